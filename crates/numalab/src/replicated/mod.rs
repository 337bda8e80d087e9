//! Replicated memory: one copy of read-mostly data per NUMA node, so reads
//! are local, with writes kept correct.
//!
//! - [`Replicated<T>`] holds one replica of a value per node (each in
//!   memory bound to its node). [`read`](Replicated::read) runs on the
//!   calling thread's node's replica; [`write`](Replicated::write) keeps
//!   every replica consistent. Two consistency modes ([`Mode`]), both
//!   linearizable:
//!   - [`Mode::Log`] (node replication, NR, ASPLOS'17): writes go to a
//!     shared operation log, batched per node by flat combining; a replica
//!     replays the log lazily, before a read that needs it. Writers on
//!     different nodes do not wait for each other's replicas. Best when
//!     writes are more than rare, or when many threads write.
//!   - [`Mode::Broadcast`]: a write takes a writers' lock and applies to
//!     every replica before returning; readers take only their replica's
//!     reader lock. Simplest and cheapest per read for data written rarely
//!     (configuration, routing tables, dictionaries).
//! - [`ReplicatedPages`] is a read-mostly byte region (a file or buffer)
//!   with lazy, page-granular node-local copies, made after a few remote
//!   reads of a page, collapsed by writes, limited by memory budgets.
//! - [`ReplicatedFile`] serves a read-mostly file from per-node copies of
//!   its chunks in a shared-memory segment, across processes: the file
//!   stays the master, a write through it makes every copy stale before
//!   its bytes land, and copies go back to the kernel when a node's
//!   memory runs low.
//!
//! Replacing an `RwLock<T>`:
//!
//! ```
//! use std::collections::HashMap;
//! use numalab::replicated::{Mode, Replicated};
//!
//! // Before: let table = RwLock::new(HashMap::new());
//! let table = Replicated::new(HashMap::<String, u32>::new(), Mode::Broadcast)?;
//!
//! // Before: table.write().unwrap().insert("eth0".into(), 1);
//! // The write runs once per replica, so it must be deterministic and may
//! // only use what it captured by reference or clones: `move` it in.
//! let key = String::from("eth0");
//! table.write(move |t| t.insert(key.clone(), 1));
//!
//! // Before: let v = table.read().unwrap().get("eth0").copied();
//! let v = table.read(|t| t.get("eth0").copied());
//! assert_eq!(v, Some(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Statistics per replica (reads, writes, log entries replayed, bytes) come
//! from [`Replicated::stats`], and where each replica's pages really are
//! from [`Replicated::replica_pages`].

mod broadcast;
#[cfg(not(loom))]
mod file;
mod locality;
mod log;
#[cfg(not(loom))]
mod pages;
#[cfg(not(loom))]
mod pool;
mod rwlock;
mod storage;
mod sync;

use std::fmt;
use std::ptr::NonNull;

use serde::{Deserialize, Serialize};

use crate::buffer::{BufferError, NodeBuffer};
use crate::locate::{self, LocateError, PageHistogram, Sample};
use crate::policy::MemPolicy;
use crate::sets::NodeSet;

#[cfg(not(loom))]
pub use file::{
    FileCopyError, FileCopyOptions, FileReader, NodeCopyStats, ReplicatedFile, MAX_CHUNKS,
    MAX_COPY_NODES,
};
pub use locality::{set_thread_replica, ReplicaSet, ReplicaSetError, MAX_REPLICAS};
#[cfg(not(loom))]
pub use pages::{PagesError, PagesOptions, PagesStats, ReplicatedPages};

use rwlock::{ReadGuard, ReaderSlot, ReplicaLock, Stale, MIN_OWNED};
use storage::NodeBox;
use sync::{AtomicU64, CachePadded, Ordering, UnsafeCell};

/// How a [`Replicated`] value keeps its replicas consistent.
///
/// ```
/// use numalab::replicated::Mode;
/// let mode: Mode = "broadcast".parse()?; // as an experiment file spells it
/// assert_eq!(mode, Mode::Broadcast);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A shared operation log with flat combining per replica; replicas
    /// replay it lazily (node replication).
    Log,
    /// Every write applied to every replica under a writers' lock.
    Broadcast,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Log => "log",
            Mode::Broadcast => "broadcast",
        })
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "log" => Ok(Mode::Log),
            "broadcast" => Ok(Mode::Broadcast),
            other => Err(format!(
                "unknown replication mode {other:?}; expected log or broadcast"
            )),
        }
    }
}

