//! The guest side of the suite: checks that run inside the emulated
//! machine, each comparing what numalab does or reports with what the
//! preset says.
//!
//! # Adding a check
//!
//! Write a function `fn(&Guest, &mut Outcome) -> anyhow::Result<()>` in
//! the module of its area, record each comparison with
//! [`Outcome::same`] or [`Outcome::check`], and add one line to
//! [`CHECKS`]. A check passes when every comparison agrees; an error
//! (`?`) or a panic fails it with the message; [`Outcome::not_applicable`]
//! says the preset has nothing for it (no memory-only node, say).
//!
//! ```no_run
//! use numalab_emu::guest::{Guest, Outcome};
//! fn every_node_has_memory(guest: &Guest, out: &mut Outcome) -> anyhow::Result<()> {
//!     let topology = guest.topology()?;
//!     for node in guest.preset.node_ids().iter() {
//!         let found = topology.node(node).map_or(0, |n| n.memory_bytes);
//!         out.check(format!("node {node} has memory"), "> 0", found, found > 0);
//!     }
//!     Ok(())
//! }
//! ```

pub mod advise;
pub mod buffer;
pub mod c;
pub mod decide;
pub mod exec;
pub mod fill;
pub mod matrix;
pub mod oracle;
pub mod pagecache;
pub mod python;
pub mod replicated;
pub mod report;
pub mod ring;
pub mod run;
pub mod topo;

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::fmt::{self, Display};
use std::fs;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use numalab::locate::PageHistogram;
use numalab::{affinity, NodeSet, Topology};
use numalab_bench::document::{Document, Schema};
use numalab_bench::topo::TopoReport;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::preset::{Preset, Presets, Tolerance};
use crate::report::{CheckReport, Comparison, GuestEnd, GuestStart, Status, BEGIN, END, RESULT};

/// One named check.
///
/// ```
/// use numalab_emu::guest::CHECKS;
/// let topology: Vec<&str> = CHECKS.iter().map(|c| c.name).filter(|n| n.starts_with("topo.")).collect();
/// assert_eq!(topology, ["topo.nodes", "topo.distances", "topo.hmat", "topo.tiers"]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Check {
    /// `area.what`, e.g. `topo.distances`.
    pub name: &'static str,
    /// One line on what it proves.
    pub about: &'static str,
    /// The check itself.
    pub run: fn(&Guest, &mut Outcome) -> Result<()>,
}

