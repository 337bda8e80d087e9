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
mod pagecache;
mod ring;
mod topology;

pub use error::{numalab_last_error, numalab_status, numalab_version};
pub use memory::{
    numalab_alloc, numalab_audit, numalab_free, numalab_locate, numalab_place, numalab_thread_bind,
    numalab_thread_restore, numalab_thread_state,
};
pub use pagecache::numalab_fincore;
pub use ring::{
    numalab_reader, numalab_reader_acquire, numalab_reader_close, numalab_reader_join,
    numalab_reader_release, numalab_reader_set_timeout, numalab_reader_transfer, numalab_ring,
    numalab_ring_close, numalab_ring_create, numalab_ring_geometry, numalab_ring_open,
    numalab_writer, numalab_writer_acquire, numalab_writer_attach, numalab_writer_begin_transfer,
    numalab_writer_close, numalab_writer_commit, numalab_writer_end_transfer,
    numalab_writer_set_timeout, numalab_writer_wait_for_readers, numalab_writer_write,
    NUMALAB_BLOCK_END, NUMALAB_BLOCK_START,
};
pub use topology::{numalab_distance, numalab_node_count, numalab_node_id, numalab_node_memory};
