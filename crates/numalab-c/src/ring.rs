//! numalab's shared-memory ring from C: the same segments and protocol as
//! the Rust library and `numalab ring`, so a C writer feeds a Rust reader
//! and the other way round.
//!
//! Handles are owned by the caller: each `numalab_*_close` frees its
//! handle, and a handle is used by one thread at a time. A reader or
//! writer keeps the ring's memory mapped on its own, so closing the ring
//! handle first is allowed.

use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

use numalab::ring::{self, HeldBlock, RingError, RingOptions, TransferHeader};

use crate::error::{boundary, numalab_status, out, text, Error};
use crate::topology::topology;

/// A ring, made or opened by name.
#[derive(Debug)]
pub struct numalab_ring {
    ring: ring::Ring,
}

/// The ring's writer.
#[derive(Debug)]
pub struct numalab_writer {
    writer: ring::Writer,
    claimed: Option<HeldBlock>,
}

/// One of the ring's readers.
#[derive(Debug)]
pub struct numalab_reader {
    reader: ring::Reader,
    held: Option<HeldBlock>,
}

/// The block starts a transfer (`numalab_reader_acquire`'s `flags`).
pub const NUMALAB_BLOCK_START: c_int = 1;
/// The block ends a transfer.
pub const NUMALAB_BLOCK_END: c_int = 2;

impl From<RingError> for Error {
    fn from(err: RingError) -> Error {
        let status = match &err {
            RingError::NotFound { .. } => numalab_status::NUMALAB_ENOTFOUND,
            RingError::Exists { .. } => numalab_status::NUMALAB_EEXIST,
            RingError::Timeout { .. } => numalab_status::NUMALAB_ETIMEDOUT,
            RingError::NotHeld { .. } => numalab_status::NUMALAB_ESTATE,
            RingError::InvalidName { .. }
            | RingError::InvalidSize(_)
            | RingError::Size(_)
            | RingError::TooLarge { .. } => numalab_status::NUMALAB_EINVAL,
            RingError::Placement(numalab::BufferError::Policy(_))
            | RingError::Placement(numalab::BufferError::InsufficientMemory { .. }) => {
                numalab_status::NUMALAB_ENODE
            }
            _ => match numalab::os_error(&err) {
                Some(io) if io.kind() == std::io::ErrorKind::PermissionDenied => {
                    numalab_status::NUMALAB_EPERM
                }
                _ => numalab_status::NUMALAB_EOTHER,
            },
        };
        Error::new(status, err.to_string())
    }
}

/// A timeout in milliseconds: negative waits as long as it takes.
fn timeout(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

fn handle<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Error> {
    out(ptr, what)
}

/// Makes ring `name` (1 to 100 of `A-Z a-z 0-9 . _ -`): `size` bytes in
/// blocks of `block_size` (a multiple of 64, at least two blocks), placed
/// by `policy` (numactl's spelling; NULL: `local`) before any page is
/// touched. Closing the handle removes the name.
///
/// # Safety
///
/// `name` and `policy` are NUL-terminated strings (`policy` may be NULL);
/// `ring` points at a pointer.
#[no_mangle]
pub unsafe extern "C" fn numalab_ring_create(
    name: *const c_char,
    size: usize,
    block_size: usize,
    policy: *const c_char,
    ring: *mut *mut numalab_ring,
) -> numalab_status {
    boundary(|| {
        let slot = out(ring, "ring")?;
        *slot = std::ptr::null_mut();
        let name = text(name, "name")?;
        let policy = if policy.is_null() {
            numalab::MemPolicy::Local
        } else {
            topology()?.parse_policy(text(policy, "policy")?)?
        };
        let made = ring::Ring::create(&RingOptions::new(name, size, block_size).policy(policy))?;
        *slot = Box::into_raw(Box::new(numalab_ring { ring: made }));
        Ok(())
    })
}

/// Opens ring `name`, made by another process (C, Rust, Python or
/// `numalab ring`); its header is checked first. Every process using a
/// ring must go through numalab.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `ring` points at a pointer.
#[no_mangle]
pub unsafe extern "C" fn numalab_ring_open(
    name: *const c_char,
    ring: *mut *mut numalab_ring,
) -> numalab_status {
    boundary(|| {
        let slot = out(ring, "ring")?;
        *slot = std::ptr::null_mut();
        let name = text(name, "name")?;
        // SAFETY: the header documents that every process using the ring
        // goes through numalab; the segment is checked before use.
        let opened = unsafe { ring::Ring::open(name)? };
        *slot = Box::into_raw(Box::new(numalab_ring { ring: opened }));
        Ok(())
    })
}

/// The ring's block size and number of blocks (either may be NULL).
///
/// # Safety
///
/// `ring` is a live handle; the others point at integers or are NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_ring_geometry(
    ring: *mut numalab_ring,
    block_size: *mut usize,
    blocks: *mut usize,
) -> numalab_status {
    boundary(|| {
        let ring = &handle(ring, "ring")?.ring;
        // SAFETY: NULL or one integer each.
        unsafe {
            if let Some(b) = block_size.as_mut() {
                *b = ring.block_size();
            }
            if let Some(n) = blocks.as_mut() {
                *n = ring.blocks();
            }
        }
        Ok(())
    })
}

