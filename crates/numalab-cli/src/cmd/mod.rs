//! One module per subcommand.

pub mod exec;
pub mod fill;
pub mod topo;
