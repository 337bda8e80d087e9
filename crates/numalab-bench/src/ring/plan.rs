//! The cells `numalab ring` runs and the streams of each: the blog's
//! tables over the machine's first two nodes with CPUs, or one custom cell
//! from the node and CPU choices of a [`RingConfig`].

use numalab::units::count;
use numalab::{CpuSet, NodeSet, SpecError, Topology};
use serde::{Deserialize, Serialize};

use super::config::{ConfigError, Layout, RingConfig};
use crate::message::Message;

/// Where one stream's parts run.
///
/// ```
/// use numalab::{CpuSet, Topology};
/// use numalab_bench::ring::StreamPlan;
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
/// let stream = StreamPlan::on_nodes(&topology, 1, 0, 0);
/// assert_eq!(stream.writer_cpus, "0-1".parse::<CpuSet>().unwrap());
/// assert_eq!(stream.reader_node, Some(0));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamPlan {
    /// Node of the ring's memory.
    pub memory_node: u32,
    /// Node the writer was asked to run on, when given as a node.
    pub writer_node: Option<u32>,
    /// CPUs the writer is pinned to.
    pub writer_cpus: CpuSet,
    /// Node the readers were asked to run on, when given as a node.
    pub reader_node: Option<u32>,
    /// CPUs the readers are pinned to.
    pub reader_cpus: CpuSet,
}

impl StreamPlan {
    /// Ring memory on `memory`, the writer on the usable CPUs of node
    /// `writer`, the readers on those of node `reader`.
    pub fn on_nodes(topology: &Topology, memory: u32, writer: u32, reader: u32) -> StreamPlan {
        StreamPlan {
            memory_node: memory,
            writer_node: Some(writer),
            writer_cpus: cpus_of_node(topology, writer),
            reader_node: Some(reader),
            reader_cpus: cpus_of_node(topology, reader),
        }
    }
}

/// One cell of a table: streams run together.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::ring::plan::blog_cells;
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
/// let cells = blog_cells(&topology);
/// assert_eq!(cells[1].name, "memory 0, writer 0, reader 1");
/// assert_eq!(cells[1].wanted, [(0, 0, 1)]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CellPlan {
    /// `single-stream`, `two-stream` (the blog's tables) or `custom`.
    pub table: &'static str,
    /// The cell's name in its table.
    pub name: String,
    /// Nodes as asked: (memory, writer, reader) per stream.
    pub wanted: Vec<(u32, u32, u32)>,
    /// The streams, or why this machine cannot place them.
    pub streams: Result<Vec<StreamPlan>, String>,
}

/// Why the node or CPU choices cannot be planned. Each names the setting
/// by its field in [`RingConfig`]; [`PlanError::message`] lets a caller
/// spell it its own way (`numalab ring` shows `--memory-node`).
///
/// ```
/// use numalab::{SpecError, Topology};
/// use numalab_bench::ring::{plan, ConfigError, PlanError, RingConfig};
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let mut config = RingConfig::new("numalab");
/// config.memory_node = Some("7".into());
/// let err = plan::cells(&config, &topology).unwrap_err();
/// assert_eq!(err.to_string(), "memory_node=7");
/// match err {
///     PlanError::Spec { setting, source: SpecError::NoSuchNode { node, .. }, .. } => {
///         assert_eq!((setting, node), ("memory_node", 7))
///     }
///     other => panic!("unexpected {other}"),
/// }
/// config.streams = 0;
/// assert!(matches!(
///     plan::cells(&config, &topology),
///     Err(PlanError::Config(ConfigError::NoStreams))
/// ));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A count, size or duration outside its limit, no stream at all,
    /// or sizes the ring itself refuses ([`RingConfig::check`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A node list with something that is not a node number.
    #[error("{}", self.message())]
    NotANode {
        /// The setting: its field in [`RingConfig`].
        setting: &'static str,
        /// Its value.
        spec: String,
        /// The part that is not a number.
        value: String,
        /// Why.
        #[source]
        source: std::num::ParseIntError,
    },
    /// A node list with neither one value nor one per stream.
    #[error("{}", self.message())]
    NodeCount {
        /// The setting: its field in [`RingConfig`].
        setting: &'static str,
        /// Its value.
        spec: String,
        /// Values given.
        found: usize,
        /// Streams.
        streams: usize,
    },
    /// A CPU set list with neither one set nor one per stream.
    #[error("{}", self.message())]
    CpuCount {
        /// The setting: its field in [`RingConfig`].
        setting: &'static str,
        /// Its value.
        spec: String,
        /// Sets given.
        found: usize,
        /// Streams.
        streams: usize,
    },
    /// A node or CPU that does not exist, is not allowed, or lacks what
    /// its role needs.
    #[error("{}", self.message())]
    Spec {
        /// The setting: its field in [`RingConfig`].
        setting: &'static str,
        /// The value at fault.
        spec: String,
        /// Why.
        #[source]
        source: SpecError,
    },
}

