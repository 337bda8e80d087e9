//! numalab's shared-memory ring for Python: the same segment, protocol and
//! placement as the Rust library (it is the library), so a Python reader
//! reads what a Rust writer writes and the other way round.
//!
//! Every wait releases the GIL, and waits without a limit are made of
//! short ones so that Ctrl-C (a Python signal handler) is seen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use numalab::ring::{
    self as lib, Backpressure, HeldBlock, RingError, RingOptions, Transfer, TransferHeader,
};
use numalab::HugePages;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{self, raise};
use crate::topology;

/// The longest one piece of a wait: how soon Ctrl-C is seen.
const SLICE: Duration = Duration::from_millis(100);

/// The handle's state, or an error when another Python thread is using
/// it (in a wait, without the GIL): a handle is for one thread at a time,
/// and waiting for it with the GIL held could never end.
fn take<'a, T>(state: &'a Mutex<T>, what: &str) -> PyResult<MutexGuard<'a, T>> {
    match state.try_lock() {
        Ok(guard) => Ok(guard),
        Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => Err(raise(
            "InvalidState",
            format!("{what} is in use by another thread; use one handle per thread"),
        )),
    }
}

/// A timeout in seconds from Python: `None` waits as long as it takes.
fn limit(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if (0.0..=1e9).contains(&s) => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(raise(
            "InvalidArgument",
            format!("timeout={s}: expected a number of seconds from 0 to 1e9, or None"),
        )),
    }
}

/// Runs `step` (which waits at most the duration it is given) until it
/// gives something other than a timeout, or `timeout` has passed; the GIL
/// is released for each piece, and a Python signal handler runs between
/// pieces (its exception ends the wait).
fn wait<T>(
    py: Python<'_>,
    timeout: Option<Duration>,
    mut step: impl FnMut(Duration) -> Result<T, RingError> + Send,
) -> PyResult<T>
where
    T: Send,
{
    let start = Instant::now();
    loop {
        let left = timeout.map(|t| t.saturating_sub(start.elapsed()));
        let piece = left.map_or(SLICE, |l| l.min(SLICE));
        match py.detach(|| step(piece)) {
            Err(RingError::Timeout { .. }) if left.is_none_or(|l| l > piece) => {
                py.check_signals()?;
            }
            other => return other.map_err(errors::from_ring),
        }
    }
}

fn header_dict<'py>(py: Python<'py>, header: &TransferHeader) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in header.iter() {
        dict.set_item(key, value)?;
    }
    Ok(dict)
}

/// A ring, made or opened by name.
#[pyclass(module = "numalab._native", frozen)]
struct Ring {
    ring: Mutex<Option<lib::Ring>>,
    name: String,
}

impl Ring {
    fn with<T>(&self, f: impl FnOnce(&lib::Ring) -> PyResult<T>) -> PyResult<T> {
        let guard = take(&self.ring, &format!("ring {:?}", self.name))?;
        match guard.as_ref() {
            Some(ring) => f(ring),
            None => Err(raise("Closed", format!("ring {:?} is closed", self.name))),
        }
    }
}

