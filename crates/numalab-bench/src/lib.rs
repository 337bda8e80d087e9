//! numalab's measurement engine: memory kernels that measure memory and
//! not themselves, and pinned workers that start together.

pub mod kernels;
pub mod stats;
pub mod workers;
