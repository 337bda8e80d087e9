//! numalab's emulated-NUMA test suite.
//!
//! The machine numalab is developed on has one NUMA node, so everything
//! numalab does across nodes is proven here, in a real Linux kernel booted
//! under QEMU (TCG) with emulated NUMA nodes. The host side
//! ([`harness`], [`qemu`]) builds the `numalab` command and
//! the guest program, packs them with busybox and their shared libraries
//! into an initramfs, boots each [`preset`] and reads back the guest's
//! report; the [`guest`] side runs the checks inside the machine.
//!
//! ```no_run
//! use numalab_emu::harness::{default_jobs, default_timeout, run_suite, SuiteEnd};
//! use numalab_emu::preset::Presets;
//! use numalab_emu::qemu::BootOptions;
//!
//! // Boot every preset on every kernel, print each one's checks and any
//! // failure's diff.
//! let presets = Presets::builtin()?;
//! let all: Vec<_> = presets.presets.iter().collect();
//! let options = BootOptions {
//!     timeout: default_timeout(),
//!     checks: None,
//!     shell: false,
//!     echo: false,
//!     kernels: Vec::new(),
//!     jobs: default_jobs(),
//! };
//! assert!(!matches!(run_suite(&all, &options), SuiteEnd::Failed));
//! # Ok::<(), String>(())
//! ```
//!
//! The presets are in `crates/numalab-emu/presets.toml`; the checks in
//! [`guest`], where adding one is a function and a line.
#![warn(missing_docs)]

pub mod guest;
pub mod harness;
pub(crate) mod initramfs;
pub mod preset;
pub mod qemu;
pub(crate) mod report;
