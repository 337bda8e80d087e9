//! Operating-system access. `linux` is the only module in numalab that
//! makes raw system calls; `procfs` reads the kernel's `/proc` and `/sys`
//! files. Everything else in the crate calls their safe wrappers.

pub(crate) mod linux;
pub(crate) mod procfs;