#[pymethods]
impl Ring {
    /// Makes ring `name`: `size` bytes of data in blocks of `block_size`,
    /// its memory placed by `policy` before any page is touched.
    #[staticmethod]
    #[pyo3(signature = (name, size, block_size, policy, huge_pages, lock, max_readers, backpressure, header_size))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        name: &str,
        size: usize,
        block_size: usize,
        policy: &str,
        huge_pages: &str,
        lock: bool,
        max_readers: u32,
        backpressure: &str,
        header_size: usize,
    ) -> PyResult<Ring> {
        let policy = topology()?
            .parse_policy(policy)
            .map_err(errors::from_policy)?;
        let huge: HugePages = huge_pages
            .parse()
            .map_err(|err: String| raise("InvalidArgument", err))?;
        let backpressure: Backpressure = backpressure
            .parse()
            .map_err(|err: String| raise("InvalidArgument", err))?;
        let options = RingOptions::new(name, size, block_size)
            .policy(policy)
            .huge_pages(huge)
            .lock(lock)
            .max_readers(max_readers)
            .backpressure(backpressure)
            .header_size(header_size);
        let ring = py
            .detach(|| lib::Ring::create(&options))
            .map_err(errors::from_ring)?;
        Ok(Ring {
            ring: Mutex::new(Some(ring)),
            name: name.to_owned(),
        })
    }

    /// Opens the existing ring `name` (its header checked first).
    #[staticmethod]
    fn open(py: Python<'_>, name: &str) -> PyResult<Ring> {
        // SAFETY: the package documents that every process using the ring
        // must go through numalab's ring (this library, the `numalab` CLI
        // or the package); the segment is checked before use.
        let ring = py
            .detach(|| unsafe { lib::Ring::open(name) })
            .map_err(errors::from_ring)?;
        Ok(Ring {
            ring: Mutex::new(Some(ring)),
            name: name.to_owned(),
        })
    }

    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    #[getter]
    fn path(&self) -> PyResult<String> {
        self.with(|r| Ok(r.path().display().to_string()))
    }

    #[getter]
    fn block_size(&self) -> PyResult<usize> {
        self.with(|r| Ok(r.block_size()))
    }

    #[getter]
    fn blocks(&self) -> PyResult<usize> {
        self.with(|r| Ok(r.blocks()))
    }

    /// The policy its creator asked for, as numalab writes it.
    #[getter]
    fn policy(&self) -> PyResult<String> {
        self.with(|r| r.policy().map(|p| p.to_string()).map_err(errors::from_ring))
    }

    /// numalab's check of where the ring's pages are against its policy.
    fn audit_note(&self) -> PyResult<(bool, String)> {
        self.with(|r| {
            let audit = r.audit();
            Ok((audit.is_match(), audit.note))
        })
    }

    /// Where the ring's pages are, per node.
    fn pages(&self) -> PyResult<std::collections::BTreeMap<u32, u64>> {
        self.with(|r| {
            r.locate(numalab::locate::Sample::All)
                .map(|h| h.per_node)
                .map_err(|err| raise("Error", err.to_string()))
        })
    }

    /// The ring's counters as `numalab ring --list --json` shows them.
    fn stats_json(&self) -> PyResult<String> {
        self.with(|r| serde_json::to_string(&r.stats()).map_err(|e| raise("Error", e.to_string())))
    }

    /// Attaches the writer.
    fn writer(&self) -> PyResult<Writer> {
        let writer = self.with(|r| r.writer().map_err(errors::from_ring))?;
        Ok(Writer {
            state: Mutex::new(WriterState {
                writer: Some(writer),
                claimed: false,
            }),
            name: self.name.clone(),
        })
    }

    /// Joins as a reader (`block` or `lag` back-pressure, or the ring's).
    #[pyo3(signature = (backpressure=None))]
    fn reader(&self, backpressure: Option<&str>) -> PyResult<Reader> {
        let reader = self.with(|r| {
            match backpressure {
                None => r.reader(),
                Some(text) => {
                    let mode: Backpressure = text
                        .parse()
                        .map_err(|err: String| raise("InvalidArgument", err))?;
                    r.reader_with(mode)
                }
            }
            .map_err(errors::from_ring)
        })?;
        Ok(Reader {
            state: Mutex::new(ReaderState {
                reader: Some(reader),
                current: None,
                timeout: None,
            }),
            name: self.name.clone(),
        })
    }

    /// Keeps the segment's name when a ring this process made is closed.
    fn keep(&self) -> PyResult<()> {
        let mut guard = take(&self.ring, &format!("ring {:?}", self.name))?;
        match guard.as_mut() {
            Some(ring) => {
                ring.keep();
                Ok(())
            }
            None => Err(raise("Closed", format!("ring {:?} is closed", self.name))),
        }
    }

    /// Lets go of the ring (a ring this process made loses its name, unless
    /// kept); blocks still held stay readable memory.
    fn close(&self) -> PyResult<()> {
        let ring = take(&self.ring, &format!("ring {:?}", self.name))?.take();
        drop(ring);
        Ok(())
    }

    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(take(&self.ring, &format!("ring {:?}", self.name))?.is_none())
    }
}

