//! The cells of a run, checked against the machine before a byte is
//! written or read: each has its reader CPUs or the reason it cannot run.

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use numalab::pagecache::{self as cache, PageCacheError};
use numalab::units::count;
use numalab::{NodeInventory, Topology};

use super::config::{
    BenchConfig, BenchError, FileSource, Method, ReaderPlace, MAX_BLOCK, MAX_READERS, MAX_REPEATS,
    MAX_SIZE, MAX_STAGGER, MAX_TOTAL_STAGGER,
};
use crate::matrix::shape::spread_cpus;
use crate::message::Message;

/// One cell of the plan: its readers' CPUs, or why it cannot run.
///
/// ```
/// use numalab_bench::pagecache::{plan, BenchConfig, FileSource, ReaderPlace};
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig {
///     file: FileSource::Create { dir: std::env::temp_dir(), size: 1 << 20 },
///     readers: vec![1, 1024],
///     places: vec![ReaderPlace::Same],
///     skip_impossible: true,
///     ..BenchConfig::default()
/// };
/// let plan = plan(&config, &topology)?;
/// assert_eq!(plan.cells[0].cpus.len(), 1);
/// assert!(plan.cells[1].skip.as_deref().unwrap().contains("--oversubscribe"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCell {
    /// Readers.
    pub readers: usize,
    /// Where they were asked to run.
    pub place: ReaderPlace,
    /// The node that means here.
    pub reader_node: Option<u32>,
    /// One CPU per reader (repeated when oversubscribed).
    pub cpus: Vec<u32>,
    /// The readers read through per-node copies.
    pub copies: bool,
    /// Why it cannot run here.
    pub skip: Option<String>,
}

/// A checked configuration ([`plan`]).
///
/// ```
/// use numalab_bench::pagecache::{plan, BenchConfig, FileSource};
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig {
///     file: FileSource::Create { dir: std::env::temp_dir(), size: 1 << 20 },
///     ..BenchConfig::default()
/// };
/// let plan = plan(&config, &topology)?;
/// assert_eq!(plan.size, 1 << 20);
/// assert!(plan.given.is_none(), "run makes the file");
/// assert!(!plan.config.places.is_empty(), "the default placements, resolved");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Plan {
    /// What was asked.
    pub config: BenchConfig,
    /// The node the cache goes on.
    pub cache_node: u32,
    /// The user's file, opened; `None`: [`run`](super::run()) makes one as
    /// [`BenchConfig::file`] says.
    pub given: Option<(PathBuf, File)>,
    /// Its size, or the size to create.
    pub size: u64,
    /// The cells, readers-major.
    pub cells: Vec<PlannedCell>,
}