/// How a [`Replicated`] value is built: its mode and the sizes of its
/// shared structures.
///
/// ```
/// use numalab::replicated::{Mode, ReplicatedOptions};
/// let options = ReplicatedOptions::new(Mode::Log).log_entries(1 << 16);
/// assert_eq!(options.mode, Mode::Log);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicatedOptions {
    /// The consistency mode.
    pub mode: Mode,
    /// Entries in the shared log (log mode; rounded up to a power of two,
    /// at least twice `request_slots`). A replica may fall this many
    /// writes behind before writers help it forward. A write's closure
    /// (and what it captured) is dropped when its entry is reused, so up
    /// to this many closures stay alive.
    pub log_entries: usize,
    /// Reader slots per replica: the first this many threads alive each
    /// own a slot and read without atomic read-modify-writes (at least
    /// 64: the first 64 find their slot without a lookup); threads beyond
    /// claim one of a few shared slots per read with a compare-exchange,
    /// which is correct but makes their reads contend.
    pub reader_slots: usize,
    /// Pending-write slots per replica for flat combining (log mode).
    pub request_slots: usize,
}

impl ReplicatedOptions {
    /// Defaults for `mode`: 4096 log entries, 64 reader slots, 32 request
    /// slots per replica.
    pub fn new(mode: Mode) -> Self {
        ReplicatedOptions {
            mode,
            log_entries: 4096,
            reader_slots: 64,
            request_slots: 32,
        }
    }

    /// With a log of `entries` entries.
    pub fn log_entries(mut self, entries: usize) -> Self {
        self.log_entries = entries;
        self
    }

    /// With `slots` reader slots per replica.
    pub fn reader_slots(mut self, slots: usize) -> Self {
        self.reader_slots = slots;
        self
    }

    /// With `slots` pending-write slots per replica.
    pub fn request_slots(mut self, slots: usize) -> Self {
        self.request_slots = slots;
        self
    }
}

impl From<Mode> for ReplicatedOptions {
    fn from(mode: Mode) -> Self {
        ReplicatedOptions::new(mode)
    }
}

/// Why a replicated value could not be made.
///
/// ```
/// use numalab::replicated::{Mode, ReplicaSet, Replicated, ReplicatedError};
/// // Replica memory on a node this machine does not have.
/// let err = ReplicaSet::emulated(vec![0, 99]).map_err(ReplicatedError::from).unwrap_err();
/// assert!(err.to_string().contains("node 99 does not exist"), "{err}");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicatedError {
    /// The replica set could not be made.
    #[error(transparent)]
    Set(#[from] ReplicaSetError),
    /// A replica's memory could not be allocated on its node.
    #[error("replica {replica} on node {node}: {source}")]
    Allocation {
        /// The replica.
        replica: usize,
        /// Its node.
        node: u32,
        /// Why.
        source: BufferError,
    },
}

/// Where a replica's slots are, as its lock says.
fn cell_slots<T>(cell: &NodeBox<Cell<T>, Slot>) -> usize {
    // SAFETY: the box holds the cell.
    unsafe { &*cell.as_ptr() }.lock.slots_ptr() as usize
}

/// Counters a replica's writers update (readers count in their lock
/// slots).
#[derive(Debug, Default)]
struct WriteCounters {
    writes: AtomicU64,
    applied: AtomicU64,
    combines: AtomicU64,
    helped: AtomicU64,
}

/// A reader slot as laid out in a replica's pages.
type Slot = CachePadded<ReaderSlot>;

/// A replica's reader-writer lock and value, at the start of pages bound
/// to its node; the lock's reader slots follow in the same pages at a
/// constant offset, so a read finds its slot, the lock's state and the
/// value from the cell's address alone.
pub(crate) struct Cell<T> {
    lock: ReplicaLock,
    /// Tells loom about accesses to `value` (a no-op otherwise).
    access: UnsafeCell<()>,
    value: std::cell::UnsafeCell<T>,
}

impl<T> Cell<T> {
    /// Where the slots start, from the cell's address.
    const SLOTS: usize = storage::tail_offset::<Cell<T>, Slot>();

    /// The slot thread `id` owns in this replica's lock, if `id` is below
    /// [`MIN_OWNED`] (as `ReplicaLock::owned_slot`, without loading where
    /// the slots are or how many there are; threads with higher ids that
    /// own a slot find it in the cold path).
    #[inline(always)]
    fn fast_slot(&self, id: usize) -> Option<&ReaderSlot> {
        if id < MIN_OWNED {
            // SAFETY: a cell lives in a `NodeBox<Cell<T>, Slot>` whose
            // tail, at `SLOTS`, holds the lock's slots, at least
            // `MIN_OWNED` owned ones first (checked in `from_fn`).
            Some(unsafe {
                &*(self as *const Self)
                    .cast::<u8>()
                    .add(Self::SLOTS)
                    .cast::<Slot>()
                    .add(id)
            })
        } else {
            None
        }
    }
}

/// One replica: its cell in memory bound to its node, and its writers'
/// counters.
pub(crate) struct Replica<T> {
    node: u32,
    cell: NodeBox<Cell<T>, Slot>,
    counters: CachePadded<WriteCounters>,
}

impl<T> Replica<T> {
    #[inline(always)]
    fn cell(&self) -> &Cell<T> {
        // SAFETY: the box holds the cell as long as the replica lives.
        unsafe { &*self.cell.as_ptr() }
    }

    fn lock(&self) -> &ReplicaLock {
        &self.cell().lock
    }

