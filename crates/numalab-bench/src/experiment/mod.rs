//! The experiment engine behind `numalab run` and `numalab sweep`: the
//! slide deck's NUMA policy simulator, generalised.
//!
//! Data flows one way:
//!
//! ```text
//! config (TOML, --set) → Plan (resolved against the Topology) → execute
//! (allocate, place, prefault, audit; pinned workers, warm-up, repeats)
//! → RunReport (serde) → tables, JSON, CSV, plots
//! ```
//!
//! - [`config`]: the experiment file, strict, with located errors;
//! - [`plan`]: threads' CPUs and nodes, regions' policies, refusals;
//! - [`mod@execute`]: the run itself (its access loops are in `access`);
//! - [`floor`]: the machine's noise floor, and runs lengthened past it;
//! - [`result`]: the one result type every exporter reads;
//! - [`warning`]: what every output shows beside the figures, made by the
//!   plan, the run and the sweep;
//! - [`sweep`]: grids of experiments, each policy against `local` or each value of the first axis against its first.

pub(crate) mod access;
pub mod clock;
pub mod config;
pub mod counters;
pub mod execute;
pub mod floor;
pub mod plan;
pub mod result;
pub mod rwlock;
pub mod sweep;
pub mod values;
pub mod warning;

pub use clock::Clock;
pub use config::{ConfigError, Experiment, Key, KEYS};
pub use execute::{run, run_plan, ExecuteError};
pub use plan::{Plan, PlanError, RegionPlan, ThreadPlan};
pub use result::{RunReport, SweepReport};
pub use sweep::run_sweep;
pub use values::{ByteSize, Pattern, PolicySpec, ReadWrite, Seconds, Sharing, ThreadPlacement};
pub use warning::{Cause, Warning, WarningKind};
