//! One module per subcommand.

pub mod exec;
pub mod fill;
pub mod matrix;
pub mod plot;
pub mod report;
pub mod ring;
pub mod run;
pub mod sweep;
pub mod topo;