    /// Takes the replica for writing. The caller must be its only writer
    /// (hold its combiner lock, or the broadcast writers' lock).
    fn exclusive(&self) -> Exclusive<'_, T> {
        self.lock().lock_exclusive();
        Exclusive { replica: self }
    }
}

/// Takes every replica for writing at once. The caller must be the only
/// writer of all of them (the broadcast writers' lock).
fn exclusive_all<T>(replicas: &[Replica<T>]) -> Vec<Exclusive<'_, T>> {
    ReplicaLock::lock_exclusive_all(replicas.iter().map(|r| r.lock()));
    replicas
        .iter()
        .map(|replica| Exclusive { replica })
        .collect()
}

/// A replica held for writing; released on drop.
pub(crate) struct Exclusive<'a, T> {
    replica: &'a Replica<T>,
}

impl<T> Exclusive<'_, T> {
    fn apply<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        let cell = self.replica.cell();
        let data = cell.value.get();
        cell.access.with_mut(|_| {
            // SAFETY: the exclusive lock keeps readers out and the caller
            // is the replica's only writer; `&mut self` makes the borrow
            // unique.
            f(unsafe { &mut *data })
        })
    }
}

impl<T> Drop for Exclusive<'_, T> {
    fn drop(&mut self) {
        self.replica.lock().unlock_exclusive();
    }
}

// One engine per value, never moved after construction; keeping the log's
// cache-padded counters inline saves reads a pointer indirection.
#[allow(clippy::large_enum_variant)]
enum Engine<T> {
    Log(log::Log<T>),
    Broadcast(broadcast::Broadcast),
}

/// One replica of `T` per NUMA node; reads local, writes to all.
///
/// Each replica lives in pages bound to its node ([`replica_pages`]
/// checks). [`read`] runs a closure on the calling thread's replica: the
/// thread's node is looked up from a per-thread cache refreshed every few
/// dozen reads, and a thread that migrates mid-read merely reads a remote
/// replica, which is as up to date as its own. [`write`] runs a closure on
/// every replica (once each, so it must be deterministic: the same
/// closure on equal replicas gives equal results) and returns the calling
/// thread's replica's result. Both modes are linearizable: a read sees
/// every write that returned before it began.
///
/// A read or write closure must not call `write` on the same value (a
/// read would wait for itself), nor `read` it again (a writer that came in
/// between waits for the outer read, and the inner one for the writer). A
/// write that panics aborts the process: the replicas would otherwise
/// disagree.
///
/// A read costs its closure plus two loads and two plain stores on the
/// replica's lock and a few instructions to find it (no fence, no atomic
/// read-modify-write while writes are rare); [`reader`](Self::reader)
/// saves the finding for loops of many reads.
///
/// ```
/// use numalab::replicated::{Mode, Replicated};
///
/// // A price table read by every thread and updated now and then.
/// let prices = Replicated::new(vec![100u64; 1024], Mode::Log)?;
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             let sum: u64 = prices.read(|p| p.iter().sum());
///             assert!(sum >= 100 * 1024);
///         });
///     }
///     s.spawn(|| prices.write(|p| p[7] += 5));
/// });
/// assert_eq!(prices.read(|p| p[7]), 105);
///
/// for replica in prices.stats() {
///     println!("replica {} on node {}: {} reads", replica.replica, replica.node, replica.reads);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`read`]: Replicated::read
/// [`write`]: Replicated::write
/// [`replica_pages`]: Replicated::replica_pages
pub struct Replicated<T> {
    set: ReplicaSet,
    replicas: Box<[Replica<T>]>,
    /// The replica's cell, when there is only one: reads need no lookup.
    only: Option<NonNull<Cell<T>>>,
    engine: Engine<T>,
    mode: Mode,
}

// SAFETY: replicas are only shared through the protocols of `log` and
// `broadcast`: &T to many readers (T: Sync), &mut T to one writer at a
// time on whichever thread combines (T: Send); write closures are Send +
// Sync by their bounds.
unsafe impl<T: Send + Sync> Sync for Replicated<T> {}
// SAFETY: as above; moving the whole value moves owned replicas.
unsafe impl<T: Send + Sync> Send for Replicated<T> {}

impl<T> fmt::Debug for Replicated<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicated")
            .field("mode", &self.mode)
            .field("nodes", &self.set.nodes())
            .finish_non_exhaustive()
    }
}

impl<T: Clone> Replicated<T> {
    /// One replica of `value` on every node with CPUs and memory this
    /// process may use ([`ReplicaSet::system`]), in `mode`.
    pub fn new(value: T, options: impl Into<ReplicatedOptions>) -> Result<Self, ReplicatedError> {
        Self::with_set(value, ReplicaSet::system()?, options)
    }

    /// One replica of `value` per replica of `set`. Each clone is made
    /// with the thread's allocations bound to the replica's node, so
    /// memory the value owns (a `Vec`'s buffer) lands there when it comes
    /// fresh from the kernel.
    pub fn with_set(
        value: T,
        set: ReplicaSet,
        options: impl Into<ReplicatedOptions>,
    ) -> Result<Self, ReplicatedError> {
        Self::from_fn(set, options, |_, _| value.clone())
    }
}