/// Lets go of the ring (a ring this process made loses its name). NULL
/// does nothing.
///
/// # Safety
///
/// `ring` came from `numalab_ring_create`/`open` and is closed once.
#[no_mangle]
pub unsafe extern "C" fn numalab_ring_close(ring: *mut numalab_ring) -> numalab_status {
    boundary(|| {
        if !ring.is_null() {
            // SAFETY: from Box::into_raw, closed once (the caller's word).
            drop(unsafe { Box::from_raw(ring) });
        }
        Ok(())
    })
}

/// Attaches the ring's writer (one at a time).
///
/// # Safety
///
/// `ring` is a live handle; `writer` points at a pointer.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_attach(
    ring: *mut numalab_ring,
    writer: *mut *mut numalab_writer,
) -> numalab_status {
    boundary(|| {
        let slot = out(writer, "writer")?;
        *slot = std::ptr::null_mut();
        let attached = handle(ring, "ring")?.ring.writer()?;
        *slot = Box::into_raw(Box::new(numalab_writer {
            writer: attached,
            claimed: None,
        }));
        Ok(())
    })
}

/// How long a write or acquire may wait for space, in milliseconds
/// (negative: as long as it takes).
///
/// # Safety
///
/// `writer` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_set_timeout(
    writer: *mut numalab_writer,
    timeout_ms: i64,
) -> numalab_status {
    boundary(|| {
        handle(writer, "writer")?
            .writer
            .set_timeout(timeout(timeout_ms));
        Ok(())
    })
}

/// Waits until `count` readers have joined, at most `timeout_ms`
/// (negative: as long as it takes).
///
/// # Safety
///
/// `writer` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_wait_for_readers(
    writer: *mut numalab_writer,
    count: usize,
    timeout_ms: i64,
) -> numalab_status {
    boundary(|| {
        let limit = timeout(timeout_ms).unwrap_or(Duration::from_secs(u64::MAX / 4));
        Ok(handle(writer, "writer")?
            .writer
            .wait_for_readers(count, limit)?)
    })
}

/// Begins a transfer whose header is `header`: lines of `KEY value`
/// (PSRDada's header format; keys without spaces, values of one line), or
/// NULL for none. Readers get it with the transfer's first block.
///
/// # Safety
///
/// `writer` is a live handle; `header` a NUL-terminated string or NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_begin_transfer(
    writer: *mut numalab_writer,
    header: *const c_char,
) -> numalab_status {
    boundary(|| {
        let w = handle(writer, "writer")?;
        not_claimed(w)?;
        let mut pairs = TransferHeader::new();
        if !header.is_null() {
            for line in text(header, "header")?
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                let (key, value) = line
                    .trim()
                    .split_once(char::is_whitespace)
                    .unwrap_or((line.trim(), ""));
                pairs.set(key, value.trim())?;
            }
        }
        Ok(w.writer.begin_transfer(&pairs)?)
    })
}

fn not_claimed(w: &numalab_writer) -> Result<(), Error> {
    match &w.claimed {
        Some(block) => Err(Error::new(
            numalab_status::NUMALAB_ESTATE,
            format!("block {} was acquired and not committed", block.seq()),
        )),
        None => Ok(()),
    }
}