/// Checks `config` against the machine and names each cell's CPUs;
/// nothing is written or read.
pub fn plan(config: &BenchConfig, topology: &Topology) -> Result<Plan, BenchError> {
    let invalid = |text: String| Err(invalid(text));
    if config.block_size == 0 || config.block_size > MAX_BLOCK {
        return invalid(format!(
            "«block_size» must be 1 byte to 1 GiB, not {}",
            config.block_size
        ));
    }
    if config.repeats == 0 || config.repeats > MAX_REPEATS {
        return invalid(format!(
            "«repeats» must be 1 to {MAX_REPEATS}, not {}",
            config.repeats
        ));
    }
    if config.group == 0 || config.group > MAX_READERS {
        return invalid(format!(
            "«group» must be 1 to {MAX_READERS} readers, not {}",
            config.group
        ));
    }
    if config.stagger > MAX_STAGGER {
        return invalid(format!(
            "«stagger» must be at most {}s, not {:?}",
            MAX_STAGGER.as_secs(),
            config.stagger
        ));
    }
    if config.readers.is_empty() || config.readers.len() > 64 {
        return invalid("«readers» takes 1 to 64 counts".into());
    }
    if let Some(&bad) = config.readers.iter().find(|&&n| n == 0 || n > MAX_READERS) {
        return invalid(format!(
            "«readers»: each count must be 1 to {MAX_READERS}, not {bad}"
        ));
    }
    if config.places.len() > 64 {
        return invalid("«places» takes at most 64 placements".into());
    }
    if let Some(copies) = &config.copies {
        let page = numalab::system::page_size() as u64;
        if !copies.chunk_size.is_power_of_two()
            || copies.chunk_size < page
            || copies.chunk_size > 1 << 30
        {
            return invalid(format!(
                "«chunk_size» must be a power of two from {page} bytes to 1 GiB, not {}",
                copies.chunk_size
            ));
        }
        if config.method == Method::Mmap {
            return invalid(
                "«replicate» reads through copies a block at a time, as read(2) does; it cannot be combined with «mmap»".into(),
            );
        }
        if let Some(every) = copies.write_every {
            if matches!(config.file, FileSource::Given(_)) {
                return invalid(
                    "«write_every» writes to the file: only to one numalab makes, never to the «file» given".into(),
                );
            }
            if every < Duration::from_micros(100) || every > MAX_STAGGER {
                return invalid(format!(
                    "«write_every» must be 100us to {}s, not {every:?}",
                    MAX_STAGGER.as_secs()
                ));
            }
        }
    }
    let inventory = NodeInventory::live();
    let with_cpus: Vec<u32> = topology
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|&n| !spread_cpus(topology, n, 1).is_empty())
        .collect();
    let cache_node = match config.cache_node {
        Some(node) => node,
        None => match with_cpus
            .iter()
            .copied()
            .find(|&n| inventory.with_memory.contains(n))
            .or_else(|| inventory.with_memory.iter().next())
        {
            Some(node) => node,
            None => return invalid("this machine reports no node with memory".into()),
        },
    };
    // A node typed on the command line is judged as every command judges
    // one: "node 7 does not exist; this machine has nodes 0-1".
    let typed = |flag: &str, node: u32, role: numalab::Role| {
        let checked = numalab::NodeSet::try_single(node)
            .map_err(|e| e.to_string())
            .and_then(|set| {
                match role {
                    numalab::Role::Cpus => inventory.check_cpu_nodes(&set),
                    _ => inventory.check_memory_nodes(&set),
                }
                .map_err(|e| e.to_string())
            });
        checked.map_err(|why| format!("{flag} {node}: {why}"))
    };
    if let Err(why) = typed("«cache_node»", cache_node, numalab::Role::Memory) {
        return invalid(why);
    }
    if !config.skip_impossible {
        for place in &config.places {
            if let ReaderPlace::Node(node) = place {
                if let Err(why) = typed("«places»", *node, numalab::Role::Cpus) {
                    return invalid(why);
                }
            }
        }
    }
    let (given, size) = match &config.file {
        FileSource::Given(path) => {
            let (file, size) = open_given(path)?;
            if size == 0 {
                return invalid(format!(
                    "{} is empty: there is nothing to read",
                    path.display()
                ));
            }
            // Its cache is to be all on the cache node, read in again
            // there when it is not: a file the node cannot hold (a sparse
            // one of terabytes among them) is refused unread.
            let memory =
                numalab::system::NodeMemory::read(cache_node).map_err(|e| BenchError::File {
                    path: path.display().to_string(),
                    source: PageCacheError::Os(e),
                })?;
            if size > memory.total_bytes {
                return invalid(format!(
                    "{} is {}, more than node {cache_node}'s {} of memory: its cache cannot all be there (nothing read)",
                    path.display(),
                    numalab::units::format_size(size),
                    numalab::units::format_size(memory.total_bytes)
                ));
            }
            (Some((path.clone(), file)), size)
        }
        FileSource::Create { dir, size } => {
            check_new_file(dir, *size, cache_node)?;
            (None, *size)
        }
    };
    let other = other_node(cache_node, &with_cpus, |n| topology.distance(cache_node, n));
    let places = if config.places.is_empty() {
        let mut places = vec![ReaderPlace::Same];
        if other.is_some() {
            places.push(ReaderPlace::Other);
        }
        places
    } else {
        config.places.clone()
    };
    let mut cells = Vec::new();
    for &readers in &config.readers {
        for &place in &places {
            let reader_node = match place {
                ReaderPlace::Same => Some(cache_node),
                ReaderPlace::Other => other,
                ReaderPlace::Node(n) => Some(n),
            };
            let (cpus, skip) = match reader_node {
                None => (
                    Vec::new(),
                    Some(format!(
                        "this machine has no node with CPUs other than node {cache_node}"
                    )),
                ),
                Some(node) => reader_cpus(topology, node, readers, config.oversubscribe),
            };
            if let (Some(why), false) = (&skip, config.skip_impossible) {
                return invalid(format!("{} on {place}: {why}", count(readers, "reader")));
            }
            // A memory-less node's readers read the copies on the nearest
            // node with memory, as its CPUs' other memory comes from there.
            let copies_skip = match (&skip, reader_node) {
                (Some(why), _) => Some(why.clone()),
                (None, Some(node)) if topology.local_memory_node(node).is_none() => {
                    Some(format!("no node has memory for node {node}'s copies"))
                }
                _ => None,
            };
            let copies = config.copies.is_some().then(|| PlannedCell {
                readers,
                place,
                reader_node,
                cpus: if copies_skip.is_some() {
                    Vec::new()
                } else {
                    cpus.clone()
                },
                copies: true,
                skip: copies_skip,
            });
            cells.push(PlannedCell {
                readers,
                place,
                reader_node,
                cpus,
                copies: false,
                skip,
            });
            cells.extend(copies);
        }
    }
    check_totals(config, &cells, size, cache_node, given.is_none(), topology)?;
    Ok(Plan {
        config: BenchConfig {
            places,
            ..config.clone()
        },
        cache_node,
        given,
        size,
        cells,
    })
}