impl<T> Replicated<T> {
    /// Builds each replica with `make(replica, node)`, run with the
    /// thread's allocations bound to `node`. The values must be equal.
    pub fn from_fn(
        set: ReplicaSet,
        options: impl Into<ReplicatedOptions>,
        mut make: impl FnMut(usize, u32) -> T,
    ) -> Result<Self, ReplicatedError> {
        let options = options.into();
        let mut replicas = Vec::with_capacity(set.len());
        for (replica, &node) in set.nodes().iter().enumerate() {
            let value = storage::on_node(node, || make(replica, node));
            let owned = options.reader_slots;
            let cell = NodeBox::with_tail(
                node,
                ReplicaLock::slots_needed(owned),
                |_| Slot::default(),
                |slots| Cell {
                    // SAFETY: the box's tail holds `slots_needed(owned)`
                    // fresh slots, lives as long as the cell and is used
                    // by nothing but this lock.
                    lock: unsafe { ReplicaLock::in_place(owned, slots) },
                    access: UnsafeCell::new(()),
                    value: std::cell::UnsafeCell::new(value),
                },
            )
            .map_err(|source| ReplicatedError::Allocation {
                replica,
                node,
                source,
            })?;
            assert_eq!(
                cell.as_ptr() as usize + Cell::<T>::SLOTS,
                cell_slots(&cell),
                "a replica's slots follow its cell"
            );
            replicas.push(Replica {
                node,
                cell,
                counters: CachePadded::new(WriteCounters::default()),
            });
        }
        let engine = match options.mode {
            Mode::Log => Engine::Log(log::Log::new(
                set.len(),
                options.log_entries,
                options.request_slots,
            )),
            Mode::Broadcast => Engine::Broadcast(broadcast::Broadcast::new()),
        };
        let replicas = replicas.into_boxed_slice();
        Ok(Replicated {
            only: match &*replicas {
                [only] => Some(NonNull::from(only.cell())),
                _ => None,
            },
            set,
            replicas,
            engine,
            mode: options.mode,
        })
    }

