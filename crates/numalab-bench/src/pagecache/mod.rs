//! `numalab pagecache bench`: the cluster mailing-list post's experiment,
//! generalised. A file's page cache is placed on one node; 1…N readers,
//! each pinned to a CPU of that node or of another, read the whole file
//! (`read(2)` at a block size, as `dd bs=8192` did, or through `mmap`),
//! started in groups with an offset; the figure is the time until the
//! last reader finished, beside each reader's and the readers' combined
//! GB/s, the remote/local ratio beside SLIT/10 and the measured read
//! bandwidth's ratio, and where the cache was before and after each cell.
//!
//! The run is planned first ([`plan`]): every count, size, node and CPU
//! is checked, and each cell either has its CPUs or a reason it cannot
//! run here, before a byte is written or read. A file numalab creates is
//! unnamed ([`numalab::files::scratch_file`]): nothing is left behind,
//! however the run ends.
//!
//! The files: `config.rs` (what to measure and the limits it is checked
//! against), `plan.rs`, `result.rs` (the `numalab.pagecache-bench`
//! document), `run.rs`; and `change.rs`, the engine of `numalab
//! pagecache load` and `drop` ([`change`]).
//!
//! ```
//! use numalab::Topology;
//! use numalab_bench::control::Control;
//! use numalab_bench::pagecache::{plan, run, BenchConfig, FileSource};
//!
//! let topology = Topology::system()?;
//! let config = BenchConfig {
//!     file: FileSource::Create { dir: std::env::temp_dir(), size: 8 << 20 },
//!     repeats: 1,
//!     compare_matrix: false,
//!     ..BenchConfig::default()
//! };
//! let plan = plan(&config, &topology)?;
//! let report = run(&plan, &topology, &Control::new())?;
//! let cell = &report.cells[0];
//! assert_eq!(cell.repeats[0].readers[0].bytes, 8 << 20);
//! assert!(cell.time_to_last_s.unwrap() > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod change;
mod config;
mod plan;
mod result;
mod run;

pub use change::*;
pub use config::*;
pub use plan::*;
pub use result::*;
pub use run::*;