/// Every check, in the order the guest runs them.
pub const CHECKS: &[Check] = &[
    Check {
        name: "topo.nodes",
        about: "numalab topo --json: nodes, CPUs and memory per node, packages, memory-only nodes",
        run: topo::nodes,
    },
    Check {
        name: "topo.distances",
        about: "numalab topo --json: the distance matrix, cell by cell, in the right orientation",
        run: topo::distances,
    },
    Check {
        name: "topo.hmat",
        about: "numalab topo --json: HMAT latency and bandwidth as Linux publishes them",
        run: topo::hmat,
    },
    Check {
        name: "topo.tiers",
        about: "numalab topo: the kernel's memory tiers as Linux makes them of the preset (HMAT-placed from 6.7), demotion, numa_balancing's tiering mode",
        run: topo::tiers,
    },
    Check {
        name: "oracle.hardware",
        about: "numalab topo --json beside numactl --hardware and lstopo --of xml in the same guest: nodes, CPUs, memory within 1%, distances exactly",
        run: oracle::hardware,
    },
    Check {
        name: "buffer.bind",
        about: "NodeBuffer bound to each node (memory-only ones too) lands there",
        run: buffer::bind,
    },
    Check {
        name: "buffer.preferred",
        about: "NodeBuffer preferring each node lands there while it has room",
        run: buffer::preferred,
    },
    Check {
        name: "buffer.preferred-many",
        about: "preferred-many takes the member nearest the thread's node (by the SLIT)",
        run: buffer::preferred_many,
    },
    Check {
        name: "buffer.interleave",
        about: "interleave over 2 nodes and over all nodes splits pages evenly (within 2 pages)",
        run: buffer::interleave,
    },
    Check {
        name: "buffer.local",
        about: "local and default from a thread pinned on each CPU node land on that node",
        run: buffer::local,
    },
    Check {
        name: "buffer.weighted-interleave",
        about: "weighted interleave follows the weights, or fails naming the kernel feature",
        run: buffer::weighted_interleave,
    },
    Check {
        name: "buffer.while-balancing",
        about: "pages a NUMA-balancing scan is watching are still located (Linux 6.1-6.4 hide them from move_pages)",
        run: buffer::while_balancing,
    },
    Check {
        name: "buffer.migrate",
        about: "NodeBuffer::migrate moves every page to each other node, contents intact",
        run: buffer::migrate,
    },
    Check {
        name: "exec.policies",
        about: "numalab exec with every policy: dd's buffer lands as asked, report agrees",
        run: exec::policies,
    },
    Check {
        name: "oracle.numastat",
        about: "every policy: the same 32 MiB placed by numactl and by numalab exec, numastat -p's MB per node within 1%; a node without memory refused by both",
        run: oracle::numastat,
    },
    Check {
        name: "exec.cpunodebind",
        about: "numalab exec --cpunodebind=N --membind=N: CPUs and pages on node N",
        run: exec::cpunodebind,
    },
    Check {
        name: "exec.interleave-thp",
        about: "numalab exec --interleave with transparent huge pages: no false uneven-split warning",
        run: exec::interleave_thp,
    },
    Check {
        name: "exec.weighted-interleave",
        about: "numalab exec --weighted-interleave: works, or fails naming the kernel feature",
        run: exec::weighted_interleave,
    },
    Check {
        name: "exec.weights-restored-on-sigterm",
        about: "numalab exec -w sent SIGTERM: the command gets it, exit 143, the kernel's weights restored",
        run: exec::weights_restored_on_sigterm,
    },
    Check {
        name: "profile.timeline",
        about: "numalab profile of a program that writes 32 MiB on the first node, holds it until a sample has read it, frees it, then the same on the last: the timeline has it on the first node, then on the last",
        run: advise::timeline,
    },
    Check {
        name: "profile.writes",
        about: "numalab profile --writes of a program writing 64 MiB, then its first quarter 4 times, one pass per sample: the samples count each pass's pages (soft-dirty bits), never more than one pass per window",
        run: advise::writes,
    },
    Check {
        name: "profile.numastat",
        about: "numalab profile --pid of a program with 32 MiB on the first node, then 16 MiB of it freed and 24 MiB on the last, each phase held until read: the last sample's MB per node and numastat -p's within 1% of the total",
        run: oracle::profile_numastat,
    },
    Check {
        name: "advise.placements",
        about: "numalab advise on busybox dd: the candidates the preset calls for, each run's pages where that placement puts them, a recommendation",
        run: advise::placements,
    },
    Check {
        name: "advise.interrupted",
        about: "numalab advise sent SIGTERM between runs: exit 143, the runs so far reported and marked interrupted",
        run: advise::interrupted,
    },
    Check {
        name: "advise.decides",
        about: "numalab advise on a program that sleeps longer the more of its pages the kernel finds off the node it likes (a memory-only one where there is one): that node's placement recommended, faster beyond noise, no placement elsewhere called faster, the rounds rotating as documented; a program as fast everywhere gets first touch",
        run: decide::decides,
    },
    Check {
        name: "advise.steady",
        about: "numalab advise on a program fast under first touch only on the runs that start on its data's node (every other run), its advice followed: a bimodal warning naming the runs that would decide (with 4 runs, unless stalled runs already decide), then with those runs the bound placement for being steady",
        run: decide::steady,
    },
    Check {
        name: "fill.spill",
        about: "numalab fill beyond a node's free memory spills to the nearest node (default, preferred)",
        run: fill::spill,
    },
    Check {
        name: "fill.bind-refused",
        about: "numalab fill --membind beyond the node's free memory is refused before allocating",
        run: fill::bind_refused,
    },
    Check {
        name: "pagecache.fincore",
        about: "numalab fincore on a file written under bind:N, for every node: its pages found on N, and N's FilePages grew by the file",
        run: pagecache::nodes,
    },
    Check {
        name: "pagecache.load-drop",
        about: "numalab pagecache drop and load --node N on an ext2 file system, every node with memory: util-linux fincore counts none then all pages, numalab fincore agrees and finds them on N, N's FilePages grew by the file",
        run: pagecache::load_drop,
    },
    Check {
        name: "pagecache.bench",
        about: "numalab pagecache bench, cache on a memory-only (else the last) node, 2 readers per CPU node: readers on the preset's CPUs and nodes, whole file read, cache on its node before and after, SLIT ratio the preset's",
        run: pagecache::bench,
    },
    Check {
        name: "pagecache.post",
        about: "numalab pagecache bench --layout post on a file written on the first CPU node: the post's rows and columns, other = the preset's nearest other CPU node (memory or not), readers on that node's CPUs by the kernel, cells beyond a node's CPUs skipped with numbered reasons, util-linux fincore and FilePages: the cache stays, remote/local beside the preset's SLIT",
        run: pagecache::post,
    },
    Check {
        name: "pagecache.replicate",
        about: "numalab pagecache bench --replicate, one reader per CPU node and a writer: each node's copies all on that node (the kernel's count), later repeats read them, writes meanwhile; ReplicatedFile of 8 MiB from each CPU node: copies there, that node's Shmem (the kernel's count) grew by the file and no other node's, a write read at once by every node",
        run: pagecache::replicate,
    },
    Check {
        name: "run.placement",
        about: "numalab run --json: threads on their planned nodes; local, remote, interleave, first-touch pages where asked",
        run: run::placement,
    },
    Check {
        name: "replicated.placement",
        about: "Replicated<T> and ReplicatedPages on ReplicaSet::system(): replicas on their nodes, reads local, a budget limits copies; numalab run with replicate",
        run: replicated::placement,
    },
    Check {
        name: "ring.blog",
        about: "numalab ring --layout blog read as a RingReport: in every cell the pages found per node and the writer/reader CPUs are the nodes the cell's name and the preset give",
        run: ring::blog,
    },
    Check {
        name: "matrix.shape",
        about: "numalab matrix --quick: CPU nodes x memory nodes, every cell on its node, SLIT and HMAT beside it",
        run: matrix::shape,
    },
    Check {
        name: "oracle.hwloc-export",
        about: "numalab matrix --quick --hwloc-xml read back by lstopo -i FILE --memattrs in the guest: every cell's value, its initiator's cpuset the preset's CPUs of that node (memory-less ones too) and its target node (CPU-less ones too), nothing else",
        run: oracle::hwloc_export,
    },
    Check {
        name: "c.place",
        about: "a C program linked with libnumalab.a: numalab_alloc(\"bind:N\") on every node with memory and numalab_alloc(\"interleave:all\"), numalab_locate against /proc/self/numa_maps, each where the preset says",
        run: c::place,
    },
    Check {
        name: "python.place",
        about: "import numalab in the guest's CPython: empty/zeros(policy=\"bind:N\") on every node with memory and place(np.ones(...), \"interleave:all\"), each read back from /proc/self/numa_maps (presets with python = true)",
        run: python::place,
    },
    Check {
        name: "report.quick",
        about: "numalab report --quick --json whole: the preset's nodes, the matrix's shape with every cell on its node, every sweep cell's regions where its policy puts them, findings",
        run: report::quick,
    },
];