    /// Runs `f` on the calling thread's replica and returns its result.
    ///
    /// ```
    /// use numalab::replicated::{Mode, Replicated};
    /// let config = Replicated::new((String::from("fast"), 8u32), Mode::Broadcast)?;
    /// let threads = config.read(|(_, threads)| *threads);
    /// assert_eq!(threads, 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let cell = match self.only {
            // SAFETY: `only` is the cell of `self.replicas[0]`, which
            // lives as long as `self`, in place.
            Some(only) => unsafe { only.as_ref() },
            None => {
                let replica = self.set.current();
                // SAFETY: `current()` is below the set's length (its CPU
                // table holds replica indices; the other maps are taken
                // modulo the length), and there is one replica per member
                // of the set.
                unsafe { self.replicas.get_unchecked(replica) }.cell()
            }
        };
        self.read_cell(cell, cell.fast_slot(sync::thread_slot()), f)
    }

    /// As [`read`](Self::read), on replica `replica` whatever node the
    /// thread runs on: to measure remote reads, or to drive emulated
    /// replicas. Panics if `replica` is out of range.
    #[inline(always)]
    pub fn read_from<R>(&self, replica: usize, f: impl FnOnce(&T) -> R) -> R {
        let cell = self.replicas[replica].cell();
        self.read_cell(cell, cell.fast_slot(sync::thread_slot()), f)
    }

    /// The read path: `slot` is the calling thread's owned slot in
    /// `cell`'s lock, if it has one there. Only the fast entry (an owned
    /// slot, state zero) and the closure are inlined; every other case is
    /// [`enter_cold`](Self::enter_cold), which returns the same kind of
    /// guard, so the closure is inlined once and what it captures need not
    /// leave the registers.
    #[inline(always)]
    fn read_cell<R>(
        &self,
        cell: &Cell<T>,
        slot: Option<&ReaderSlot>,
        f: impl FnOnce(&T) -> R,
    ) -> R {
        let guard = self.enter(cell, slot);
        cell.access.with(|_| {
            // SAFETY: the read guard keeps writers out until it drops,
            // after `f` returns.
            let result = f(unsafe { &*cell.value.get() });
            drop(guard);
            result
        })
    }

    /// The fast entry found the state not zero: a fenced second look, or
    /// the slow entry.
    #[cold]
    #[inline(never)]
    fn enter_contended<'a>(
        &'a self,
        cell: &'a Cell<T>,
        guard: ReadGuard<'a>,
        state: u64,
    ) -> ReadGuard<'a> {
        match cell.lock.read_contended(guard, state) {
            Some(guard) => guard,
            None => self.enter_slow(cell, cell.lock.slot_of_thread()),
        }
    }

    /// Enters `cell`'s reader lock when the thread has no owned slot
    /// below [`MIN_OWNED`] (or no id yet).
    #[cold]
    #[inline(never)]
    fn enter_cold<'a>(&'a self, cell: &'a Cell<T>) -> ReadGuard<'a> {
        let lock = &cell.lock;
        let slot = lock.slot_of_thread();
        if let Some(slot) = slot {
            // An owned slot above the constant: the fast entry, from here.
            if let Some(guard) = lock.read_owned_or_contended(slot) {
                return guard;
            }
        }
        self.enter_slow(cell, slot)
    }

    /// The slow entry through `slot` (the thread's owned slot, if any),
    /// waiting while a writer holds the replica and (log mode) catching
    /// it up first if it is stale.
    fn enter_slow<'a>(&'a self, cell: &'a Cell<T>, slot: Option<&'a ReaderSlot>) -> ReadGuard<'a> {
        let lock = &cell.lock;
        let mut stale_ok = false;
        loop {
            match lock.read_slow(slot, stale_ok) {
                Ok(guard) => return guard,
                Err(Stale) => {
                    if let Engine::Log(log) = &self.engine {
                        let index = self
                            .replicas
                            .iter()
                            .position(|r| std::ptr::eq(r.cell(), cell))
                            .expect("a replica of this value");
                        log.catch_up(index, &self.replicas);
                    }
                    // Caught up to every write completed before this read
                    // began, it may go on even if later writes mark the
                    // replica stale again (it overlaps them).
                    stale_ok = true;
                }
            }
        }
    }

    /// A handle for many reads from the calling thread: it looks up the
    /// thread's replica and reader slot once, so each
    /// [`Reader::read`] does only the read itself (for hot loops). The
    /// handle stays on the replica it was made for; make a new one now
    /// and then (per batch or task) so a thread that moved to another
    /// node reads locally again. It cannot leave the thread.
    ///
    /// ```
    /// use numalab::replicated::{Mode, Replicated};
    /// let table = Replicated::new(vec![1u32; 4096], Mode::Log)?;
    /// let reader = table.reader();
    /// let sum: u64 = (0..4096).map(|i| reader.read(|t| t[i] as u64)).sum();
    /// assert_eq!(sum, 4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reader(&self) -> Reader<'_, T> {
        self.reader_on(self.set.current())
    }

    /// A reader that registers once for many reads: it enters the calling
    /// thread's replica when made and stays inside between reads, so each
    /// [`HeldReader::read`] adds one load to the read itself (a word only
    /// writers change) instead of entering and leaving. For hot loops of
    /// small reads.
    ///
    /// Reads through it are linearizable as every read is. When a writer
    /// is waiting for the replica (or, in log mode, a write completed
    /// elsewhere since), the next read steps out, lets it through or
    /// catches up, and enters again. So a writer waits for a held reader
    /// at most until its next read, or until it is dropped: hold one
    /// across a loop of reads, never across blocking work, a sleep or a
    /// wait for another thread that may be writing.
    ///
    /// ```
    /// use numalab::replicated::{Mode, Replicated};
    /// let table = Replicated::new(vec![1u32; 4096], Mode::Log)?;
    /// let mut reader = table.held_reader();
    /// let sum: u64 = (0..4096).map(|i| reader.read(|t| t[i] as u64)).sum();
    /// assert_eq!(sum, 4096);
    /// drop(reader); // before this thread writes
    /// table.write(|t| t[0] = 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn held_reader(&self) -> HeldReader<'_, T> {
        self.held_reader_on(self.set.current())
    }

    /// A [`HeldReader`] on replica `replica` (panics if out of range).
    pub fn held_reader_on(&self, replica: usize) -> HeldReader<'_, T> {
        let cell = self.replicas[replica].cell();
        let slot = cell.lock.slot_of_thread();
        HeldReader {
            value: self,
            cell,
            index: replica,
            slot,
            guard: Some(self.enter(cell, slot)),
            reads: 0,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Enters `cell`'s lock through `slot` (the thread's owned slot, if
    /// any), as a read does.
    #[inline(always)]
    fn enter<'a>(&'a self, cell: &'a Cell<T>, slot: Option<&'a ReaderSlot>) -> ReadGuard<'a> {
        match slot {
            Some(slot) => match cell.lock.read_owned(slot) {
                Ok(guard) => guard,
                Err((guard, state)) => self.enter_contended(cell, guard, state),
            },
            None => self.enter_cold(cell),
        }
    }

    /// A [`Reader`] on replica `replica` (panics if out of range).
    pub fn reader_on(&self, replica: usize) -> Reader<'_, T> {
        let cell = self.replicas[replica].cell();
        Reader {
            value: self,
            cell,
            index: replica,
            slot: cell.lock.slot_of_thread(),
            _not_send: std::marker::PhantomData,
        }
    }

    /// Applies `op` to every replica and returns the result it gave on the
    /// calling thread's replica. `op` runs once per replica, possibly on
    /// another thread (log mode: the node's combiner), so it must be
    /// deterministic and own what it captures (`move`, cloning what it
    /// inserts).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use numalab::replicated::{Mode, Replicated};
    /// let routes = Replicated::new(BTreeMap::new(), Mode::Log)?;
    /// let (prefix, hop) = (String::from("10.0.0.0/8"), 3u32);
    /// let previous = routes.write(move |r| r.insert(prefix.clone(), hop));
    /// assert_eq!(previous, None);
    /// assert_eq!(routes.read(|r| r.len()), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write<R, F>(&self, op: F) -> R
    where
        F: Fn(&mut T) -> R + Send + Sync + 'static,
        R: Send + 'static,
    {
        self.write_from(self.set.current(), op)
    }

    /// As [`write`](Self::write), issued from replica `replica` (whose
    /// combiner batches it in log mode, and whose result is returned).
    /// Panics if `replica` is out of range.
    pub fn write_from<R, F>(&self, replica: usize, op: F) -> R
    where
        F: Fn(&mut T) -> R + Send + Sync + 'static,
        R: Send + 'static,
    {
        assert!(
            replica < self.replicas.len(),
            "replica {replica} of {}",
            self.replicas.len()
        );
        match &self.engine {
            Engine::Log(log) => log.write(replica, op, &self.replicas),
            Engine::Broadcast(broadcast) => broadcast.write(replica, op, &self.replicas),
        }
    }

    /// Brings every replica up to date with every completed write (log
    /// mode; broadcast replicas always are). Reads do this lazily for
    /// their own replica; call it to take the replay cost off a later read.
    pub fn sync(&self) {
        if let Engine::Log(log) = &self.engine {
            for replica in 0..self.replicas.len() {
                log.catch_up(replica, &self.replicas);
            }
        }
    }

    /// The consistency mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The replicas and their nodes.
    pub fn replica_set(&self) -> &ReplicaSet {
        &self.set
    }

    /// Statistics per replica, in replica order.
    pub fn stats(&self) -> Vec<ReplicaStats> {
        self.replicas
            .iter()
            .enumerate()
            .map(|(i, r)| ReplicaStats {
                replica: i,
                node: r.node,
                reads: r.lock().reads(),
                read_waits: r.lock().read_waits(),
                writes: r.counters.writes.load(Ordering::Relaxed),
                applied: r.counters.applied.load(Ordering::Relaxed),
                combines: r.counters.combines.load(Ordering::Relaxed),
                helped: r.counters.helped.load(Ordering::Relaxed),
                bytes: r.cell.mapped_bytes() as u64,
            })
            .collect()
    }

    /// Where each replica's own storage (the pages holding the `T`) is,
    /// in replica order: with a set made from nodes, replica `i`'s pages
    /// should all be on `replica_set().node(i)`.
    ///
    /// ```
    /// use numalab::{locate::Sample, replicated::{Mode, Replicated}};
    /// let counts = Replicated::new([0u64; 512], Mode::Broadcast)?;
    /// for (replica, pages) in counts.replica_pages(Sample::All)?.iter().enumerate() {
    ///     let node = counts.replica_set().node(replica);
    ///     assert_eq!(pages.on_node(node), pages.present(), "{pages}");
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replica_pages(&self, sample: Sample) -> Result<Vec<PageHistogram>, LocateError> {
        self.replicas
            .iter()
            .map(|r| r.cell.locate(sample))
            .collect()
    }

    /// Where the memory `region(&replica)` names is, for each replica: for
    /// data the value owns outside its own storage, such as a `Vec`'s
    /// buffer (`|v| (v.as_ptr().cast(), v.len() * 8)`).
    pub fn replica_pages_of(
        &self,
        sample: Sample,
        region: impl Fn(&T) -> (*const u8, usize),
    ) -> Result<Vec<PageHistogram>, LocateError> {
        (0..self.replicas.len())
            .map(|i| {
                let (ptr, len) = self.read_from(i, &region);
                locate::locate(ptr, len, sample)
            })
            .collect()
    }
}