/// The bytes each reader's buffer takes: a block, or the whole file when
/// that is smaller (a read never asks for more than is left).
pub(super) fn buffer_bytes(config: &BenchConfig, size: u64) -> u64 {
    config.block_size.min(size)
}

/// What the cells take together, checked before anything is made: each
/// cell's reader buffers must fit in the free memory of the node they
/// are placed on (less the file's cache when numalab is to cache a new
/// file there), and the staggered starts of every cell and repeat must
/// add up to at most [`MAX_TOTAL_STAGGER`].
/// `--reader-node other`: of the nodes with CPUs (`with_cpus`) other than
/// `cache_node`, the nearest by the firmware's distance from it
/// (`distance`), the lowest id among equals and after those with a
/// distance. Whether that node has memory does not matter: the question
/// is what reading the cache from the next CPUs costs, and a memory-less
/// node's readers keep their buffers on its nearest memory, as its CPUs'
/// memory is.
///
/// ```
/// use numalab_bench::pagecache::other_node;
/// // The memless preset: node 2 (CPUs, no memory) is 12 from node 0,
/// // node 1 (CPUs and memory) 21.
/// let slit = |n| [None, Some(21), Some(12)][n as usize];
/// assert_eq!(other_node(0, &[0, 1, 2], slit), Some(2));
/// assert_eq!(other_node(0, &[0], slit), None);
/// assert_eq!(other_node(0, &[0, 1, 2], |_| None), Some(1), "no distances: the lowest id");
/// ```
pub fn other_node(
    cache_node: u32,
    with_cpus: &[u32],
    distance: impl Fn(u32) -> Option<u64>,
) -> Option<u32> {
    with_cpus
        .iter()
        .copied()
        .filter(|&n| n != cache_node)
        .min_by_key(|&n| (distance(n).unwrap_or(u64::MAX), n))
}

fn check_totals(
    config: &BenchConfig,
    cells: &[PlannedCell],
    size: u64,
    cache_node: u32,
    created: bool,
    topology: &Topology,
) -> Result<(), BenchError> {
    let format = numalab::units::format_size;
    let hours = |d: Duration| format!("{:.1} hours", d.as_secs_f64() / 3600.0);
    let buffer = buffer_bytes(config, size);
    let mut waits = Duration::ZERO;
    for cell in cells.iter().filter(|c| c.skip.is_none()) {
        let groups = cell.readers.div_ceil(config.group) as u32;
        waits = waits.saturating_add(
            config
                .stagger
                .saturating_mul(groups.saturating_sub(1))
                .saturating_mul(config.repeats as u32),
        );
        let Some(reader_node) = cell.reader_node else {
            continue;
        };
        // First touch on the readers' CPUs: their node's memory, or for a
        // memory-less node the nearest node's.
        let node = topology
            .local_memory_node(reader_node)
            .unwrap_or(reader_node);
        let need = buffer.saturating_mul(cell.readers as u64);
        let Ok(memory) = numalab::system::NodeMemory::read(node) else {
            continue;
        };
        let cached_here = if created && node == cache_node {
            size
        } else {
            0
        };
        // Free memory and the page cache reclaim can give back, as the
        // check of a created file's size counts it.
        let available = memory.free_bytes.saturating_add(memory.file_lru_bytes) / 10 * 9;
        let room = available.saturating_sub(cached_here);
        if need > room && need <= available {
            return Err(invalid(format!(
                "the {} file to cache on node {node} leaves {} of its {} free or reclaimable for {}'{} {} of buffers: give a smaller «size»",
                format(size),
                format(room),
                format(available),
                count(cell.readers, "reader"),
                if cell.readers == 1 { "s" } else { "" },
                format(need)
            )));
        }
        if need > room {
            return Err(invalid(format!(
                "{} x «block_size» {} {} {} of buffers on node {node}, which has {} free or reclaimable: give fewer «readers» or a smaller «block_size»",
                count(cell.readers, "reader"),
                format(buffer),
                if cell.readers == 1 { "needs" } else { "need" },
                format(need),
                format(available)
            )));
        }
    }
    if waits > MAX_TOTAL_STAGGER {
        return Err(invalid(format!(
            "«stagger» {:?} between groups of «group» {} readers, over every cell and «repeats» {}, adds up to {} of waiting; at most {} is allowed: give a shorter «stagger», larger groups or fewer repeats",
            config.stagger,
            config.group,
            config.repeats,
            hours(waits),
            hours(MAX_TOTAL_STAGGER),
        )));
    }
    Ok(())
}

