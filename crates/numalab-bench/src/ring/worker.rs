//! A writer or reader process of `numalab ring`: pinned to its CPUs, it
//! attaches to the ring the run made, moves the ramp (untimed) and the
//! volume, and reports where it ran and when the first and last bytes of
//! the volume moved.

use std::collections::BTreeSet;
use std::time::Duration;

use numalab::affinity::{self, BindError};
use numalab::ring::{Ring, RingError};
use numalab::{BufferError, CpuSet, MemPolicy, NodeBuffer, NodeSet};
use serde::{Deserialize, Serialize};

use super::config::Mode;
use crate::kernels::{self, Isa, Store};

/// What a worker process prints when it is done (one JSON line).
///
/// ```
/// use numalab_bench::ring::{ProcessPlacement, Role, WorkerReport};
///
/// let line = r#"{"role":"reader","pid":7,"bytes":64,"blocks":1,"start_ns":0,"end_ns":9,
///   "cpu_seconds":0.0,"cpus_allowed":[0,1,2,3],"cpus_seen":[2],"nodes_seen":[0],"skipped_blocks":0}"#;
/// let report: WorkerReport = serde_json::from_str(line).unwrap();
/// assert_eq!(report.role, Role::Reader);
/// assert!(ProcessPlacement::of(&report, &"2-3".parse().unwrap()).ok);
/// assert!(!ProcessPlacement::of(&report, &"0".parse().unwrap()).ok);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// `writer` or `reader`.
    pub role: Role,
    /// Process id.
    pub pid: u32,
    /// Payload bytes moved after the ramp.
    pub bytes: u64,
    /// Blocks moved after the ramp.
    pub blocks: u64,
    /// `CLOCK_MONOTONIC` where the timed part began, nanoseconds: for the
    /// writer before its first byte after the ramp, for a reader once it
    /// had read the ramp's last block (with no ramp: before its first
    /// read).
    pub start_ns: u64,
    /// `CLOCK_MONOTONIC` after the last byte, nanoseconds.
    pub end_ns: u64,
    /// CPU time used, seconds.
    pub cpu_seconds: f64,
    /// The CPUs it was pinned to.
    pub cpus_allowed: CpuSet,
    /// CPUs it ran on.
    pub cpus_seen: CpuSet,
    /// Their nodes.
    pub nodes_seen: NodeSet,
    /// Blocks the ring skipped for it (lag mode).
    pub skipped_blocks: u64,
}

/// A worker's side of the ring.
///
/// ```
/// use numalab_bench::ring::Role;
/// assert_eq!(Role::Writer.as_str(), "writer");
/// assert_eq!(serde_json::from_str::<Role>(r#""reader""#)?, Role::Reader);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Attaches as the writer and moves the volume in.
    Writer,
    /// Joins as a reader and reads everything out.
    Reader,
}

impl Role {
    /// `writer` or `reader`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reader => "reader",
        }
    }
}

/// What one worker process does.
///
/// ```
/// use std::time::Duration;
/// use numalab_bench::ring::{Mode, Role, WorkerConfig};
///
/// let worker = WorkerConfig {
///     role: Role::Reader, name: "run-1-0".into(), cpus: "0-3".parse().unwrap(),
///     mode: Mode::InPlace, timeout: Duration::from_secs(30), volume: 1 << 30,
///     ramp: 0, readers: 1, verify: false,
/// };
/// let args = worker.args();
/// assert_eq!(args[..3], ["ring-worker", "--role", "reader"]);
/// assert!(args.windows(2).any(|w| w == ["--mode", "in-place"]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Writer or reader.
    pub role: Role,
    /// The ring to attach to.
    pub name: String,
    /// CPUs to pin to.
    pub cpus: CpuSet,
    /// How data goes in and out.
    pub mode: Mode,
    /// How long to wait for the other side.
    pub timeout: Duration,
    /// Bytes to write (the writer), timed.
    pub volume: u64,
    /// Bytes moved first, untimed: whole blocks, this rounded up.
    pub ramp: u64,
    /// Readers the writer waits for.
    pub readers: usize,
    /// Sequence-numbered words, checked by readers.
    pub verify: bool,
}