/// What one check found.
///
/// ```
/// use numalab_emu::guest::Outcome;
/// let mut out = Outcome::default();
/// assert!(out.same("node ids", "0-3", "0-3"));
/// let free = 90;
/// assert!(!out.check("free MiB", ">= 100", free, free >= 100));
/// ```
#[derive(Debug, Default)]
pub struct Outcome {
    comparisons: Vec<Comparison>,
    notes: Vec<String>,
    not_applicable: Option<String>,
}

impl Outcome {
    /// Records that `found` should print as `expected`; returns whether it
    /// does.
    pub fn same(
        &mut self,
        what: impl Into<String>,
        expected: impl Display,
        found: impl Display,
    ) -> bool {
        let (expected, found) = (expected.to_string(), found.to_string());
        let ok = expected == found;
        self.comparisons.push(Comparison {
            what: what.into(),
            expected,
            found,
            ok,
        });
        ok
    }

    /// Records a comparison judged by the caller (`expected` describes
    /// what would have been accepted, e.g. `>= 240 MiB`).
    pub fn check(
        &mut self,
        what: impl Into<String>,
        expected: impl Display,
        found: impl Display,
        ok: bool,
    ) -> bool {
        self.comparisons.push(Comparison {
            what: what.into(),
            expected: expected.to_string(),
            found: found.to_string(),
            ok,
        });
        ok
    }