impl PlanError {
    /// What went wrong, its settings named `«field»` for the caller to
    /// spell ([`Message::spelt`]).
    pub fn message(&self) -> Message {
        match self {
            PlanError::Config(err) => err.message(),
            PlanError::NotANode {
                setting,
                spec,
                value,
                ..
            } => Message::new(format!(
                "«{setting}»={spec}: {value:?} is not a node number"
            )),
            PlanError::NodeCount {
                setting,
                spec,
                found,
                streams,
            } => Message::new(format!(
                "«{setting}»={spec}: {} for {}; give one, or one per stream",
                count(*found, "value"),
                count(*streams, "stream")
            )),
            PlanError::CpuCount {
                setting,
                spec,
                found,
                streams,
            } => Message::new(format!(
                "«{setting}»={spec}: {} for {}; give one, or one per stream (separated by /)",
                count(*found, "CPU set"),
                count(*streams, "stream")
            )),
            PlanError::Spec { setting, spec, .. } => Message::new(format!("«{setting}»={spec}")),
        }
    }
}

fn node_list(spec: &str, streams: usize, setting: &'static str) -> Result<Vec<u32>, PlanError> {
    let values: Vec<u32> = spec
        .split(',')
        .map(|v| {
            v.trim().parse().map_err(|source| PlanError::NotANode {
                setting,
                spec: spec.to_owned(),
                value: v.to_owned(),
                source,
            })
        })
        .collect::<Result<_, _>>()?;
    match values.len() {
        1 => Ok(vec![values[0]; streams]),
        n if n == streams => Ok(values),
        found => Err(PlanError::NodeCount {
            setting,
            spec: spec.to_owned(),
            found,
            streams,
        }),
    }
}

fn cpu_list(
    topology: &Topology,
    spec: &str,
    streams: usize,
    setting: &'static str,
) -> Result<Vec<CpuSet>, PlanError> {
    let values: Vec<CpuSet> = spec
        .split('/')
        .map(|v| {
            topology.parse_cpus(v).map_err(|source| PlanError::Spec {
                setting,
                spec: spec.to_owned(),
                source,
            })
        })
        .collect::<Result<_, _>>()?;
    match values.len() {
        1 => Ok(vec![values[0].clone(); streams]),
        n if n == streams => Ok(values),
        found => Err(PlanError::CpuCount {
            setting,
            spec: spec.to_owned(),
            found,
            streams,
        }),
    }
}

/// Why a node cannot be used for `what` here, if it cannot.
pub(crate) fn unusable(topology: &Topology, node: u32, what: &str) -> Option<String> {
    let check = if what == "memory" {
        topology.check_memory_nodes(&NodeSet::single(node))
    } else {
        topology.check_cpu_nodes(&NodeSet::single(node))
    };
    check
        .err()
        .map(|err| format!("{what} on node {node}: {err}"))
}

fn cpus_of_node(topology: &Topology, node: u32) -> CpuSet {
    topology
        .cpus_of(&NodeSet::single(node))
        .intersection(&topology.allowed_cpus)
}