impl WorkerConfig {
    /// The worker executable's arguments that start this worker: the
    /// hidden `numalab ring-worker` subcommand and its options.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "ring-worker",
            "--role",
            self.role.as_str(),
            "--name",
            &self.name,
            "--cpus",
            &self.cpus.to_string(),
            "--mode",
            self.mode.as_str(),
            "--timeout",
            &self.timeout.as_secs_f64().to_string(),
            "--volume",
            &self.volume.to_string(),
            "--ramp",
            &self.ramp.to_string(),
            "--readers",
            &self.readers.to_string(),
        ]
        .map(str::to_owned)
        .into();
        if self.verify {
            args.push("--verify".into());
        }
        args
    }
}

/// Why a worker failed.
///
/// ```
/// use std::time::Duration;
/// use numalab_bench::ring::{worker, Mode, Role, WorkerConfig, WorkerError};
///
/// let config = WorkerConfig {
///     role: Role::Reader, name: "no-such-ring".into(), cpus: "4000".parse()?,
///     mode: Mode::Copy, timeout: Duration::from_secs(1), volume: 1 << 20,
///     ramp: 0, readers: 1, verify: false,
/// };
/// // A worker pins itself first: CPU 4000 does not exist.
/// match worker::run(&config).unwrap_err() {
///     WorkerError::Pin { cpus, .. } => assert_eq!(cpus.to_string(), "4000"),
///     other => panic!("unexpected {other}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// It could not be pinned.
    #[error("pinning to CPUs {cpus}")]
    Pin {
        /// The CPUs.
        cpus: CpuSet,
        /// Why.
        #[source]
        source: BindError,
    },
    /// The ring could not be opened.
    #[error("opening ring {name:?}")]
    Open {
        /// The ring's name.
        name: String,
        /// Why.
        #[source]
        source: RingError,
    },
    /// Attaching, writing or reading failed.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The writer's source or the reader's buffer could not be mapped.
    #[error("mapping the worker's buffer")]
    Buffer(#[from] BufferError),
    /// A reader got a second transfer.
    #[error("a second transfer arrived; the writer sends one")]
    SecondTransfer,
    /// A read that is not whole words (with verification).
    #[error("verify: a read of {len} bytes is not whole words")]
    PartialWord {
        /// Bytes read.
        len: usize,
    },
    /// A word that is not the one expected (with verification).
    #[error("verify: byte {offset} of the stream is wrong (word {found:#x}, expected {expected:#x}): lost, repeated or reordered data")]
    WrongWord {
        /// Offset of the word in the stream.
        offset: u64,
        /// The word found.
        found: u64,
        /// The word expected.
        expected: u64,
    },
}

/// `len` bytes of `byte` on whole base pages, written by this process (so
/// on its node). The ring's blocks start on page boundaries, and so do the
/// C ring's buffers; a `Vec` this large comes from `mmap` through `malloc`,
/// 16 bytes past a page, and copies between such a buffer and a block ran
/// worse on the Zen 4 VM: with both ends of the C ring's copies 16 bytes
/// off, 256 KiB blocks moved at 11 GB/s in three runs of four, with both on
/// pages at 22–36 (docs/figures.md).
fn page_buffer(len: usize, byte: u8) -> Result<NodeBuffer, WorkerError> {
    let mut buffer = NodeBuffer::new(len, MemPolicy::Default)?;
    buffer.as_mut_slice().fill(byte);
    Ok(buffer)
}

/// The word at position `index` of a verified stream.
fn word(index: u64) -> u64 {
    index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (index >> 29)
}

/// Where the worker ran.
#[derive(Default)]
struct Seen {
    cpus: BTreeSet<u32>,
    nodes: BTreeSet<u32>,
}