    /// Adds a note to the report (what was measured, what was set).
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// Marks the check as not applicable to this preset, saying why.
    pub fn not_applicable(&mut self, why: impl Into<String>) {
        self.not_applicable = Some(why.into());
    }
}

/// The guest's view of its world: the preset it was booted as, the
/// kernel, and numalab's answers (cached). Checks receive one; see the
/// [module documentation](self) for a check using it.
///
/// ```no_run
/// use numalab_emu::guest::{Guest, Outcome};
/// fn exec_runs(guest: &Guest, out: &mut Outcome) -> anyhow::Result<()> {
///     let ran = guest.numalab(&["exec", "--membind=0", "--", "true"])?;
///     out.same("exit status", "Some(0)", format!("{:?}", ran.code));
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Guest {
    /// The preset the host booted.
    pub preset: Preset,
    /// How close memory sizes must be.
    pub(crate) tolerance: Tolerance,
    /// `uname -r`.
    pub kernel: String,
    /// The `numalab` command.
    pub numalab: PathBuf,
    topo: OnceCell<TopoReport>,
    topology: OnceCell<Topology>,
    matrix: OnceCell<numalab_bench::matrix::MatrixReport>,
}

/// Where [`Guest::quick_matrix`] has `numalab matrix` write its hwloc
/// export.
pub const MATRIX_XML: &str = "/tmp/emu-matrix.xml";

/// A finished command.
///
/// ```
/// use numalab_emu::guest::Ran;
/// let ran = Ran { code: Some(0), stdout: String::new(), stderr: "1+0 records in\n{\"schema\": \"numalab.exec\"}\n".into() };
/// assert_eq!(Ran::json_in(&ran.stderr)?["schema"], "numalab.exec");
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug)]
pub struct Ran {
    /// Exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    /// The first JSON document in `text` (numalab exec writes its report
    /// after the command's own messages).
    pub fn json_in(text: &str) -> Result<Value> {
        let start = text
            .find("\n{")
            .map(|i| i + 1)
            .or_else(|| text.starts_with('{').then_some(0))
            .ok_or_else(|| anyhow!("no JSON document in:\n{text}"))?;
        serde_json::from_str(&text[start..]).with_context(|| format!("reading JSON from:\n{text}"))
    }

    /// The first JSON document in `text`, read as the result type it is
    /// after checking its schema and version (numalab exec writes its
    /// report after the command's own messages).
    pub fn result_in<T: Schema + DeserializeOwned>(text: &str) -> Result<T> {
        Document::<T>::from_value(Ran::json_in(text)?)
            .with_context(|| format!("reading {} from:\n{text}", T::NAME))
    }
}

impl Guest {
    /// A guest for `preset`.
    pub(crate) fn new(preset: Preset, tolerance: Tolerance) -> Guest {
        Guest {
            preset,
            tolerance,
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
            numalab: PathBuf::from("/bin/numalab"),
            topo: OnceCell::new(),
            topology: OnceCell::new(),
            matrix: OnceCell::new(),
        }
    }