/// A block lent to Python: read (from a reader) or to fill (from the
/// writer). Its memory stays mapped while this object lives; after it is
/// given back, the package refuses to hand out its address.
#[pyclass(module = "numalab._native", frozen)]
struct Block {
    held: HeldBlock,
    writable: bool,
    released: AtomicBool,
    transfer: Option<Transfer>,
}

impl Block {
    fn check(&self) -> PyResult<()> {
        if self.released.load(Ordering::Acquire) {
            return Err(raise(
                "Released",
                format!(
                    "block {} was given back to the ring; its bytes may be another block's now",
                    self.held.seq()
                ),
            ));
        }
        Ok(())
    }
}

#[pymethods]
impl Block {
    /// The first byte's address (refused once given back).
    #[getter]
    fn address(&self) -> PyResult<usize> {
        self.check()?;
        Ok(self.held.as_ptr() as usize)
    }

    /// Bytes: what the writer committed (read), or the whole block (write).
    #[getter]
    fn length(&self) -> usize {
        self.held.len()
    }

    #[getter]
    fn seq(&self) -> u64 {
        self.held.seq()
    }

    #[getter]
    fn writable(&self) -> bool {
        self.writable
    }

    #[getter]
    fn starts_transfer(&self) -> bool {
        self.held.starts_transfer()
    }

    #[getter]
    fn ends_transfer(&self) -> bool {
        self.held.ends_transfer()
    }

    #[getter]
    fn released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// The transfer it belongs to: (id, header) for a read block.
    #[getter]
    fn transfer<'py>(&self, py: Python<'py>) -> PyResult<Option<(u64, Bound<'py, PyDict>)>> {
        match &self.transfer {
            Some(t) => Ok(Some((t.id, header_dict(py, &t.header)?))),
            None => Ok(None),
        }
    }
}

struct WriterState {
    writer: Option<lib::Writer>,
    /// Whether a claimed block waits for its commit.
    claimed: bool,
}

/// The ring's writer.
#[pyclass(module = "numalab._native", frozen)]
struct Writer {
    state: Mutex<WriterState>,
    name: String,
}

impl Writer {
    fn what(&self) -> String {
        format!("the writer of ring {:?}", self.name)
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut WriterState, &mut lib::Writer) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut guard = take(&self.state, &self.what())?;
        let state = &mut *guard;
        let Some(mut writer) = state.writer.take() else {
            return Err(raise(
                "Closed",
                format!("the writer of ring {:?} is closed", self.name),
            ));
        };
        let out = f(state, &mut writer);
        state.writer = Some(writer);
        out
    }

    fn not_claimed(&self, state: &WriterState, what: &str) -> PyResult<()> {
        if state.claimed {
            return Err(raise(
                "InvalidState",
                format!("cannot {what} while a claimed block waits for its commit"),
            ));
        }
        Ok(())
    }
}

#[pymethods]
impl Writer {
    /// How long a write or claim may wait for space (None: as long as it
    /// takes).
    fn set_timeout(&self, seconds: Option<f64>) -> PyResult<()> {
        let timeout = limit(seconds)?;
        self.with(|_, w| {
            w.set_timeout(timeout);
            Ok(())
        })
    }

    /// Waits until `count` readers have joined.
    fn wait_for_readers(&self, py: Python<'_>, count: usize, seconds: Option<f64>) -> PyResult<()> {
        let timeout = limit(seconds)?;
        let guard = take(&self.state, &self.what())?;
        let Some(writer) = guard.writer.as_ref() else {
            return Err(raise(
                "Closed",
                format!("the writer of ring {:?} is closed", self.name),
            ));
        };
        wait(py, timeout, |piece| writer.wait_for_readers(count, piece))?;
        Ok(())
    }

    /// Begins a transfer with the header's pairs.
    fn begin_transfer(&self, header: Vec<(String, String)>) -> PyResult<()> {
        let mut text = TransferHeader::new();
        for (key, value) in &header {
            text.set(key, value).map_err(|err| match err {
                RingError::InvalidSize(message) => raise("InvalidArgument", message),
                other => errors::from_ring(other),
            })?;
        }
        self.with(|state, w| {
            self.not_claimed(state, "begin a transfer")?;
            w.begin_transfer(&text).map_err(errors::from_ring)
        })
    }

