//! The copies of [`Writer::write`](super::Writer::write) and
//! [`Reader::read`](super::Reader::read): through the caches with the
//! system's `memcpy`, or with streaming (non-temporal) stores for large
//! blocks.
//!
//! A cached store first reads its line for ownership; when the memory
//! written is far larger than the caches that read is pure cost, and the
//! line then pushes something useful out of the cache. Streaming stores
//! write whole lines to memory without reading them. Measured on a 2-core
//! 2-core Xeon VM with AVX-512, one core writing blocks into an 8-block
//! area:
//!
//! | block | cached stores | streaming stores |
//! |---|---|---|
//! | 4 MiB (32 MiB area, stays in the cache) | 27 GB/s | 22 GB/s |
//! | 16 MiB (128 MiB area) | 9.7 GB/s | 24 GB/s |
//! | 64 MiB (512 MiB area) | 9.7 GB/s | 25 GB/s |
//!
//! so [`CopyStores::Auto`] streams from 8 MiB ([`STREAMING_FROM`]): the
//! writer by its ring's block size (a block that large has left the cache
//! before a reader comes to it), a reader by the size of each copy (the
//! caller's buffer is as large). The streaming copy works on four pages at
//! once, a line of each in turn: the hardware prefetchers follow a stream
//! only within a 4 KiB page, and four streams keep four of them busy (one
//! core copying memory to memory: 6.9 GB/s with `memcpy`, 9.2 GB/s
//! streaming one page at a time, 12 GB/s four pages at a time).

use serde::{Deserialize, Serialize};

/// A copy routine: `(dst, src, len)`, unsafe as `copy`.
#[cfg(test)]
type Kernel = unsafe fn(*mut u8, *const u8, usize);

/// Copies at least this large stream under [`CopyStores::Auto`]: 8 MiB.
pub const STREAMING_FROM: usize = 8 << 20;

/// How the ring's copies store the bytes they write: into the ring for
/// [`Writer::write`](super::Writer::write), into the caller's buffer for
/// [`Reader::read`](super::Reader::read). In-place access
/// ([`Writer::claim`](super::Writer::claim),
/// [`Reader::borrow`](super::Reader::borrow)) copies nothing.
///
/// ```
/// use numalab::ring::{CopyStores, STREAMING_FROM};
/// assert_eq!(CopyStores::default(), CopyStores::Auto);
/// assert!(CopyStores::Auto.streams(64 << 20));
/// assert!(!CopyStores::Auto.streams(1 << 20));
/// assert!(CopyStores::Streaming.streams(4096));
/// assert_eq!("cached".parse::<CopyStores>()?, CopyStores::Cached);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyStores {
    /// Streaming stores for copies of [`STREAMING_FROM`] bytes or more
    /// (for the writer: into blocks that large), cached stores below.
    #[default]
    Auto,
    /// Always through the caches (the system's `memcpy`): for data read
    /// again soon by the core that copied it.
    Cached,
    /// Always streaming stores, straight to memory.
    Streaming,
}

impl CopyStores {
    /// Whether a copy of `len` bytes streams.
    pub fn streams(self, len: usize) -> bool {
        match self {
            CopyStores::Auto => len >= STREAMING_FROM,
            CopyStores::Cached => false,
            CopyStores::Streaming => true,
        }
    }
}

impl std::fmt::Display for CopyStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CopyStores::Auto => "auto",
            CopyStores::Cached => "cached",
            CopyStores::Streaming => "streaming",
        })
    }
}

impl std::str::FromStr for CopyStores {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(CopyStores::Auto),
            "cached" => Ok(CopyStores::Cached),
            "streaming" | "non-temporal" | "nt" => Ok(CopyStores::Streaming),
            other => Err(format!(
                "unknown copy stores {other:?}; expected auto, cached or streaming"
            )),
        }
    }
}