    /// Whether the kernel is at least `major.minor`.
    pub fn kernel_at_least(&self, major: u64, minor: u64) -> bool {
        let mut parts = self
            .kernel
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|p| p.parse::<u64>().ok());
        let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        found >= (major, minor)
    }

    /// Runs `numalab ARGS`.
    pub fn numalab(&self, args: &[&str]) -> Result<Ran> {
        let output = Command::new(&self.numalab)
            .args(args)
            .output()
            .with_context(|| format!("running numalab {}", args.join(" ")))?;
        Ok(Ran {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Runs numalab with `args`; a non-zero exit is an error carrying
    /// its output.
    pub fn numalab_ok(&self, args: &[&str]) -> Result<Ran> {
        let ran = self.numalab(args)?;
        if ran.code != Some(0) {
            bail!(
                "numalab {} exited {:?}:\n{}{}",
                args.join(" "),
                ran.code,
                ran.stdout,
                ran.stderr
            );
        }
        Ok(ran)
    }

    /// Runs numalab with `args` (which ask for `--json`) and returns its
    /// JSON document; a non-zero exit is an error carrying its output.
    pub fn numalab_json(&self, args: &[&str]) -> Result<Value> {
        Ran::json_in(&self.numalab_ok(args)?.stdout)
    }

    /// Runs numalab with `args` (which ask for `--json`) and reads its
    /// result as the type it is, after checking the document's schema and
    /// version; a non-zero exit is an error carrying its output.
    pub fn numalab_result<T: Schema + DeserializeOwned>(&self, args: &[&str]) -> Result<T> {
        Document::<T>::from_value(self.numalab_json(args)?)
            .with_context(|| format!("reading the result of numalab {}", args.join(" ")))
    }

    /// `numalab topo --json`, run once.
    pub fn topo_report(&self) -> Result<&TopoReport> {
        if let Some(report) = self.topo.get() {
            return Ok(report);
        }
        let report = self.numalab_result(&["topo", "--json"])?;
        Ok(self.topo.get_or_init(|| report))
    }

    /// `numalab matrix --quick --json --hwloc-xml` [`MATRIX_XML`], run
    /// once for the checks that read the matrix and its hwloc export (a
    /// quick matrix is half a minute of emulated CPU).
    pub fn quick_matrix(&self) -> Result<&numalab_bench::matrix::MatrixReport> {
        if let Some(result) = self.matrix.get() {
            return Ok(result);
        }
        let result =
            self.numalab_result(&["matrix", "--quick", "--json", "--hwloc-xml", MATRIX_XML])?;
        Ok(self.matrix.get_or_init(|| result))
    }

    /// The library's view of the machine ([`Topology::system`]), taken
    /// once.
    pub fn topology(&self) -> Result<&Topology> {
        if let Some(topology) = self.topology.get() {
            return Ok(topology);
        }
        let topology = Topology::system()?;
        Ok(self.topology.get_or_init(|| topology))
    }

    /// Runs `f` on a new thread bound to the CPUs of `node` (with
    /// [`affinity::bind_thread_to_nodes`]); also returns the node the
    /// thread ran on as `f` started.
    pub fn on_node<T: Send>(&self, node: u32, f: impl FnOnce() -> T + Send) -> Result<(u32, T)> {
        let topology = self.topology()?;
        std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<(u32, T)> {
                    affinity::bind_thread_to_nodes(topology, &NodeSet::single(node))?;
                    let ran_on = affinity::current().node;
                    Ok((ran_on, f()))
                })
                .join()
                .map_err(|_| anyhow!("the thread pinned on node {node} panicked"))?
        })
    }
}

/// Pages per node, printed `node0 256, node1 256`.
///
/// ```
/// use numalab_emu::guest::Pages;
/// let even = Pages::even(&"0-3".parse()?, 1024);
/// assert_eq!(even.to_string(), "node0 256, node1 256, node2 256, node3 256");
/// assert!(!Pages::on(0, 1024).within(&even, 2));
/// # Ok::<(), numalab::ParseSetError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pages(pub BTreeMap<u32, u64>);

impl Display for Pages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (node, count) in self.0.iter().filter(|(_, c)| **c > 0) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "node{node} {count}")?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl Pages {
    /// What of `found` has no node: " (+N not present, +M of unknown
    /// node)", or nothing.
    pub fn absent(found: &PageHistogram) -> String {
        match (found.not_present, found.unknown) {
            (0, 0) => String::new(),
            (n, 0) => format!(" (+{n} not present)"),
            (0, u) => format!(" (+{u} of unknown node)"),
            (n, u) => format!(" (+{n} not present, +{u} of unknown node)"),
        }
    }

    /// All `count` pages on `node`.
    pub fn on(node: u32, count: u64) -> Pages {
        Pages(BTreeMap::from([(node, count)]))
    }