/// Reads from one thread on one replica, with the lookups done once: see
/// [`Replicated::reader`].
///
/// ```
/// use numalab::replicated::{Mode, Replicated};
/// let v = Replicated::new([3u8; 64], Mode::Broadcast)?;
/// let reader = v.reader_on(0);
/// assert_eq!(reader.read(|a| a[63]), 3);
/// assert_eq!(reader.replica(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Reader<'a, T> {
    value: &'a Replicated<T>,
    cell: &'a Cell<T>,
    index: usize,
    /// The reader slot this thread owns, if any (why the handle must stay
    /// on its thread).
    slot: Option<&'a ReaderSlot>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl<T> fmt::Debug for Reader<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("replica", &self.index)
            .finish_non_exhaustive()
    }
}

impl<T> Reader<'_, T> {
    /// Runs `f` on the handle's replica, as [`Replicated::read`].
    #[inline(always)]
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.value.read_cell(self.cell, self.slot, f)
    }

    /// The replica it reads.
    pub fn replica(&self) -> usize {
        self.index
    }
}

/// A reader that stays registered in its replica between reads
/// ([`Replicated::held_reader`]): each read loads one word only writers
/// change and, unless a writer is waiting (or, in log mode, the replica
/// lags the log), reads. It stays on its replica and its thread.
///
/// ```
/// use numalab::replicated::{Mode, Replicated};
/// let v = Replicated::new([3u8; 64], Mode::Broadcast)?;
/// let mut reader = v.held_reader_on(0);
/// assert_eq!(reader.read(|a| a[63]), 3);
/// assert_eq!(reader.replica(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HeldReader<'a, T> {
    value: &'a Replicated<T>,
    cell: &'a Cell<T>,
    index: usize,
    /// The reader slot this thread owns, if any (why the reader must stay
    /// on its thread).
    slot: Option<&'a ReaderSlot>,
    /// Inside the replica's lock; `None` only while stepping out.
    guard: Option<ReadGuard<'a>>,
    /// Reads since the guard was taken, counted into the replica's
    /// statistics when it is let go.
    reads: u64,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl<T> fmt::Debug for HeldReader<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldReader")
            .field("replica", &self.index)
            .finish_non_exhaustive()
    }
}

