//! A file's pages in the page cache per node, as `numalab fincore`
//! counts them (nothing is read from the file).

use std::ffi::c_char;

use numalab::pagecache::{file_cache, open_for_cache, PageCacheError};

use crate::error::{boundary, counts, fill_counts, numalab_status, text, Error};

impl From<PageCacheError> for Error {
    fn from(err: PageCacheError) -> Error {
        let status = match &err {
            PageCacheError::NotRegular(_) => numalab_status::NUMALAB_EINVAL,
            PageCacheError::Os(io) => match io.kind() {
                std::io::ErrorKind::NotFound => numalab_status::NUMALAB_ENOTFOUND,
                std::io::ErrorKind::PermissionDenied => numalab_status::NUMALAB_EPERM,
                _ => numalab_status::NUMALAB_EOTHER,
            },
            _ => numalab_status::NUMALAB_EOTHER,
        };
        Error::new(status, err.to_string())
    }
}

/// The pages of file `path` in the page cache: in all (`*cached`, may be
/// NULL), of how many it spans (`*pages`, may be NULL), and on each node
/// `n < nodes` (`per_node[n]`; a node past `nodes` holding pages is
/// `NUMALAB_EINVAL`). `path` must be a regular file; a link is followed.
///
/// # Safety
///
/// `path` is a NUL-terminated string; `per_node` points at `nodes`
/// integers (or is NULL with `nodes` 0); `cached` and `pages` at one each
/// or NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_fincore(
    path: *const c_char,
    per_node: *mut u64,
    nodes: usize,
    cached: *mut u64,
    pages: *mut u64,
) -> numalab_status {
    boundary(|| {
        let counts = counts(per_node, nodes, "per_node")?;
        let path = text(path, "path")?;
        let file =
            open_for_cache(path.as_ref(), true).map_err(|err| Error::from(err).prefixed(path))?;
        let cache = file_cache(&file).map_err(|err| Error::from(err).prefixed(path))?;
        fill_counts(counts, &cache.per_node).map_err(|err| err.prefixed(path))?;
        // SAFETY: NULL or one integer each.
        unsafe {
            if let Some(slot) = cached.as_mut() {
                *slot = cache.cached;
            }
            if let Some(slot) = pages.as_mut() {
                *slot = cache.pages;
            }
        }
        Ok(())
    })
}