    /// `count` pages split evenly over `nodes` (the first ones get the
    /// remainder, as round-robin from the first node does).
    pub fn even(nodes: &NodeSet, count: u64) -> Pages {
        let k = nodes.len() as u64;
        Pages(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n, count / k + u64::from((i as u64) < count % k)))
                .collect(),
        )
    }

    /// The present pages of a histogram.
    pub fn found(histogram: &PageHistogram) -> Pages {
        Pages(histogram.per_node.clone())
    }

    /// Whether every node is within `slack` pages of `expected` (nodes on
    /// either side only count as their pages).
    pub fn within(&self, expected: &Pages, slack: u64) -> bool {
        let nodes: NodeSet = self.0.keys().chain(expected.0.keys()).copied().collect();
        let within = nodes.iter().all(|n| {
            let a = self.0.get(&n).copied().unwrap_or(0);
            let b = expected.0.get(&n).copied().unwrap_or(0);
            a.abs_diff(b) <= slack
        });
        within
    }
}

/// Records a comparison of pages found with pages expected, `slack` pages
/// per node allowed, plus one of no page missing.
pub fn expect_pages(
    out: &mut Outcome,
    what: impl Into<String>,
    expected: &Pages,
    found: &PageHistogram,
    slack: u64,
) -> bool {
    let pages = Pages::found(found);
    let text = format!("{pages}{}", Pages::absent(found));
    let ok = pages.within(expected, slack) && found.not_present + found.unknown == 0;
    let expected_text = if slack > 0 {
        format!("{expected} (±{slack})")
    } else {
        expected.to_string()
    };
    out.check(what, expected_text, text, ok)
}

/// How long a check waits for something that ends by itself in seconds
/// (a program starting, a profile of a program that paces itself by the
/// profiler; the slowest seen, beside `stress-ng --cpu 2`, 107 s) before
/// calling it a hang. Never a measure of speed: every
/// check paces itself by what the guest has done, and this only turns a
/// hang into a failure that names what was waited for instead of a guest
/// that never powers off.
pub(crate) const HANG: std::time::Duration = std::time::Duration::from_secs(300);

const BALANCING: &str = "/proc/sys/kernel/numa_balancing";

/// Sets `numa_balancing` for as long as it lives.
#[derive(Debug)]
pub struct Balancing(Option<String>);

impl Balancing {
    /// Writes `value` (`0`, `1`, `2`) to `kernel.numa_balancing`; the
    /// value before comes back when this is dropped.
    pub fn set(value: &str) -> Result<Balancing> {
        let previous = fs::read_to_string(BALANCING).ok();
        fs::write(BALANCING, value)?;
        Ok(Balancing(previous))
    }
}

impl Drop for Balancing {
    fn drop(&mut self) {
        if let Some(previous) = &self.0 {
            let _ = fs::write(BALANCING, previous.trim());
        }
    }
}

/// The value of `numalab.KEY=` on the kernel command line.
fn cmdline_value(key: &str) -> Option<String> {
    let cmdline = fs::read_to_string("/proc/cmdline").ok()?;
    let prefix = format!("numalab.{key}=");
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .map(str::to_owned)
}

/// Whether `check` is selected by a comma-separated list of names or
/// prefixes (`topo`, `buffer.bind`).
pub fn selected(check: &str, filter: Option<&str>) -> bool {
    match filter {
        None => true,
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .any(|f| check.starts_with(f)),
    }
}

