//! The segment: a named file on tmpfs (or hugetlbfs) mapped shared, with
//! its header validated, and the OS locks that say who is alive.

use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use super::error::RingError;
use super::layout::{
    decode_header, encode_header, BlockDesc, Geometry, Header, HeaderInfo, FLAG_HUGE_2M, FLAG_THP,
    LOCK_CREATOR, MAGIC,
};
use super::protocol::{ReaderCtl, WriterCtl};
use crate::buffer::{check_free_memory, BufferOptions, HugePages};
use crate::policy::{MemPolicy, RangeMode};
use crate::sys::linux::{self, LockKind, SegmentOpen};

/// Where segments on base pages (and transparent huge pages) live.
pub(crate) const SHM_DIR: &str = "/dev/shm";
/// Where segments on explicit huge pages live (a hugetlbfs mount).
pub(crate) const HUGETLB_DIR: &str = "/dev/hugepages";
/// Every segment file's name starts with this.
pub(crate) const PREFIX: &str = "numalab-ring.";

/// Checks a ring name: 1 to 100 characters from `A-Z a-z 0-9 . _ -`, not
/// starting with a dot.
pub(crate) fn check_name(name: &str) -> Result<(), RingError> {
    let bad = |reason| RingError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() || name.len() > 100 {
        return Err(bad("it must have 1 to 100 characters"));
    }
    if name.starts_with('.') {
        return Err(bad("it must not start with a dot"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(bad("only letters, digits, '.', '_' and '-' are allowed"));
    }
    Ok(())
}

/// The file a ring's segment has, in `dir`.
pub(crate) fn path_in(dir: &str, name: &str) -> PathBuf {
    Path::new(dir).join(format!("{PREFIX}{name}"))
}

/// Finds an existing ring's file: on tmpfs, else on hugetlbfs.
pub(crate) fn find(name: &str) -> Result<PathBuf, RingError> {
    check_name(name)?;
    let shm = path_in(SHM_DIR, name);
    for path in [shm.clone(), path_in(HUGETLB_DIR, name)] {
        if std::fs::symlink_metadata(&path).is_ok() {
            return Ok(path);
        }
    }
    Err(RingError::NotFound {
        name: name.to_owned(),
        path: shm,
    })
}

/// Reads the fixed header of the open segment file `fd` (`file_len` bytes
/// long): all [`Header`]'s bytes, or a `Corrupt` error when the file is
/// shorter.
pub(crate) fn read_header(
    fd: OwnedFd,
    path: &Path,
    file_len: u64,
) -> Result<(OwnedFd, [u8; size_of::<Header>()]), RingError> {
    let mut bytes = [0u8; size_of::<Header>()];
    if file_len < bytes.len() as u64 {
        return Err(RingError::Corrupt {
            reason: format!(
                "the file is {file_len} bytes, shorter than a ring header ({} bytes)",
                bytes.len()
            ),
        });
    }
    let file = std::fs::File::from(fd);
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => Ok((OwnedFd::from(file), bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => Err(RingError::Corrupt {
            reason: "the file shrank while its header was read".into(),
        }),
        Err(err) => Err(RingError::os(format!(
            "read the header of {}",
            path.display()
        ))(err)),
    }
}

/// A mapped, validated segment.
pub(crate) struct Segment {
    pub name: String,
    pub path: PathBuf,
    /// The descriptor the mapping was made from; the creator's also holds
    /// the creator lock.
    pub fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
    pub geometry: Geometry,
    pub info: HeaderInfo,
    pub read_only: bool,
}

// SAFETY: the mapping is shared memory reached only through atomics and
// the ring protocol; the pointer is valid for the segment's lifetime on any
// thread.
unsafe impl Send for Segment {}
// SAFETY: as above: shared references give access to atomics only, and to
// block memory only under the protocol.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("path", &self.path)
            .field("geometry", &self.geometry)
            .finish()
    }
}

/// What [`create`] needs beyond the geometry.
pub(crate) struct CreateSpec<'a> {
    pub name: &'a str,
    pub geometry: Geometry,
    pub policy: &'a MemPolicy,
    pub huge_pages: HugePages,
    pub lock: bool,
}