/// The next whole block, to fill in place: `*data` and `*capacity` (the
/// block size). Publish it with [`numalab_writer_commit`]; until then the
/// writer lends no other and writes nothing.
///
/// # Safety
///
/// `writer` is a live handle; `data` and `capacity` point at a pointer and
/// an integer.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_acquire(
    writer: *mut numalab_writer,
    data: *mut *mut c_void,
    capacity: *mut usize,
) -> numalab_status {
    boundary(|| {
        let w = handle(writer, "writer")?;
        let data = out(data, "data")?;
        let capacity = out(capacity, "capacity")?;
        not_claimed(w)?;
        let block = w.writer.hold_claim()?;
        *data = block.as_ptr().cast();
        *capacity = block.len();
        w.claimed = Some(block);
        Ok(())
    })
}

/// Publishes the first `used` bytes of the acquired block, as the last of
/// its transfer when `last` is non-zero. No acquired block is
/// `NUMALAB_ESTATE`; `used` past the block is `NUMALAB_EINVAL`.
///
/// # Safety
///
/// `writer` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_commit(
    writer: *mut numalab_writer,
    used: usize,
    last: c_int,
) -> numalab_status {
    boundary(|| {
        let w = handle(writer, "writer")?;
        let Some(block) = w.claimed.as_ref() else {
            return Err(Error::new(
                numalab_status::NUMALAB_ESTATE,
                "no block was acquired to commit",
            ));
        };
        if used > block.len() {
            return Err(Error::invalid(format!(
                "used = {used}: the block holds {} bytes",
                block.len()
            )));
        }
        w.writer.commit_held(block, used, last != 0)?;
        w.claimed = None;
        Ok(())
    })
}

/// Copies `len` bytes into the ring, filling blocks one after another.
///
/// # Safety
///
/// `writer` is a live handle; `data` points at `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_write(
    writer: *mut numalab_writer,
    data: *const c_void,
    len: usize,
) -> numalab_status {
    boundary(|| {
        let w = handle(writer, "writer")?;
        not_claimed(w)?;
        if len == 0 {
            return Ok(());
        }
        if data.is_null() {
            return Err(Error::invalid("data is NULL"));
        }
        // SAFETY: `len` readable bytes at `data`, the caller's word.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        Ok(w.writer.write(bytes)?)
    })
}

/// Ends the current transfer.
///
/// # Safety
///
/// `writer` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_end_transfer(
    writer: *mut numalab_writer,
) -> numalab_status {
    boundary(|| {
        let w = handle(writer, "writer")?;
        not_claimed(w)?;
        Ok(w.writer.end_transfer()?)
    })
}

/// Ends the stream (readers get `NUMALAB_END` once they have read
/// everything) and frees the handle. NULL does nothing.
///
/// # Safety
///
/// `writer` came from `numalab_writer_attach` and is closed once.
#[no_mangle]
pub unsafe extern "C" fn numalab_writer_close(writer: *mut numalab_writer) -> numalab_status {
    boundary(|| {
        if writer.is_null() {
            return Ok(());
        }
        // SAFETY: from Box::into_raw, closed once.
        let w = unsafe { Box::from_raw(writer) };
        Ok(w.writer.finish()?)
    })
}

/// Joins the ring as a reader: it reads every block from now on, in
/// order.
///
/// # Safety
///
/// `ring` is a live handle; `reader` points at a pointer.
#[no_mangle]
pub unsafe extern "C" fn numalab_reader_join(
    ring: *mut numalab_ring,
    reader: *mut *mut numalab_reader,
) -> numalab_status {
    boundary(|| {
        let slot = out(reader, "reader")?;
        *slot = std::ptr::null_mut();
        let joined = handle(ring, "ring")?.ring.reader()?;
        *slot = Box::into_raw(Box::new(numalab_reader {
            reader: joined,
            held: None,
        }));
        Ok(())
    })
}

/// How long an acquire may wait for data, in milliseconds (negative: as
/// long as it takes).
///
/// # Safety
///
/// `reader` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn numalab_reader_set_timeout(
    reader: *mut numalab_reader,
    timeout_ms: i64,
) -> numalab_status {
    boundary(|| {
        handle(reader, "reader")?
            .reader
            .set_timeout(timeout(timeout_ms));
        Ok(())
    })
}