/// The streams of the configuration's own placement.
pub fn custom_streams(
    config: &RingConfig,
    topology: &Topology,
) -> Result<Vec<StreamPlan>, PlanError> {
    let n = config.streams;
    if n == 0 {
        return Err(ConfigError::NoStreams.into());
    }
    let default_memory = topology
        .nodes_with_memory()
        .intersection(&topology.inventory().allowed_nodes)
        .first()
        .unwrap_or(0);
    let memory = match &config.memory_node {
        Some(spec) => node_list(spec, n, "memory_node")?,
        None => vec![default_memory; n],
    };
    let node_error = |setting: &'static str, node: u32| {
        move |source| PlanError::Spec {
            setting,
            spec: node.to_string(),
            source,
        }
    };
    for &node in &memory {
        topology
            .check_memory_nodes(&NodeSet::single(node))
            .map_err(node_error("memory_node", node))?;
    }
    type Side = (Vec<Option<u32>>, Vec<CpuSet>);
    // The side's node and CPU settings.
    let side = |node_spec: &Option<String>,
                cpu_spec: &Option<String>,
                (node_setting, cpu_setting): (&'static str, &'static str)|
     -> Result<Side, PlanError> {
        if let Some(spec) = cpu_spec {
            let cpus = cpu_list(topology, spec, n, cpu_setting)?;
            return Ok((vec![None; n], cpus));
        }
        let nodes = match node_spec {
            Some(spec) => node_list(spec, n, node_setting)?,
            // With CPUs of its own, the memory's node; else the nearest
            // node that has CPUs.
            None => memory
                .iter()
                .map(|&m| {
                    std::iter::once(m)
                        .chain(topology.nodes_by_distance(m))
                        .find(|&c| !cpus_of_node(topology, c).is_empty())
                        .unwrap_or(m)
                })
                .collect(),
        };
        let mut cpus = Vec::new();
        for &node in &nodes {
            topology
                .check_cpu_nodes(&NodeSet::single(node))
                .map_err(node_error(node_setting, node))?;
            cpus.push(cpus_of_node(topology, node));
        }
        Ok((nodes.into_iter().map(Some).collect(), cpus))
    };
    let (writer_nodes, writer_cpus) = side(
        &config.writer_node,
        &config.writer_cpus,
        ("writer_node", "writer_cpus"),
    )?;
    let (reader_nodes, reader_cpus) = side(
        &config.reader_node,
        &config.reader_cpus,
        ("reader_node", "reader_cpus"),
    )?;
    Ok((0..n)
        .map(|i| StreamPlan {
            memory_node: memory[i],
            writer_node: writer_nodes[i],
            writer_cpus: writer_cpus[i].clone(),
            reader_node: reader_nodes[i],
            reader_cpus: reader_cpus[i].clone(),
        })
        .collect())
}