/// Runs the selected checks, writing result lines to `results` and a
/// readable account to standard output.
pub(crate) fn run_checks(guest: &Guest, filter: Option<&str>, results: &mut dyn Write) -> GuestEnd {
    let checks: Vec<&Check> = CHECKS.iter().filter(|c| selected(c.name, filter)).collect();
    let start = GuestStart {
        preset: guest.preset.name.clone(),
        kernel: guest.kernel.clone(),
        checks: checks.iter().map(|c| c.name.to_owned()).collect(),
    };
    let emit = |results: &mut dyn Write, prefix: &str, json: String| {
        let _ = writeln!(results, "{prefix}{json}");
        let _ = results.flush();
    };
    emit(
        results,
        BEGIN,
        serde_json::to_string(&start).unwrap_or_default(),
    );
    println!(
        "numalab-guest: preset {} ({}), Linux {}, {} checks",
        guest.preset.name,
        guest.preset.summary(),
        guest.kernel,
        checks.len()
    );
    let mut end = GuestEnd {
        passed: 0,
        failed: 0,
        not_applicable: 0,
    };
    for check in checks {
        println!("numalab-guest: running {}", check.name);
        let began = Instant::now();
        let mut outcome = Outcome::default();
        let ran = panic::catch_unwind(AssertUnwindSafe(|| (check.run)(guest, &mut outcome)));
        let error = match ran {
            Ok(Ok(())) => None,
            Ok(Err(err)) => Some(format!("error: {err:#}")),
            Err(panic) => Some(format!(
                "panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)")
            )),
        };
        let mismatches = outcome.comparisons.iter().any(|c| !c.ok);
        let status = if error.is_some() || mismatches {
            Status::Fail
        } else if outcome.not_applicable.is_some() {
            Status::NotApplicable
        } else if outcome.comparisons.is_empty() {
            outcome
                .notes
                .push("the check compared nothing, which is a failure".into());
            Status::Fail
        } else {
            Status::Pass
        };
        let mut detail: Vec<String> = error.into_iter().collect();
        detail.extend(outcome.not_applicable.clone());
        detail.extend(outcome.notes);
        let report = CheckReport {
            check: check.name.to_owned(),
            status,
            detail: detail.join("\n"),
            comparisons: outcome.comparisons,
            seconds: began.elapsed().as_secs_f64(),
        };
        match status {
            Status::Pass => end.passed += 1,
            Status::Fail => end.failed += 1,
            Status::NotApplicable => end.not_applicable += 1,
        }
        if status == Status::Fail {
            print!("{}", report.render_diff());
        } else {
            println!(
                "numalab-guest: {} {} ({} comparisons, {:.2} s){}",
                status,
                check.name,
                report.comparisons.len(),
                report.seconds,
                if report.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", report.detail.replace('\n', "; "))
                }
            );
        }
        emit(
            results,
            RESULT,
            serde_json::to_string(&report).unwrap_or_default(),
        );
    }
    emit(
        results,
        END,
        serde_json::to_string(&end).unwrap_or_default(),
    );
    println!(
        "numalab-guest: {} passed, {} failed, {} n/a",
        end.passed, end.failed, end.not_applicable
    );
    end
}