/// Lends the next block in place: `*data`, `*len` (the bytes the writer
/// committed) and `*flags` (`NUMALAB_BLOCK_START`, `NUMALAB_BLOCK_END`;
/// may be NULL). `NUMALAB_END` at the end of the stream. Give it back with
/// [`numalab_reader_release`] before the next acquire (acquiring again
/// gives the held block back first).
///
/// # Safety
///
/// `reader` is a live handle; `data` and `len` point at a pointer and an
/// integer; `flags` at an int or is NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_reader_acquire(
    reader: *mut numalab_reader,
    data: *mut *const c_void,
    len: *mut usize,
    flags: *mut c_int,
) -> numalab_status {
    let mut end = false;
    let status = boundary(|| {
        let r = handle(reader, "reader")?;
        let data = out(data, "data")?;
        let len = out(len, "len")?;
        if let Some(block) = r.held.take() {
            r.reader.release_held(&block);
        }
        match r.reader.hold()? {
            Some(block) => {
                *data = block.as_ptr().cast_const().cast();
                *len = block.len();
                // SAFETY: NULL or one int.
                if let Some(f) = unsafe { flags.as_mut() } {
                    *f = if block.starts_transfer() {
                        NUMALAB_BLOCK_START
                    } else {
                        0
                    } | if block.ends_transfer() {
                        NUMALAB_BLOCK_END
                    } else {
                        0
                    };
                }
                r.held = Some(block);
            }
            None => {
                *data = std::ptr::null();
                *len = 0;
                end = true;
            }
        }
        Ok(())
    });
    if end && status == numalab_status::NUMALAB_OK {
        numalab_status::NUMALAB_END
    } else {
        status
    }
}

/// Gives the acquired block back to the writer. No block held (released
/// already) is `NUMALAB_ESTATE`.
///
/// # Safety
///
/// `reader` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn numalab_reader_release(reader: *mut numalab_reader) -> numalab_status {
    boundary(|| {
        let r = handle(reader, "reader")?;
        match r.held.take() {
            Some(block) => {
                r.reader.release_held(&block);
                Ok(())
            }
            None => Err(Error::new(
                numalab_status::NUMALAB_ESTATE,
                "no block is held: it was released already, or none was acquired",
            )),
        }
    })
}

/// The current transfer's number (from 1) and header, as `KEY value`
/// lines, into `header` (`header_len` bytes, NUL-terminated; a header that
/// does not fit is `NUMALAB_EINVAL` with the size needed in the message).
/// Either output may be NULL. No transfer yet is `NUMALAB_ESTATE`.
///
/// # Safety
///
/// `reader` is a live handle; `id` points at an integer or is NULL;
/// `header` at `header_len` bytes or is NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_reader_transfer(
    reader: *mut numalab_reader,
    id: *mut u64,
    header: *mut c_char,
    header_len: usize,
) -> numalab_status {
    boundary(|| {
        let r = handle(reader, "reader")?;
        let Some(transfer) = r.reader.transfer() else {
            return Err(Error::new(
                numalab_status::NUMALAB_ESTATE,
                "no transfer has begun yet",
            ));
        };
        // SAFETY: NULL or one integer.
        if let Some(slot) = unsafe { id.as_mut() } {
            *slot = transfer.id;
        }
        if !header.is_null() {
            let text = transfer.header.to_string();
            if text.len() >= header_len {
                return Err(Error::invalid(format!(
                    "the header needs {} bytes with its NUL; header_len is {header_len}",
                    text.len() + 1
                )));
            }
            // SAFETY: `header` has header_len > text.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), header.cast::<u8>(), text.len());
                *header.add(text.len()) = 0;
            }
        }
        Ok(())
    })
}

/// Gives back the held block, leaves the ring and frees the handle. NULL
/// does nothing.
///
/// # Safety
///
/// `reader` came from `numalab_reader_join` and is closed once.
#[no_mangle]
pub unsafe extern "C" fn numalab_reader_close(reader: *mut numalab_reader) -> numalab_status {
    boundary(|| {
        if !reader.is_null() {
            // SAFETY: from Box::into_raw, closed once.
            let mut r = unsafe { Box::from_raw(reader) };
            if let Some(block) = r.held.take() {
                r.reader.release_held(&block);
            }
        }
        Ok(())
    })
}