impl<T> HeldReader<'_, T> {
    /// Runs `f` on the replica, as [`Replicated::read`]; first steps out
    /// for a writer that waits (or to catch up, in log mode) and enters
    /// again. `f` must not read the same value again (as for every read).
    #[inline(always)]
    pub fn read<R>(&mut self, f: impl FnOnce(&T) -> R) -> R {
        if self.cell.lock.must_step_out() {
            self.step_out_and_in();
        }
        self.reads += 1;
        self.cell.access.with(|_| {
            // SAFETY: the guard keeps writers out until it drops, which
            // needs `&mut self`, after `f` returns.
            f(unsafe { &*self.cell.value.get() })
        })
    }

    /// One read per item of `items`: `f(value, item)` for each, in order,
    /// as if each were a [`read`](Self::read) begun once its item was
    /// taken from `items` (each linearizable, each counted, a writer
    /// waiting let through between two of them). For a batch of lookups
    /// in hand — keys to probe, packets to classify — this is the
    /// faster form: between two writers the value is handed to the loop
    /// as one `&T` that no write can change, so the compiler keeps what
    /// every read loads again and again (a map's table pointer, its hash
    /// keys) in registers, where a loop of `read` calls must load it for
    /// each read, since a writer may have changed it before that read.
    /// Neither `f` nor the iterator may read the same value again (as for
    /// every read's closure): the items are taken while the replica is
    /// held.
    ///
    /// ```
    /// use numalab::replicated::{Mode, Replicated};
    /// use std::collections::HashMap;
    /// let prices = Replicated::new(HashMap::from([(1u32, 10u64), (2, 20)]), Mode::Log)?;
    /// let mut reader = prices.held_reader();
    /// let mut total = 0;
    /// reader.read_each([1, 2, 3, 2], |prices, item| {
    ///     total += prices.get(&item).copied().unwrap_or(0)
    /// });
    /// assert_eq!(total, 50);
    /// drop(reader);
    /// assert_eq!(prices.stats()[0].reads, 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_each<I: IntoIterator>(&mut self, items: I, mut f: impl FnMut(&T, I::Item)) {
        let mut items = items.into_iter();
        loop {
            let cell = self.cell;
            let stopped = cell.access.with(|_| {
                // SAFETY: the guard keeps writers out until it drops,
                // which needs `&mut self`; `reads_while_no_writer`
                // returns before anything steps out.
                let value = unsafe { &*cell.value.get() };
                reads_while_no_writer(value, &cell.lock, items, &mut f, &mut self.reads)
            });
            let Some((rest, item)) = stopped else {
                return;
            };
            // A writer waits (or the replica lags the log): let it
            // through; the item taken is read after.
            self.read(|value| f(value, item));
            items = rest;
        }
    }

    /// The replica it reads.
    pub fn replica(&self) -> usize {
        self.index
    }

    /// Leaves the lock (a writer waiting goes in), then enters again as a
    /// read does (waiting for the writer; catching up in log mode).
    #[cold]
    #[inline(never)]
    fn step_out_and_in(&mut self) {
        self.let_go();
        self.guard = Some(self.value.enter(self.cell, self.slot));
    }

    /// Leaves the lock, counting the reads made.
    fn let_go(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.leave_counting(self.reads);
            self.reads = 0;
        }
    }
}