/// The blog's cells over the machine's first two nodes with CPUs (named 0
/// and 1 in the tables when the machine has fewer); a cell this machine
/// cannot place carries the reason instead of its streams.
pub fn blog_cells(topology: &Topology) -> Vec<CellPlan> {
    let with_cpus: Vec<u32> = topology.nodes_with_cpus().iter().collect();
    let a = with_cpus.first().copied().unwrap_or(0);
    let b = with_cpus.get(1).copied().unwrap_or(a + 1);
    // (table, name, (memory, writer, reader) per stream)
    type Cell = (&'static str, String, Vec<(u32, u32, u32)>);
    let mut cells: Vec<Cell> = Vec::new();
    for mem in [a, b] {
        for writer in [a, b] {
            for reader in [a, b] {
                cells.push((
                    "single-stream",
                    format!("memory {mem}, writer {writer}, reader {reader}"),
                    vec![(mem, writer, reader)],
                ));
            }
        }
    }
    for (name, streams) in [
        ("isolated".to_owned(), vec![(a, a, a), (b, b, b)]),
        (format!("adjacent on {a}"), vec![(a, a, a), (a, a, a)]),
        (format!("adjacent on {b}"), vec![(b, b, b), (b, b, b)]),
        ("crossed".to_owned(), vec![(b, a, a), (a, b, b)]),
    ] {
        cells.push(("two-stream", name, streams));
    }
    cells
        .into_iter()
        .map(|(table, name, wanted)| {
            let streams = wanted
                .iter()
                .map(|&(m, w, r)| {
                    if let Some(why) = unusable(topology, m, "memory")
                        .or_else(|| unusable(topology, w, "writer"))
                        .or_else(|| unusable(topology, r, "reader"))
                    {
                        return Err(why);
                    }
                    Ok(StreamPlan::on_nodes(topology, m, w, r))
                })
                .collect();
            CellPlan {
                table,
                name,
                wanted,
                streams,
            }
        })
        .collect()
}

/// The cells `config` asks for on `topology`: the preset table, or one
/// custom cell named after its placement.
pub fn cells(config: &RingConfig, topology: &Topology) -> Result<Vec<CellPlan>, PlanError> {
    match config.layout {
        Some(Layout::Blog) => Ok(blog_cells(topology)),
        None => {
            let streams = custom_streams(config, topology)?;
            let name = streams
                .iter()
                .map(|s| {
                    format!(
                        "memory {}, writer {}, reader {}",
                        s.memory_node,
                        s.writer_node
                            .map_or(format!("cpus {}", s.writer_cpus), |n| n.to_string()),
                        s.reader_node
                            .map_or(format!("cpus {}", s.reader_cpus), |n| n.to_string()),
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let wanted = streams.iter().map(|s| (s.memory_node, 0, 0)).collect();
            Ok(vec![CellPlan {
                table: "custom",
                name,
                wanted,
                streams: Ok(streams),
            }])
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_blog_layout_has_eight_single_and_four_two_stream_cells() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let cells = blog_cells(&topology);
        assert_eq!(
            cells.iter().filter(|c| c.table == "single-stream").count(),
            8
        );
        let two: Vec<_> = cells.iter().filter(|c| c.table == "two-stream").collect();
        let names: Vec<&str> = two.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["isolated", "adjacent on 0", "adjacent on 1", "crossed"]
        );
        // Crossed: each stream's memory on the other stream's node.
        assert_eq!(two[3].wanted, vec![(1, 0, 0), (0, 1, 1)]);
        let singles: BTreeSet<(u32, u32, u32)> = cells
            .iter()
            .filter(|c| c.table == "single-stream")
            .map(|c| c.wanted[0])
            .collect();
        assert_eq!(singles.len(), 8);
        assert!(cells.iter().all(|c| c.streams.is_ok()));
    }

    #[test]
    fn one_node_machines_skip_what_they_cannot_place() {
        let topology = Topology::from_synthetic("pack:1 numa:1 core:2 pu:1").unwrap();
        let cells = blog_cells(&topology);
        let runnable: Vec<&str> = cells
            .iter()
            .filter(|c| c.streams.is_ok())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(runnable, ["memory 0, writer 0, reader 0", "adjacent on 0"]);
        let why = unusable(&topology, 1, "memory").unwrap();
        assert!(why.contains("node 1 does not exist"), "{why}");
        let skipped = cells.iter().find(|c| c.streams.is_err()).unwrap();
        assert!(skipped.streams.as_ref().unwrap_err().contains("node 1"));
    }

    #[test]
    fn node_and_cpu_lists_take_one_value_or_one_per_stream() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        assert_eq!(node_list("1", 2, "memory_node").unwrap(), [1, 1]);
        assert_eq!(node_list("0,1", 2, "memory_node").unwrap(), [0, 1]);
        let err = node_list("0,0,0", 2, "memory_node").unwrap_err();
        assert_eq!(
            err.to_string(),
            "memory_node=0,0,0: 3 values for 2 streams; give one, or one per stream"
        );
        let err = node_list("x", 1, "writer_node").unwrap_err();
        assert_eq!(err.to_string(), "writer_node=x: \"x\" is not a node number");
        let cpus = cpu_list(&topology, "0/2-3", 2, "reader_cpus").unwrap();
        assert_eq!(cpus[1], "2-3".parse::<CpuSet>().unwrap());
        assert!(cpu_list(&topology, "0/1/2", 2, "reader_cpus").is_err());
    }

    #[test]
    fn a_custom_cell_is_named_after_its_placement() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let mut config = RingConfig::new("numalab");
        config.writer_cpus = Some("0".into());
        let cells = cells(&config, &topology).unwrap();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].name, "memory 0, writer cpus 0, reader 0");
        let stream = &cells[0].streams.as_ref().unwrap()[0];
        assert_eq!(stream.writer_cpus, "0".parse::<CpuSet>().unwrap());
        assert_eq!(stream.writer_node, None);
        // Readers default to the memory's node when it has CPUs.
        config.memory_node = Some("1".into());
        let cells = super::cells(&config, &topology).unwrap();
        assert_eq!(cells[0].name, "memory 1, writer cpus 0, reader 1");
        config.memory_node = Some("7".into());
        let err = super::cells(&config, &topology).unwrap_err();
        assert!(err.to_string().starts_with("memory_node=7"), "{err}");
        config.streams = 0;
        assert!(matches!(
            super::cells(&config, &topology),
            Err(PlanError::Config(ConfigError::NoStreams))
        ));
    }
}