impl Segment {
    /// Makes a new segment: an unnamed owner-only file, sized, mapped,
    /// placed by the policy *before* any page is touched, prefaulted,
    /// optionally locked, its header written with the magic last, and only
    /// then linked under its name (failing if the name exists).
    pub fn create(spec: &CreateSpec<'_>) -> Result<Segment, RingError> {
        check_name(spec.name)?;
        let g = spec.geometry;
        let dir = if g.flags & FLAG_HUGE_2M != 0 {
            if !linux::is_hugetlbfs(Path::new(HUGETLB_DIR)) {
                return Err(RingError::InvalidSize(format!(
                    "explicit 2 MiB pages need a hugetlbfs mount at {HUGETLB_DIR} \
                     (mount -t hugetlbfs none {HUGETLB_DIR})"
                )));
            }
            HUGETLB_DIR
        } else {
            SHM_DIR
        };
        let path = path_in(dir, spec.name);
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(RingError::Exists {
                name: spec.name.to_owned(),
                path,
            });
        }
        let len = g.total_size as usize;
        spec.policy.check()?;
        let buffer_options = BufferOptions::new(spec.policy.clone()).huge_pages(spec.huge_pages);
        check_free_memory(len, &buffer_options)?;

        // An unnamed file where the file system can make one, so a crash
        // now leaves nothing behind; else a hidden temporary name.
        let (fd, temporary) = match linux::open_unnamed(Path::new(dir)) {
            Ok(fd) => (fd, None),
            Err(_) => {
                let tmp = Path::new(dir).join(format!(
                    ".{PREFIX}{}.{}.tmp",
                    spec.name,
                    linux::process_id()
                ));
                let fd = linux::open_segment(&tmp, SegmentOpen::CreateExclusive)
                    .map_err(RingError::os(format!("create {}", tmp.display())))?;
                (fd, Some(tmp))
            }
        };
        let remove_temporary = |temporary: &Option<PathBuf>| {
            if let Some(tmp) = temporary {
                let _ = linux::unlink(tmp);
            }
        };
        let made = Self::build(spec, &path, fd);
        let segment = match made {
            Ok(segment) => segment,
            Err(err) => {
                remove_temporary(&temporary);
                return Err(err);
            }
        };
        let linked = linux::link_fd(&segment.fd, &path);
        remove_temporary(&temporary);
        match linked {
            Ok(()) => Ok(segment),
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) => Err(RingError::Exists {
                name: spec.name.to_owned(),
                path,
            }),
            Err(err) => Err(RingError::os(format!("link {}", path.display()))(err)),
        }
    }

    fn build(spec: &CreateSpec<'_>, path: &Path, fd: OwnedFd) -> Result<Segment, RingError> {
        let g = spec.geometry;
        let len = g.total_size as usize;
        linux::set_len(&fd, g.total_size)
            .map_err(RingError::os(format!("size the segment to {len} bytes")))?;
        // The creator's shared lock says "someone owns this segment" for
        // as long as this process lives.
        linux::lock(&fd, LOCK_CREATOR, 1, LockKind::Shared)
            .map_err(RingError::os("lock the segment"))?;
        let ptr = linux::map_shared(&fd, len, false)
            .map_err(RingError::os(format!("map {len} bytes of shared memory")))?;
        let segment = Segment {
            name: spec.name.to_owned(),
            path: path.to_owned(),
            fd,
            // mmap never returns null on success.
            ptr: NonNull::new(ptr).ok_or_else(|| RingError::Corrupt {
                reason: "mmap returned null".into(),
            })?,
            len,
            geometry: g,
            info: HeaderInfo {
                geometry: g,
                creator_pid: linux::process_id(),
                created_unix_ns: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                policy: spec.policy.to_string(),
            },
            read_only: false,
        };
        if g.flags & FLAG_HUGE_2M == 0 {
            let advice = if g.flags & FLAG_THP != 0 {
                linux::Advice::HugePage
            } else {
                linux::Advice::NoHugePage
            };
            // Advice only; shmem follows /sys/kernel/mm/transparent_hugepage/shmem_enabled.
            let _ = linux::madvise(ptr, len, advice);
        }
        // Before the first touch: for tmpfs this sets the file's shared
        // policy, which every process's faults follow.
        spec.policy
            .apply_to_range(ptr, len, RangeMode::FutureOnly)?;
        if let Err(source) = linux::madvise(ptr, len, linux::Advice::PopulateWrite) {
            if source.raw_os_error() != Some(libc::EINVAL) {
                return Err(RingError::os(format!("prefault {len} bytes"))(source));
            }
            let step = if g.flags & FLAG_HUGE_2M != 0 {
                2 << 20
            } else {
                linux::page_size()
            };
            for offset in (0..len).step_by(step) {
                // SAFETY: offset is inside the mapping, which nobody else
                // can see yet (the file has no name); writing zero over a
                // fresh zero page changes nothing.
                unsafe { ptr.add(offset).write_volatile(0) };
            }
        }
        if spec.lock {
            linux::mlock(ptr, len).map_err(RingError::os(format!(
                "lock {len} bytes in memory (raise `ulimit -l`)"
            )))?;
        }
        let mut bytes = [0u8; 256];
        encode_header(&segment.info, &mut bytes);
        // SAFETY: the header is the first 256 bytes of the mapping, which
        // nobody else can see yet; bytes 0..8 (the magic) stay zero.
        unsafe { std::ptr::copy_nonoverlapping(bytes[8..].as_ptr(), ptr.add(8), 248) };
        // Publishes the header: a process that loads the magic (acquire)
        // sees every byte written above.
        segment.header().magic.store(MAGIC, Ordering::Release);
        Ok(segment)
    }

    /// Maps an existing segment and validates it.
    pub fn open(name: &str, read_only: bool) -> Result<Segment, RingError> {
        let path = find(name)?;
        Self::open_path(name, path, read_only)
    }

    /// Maps the segment file at `path` (ring `name`) after checking it is
    /// a regular file of this user, owner-only, with a valid header.
    pub fn open_path(name: &str, path: PathBuf, read_only: bool) -> Result<Segment, RingError> {
        let how = if read_only {
            SegmentOpen::ReadOnly
        } else {
            SegmentOpen::ReadWrite
        };
        let fd = linux::open_segment(&path, how).map_err(|err| match err.raw_os_error() {
            Some(libc::ENOENT) => RingError::NotFound {
                name: name.to_owned(),
                path: path.clone(),
            },
            Some(libc::ELOOP) => RingError::NotASegment {
                path: path.clone(),
                kind: "symbolic link",
            },
            _ => RingError::os(format!("open {}", path.display()))(err),
        })?;
        let st = linux::stat_fd(&fd).map_err(RingError::os(format!("stat {}", path.display())))?;
        if !st.regular {
            return Err(RingError::NotASegment {
                path,
                kind: crate::files::kind_of(st.mode),
            });
        }
        let not_owned = |reason: String| RingError::NotOwned {
            path: path.clone(),
            reason,
        };
        if st.uid != linux::effective_uid() {
            return Err(not_owned(format!("it belongs to user {}", st.uid)));
        }
        if st.mode & 0o077 != 0 {
            return Err(not_owned(format!(
                "its mode is {:o}; rings are owner-only (600)",
                st.mode & 0o777
            )));
        }
        // The header is read and checked before anything is mapped: its
        // sizes, not the file's, say how much to map.
        let (fd, bytes) = read_header(fd, &path, st.size)?;
        let info = decode_header(&bytes, st.size, linux::page_size() as u64)?;
        let len = usize::try_from(info.geometry.total_size).map_err(|_| RingError::Corrupt {
            reason: format!("the file is {} bytes", st.size),
        })?;
        let ptr = linux::map_shared(&fd, len, read_only)
            .map_err(RingError::os(format!("map {}", path.display())))?;
        // The creator faulted every page in, but only into its own page
        // tables: a process that writes or reads the ring would otherwise
        // take a fault on each page the first time it touches it, in its
        // data path (half the rate of a ring of 256 MiB blocks whose
        // volume passes through each block once). Fill them now, for a
        // ring whose pages all exist (a sparse file would be allocated
        // whole: left alone) and not for a read-only look (--list, stats).
        // Where the kernel has no such advice (before 5.14) the faults stay
        // where they were.
        if !read_only && st.allocated >= len as u64 {
            let _ = linux::madvise(ptr, len, linux::Advice::PopulateWrite);
        }
        Ok(Segment {
            name: name.to_owned(),
            path,
            fd,
            // mmap never returns null on success.
            ptr: NonNull::new(ptr).ok_or_else(|| RingError::Corrupt {
                reason: "mmap returned null".into(),
            })?,
            len,
            geometry: info.geometry,
            info,
            read_only,
        })
    }

    fn at<T>(&self, offset: u64) -> &T {
        debug_assert!(offset as usize + size_of::<T>() <= self.len);
        // SAFETY: offsets come from a validated Geometry, so the object lies
        // inside the mapping and is aligned (every offset is a multiple of
        // 32 or more); the types placed here are atomics, valid for any bit
        // pattern and for shared access.
        unsafe { &*(self.ptr.as_ptr().add(offset as usize) as *const T) }
    }

    /// The fixed header.
    pub fn header(&self) -> &Header {
        self.at(0)
    }

    /// The writer's control words.
    pub fn writer(&self) -> &WriterCtl {
        self.at(size_of::<Header>() as u64)
    }

    /// The reader slots.
    pub fn readers(&self) -> &[ReaderCtl] {
        let g = &self.geometry;
        // SAFETY: as in `at`: max_readers slots start at readers_offset,
        // inside the mapping by the validated geometry.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().add(g.readers_offset as usize) as *const ReaderCtl,
                g.max_readers as usize,
            )
        }
    }

    /// The descriptor of the block in `slot` (`slot < blocks`).
    pub fn desc(&self, slot: u64) -> &BlockDesc {
        assert!(slot < self.geometry.blocks);
        self.at(self.geometry.descs_offset + slot * size_of::<BlockDesc>() as u64)
    }

    /// Start of the data of the block in `slot` (`slot < blocks`).
    pub fn block_ptr(&self, slot: u64) -> *mut u8 {
        assert!(slot < self.geometry.blocks);
        let offset = self.geometry.data_offset + slot * self.geometry.block_size;
        // SAFETY: the block lies inside the mapping by the validated
        // geometry.
        unsafe { self.ptr.as_ptr().add(offset as usize) }
    }

    /// Start of the transfer-header slot beside the block in `slot`.
    pub fn meta_ptr(&self, slot: u64) -> *mut u8 {
        assert!(slot < self.geometry.blocks);
        let offset = self.geometry.meta_offset + slot * u64::from(self.geometry.meta_size);
        // SAFETY: as for block_ptr.
        unsafe { self.ptr.as_ptr().add(offset as usize) }
    }

    /// The whole data area.
    pub fn data_range(&self) -> (*const u8, usize) {
        let g = &self.geometry;
        (
            self.block_ptr(0).cast_const(),
            (g.blocks * g.block_size) as usize,
        )
    }

    /// Opens the file again as a new open file description, for a handle's
    /// own locks.
    pub fn reopen(&self) -> Result<OwnedFd, RingError> {
        let how = if self.read_only {
            SegmentOpen::ReadOnly
        } else {
            SegmentOpen::ReadWrite
        };
        linux::reopen_fd(&self.fd, how)
            .map_err(RingError::os(format!("reopen {}", self.path.display())))
    }

    /// Whether the file at the segment's path is still this segment.
    pub fn still_named(&self) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(&self.path) else {
            return false;
        };
        linux::stat_fd(&self.fd).is_ok_and(|st| st.id == (meta.dev(), meta.ino()))
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: every handle that borrows the mapping holds an Arc of this
        // segment, so nothing refers to it any more.
        let _ = unsafe { linux::unmap(self.ptr.as_ptr(), self.len) };
    }
}
