//! Status codes, the thread's last error, and the boundary no panic
//! crosses.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call did: `NUMALAB_OK`, or the kind of error (the message is
/// [`numalab_last_error`]'s).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum numalab_status {
    /// Done.
    NUMALAB_OK = 0,
    /// A NULL pointer, a size or count out of range, a string that is not
    /// UTF-8, a pointer numalab did not hand out.
    NUMALAB_EINVAL = 1,
    /// A malformed policy or CPU list.
    NUMALAB_EPOLICY = 2,
    /// A node that does not exist, is not allowed, lacks memory or CPUs,
    /// or has too little free.
    NUMALAB_ENODE = 3,
    /// The kernel lacks what was asked (a policy, page location).
    NUMALAB_EUNSUPPORTED = 4,
    /// The operating system refused (permission).
    NUMALAB_EPERM = 5,
    /// A file or ring that does not exist.
    NUMALAB_ENOTFOUND = 6,
    /// A ring whose name is taken.
    NUMALAB_EEXIST = 7,
    /// The other side did not come within the timeout.
    NUMALAB_ETIMEDOUT = 8,
    /// A call out of order: a block released twice, a commit without a
    /// block.
    NUMALAB_ESTATE = 9,
    /// The end of the stream (not an error: nothing more will come).
    NUMALAB_END = 10,
    /// Anything else the system reported.
    NUMALAB_EOTHER = 11,
    /// A bug in numalab (a Rust panic, caught at the boundary).
    NUMALAB_EINTERNAL = 12,
}

/// An error on its way to C: its kind and message.
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) status: numalab_status,
    pub(crate) message: String,
}

impl Error {
    pub(crate) fn new(status: numalab_status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(numalab_status::NUMALAB_EINVAL, message)
    }

    /// The same error, its message after `what: `.
    pub(crate) fn prefixed(self, what: &str) -> Error {
        Error::new(self.status, format!("{what}: {}", self.message))
    }
}

/// A node or CPU number past what Linux can address is a node error; any
/// other malformed list a policy error.
fn parse_status(err: &numalab::ParseSetError) -> numalab_status {
    match err {
        numalab::ParseSetError::TooLarge { .. } => numalab_status::NUMALAB_ENODE,
        _ => numalab_status::NUMALAB_EPOLICY,
    }
}

impl From<numalab::PolicyError> for Error {
    fn from(err: numalab::PolicyError) -> Error {
        use numalab::{PolicyError, SpecError};
        let status = match &err {
            PolicyError::Node(SpecError::Parse(parse)) => parse_status(parse),
            PolicyError::Parse { .. } => numalab_status::NUMALAB_EPOLICY,
            PolicyError::Node(_) => numalab_status::NUMALAB_ENODE,
            PolicyError::Unsupported { .. } => numalab_status::NUMALAB_EUNSUPPORTED,
            PolicyError::NotMapped { .. } => numalab_status::NUMALAB_EINVAL,
            _ => numalab_status::NUMALAB_EOTHER,
        };
        Error::new(status, err.to_string())
    }
}

impl From<numalab::SpecError> for Error {
    fn from(err: numalab::SpecError) -> Error {
        let status = match &err {
            numalab::SpecError::Parse(parse) => parse_status(parse),
            _ => numalab_status::NUMALAB_ENODE,
        };
        Error::new(status, err.to_string())
    }
}

impl From<numalab::BufferError> for Error {
    fn from(err: numalab::BufferError) -> Error {
        match err {
            numalab::BufferError::Policy(err) => err.into(),
            numalab::BufferError::InsufficientMemory { .. } => {
                Error::new(numalab_status::NUMALAB_ENODE, err.to_string())
            }
            other => Error::new(numalab_status::NUMALAB_EOTHER, other.to_string()),
        }
    }
}

impl From<numalab::locate::LocateError> for Error {
    fn from(err: numalab::locate::LocateError) -> Error {
        let status = match err {
            numalab::locate::LocateError::Unsupported(_) => numalab_status::NUMALAB_EUNSUPPORTED,
            _ => numalab_status::NUMALAB_EOTHER,
        };
        Error::new(status, err.to_string())
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn remember(message: &str) {
    // A message with a NUL in it is cut there: C reads up to it anyway.
    let text = message.split('\0').next().unwrap_or_default();
    let text = CString::new(text).unwrap_or_default();
    LAST.with(|last| *last.borrow_mut() = text);
}

/// Runs `f` at the boundary: its error is remembered for
/// [`numalab_last_error`] and returned as a status; a panic becomes
/// `NUMALAB_EINTERNAL`.
pub(crate) fn boundary(f: impl FnOnce() -> Result<(), Error>) -> numalab_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => numalab_status::NUMALAB_OK,
        Ok(Err(err)) => {
            remember(&err.message);
            err.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            remember(&format!(
                "internal error in numalab (please report it): {what}"
            ));
            numalab_status::NUMALAB_EINTERNAL
        }
    }
}

/// A C string argument as UTF-8, `what` naming it in the error.
pub(crate) fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string (the header says
    // so); it is only read, for this call.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// An out-pointer, refused when NULL.
pub(crate) fn out<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Error> {
    // SAFETY: non-NULL out-pointers point at a T the caller owns (the
    // header says so).
    unsafe { ptr.as_mut() }.ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// A caller's array of `nodes` counts per node, refused when NULL with
/// `nodes` above 0 (checked before any work).
pub(crate) fn counts<'a>(ptr: *mut u64, nodes: usize, what: &str) -> Result<&'a mut [u64], Error> {
    if nodes == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: `nodes` integers at `ptr`, the caller's word (the header
    // says so).
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, nodes) })
}

/// Fills `counts` with `per_node` (zero elsewhere); a node holding pages
/// past the counts given is an error.
pub(crate) fn fill_counts(
    counts: &mut [u64],
    per_node: &std::collections::BTreeMap<u32, u64>,
) -> Result<(), Error> {
    let nodes = counts.len();
    if let Some((node, _)) = per_node
        .iter()
        .find(|(n, c)| **c > 0 && **n as usize >= nodes)
    {
        return Err(Error::invalid(format!(
            "pages on node {node}, past the {nodes} counts given"
        )));
    }
    counts.fill(0);
    for (node, count) in per_node {
        counts[*node as usize] = *count;
    }
    Ok(())
}

/// The calling thread's last error message: empty before any error. The
/// string stays valid until the next numalab call on this thread.
#[no_mangle]
pub extern "C" fn numalab_last_error() -> *const c_char {
    LAST.with(|last| last.borrow().as_ptr())
}

/// numalab's version, as `numalab --version` prints its number.
#[no_mangle]
pub extern "C" fn numalab_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
