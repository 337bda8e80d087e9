//! `numalab ring`: the radio-astronomy (PSRDada) blog's shared-memory ring
//! test — writer and reader processes pinned to chosen nodes or CPUs, the
//! ring's memory on a chosen node, MB/s per stream with every placement
//! verified — over numalab's own ring ([`numalab::ring`]).
//!
//! - [`config`]: what to measure ([`RingConfig`]), as the command line
//!   gives it;
//! - [`plan`]: the cells and their streams, resolved against the
//!   [`Topology`](numalab::Topology) (the blog's tables or one custom
//!   cell);
//! - [`run`](mod@run): one ring per stream, a writer and readers per ring
//!   as processes of the worker executable, every placement audited, into
//!   a [`RingReport`];
//! - [`worker`]: what a writer or reader process does;
//! - the result types ([`RingReport`], [`RingListReport`]).
//!
//! The engine prints nothing: progress goes to a callback, and the
//! result carries what a person must be told.

pub mod config;
pub mod plan;
mod result;
pub mod run;
pub mod worker;

pub use config::{ConfigError, Layout, Mode, RingConfig};
pub use plan::{CellPlan, PlanError, StreamPlan};
pub use result::{
    CellResult, CellStatus, ProcessPlacement, RingListReport, RingReport, Settings, StreamResult,
};
pub use run::{run, RunError};
pub use worker::{Role, WorkerConfig, WorkerError, WorkerReport};