/// Copies `len` bytes from `src` to `dst`, with streaming stores if
/// `streaming`. A streaming copy ends with a store fence, so a release
/// store after it (publishing a block) orders the bytes before it.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and `dst`
/// for writes of `len` bytes, the two not overlapping.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize, streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        // SAFETY: passed on from the caller.
        unsafe { x86::stream(dst, src, len) };
        return;
    }
    let _ = streaming;
    // SAFETY: passed on from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The streaming copy: the widest vectors the CPU has (AVX-512, AVX2,
    //! else SSE2, which every x86-64 CPU has), unaligned loads, aligned
    //! non-temporal stores, four pages at a time.
    use std::arch::x86_64::*;
    use std::ptr::copy_nonoverlapping;

    #[cfg(test)]
    use super::Kernel;

    const LINE: usize = 64;
    const PAGE: usize = 4096;
    /// Pages copied side by side.
    const PAGES: usize = 4;

    /// # Safety
    /// As [`super::copy`].
    pub(super) unsafe fn stream(dst: *mut u8, src: *const u8, len: usize) {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F; the rest is the caller's.
            unsafe { stream_avx512(dst, src, len) }
        } else if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2; the rest is the caller's.
            unsafe { stream_avx2(dst, src, len) }
        } else {
            // SAFETY: SSE2 is part of x86-64; the rest is the caller's.
            unsafe { stream_sse2(dst, src, len) }
        }
    }

    /// # Safety
    /// The CPU has AVX-512F; otherwise as [`super::copy`].
    #[target_feature(enable = "avx512f")]
    unsafe fn stream_avx512(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the caller's contract; `line` is called only for lines
        // inside both ranges, with `d` 64-byte aligned.
        unsafe {
            stream_with(dst, src, len, |d, s| {
                _mm512_stream_si512(d.cast(), _mm512_loadu_si512(s.cast()));
            })
        }
    }

    /// # Safety
    /// The CPU has AVX2; otherwise as [`super::copy`].
    #[target_feature(enable = "avx2")]
    unsafe fn stream_avx2(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: as in stream_avx512.
        unsafe {
            stream_with(dst, src, len, |d, s| {
                _mm256_stream_si256(d.cast(), _mm256_loadu_si256(s.cast()));
                _mm256_stream_si256(d.add(32).cast(), _mm256_loadu_si256(s.add(32).cast()));
            })
        }
    }

    /// # Safety
    /// As [`super::copy`].
    unsafe fn stream_sse2(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: as in stream_avx512.
        unsafe {
            stream_with(dst, src, len, |d, s| {
                for k in (0..LINE).step_by(16) {
                    _mm_stream_si128(d.add(k).cast(), _mm_loadu_si128(s.add(k).cast()));
                }
            })
        }
    }

    /// The copy's shape, for a `line` that copies one 64-byte line to an
    /// aligned destination with streaming stores: the bytes before `dst`'s
    /// first line boundary and after its last are copied with ordinary
    /// stores; the lines between four pages at a time, then one by one;
    /// a store fence ends it.
    ///
    /// # Safety
    /// As [`super::copy`]; `line(d, s)` must be sound for any aligned
    /// line `d` of the destination and the matching `s`.
    #[inline(always)]
    unsafe fn stream_with(
        dst: *mut u8,
        src: *const u8,
        len: usize,
        line: impl Fn(*mut u8, *const u8),
    ) {
        let head = dst.align_offset(LINE).min(len);
        let lines = (len - head) / LINE * LINE;
        // SAFETY: head <= len: inside both ranges.
        unsafe { copy_nonoverlapping(src, dst, head) };
        // SAFETY: every offset below is < lines, and head + lines <= len.
        let (d, s) = unsafe { (dst.add(head), src.add(head)) };
        let group = PAGE * PAGES;
        let mut done = 0;
        while done + group <= lines {
            for offset in (0..PAGE).step_by(LINE) {
                for page in 0..PAGES {
                    let at = done + page * PAGE + offset;
                    // SAFETY: at + LINE <= done + group <= lines; d + at is
                    // aligned since d is and at is a multiple of LINE.
                    unsafe { line(d.add(at), s.add(at)) };
                }
            }
            done += group;
        }
        while done < lines {
            // SAFETY: done + LINE <= lines, aligned as above.
            unsafe { line(d.add(done), s.add(done)) };
            done += LINE;
        }
        // SAFETY: the bytes from head + lines to len, inside both ranges.
        unsafe { copy_nonoverlapping(s.add(lines), d.add(lines), len - head - lines) };
        // Streaming stores are weakly ordered: fence them before whatever
        // publishes them.
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() };
    }

    #[cfg(test)]
    pub(super) fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut kernels: Vec<(&str, Kernel)> = vec![("sse2", stream_sse2)];
        if is_x86_feature_detected!("avx2") {
            kernels.push(("avx2", |d, s, n| {
                // SAFETY: the CPU has AVX2 (checked above); the rest is
                // the caller's.
                unsafe { stream_avx2(d, s, n) }
            }));
        }
        if is_x86_feature_detected!("avx512f") {
            kernels.push(("avx512", |d, s, n| {
                // SAFETY: the CPU has AVX-512F (checked above); the rest
                // is the caller's.
                unsafe { stream_avx512(d, s, n) }
            }));
        }
        kernels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies `len` bytes between offsets `from` and `to` of two buffers
    /// with `kernel`, and checks every byte of the destination: copied
    /// where it should be, untouched around it.
    fn check(name: &str, kernel: Kernel, from: usize, to: usize, len: usize) {
        let what = format!("{name}: {len} bytes from offset {from} to offset {to}");
        let src: Vec<u8> = (0..from + len).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0xeeu8; to + len + 100];
        // SAFETY: both ranges lie inside their vectors, which are distinct.
        unsafe { kernel(dst.as_mut_ptr().add(to), src.as_ptr().add(from), len) };
        assert!(dst[..to].iter().all(|&b| b == 0xee), "{what}: wrote before");
        assert!(dst[to..to + len] == src[from..], "{what}: wrong bytes");
        assert!(
            dst[to + len..].iter().all(|&b| b == 0xee),
            "{what}: wrote after"
        );
    }

    #[test]
    fn every_kernel_copies_every_length_and_alignment() {
        let mut kernels: Vec<(&str, Kernel)> = vec![("copy", |d, s, n| {
            // SAFETY: the caller's contract.
            unsafe { copy(d, s, n, true) }
        })];
        #[cfg(target_arch = "x86_64")]
        kernels.extend(x86::kernels());
        let lengths = [
            0,
            1,
            63,
            64,
            65,
            4095,
            4096,
            16384,
            16384 + 64,
            3 * 16384 + 4097,
            200_003,
        ];
        for (name, kernel) in kernels {
            for len in lengths {
                for (from, to) in [(0, 0), (1, 0), (0, 1), (13, 61), (64, 32), (4000, 96)] {
                    check(name, kernel, from, to, len);
                }
            }
        }
    }

    #[test]
    fn auto_streams_from_the_threshold() {
        assert!(!CopyStores::Auto.streams(STREAMING_FROM - 1));
        assert!(CopyStores::Auto.streams(STREAMING_FROM));
        assert!(!CopyStores::Cached.streams(usize::MAX));
        assert!(CopyStores::Streaming.streams(0));
        for stores in [CopyStores::Auto, CopyStores::Cached, CopyStores::Streaming] {
            assert_eq!(stores.to_string().parse::<CopyStores>(), Ok(stores));
        }
        assert!("fast"
            .parse::<CopyStores>()
            .unwrap_err()
            .contains("auto, cached or streaming"));
    }
}