/// The guest program: `numalab-guest [--preset NAME] [--checks LIST]
/// [--results PATH] [--list]`. The preset and checks default to the
/// kernel command line's `numalab.preset=` and `numalab.checks=`.
pub fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut preset, mut checks, mut results) = (None, None, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--preset" => preset = args.next(),
            "--checks" => checks = args.next(),
            "--results" => results = args.next(),
            // Programs for profile.writes and profile.timeline to watch.
            "--write-quarter" => {
                return match advise::write_quarter() {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("numalab-guest --write-quarter: {err:#}");
                        ExitCode::from(1)
                    }
                };
            }
            "--hold" => {
                let (mib, pidfile) = (args.next().unwrap_or_default(), args.next());
                return match oracle::hold(&mib, &pidfile.unwrap_or_default()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("numalab-guest --hold: {err:#}");
                        ExitCode::from(1)
                    }
                };
            }
            "--phases" => {
                let (nodes, statefile) = (args.next().unwrap_or_default(), args.next());
                return match oracle::phases(&nodes, &statefile.unwrap_or_default()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("numalab-guest --phases: {err:#}");
                        ExitCode::from(1)
                    }
                };
            }
            "--placement-speed" => {
                let rest: Vec<String> = args.collect();
                return match decide::placement_speed(&rest) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("numalab-guest --placement-speed: {err:#}");
                        ExitCode::from(1)
                    }
                };
            }
            "--allocate" => {
                return match advise::allocate_in_turn(&args.next().unwrap_or_default()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("numalab-guest --allocate: {err:#}");
                        ExitCode::from(1)
                    }
                };
            }
            "--list" => {
                for check in CHECKS {
                    println!("{:<28} {}", check.name, check.about);
                }
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!(
                    "numalab-guest: unknown argument {other:?}; usage: numalab-guest \
                     [--preset NAME] [--checks LIST] [--results PATH] [--list]"
                );
                return ExitCode::from(2);
            }
        }
    }
    // The host may hand the guest other expectations than its own copy
    // (`harness::boot_with_expectations`).
    let presets = match fs::read_to_string(crate::harness::GUEST_PRESETS) {
        Ok(text) => Presets::parse(&text),
        Err(_) => Presets::builtin(),
    };
    let presets = match presets {
        Ok(p) => p,
        Err(err) => {
            eprintln!("numalab-guest: {err}");
            return ExitCode::from(2);
        }
    };
    let Some(name) = preset.or_else(|| cmdline_value("preset")) else {
        eprintln!("numalab-guest: no preset: pass --preset NAME or boot with numalab.preset=NAME");
        return ExitCode::from(2);
    };
    let preset = match presets.get(&name) {
        Ok(p) => p.clone(),
        Err(err) => {
            eprintln!("numalab-guest: {err}");
            return ExitCode::from(2);
        }
    };
    let checks = checks.or_else(|| cmdline_value("checks"));
    let guest = Guest::new(preset, presets.tolerance.clone());
    let end = match results {
        Some(path) => match fs::OpenOptions::new().write(true).open(&path) {
            Ok(mut file) => run_checks(&guest, checks.as_deref(), &mut file),
            Err(err) => {
                eprintln!("numalab-guest: cannot open {path}: {err}");
                return ExitCode::from(2);
            }
        },
        None => run_checks(&guest, checks.as_deref(), &mut std::io::stdout()),
    };
    if end.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_are_unique_and_filterable() {
        let mut names: Vec<&str> = CHECKS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CHECKS.len());
        assert!(selected("topo.hmat", Some("topo")));
        assert!(selected("buffer.bind", Some("exec, buffer.bind")));
        assert!(!selected("buffer.bind", Some("exec")));
        assert!(selected("anything", None));
    }

    #[test]
    fn pages_compare_within_slack() {
        let nodes: NodeSet = "0-2".parse().unwrap();
        let even = Pages::even(&nodes, 10);
        assert_eq!(even.to_string(), "node0 4, node1 3, node2 3");
        let found = Pages(BTreeMap::from([(0, 3), (1, 4), (2, 3)]));
        assert!(found.within(&even, 1));
        assert!(!found.within(&even, 0));
        let elsewhere = Pages(BTreeMap::from([(0, 4), (1, 3), (2, 3), (3, 2)]));
        assert!(
            !elsewhere.within(&even, 1),
            "pages on a node not expected count"
        );
        assert_eq!(Pages::on(1, 0).to_string(), "none");
    }

    #[test]
    fn an_empty_selection_still_reports_begin_and_end() {
        let presets = Presets::builtin().unwrap();
        let guest = Guest::new(
            presets.get("two-socket").unwrap().clone(),
            presets.tolerance.clone(),
        );
        let mut out = Vec::new();
        let end = run_checks(&guest, Some("no-such-check"), &mut out);
        assert_eq!(end.passed + end.failed + end.not_applicable, 0);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(BEGIN) && text.contains(END), "{text}");
    }

    #[test]
    fn kernel_versions_compare_numerically() {
        let presets = Presets::builtin().unwrap();
        let mut guest = Guest::new(
            presets.get("two-socket").unwrap().clone(),
            presets.tolerance.clone(),
        );
        guest.kernel = "6.1.0-56-amd64".into();
        assert!(guest.kernel_at_least(5, 15));
        assert!(!guest.kernel_at_least(6, 9));
        guest.kernel = "6.10.2".into();
        assert!(guest.kernel_at_least(6, 9));
    }

    #[test]
    fn finds_the_json_after_other_output() {
        let doc = Ran::json_in("2+0 records in\n{\n \"a\": 1\n}\n").unwrap();
        assert_eq!(doc["a"], 1);
        assert!(Ran::json_in("nothing here").is_err());
    }

    #[test]
    fn reads_the_result_after_other_output_as_its_type() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1").unwrap();
        let json = Document::new(TopoReport::gather(topology))
            .to_json()
            .unwrap();
        let text = format!("2+0 records in\n{json}");
        let report: TopoReport = Ran::result_in(&text).unwrap();
        assert_eq!(report.topology.nodes.len(), 2);
        let other = text.replace("numalab.topo", "numalab.exec");
        let err = Ran::result_in::<TopoReport>(&other).unwrap_err();
        assert!(format!("{err:#}").contains("not numalab.topo"), "{err:#}");
    }
}