    /// Copies `[address, address + length)` into the ring (the package
    /// holds the object it comes from for the call).
    fn write(&self, py: Python<'_>, address: usize, length: usize) -> PyResult<()> {
        // The address is NumPy's, of an object the caller holds; as an
        // integer it crosses into the GIL-free closure.
        self.with(|state, w| {
            self.not_claimed(state, "write")?;
            py.detach(|| {
                // SAFETY: the package passes a live, readable object's
                // buffer and holds the object until this returns.
                let data = unsafe { std::slice::from_raw_parts(address as *const u8, length) };
                w.write(data)
            })
            .map_err(errors::from_ring)
        })
    }

    /// Publishes the partly filled block, if any.
    fn flush(&self) -> PyResult<()> {
        self.with(|state, w| {
            self.not_claimed(state, "flush")?;
            w.flush().map_err(errors::from_ring)
        })
    }

    /// The next whole block, to fill in place; commit it with `commit`.
    #[pyo3(signature = (seconds=None))]
    fn claim(&self, py: Python<'_>, seconds: Option<f64>) -> PyResult<Block> {
        let timeout = limit(seconds)?;
        let held = self.with(|state, w| {
            self.not_claimed(state, "claim another block")?;
            let held = wait(py, timeout, |piece| {
                w.set_timeout(Some(piece));
                let out = w.hold_claim();
                w.set_timeout(None);
                out
            })?;
            state.claimed = true;
            Ok(held)
        })?;
        Ok(Block {
            held,
            writable: true,
            released: AtomicBool::new(false),
            transfer: None,
        })
    }

    /// Publishes the first `length` bytes of a claimed block (the last of
    /// its transfer when `last`).
    fn commit(&self, block: &Block, length: usize, last: bool) -> PyResult<()> {
        if !block.writable {
            return Err(raise(
                "InvalidArgument",
                "a read block cannot be committed".into(),
            ));
        }
        block.check()?;
        if length > block.held.len() {
            return Err(raise(
                "InvalidArgument",
                format!(
                    "length={length}: a block holds at most {} bytes",
                    block.held.len()
                ),
            ));
        }
        self.with(|state, w| {
            w.commit_held(&block.held, length, last)
                .map_err(errors::from_ring)?;
            state.claimed = false;
            block.released.store(true, Ordering::Release);
            Ok(())
        })
    }

    /// Gives a claimed block back unpublished.
    fn abandon(&self, block: &Block) -> PyResult<()> {
        self.with(|state, _| {
            if block.writable && !block.released.swap(true, Ordering::AcqRel) {
                state.claimed = false;
            }
            Ok(())
        })
    }

    /// Ends the current transfer.
    fn end_transfer(&self, py: Python<'_>) -> PyResult<()> {
        self.with(|state, w| {
            self.not_claimed(state, "end the transfer")?;
            py.detach(|| w.end_transfer()).map_err(errors::from_ring)
        })
    }

    /// Ends the transfer and the stream, and lets go of the writer.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = take(&self.state, &self.what())?;
        if guard.claimed {
            return Err(raise(
                "InvalidState",
                "cannot finish while a claimed block waits for its commit".into(),
            ));
        }
        match guard.writer.take() {
            Some(writer) => py.detach(|| writer.finish()).map_err(errors::from_ring),
            None => Ok(()),
        }
    }

    /// Lets go of the writer: the stream ends as with `finish`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = take(&self.state, &self.what())?;
        guard.claimed = false;
        match guard.writer.take() {
            Some(writer) => py.detach(|| writer.finish()).map_err(errors::from_ring),
            None => Ok(()),
        }
    }

    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(take(&self.state, &self.what())?.writer.is_none())
    }
}

struct ReaderState {
    reader: Option<lib::Reader>,
    /// The block lent now, given back before the next is taken.
    current: Option<Py<Block>>,
    timeout: Option<Duration>,
}

/// One of the ring's readers.
#[pyclass(module = "numalab._native", frozen)]
struct Reader {
    state: Mutex<ReaderState>,
    name: String,
}