/// Opens the user's file, which must be a regular file numalab may
/// read, and says its size.
pub(super) fn open_given(path: &std::path::Path) -> Result<(File, u64), BenchError> {
    let wrap = |source| BenchError::File {
        path: path.display().to_string(),
        source,
    };
    let file = cache::open_for_cache(path, true).map_err(wrap)?;
    let size = cache::file_size(&file).map_err(wrap)?;
    Ok((file, size))
}

/// A new file of `size` bytes must fit on its file system and in the
/// cache node's memory (or its cache would spill to other nodes).
fn check_new_file(dir: &std::path::Path, size: u64, node: u32) -> Result<(), BenchError> {
    let wrap = |source| BenchError::File {
        path: dir.display().to_string(),
        source,
    };
    if size == 0 || size > MAX_SIZE {
        return Err(invalid(format!(
            "«size» must be 1 byte to 1 TiB, not {}",
            numalab::units::format_size(size)
        )));
    }
    let meta = std::fs::metadata(dir).map_err(|e| wrap(PageCacheError::Os(e)))?;
    if !meta.is_dir() {
        return Err(invalid(format!("«dir» {}: not a directory", dir.display())));
    }
    let available =
        numalab::files::available_bytes(dir).map_err(|e| wrap(PageCacheError::Os(e)))?;
    if size > available {
        return Err(invalid(format!(
            "«size» {}: {} has only {} free",
            numalab::units::format_size(size),
            dir.display(),
            numalab::units::format_size(available)
        )));
    }
    let memory =
        numalab::system::NodeMemory::read(node).map_err(|e| wrap(PageCacheError::Os(e)))?;
    // Free memory and the page cache reclaim can give back.
    let room = memory.free_bytes + memory.file_lru_bytes;
    if size > room / 10 * 9 {
        return Err(invalid(format!(
            "«size» {}: node {node} has {} free or reclaimable; a file that large cannot be cached on it (give a smaller «size» or another «cache_node»)",
            numalab::units::format_size(size),
            numalab::units::format_size(room)
        )));
    }
    Ok(())
}

/// `count` CPUs of `node` (cycled when oversubscribed), or why not.
fn reader_cpus(
    topology: &Topology,
    node: u32,
    count: usize,
    oversubscribe: bool,
) -> (Vec<u32>, Option<String>) {
    if topology.node(node).is_none() {
        return (Vec::new(), Some(format!("this machine has no node {node}")));
    }
    let cpus = spread_cpus(topology, node, usize::MAX);
    if cpus.is_empty() {
        return (
            Vec::new(),
            Some(format!("node {node} has no CPUs this process may use")),
        );
    }
    if count > cpus.len() && !oversubscribe {
        return (
            Vec::new(),
            Some(format!(
                "more readers than node {node}'s {} this process may use (--oversubscribe lets readers share CPUs)",
                numalab::units::count(cpus.len(), "CPU")
            )),
        );
    }
    (cpus.iter().copied().cycle().take(count).collect(), None)
}

/// A setting refused: the message names settings between guillemets, for the caller
/// to spell ([`Message`]).
fn invalid(text: String) -> BenchError {
    BenchError::Invalid(Message::new(text))
}
