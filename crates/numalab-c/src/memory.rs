//! Placed memory, where pages are, and the calling thread's policy and
//! CPUs.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use numalab::audit::audit;
use numalab::locate::{locate, Sample};
use numalab::{affinity, BufferOptions, CpuSet, MemPolicy, NodeBuffer, NodeSet, RangeMode};

use crate::error::{boundary, counts, fill_counts, numalab_status, out, text, Error};
use crate::topology::topology;

/// The buffers `numalab_alloc` handed out, by address: `numalab_free`
/// takes only these.
fn buffers() -> &'static Mutex<HashMap<usize, NodeBuffer>> {
    static BUFFERS: OnceLock<Mutex<HashMap<usize, NodeBuffer>>> = OnceLock::new();
    BUFFERS.get_or_init(Default::default)
}

fn policy(spec: *const c_char) -> Result<MemPolicy, Error> {
    Ok(topology()?.parse_policy(text(spec, "policy")?)?)
}

/// Allocates `size` bytes whose pages `policy` places (numactl's
/// spelling: `"bind:1"`, `"interleave:all"`, `"weighted-interleave:0=3,1=1"`,
/// `"local"`), applied before any page is touched. With `prefault`
/// non-zero every page is made now, on this thread (the placement is
/// decided, and can be audited, before use); with 0 each page is made,
/// where the policy says, when first written. The memory reads as zero.
/// Free it with [`numalab_free`].
///
/// # Safety
///
/// `policy` is a NUL-terminated string or NULL; `out` points at a `void *`
/// or is NULL (both NULL cases are errors).
#[no_mangle]
pub unsafe extern "C" fn numalab_alloc(
    size: usize,
    policy_spec: *const c_char,
    prefault: c_int,
    out_ptr: *mut *mut c_void,
) -> numalab_status {
    boundary(|| {
        let slot = out(out_ptr, "out")?;
        *slot = std::ptr::null_mut();
        if size == 0 {
            return Err(Error::invalid("size is 0"));
        }
        let options = BufferOptions::new(policy(policy_spec)?).prefault(prefault != 0);
        let mut buffer = NodeBuffer::with_options(size, options)?;
        let address = buffer.as_mut_ptr();
        buffers()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(address as usize, buffer);
        *slot = address.cast();
        Ok(())
    })
}

/// Frees memory from [`numalab_alloc`]. NULL is allowed (nothing
/// happens); any other pointer numalab did not hand out, or one freed
/// already, is `NUMALAB_EINVAL`.
#[no_mangle]
pub extern "C" fn numalab_free(ptr: *mut c_void) -> numalab_status {
    boundary(|| {
        if ptr.is_null() {
            return Ok(());
        }
        let buffer = buffers()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(ptr as usize));
        match buffer {
            Some(buffer) => {
                drop(buffer);
                Ok(())
            }
            None => Err(Error::invalid(format!(
                "{ptr:p} was not allocated by numalab_alloc, or was freed already"
            ))),
        }
    })
}

/// Where the pages of `[addr, addr + len)` are (`move_pages`): the pages
/// on node `n` go to `pages[n]` for each `n < nodes` (a node past `nodes`
/// holding pages is `NUMALAB_EINVAL`: size `pages` by the highest node
/// id plus one, from [`numalab_node_id`](crate::numalab_node_id)); the
/// pages never touched (or swapped out) go to `*not_present` when it is
/// not NULL.
///
/// # Safety
///
/// `pages` points at `nodes` integers (or is NULL with `nodes` 0);
/// `not_present` at one or is NULL. `addr` need not be mapped: pages
/// that are not count as not present.
#[no_mangle]
pub unsafe extern "C" fn numalab_locate(
    addr: *const c_void,
    len: usize,
    pages: *mut u64,
    nodes: usize,
    not_present: *mut u64,
) -> numalab_status {
    boundary(|| {
        let counts = counts(pages, nodes, "pages")?;
        let found = locate(addr.cast(), len, Sample::All)?;
        fill_counts(counts, &found.per_node)?;
        // SAFETY: NULL or one integer, as documented.
        if let Some(slot) = unsafe { not_present.as_mut() } {
            *slot = found.not_present;
        }
        Ok(())
    })
}