fn give_back(state: &mut ReaderState) {
    if let (Some(block), Some(reader)) = (state.current.take(), state.reader.as_mut()) {
        let block = block.get();
        if !block.released.swap(true, Ordering::AcqRel) {
            reader.release_held(&block.held);
        }
    }
}

impl Reader {
    fn what(&self) -> String {
        format!("the reader of ring {:?}", self.name)
    }

    /// Gives back the block lent, then runs `step` (a wait) within the
    /// reader's timeout, in pieces; returns the state, still held, with
    /// what `step` gave.
    fn next<T: Send>(
        &self,
        py: Python<'_>,
        step: fn(&mut lib::Reader) -> Result<T, RingError>,
    ) -> PyResult<(MutexGuard<'_, ReaderState>, T)> {
        let mut guard = take(&self.state, &self.what())?;
        give_back(&mut guard);
        let timeout = guard.timeout;
        let Some(reader) = guard.reader.as_mut() else {
            return Err(raise("Closed", format!("{} is closed", self.what())));
        };
        let out = wait(py, timeout, |piece| {
            reader.set_timeout(Some(piece));
            let out = step(reader);
            reader.set_timeout(None);
            out
        })?;
        Ok((guard, out))
    }
}

#[pymethods]
impl Reader {
    /// How long `next_block` and `next_transfer` wait (None: as long as it
    /// takes).
    fn set_timeout(&self, seconds: Option<f64>) -> PyResult<()> {
        let timeout = limit(seconds)?;
        take(&self.state, &self.what())?.timeout = timeout;
        Ok(())
    }

    /// Gives back the block lent before, then lends the next; None at the
    /// end of the stream.
    fn next_block(&self, py: Python<'_>) -> PyResult<Option<Py<Block>>> {
        let (mut state, held) = self.next(py, lib::Reader::hold)?;
        let Some(held) = held else {
            return Ok(None);
        };
        let transfer = state.reader.as_ref().and_then(|r| r.transfer().cloned());
        let block = Py::new(
            py,
            Block {
                held,
                writable: false,
                released: AtomicBool::new(false),
                transfer,
            },
        )?;
        state.current = Some(block.clone_ref(py));
        Ok(Some(block))
    }

    /// Gives `block` back to the writer (nothing if it was already).
    fn release(&self, block: &Block) -> PyResult<()> {
        let mut guard = take(&self.state, &self.what())?;
        let state = &mut *guard;
        if block.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(reader) = state.reader.as_mut() {
            reader.release_held(&block.held);
        }
        state.current = None;
        Ok(())
    }

    /// Skips the rest of the current transfer and waits for the next:
    /// (id, header), or None at the end of the stream.
    fn next_transfer<'py>(&self, py: Python<'py>) -> PyResult<Option<(u64, Bound<'py, PyDict>)>> {
        match self.next(py, lib::Reader::next_transfer)?.1 {
            Some(t) => Ok(Some((t.id, header_dict(py, &t.header)?))),
            None => Ok(None),
        }
    }

    /// Blocks this reader missed (lag back-pressure).
    #[getter]
    fn skipped(&self) -> PyResult<u64> {
        let guard = take(&self.state, &self.what())?;
        Ok(guard.reader.as_ref().map_or(0, |r| r.skipped()))
    }

    /// Gives back the block lent, and leaves the ring.
    fn close(&self) -> PyResult<()> {
        let mut guard = take(&self.state, &self.what())?;
        give_back(&mut guard);
        guard.reader = None;
        Ok(())
    }

    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(take(&self.state, &self.what())?.reader.is_none())
    }
}

/// Removes the ring `name` if no process holds it (`numalab ring
/// --cleanup NAME`); `force` removes it even then.
#[pyfunction]
#[pyo3(signature = (name, force=false))]
fn remove(name: &str, force: bool) -> PyResult<Vec<String>> {
    lib::remove(name, force)
        .map(|paths| paths.iter().map(|p| p.display().to_string()).collect())
        .map_err(errors::from_ring)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Ring>()?;
    m.add_class::<Writer>()?;
    m.add_class::<Reader>()?;
    m.add_class::<Block>()?;
    m.add_function(wrap_pyfunction!(remove, m)?)?;
    Ok(())
}
