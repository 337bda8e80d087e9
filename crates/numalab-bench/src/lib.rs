//! numalab's measurement engine: memory kernels that measure memory and
//! not themselves, pinned workers that start together, and the experiment
//! engine (`numalab run` / `numalab sweep`) built on them.

pub mod advise;
pub mod control;
pub mod document;
pub mod exec;
pub mod experiment;
pub mod fill;
pub mod fincore;
pub mod fleet;
pub mod goals;
pub mod host;
pub mod kernels;
pub mod matrix;
pub mod message;
pub mod pagecache;
pub mod profile;
pub mod report;
pub mod ring;
pub mod stats;
pub mod topo;
pub mod workers;
