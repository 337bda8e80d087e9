//! A shared-memory ring between processes: one writer, many readers, its
//! memory placed on the NUMA node you choose.
//!
//! A ring is a named segment (a file in `/dev/shm`, or in `/dev/hugepages`
//! for explicit huge pages) cut into equal blocks. The writer fills blocks
//! in order — by copying bytes in ([`Writer::write`]) or in place
//! ([`Writer::claim`], then [`WriteBlock::commit`]) — and every reader
//! reads every block from the moment it joined, in order — by copying out
//! ([`Reader::read`]) or in place ([`Reader::borrow`]). Data travels in
//! *transfers*, each with a key-value [`TransferHeader`] sent beside its
//! first block, as PSRDada's header blocks.
//!
//! * **Placement.** The creator applies the [`MemPolicy`](crate::MemPolicy) to the mapping
//!   before any page is touched, faults every page in, optionally locks
//!   them, and [`Ring::audit`] checks with `move_pages` where they landed.
//! * **Back-pressure** per reader ([`Backpressure`]): the writer waits for
//!   a slow reader, or moves it on (it is marked lagging and the blocks it
//!   missed are counted).
//! * **Waiting** spins for a few microseconds, then sleeps on a futex in
//!   the segment: an idle ring uses no CPU, and there is no semaphore per
//!   block.
//! * **Liveness** is held by the kernel: the writer, each reader and the
//!   creator hold open-file-description locks on bytes of the segment
//!   file, which the kernel drops when their process dies. A dead writer is
//!   the end of the data for readers ([`RingError::WriterDied`] once they
//!   have read all it committed); a dead reader is dropped so the writer
//!   never waits for it; a segment nobody holds is stale, listed by
//!   [`list`] and removed by [`remove`] (`numalab ring --list`,
//!   `numalab ring --cleanup NAME`).
//! * **Robustness.** The segment is made as an unnamed owner-only file,
//!   completed (header last, magic stored with release ordering) and only
//!   then linked under its name, which fails if the name exists; opening
//!   never follows a link and refuses a file of another user or with
//!   group/other permissions. A header with the wrong magic, version,
//!   checksum or sizes is refused with an error; the block descriptors a
//!   reader gets are checked before use.
//!
//! # Two programs
//!
//! The writer (the creator here) and the reader usually run in two
//! processes; here they are two threads, which changes nothing.
//!
//! ```
//! use numalab::ring::{Ring, RingOptions, TransferHeader};
//! use numalab::{MemPolicy, NodeSet};
//! # let name = format!("doc-example-{}", std::process::id());
//!
//! // Program 1, the writer: 8 blocks of 1 MiB on node 0.
//! let ring = Ring::create(
//!     &RingOptions::new(&name, 8 << 20, 1 << 20).policy(MemPolicy::Bind(NodeSet::single(0))),
//! )?;
//! assert!(ring.audit().is_match()); // every page is on node 0
//!
//! // Program 2, the reader.
//! let reader_program = {
//!     let name = name.clone();
//!     std::thread::spawn(move || -> Result<u64, numalab::ring::RingError> {
//!         // SAFETY: every process using this ring goes through numalab's
//!         // ring API.
//!         let ring = unsafe { Ring::open(&name)? };
//!         let mut reader = ring.reader()?;
//!         let mut total = 0;
//!         while let Some(transfer) = reader.next_transfer()? {
//!             assert_eq!(transfer.header.get("SOURCE"), Some("J0437-4715"));
//!             // Read in place; or copy out with `reader.read(&mut buf)`.
//!             while let Some(block) = reader.borrow()? {
//!                 total += block.iter().map(|&b| u64::from(b)).sum::<u64>();
//!                 if block.ends_transfer() {
//!                     break;
//!                 }
//!             }
//!         }
//!         Ok(total)
//!     })
//! };
//!
//! let mut writer = ring.writer()?;
//! writer.wait_for_readers(1, std::time::Duration::from_secs(10))?;
//! let mut header = TransferHeader::new();
//! header.set("SOURCE", "J0437-4715")?;
//! writer.begin_transfer(&header)?;
//! writer.write(&[1u8; 3 << 20])?; // copied in
//! let mut block = writer.claim()?; // or filled in place
//! block[..4].copy_from_slice(&[2, 2, 2, 2]);
//! block.commit(4)?;
//! writer.finish()?; // end of the stream
//!
//! assert_eq!(reader_program.join().unwrap()?, (3 << 20) + 8);
//! // Dropping `ring`, the creator's handle, removes the segment's name.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod atomic;
pub(crate) mod protocol;

#[cfg(not(loom))]
mod copy;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod held;
#[cfg(not(loom))]
mod layout;
#[cfg(not(loom))]
mod limits;
#[cfg(not(loom))]
mod meta;
#[cfg(not(loom))]
mod monitor;
#[cfg(not(loom))]
mod reader;
#[cfg(not(loom))]
mod segment;
#[cfg(not(loom))]
mod wait;
#[cfg(not(loom))]
mod writer;

#[cfg(not(loom))]
pub use self::{
    copy::{
        auto_stores, streaming_threshold, AutoBasis, AutoStores, Calibration, CopyStores,
        StreamOrder, STREAMING_FROM,
    },
    error::{RingError, SizeError},
    held::HeldBlock,
    layout::{validate_header, HEADER_SIZE},
    limits::{MAX_BLOCKS, MAX_META_SIZE, MAX_READERS},
    meta::{Transfer, TransferHeader},
    monitor::{
        list, remove, remove_abandoned, ReaderStats, RingMonitor, RingStats, SegmentEntry,
        WriterStats,
    },
    reader::{ReadBlock, Reader},
    writer::{WriteBlock, Writer},
};

#[cfg(not(loom))]
mod handle;
#[cfg(not(loom))]
pub use self::handle::{check_room, Backpressure, Ring, RingOptions};
