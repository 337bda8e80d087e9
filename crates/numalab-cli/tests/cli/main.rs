//! The `numalab` binary as users run it: one module per command, shared
//! helpers in `common`.

mod advise;
mod browser;
mod common;
mod exec;
mod experiment;
mod files;
mod fill;
mod fincore;
mod fleet;
mod help;
mod manual;
mod matrix;
mod pagecache_bench;
mod profile;
mod report;
mod ring;
mod signals;
mod slurm;
mod topo;
mod unprivileged;
