//! numalab for C and C++: a C ABI over the `numalab` library, installed as
//! `libnumalab.so.0` / `libnumalab.a` with `numalab.h` and `numalab.pc`
//! (`scripts/c.sh`). docs/c.md is the guide.
//!
//! Every function returns a status ([`numalab_status`]); on an error,
//! [`numalab_last_error`] gives the calling thread's message, in the words
//! the `numalab` command prints. A NULL or out-of-range argument is an
//! error, never a crash, and no Rust panic crosses into C: it becomes
//! `NUMALAB_EINTERNAL`.

#![allow(non_camel_case_types)]

mod error;
mod memory;
mod topology;

pub use error::{numalab_last_error, numalab_status, numalab_version};
pub use memory::{
    numalab_alloc, numalab_audit, numalab_free, numalab_locate, numalab_place, numalab_thread_bind,
    numalab_thread_restore, numalab_thread_state,
};
pub use topology::{numalab_distance, numalab_node_count, numalab_node_id, numalab_node_memory};