impl Seen {
    fn sample(&mut self) {
        let here = affinity::current();
        self.cpus.insert(here.cpu);
        self.nodes.insert(here.node);
    }
}

/// The most a copying writer copies from (without verification).
const SOURCE_MAX: usize = 4 << 20;

fn now_ns() -> u64 {
    numalab::system::monotonic().as_nanos() as u64
}

/// Runs a worker in this process (started by [`run`](super::run())). It
/// first restores Ctrl-C's default, in case whatever started it ignored
/// the signal: an interrupt must end it. [`run`](super::run()) starts it
/// so that the kernel sends it `SIGTERM` when the run's process dies; the
/// `numalab ring-worker` command then removes the ring if its creator is
/// gone ([`numalab::ring::remove_abandoned`]) and exits.
pub fn run(config: &WorkerConfig) -> Result<WorkerReport, WorkerError> {
    numalab::system::default_interrupts();
    affinity::bind_thread_to_cpus(&config.cpus).map_err(|source| WorkerError::Pin {
        cpus: config.cpus.clone(),
        source,
    })?;
    let timeout = config.timeout;
    // SAFETY: the ring was made by the `numalab ring` that started this
    // process, and every process touching it is a numalab worker.
    let ring = unsafe { Ring::open(&config.name) }.map_err(|source| WorkerError::Open {
        name: config.name.clone(),
        source,
    })?;
    let block = ring.block_size();
    let cpu_before = numalab::system::process_cpu_time();
    let mut seen = Seen::default();
    seen.sample();
    // The ramp moves whole blocks, so that readers know where it ends by
    // counting them.
    let ramp_blocks = config.ramp.div_ceil(block as u64);
    let (bytes, blocks, start_ns, end_ns, skipped) = match config.role {
        Role::Writer => {
            let mut writer = ring.writer()?;
            writer.set_timeout(Some(timeout));
            writer.wait_for_readers(config.readers, timeout)?;
            // The source buffer, written here: on this process's node. A
            // block of sequence words with verification; otherwise at most
            // SOURCE_MAX, copied in as often as a block takes, as
            // PSRDada's dada_junkdb does: a producer's data is usually
            // fresh in its cache, not read back from memory.
            let source_len = if config.verify {
                block
            } else {
                block.min(SOURCE_MAX)
            };
            let mut source = page_buffer(source_len, 1)?;
            let source = source.as_mut_slice();
            // An in-place producer stores as the ring's own copy-in would
            // (streaming for blocks too large to stay in the cache).
            let isa = Isa::detect();
            let store = if writer.streams() {
                Store::NonTemporal
            } else {
                Store::Cached
            };
            // One block of `len` bytes, the stream's bytes from
            // `offset` on (the words' numbers, with verification), the
            // stream's `index`th block.
            let mut put = |len: usize, offset: u64, index: u64| -> Result<(), WorkerError> {
                match config.mode {
                    Mode::Copy => {
                        if config.verify {
                            fill_words(&mut source[..len], offset / 8);
                            writer.write(&source[..len])?;
                        } else {
                            source[0] = index as u8;
                            let mut left = len;
                            while left > 0 {
                                let part = left.min(source.len());
                                writer.write(&source[..part])?;
                                left -= part;
                            }
                        }
                    }
                    Mode::InPlace => {
                        let mut slot = writer.claim()?;
                        if config.verify {
                            fill_words(&mut slot[..len], offset / 8);
                        } else {
                            kernels::write(&mut slot[..len], index as u8, isa, store);
                        }
                        slot.commit(len)?;
                    }
                }
                Ok(())
            };
            // The ramp, untimed.
            let mut offset = 0u64;
            for index in 0..ramp_blocks {
                put(block, offset, index)?;
                offset += block as u64;
            }
            let mut written = 0u64;
            let mut blocks = 0u64;
            let start = now_ns();
            while written < config.volume {
                let len = (config.volume - written).min(block as u64) as usize;
                put(len, offset, ramp_blocks + blocks)?;
                offset += len as u64;
                written += len as u64;
                blocks += 1;
                if blocks.is_multiple_of(64) {
                    seen.sample();
                }
            }
            writer.finish()?;
            (written, blocks, start, now_ns(), 0)
        }
        Role::Reader => {
            // Written here, so its pages are this process's own, and
            // before joining: the writer starts its clock once every
            // reader has joined, and faulting in a 256 MiB buffer then
            // would be timed (a sixth of a 2 GiB run at that size).
            let mut buffer = match config.mode {
                Mode::Copy => Some(page_buffer(block, 1)?),
                Mode::InPlace => None,
            };
            let buf = buffer
                .as_mut()
                .map(NodeBuffer::as_mut_slice)
                .unwrap_or_default();
            let mut reader = ring.reader()?;
            reader.set_timeout(Some(timeout));
            let isa = Isa::detect();
            // The ramp's blocks come first, untimed and not counted.
            let mut ramp_seen = 0u64;
            let mut offset = 0u64;
            let mut read = 0u64;
            let mut blocks = 0u64;
            let mut start = (ramp_blocks == 0).then(now_ns);
            let mut sink = 0u64;
            loop {
                let n = match config.mode {
                    Mode::Copy => {
                        let n = reader.read(buf)?;
                        if n == 0 {
                            // End of the transfer; then the stream's end.
                            if reader.read(buf)? == 0 {
                                break;
                            }
                            return Err(WorkerError::SecondTransfer);
                        }
                        if config.verify {
                            check_words(&buf[..n], offset / 8)?;
                        } else {
                            sink = sink.wrapping_add(u64::from(buf[n - 1]));
                        }
                        n
                    }
                    Mode::InPlace => {
                        let Some(slot) = reader.borrow()? else { break };
                        if config.verify {
                            check_words(&slot, offset / 8)?;
                        } else {
                            // Every byte, with the widest loads there are.
                            sink ^= kernels::read(&slot, isa);
                        }
                        slot.len()
                    }
                };
                offset += n as u64;
                if ramp_seen < ramp_blocks {
                    ramp_seen += 1;
                    if ramp_seen == ramp_blocks {
                        start = Some(now_ns());
                    }
                    continue;
                }
                read += n as u64;
                blocks += 1;
                if blocks.is_multiple_of(64) {
                    seen.sample();
                }
            }
            std::hint::black_box(sink);
            let end = now_ns();
            (read, blocks, start.unwrap_or(end), end, reader.skipped())
        }
    };
    seen.sample();
    Ok(WorkerReport {
        role: config.role,
        pid: std::process::id(),
        bytes,
        blocks,
        start_ns,
        end_ns,
        cpu_seconds: (numalab::system::process_cpu_time() - cpu_before).as_secs_f64(),
        cpus_allowed: affinity::thread_cpus().unwrap_or_default(),
        cpus_seen: seen.cpus.iter().copied().collect(),
        nodes_seen: seen.nodes.iter().copied().collect::<NodeSet>(),
        skipped_blocks: skipped,
    })
}

fn fill_words(bytes: &mut [u8], first: u64) {
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(first + i as u64).to_le_bytes());
    }
}

fn check_words(bytes: &[u8], first: u64) -> Result<(), WorkerError> {
    if !bytes.len().is_multiple_of(8) {
        return Err(WorkerError::PartialWord { len: bytes.len() });
    }
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        let index = first + i as u64;
        let found = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        if found != word(index) {
            return Err(WorkerError::WrongWord {
                offset: index * 8,
                found,
                expected: word(index),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_words_catch_a_repeat() {
        let mut block = vec![0u8; 64];
        fill_words(&mut block, 8);
        check_words(&block, 8).unwrap();
        let err = check_words(&block, 0).unwrap_err().to_string();
        assert!(err.contains("byte 0 of the stream is wrong"), "{err}");
        let err = check_words(&block[..12], 8).unwrap_err().to_string();
        assert!(err.contains("not whole words"), "{err}");
    }
}