/// [`HeldReader::read_each`]'s reads while no writer waits: for each
/// item, taken first, one look at the lock's word, then `f(value,
/// item)` — so a read begins after its item was taken, and sees every
/// write returned by then. Until the items run out (`None`) or the
/// replica must be let go: then the items left and the one taken but
/// not read. `value` is an argument of a function of its own so that the
/// compiler may keep what it loads from it across the loop (it does not
/// change while the function runs, as a shared reference as argument
/// promises, for the caller holds the replica against writers until it
/// returns), and the items are its own, so that an iterator's position
/// stays in a register.
#[inline(never)]
fn reads_while_no_writer<T, I: Iterator>(
    value: &T,
    lock: &ReplicaLock,
    mut items: I,
    f: &mut impl FnMut(&T, I::Item),
    reads: &mut u64,
) -> Option<(I, I::Item)> {
    let mut made = 0;
    let stopped = loop {
        let Some(item) = items.next() else {
            break None;
        };
        if lock.must_step_out() {
            break Some((items, item));
        }
        f(value, item);
        made += 1;
    };
    *reads += made;
    stopped
}

impl<T> Drop for HeldReader<'_, T> {
    fn drop(&mut self) {
        self.let_go();
    }
}

/// A replica's byte region, for code that works on raw memory (the
/// experiment engine's kernels, `locate`).
///
/// ```
/// use numalab::replicated::{Mode, ReplicaSet, Replicated};
/// let region = Replicated::bytes(ReplicaSet::system()?, Mode::Broadcast, b"abc")?;
/// let first = region.regions()[0];
/// // SAFETY: no write runs while the slice is used.
/// let bytes = unsafe { std::slice::from_raw_parts(first.ptr, first.len) };
/// assert_eq!(bytes, b"abc");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaRegion {
    /// The replica.
    pub replica: usize,
    /// The node its memory is bound to.
    pub node: u32,
    /// Its first byte.
    pub ptr: *const u8,
    /// Its length in bytes.
    pub len: usize,
}

impl Replicated<NodeBuffer> {
    /// A byte region replicated on every replica of `set`: each replica a
    /// [`NodeBuffer`] bound to its node and holding a copy of `bytes`.
    /// Read it with `read(|b| b.as_slice() …)`, write with
    /// `write(|b| b.as_mut_slice() …)`.
    ///
    /// ```
    /// use numalab::replicated::{Mode, ReplicaSet, Replicated};
    /// let region = Replicated::bytes(ReplicaSet::system()?, Mode::Broadcast, &[7u8; 8192])?;
    /// assert_eq!(region.read(|b| b.as_slice()[4096]), 7);
    /// region.write(|b| b.as_mut_slice()[0] = 1);
    /// for r in region.regions() {
    ///     assert_eq!(r.len, 8192);
    ///     let pages = numalab::locate::locate(r.ptr, r.len, numalab::locate::Sample::All)?;
    ///     assert_eq!(pages.on_node(r.node), 2);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bytes(
        set: ReplicaSet,
        options: impl Into<ReplicatedOptions>,
        bytes: &[u8],
    ) -> Result<Self, ReplicatedError> {
        let mut buffers = Vec::with_capacity(set.len());
        for (replica, &node) in set.nodes().iter().enumerate() {
            let mut buffer =
                NodeBuffer::new(bytes.len().max(1), MemPolicy::Bind(NodeSet::single(node)))
                    .map_err(|source| ReplicatedError::Allocation {
                        replica,
                        node,
                        source,
                    })?;
            buffer.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
            buffers.push(Some(buffer));
        }
        Self::from_fn(set, options, |replica, _| {
            buffers[replica].take().expect("one buffer per replica")
        })
    }

    /// Each replica's bytes: base address, length and node. Found with
    /// one read of each replica (so that no write moves them meanwhile),
    /// which [`stats`](Self::stats) counts among the reads.
    pub fn regions(&self) -> Vec<ReplicaRegion> {
        (0..self.replicas.len())
            .map(|replica| {
                let (ptr, len) = self.read_from(replica, |b| (b.as_ptr(), b.len()));
                ReplicaRegion {
                    replica,
                    node: self.replicas[replica].node,
                    ptr,
                    len,
                }
            })
            .collect()
    }
}

/// What one replica has done.
///
/// ```
/// use numalab::replicated::{Mode, Replicated};
/// let v = Replicated::new(0u64, Mode::Log)?;
/// v.write(|x| *x += 1);
/// v.read(|x| *x);
/// let total: u64 = v.stats().iter().map(|s| s.reads).sum();
/// assert_eq!(total, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStats {
    /// Replica index.
    pub replica: usize,
    /// The node its memory is bound to.
    pub node: u32,
    /// Reads served by this replica.
    pub reads: u64,
    /// Reads that found a write in progress on this replica and waited.
    pub read_waits: u64,
    /// Writes issued by threads of this replica.
    pub writes: u64,
    /// Writes applied to this replica (log mode: log entries replayed).
    pub applied: u64,
    /// Batches of writes this replica's combiners appended to the log.
    pub combines: u64,
    /// Log entries applied to this replica by other replicas' threads
    /// helping it forward when the log was full.
    pub helped: u64,
    /// Bytes of the replica's own storage (whole pages).
    pub bytes: u64,
}

#[cfg(all(test, not(loom)))]
mod linearizability;
#[cfg(all(test, loom))]
mod models;
#[cfg(all(test, not(loom)))]
mod tests;