/// Checks the pages of `[addr, addr + len)` against `policy`:
/// `*matched` is 1 when every present page is where the policy puts it,
/// else 0; `note` (when not NULL, `note_len` bytes) receives numalab's
/// sentence saying so, cut to fit and NUL-terminated. `local` expects
/// the calling thread's node.
///
/// # Safety
///
/// `policy` is a NUL-terminated string; `matched` points at an int;
/// `note` at `note_len` bytes or is NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_audit(
    addr: *const c_void,
    len: usize,
    policy_spec: *const c_char,
    matched: *mut c_int,
    note: *mut c_char,
    note_len: usize,
) -> numalab_status {
    boundary(|| {
        let matched = out(matched, "matched")?;
        let policy = policy(policy_spec)?;
        let found = locate(addr.cast(), len, Sample::All)?;
        let check = audit(&policy, &NodeSet::single(affinity::current().node), &found);
        *matched = c_int::from(check.is_match());
        if !note.is_null() && note_len > 0 {
            let bytes = check.note.as_bytes();
            let n = bytes.len().min(note_len - 1);
            // SAFETY: `note` has `note_len` bytes; n + 1 <= note_len.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), note.cast::<u8>(), n);
                *note.add(n) = 0;
            }
        }
        Ok(())
    })
}

/// Applies `policy` to the whole pages of `[addr, addr + len)` (`mbind`)
/// and, when `move_pages` is non-zero, moves the pages already there
/// (each to its node in an interleave).
///
/// # Safety
///
/// `policy` is a NUL-terminated string; the range is this process's
/// memory (an unmapped range is `NUMALAB_EINVAL`).
#[no_mangle]
pub unsafe extern "C" fn numalab_place(
    addr: *mut c_void,
    len: usize,
    policy_spec: *const c_char,
    move_pages: c_int,
) -> numalab_status {
    boundary(|| {
        let policy = policy(policy_spec)?;
        if addr.is_null() || len == 0 {
            return Err(Error::invalid("the range is empty or at NULL"));
        }
        let mode = if move_pages != 0 {
            RangeMode::Move
        } else {
            RangeMode::FutureOnly
        };
        Ok(policy.apply_to_pages(addr.cast_const().cast(), len, mode)?)
    })
}

/// A thread's policy and CPUs as they were before [`numalab_thread_bind`].
#[derive(Debug)]
pub struct numalab_thread_state {
    policy: MemPolicy,
    cpus: CpuSet,
}

/// Sets the calling thread's memory policy (`policy`, or NULL to keep it)
/// and CPUs (`cpus` in numactl's list syntax, `"0-3"`, `"all"`, `"!0"`, or
/// NULL to keep them); `*saved` receives what they were, for
/// [`numalab_thread_restore`]. Everything is checked before anything
/// changes.
///
/// # Safety
///
/// `policy` and `cpus` are NUL-terminated strings or NULL; `saved` points
/// at a pointer.
#[no_mangle]
pub unsafe extern "C" fn numalab_thread_bind(
    policy_spec: *const c_char,
    cpus: *const c_char,
    saved: *mut *mut numalab_thread_state,
) -> numalab_status {
    boundary(|| {
        let saved = out(saved, "saved")?;
        *saved = std::ptr::null_mut();
        let policy = if policy_spec.is_null() {
            None
        } else {
            Some(policy(policy_spec)?)
        };
        let cpus = if cpus.is_null() {
            None
        } else {
            Some(topology()?.parse_cpus(text(cpus, "cpus")?)?)
        };
        let before = numalab_thread_state {
            policy: MemPolicy::of_thread()
                .map_err(|e| Error::new(numalab_status::NUMALAB_EOTHER, e.to_string()))?,
            cpus: affinity::thread_cpus()
                .map_err(|e| Error::new(numalab_status::NUMALAB_EOTHER, e.to_string()))?,
        };
        if let Some(cpus) = &cpus {
            affinity::bind_thread_to_cpus(cpus)
                .map_err(|e| Error::new(numalab_status::NUMALAB_EOTHER, e.to_string()))?;
        }
        if let Some(policy) = &policy {
            if let Err(err) = policy.apply_to_thread() {
                let _ = affinity::bind_thread_to_cpus(&before.cpus);
                return Err(err.into());
            }
        }
        *saved = Box::into_raw(Box::new(before));
        Ok(())
    })
}

/// Puts back the policy and CPUs `saved` holds (from
/// [`numalab_thread_bind`] on this thread) and frees it. NULL is
/// `NUMALAB_EINVAL`.
///
/// # Safety
///
/// `saved` came from `numalab_thread_bind` and was not restored yet.
#[no_mangle]
pub unsafe extern "C" fn numalab_thread_restore(
    saved: *mut numalab_thread_state,
) -> numalab_status {
    boundary(|| {
        if saved.is_null() {
            return Err(Error::invalid("saved is NULL"));
        }
        // SAFETY: from Box::into_raw in numalab_thread_bind, restored once.
        let saved = unsafe { Box::from_raw(saved) };
        affinity::bind_thread_to_cpus(&saved.cpus)
            .map_err(|e| Error::new(numalab_status::NUMALAB_EOTHER, e.to_string()))?;
        Ok(saved.policy.apply_to_thread()?)
    })
}
