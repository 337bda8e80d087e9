//! The segment's layout in shared memory, and its validation.
//!
//! ```text
//! offset          what                                   written
//! 0               Header (256 bytes, #[repr(C)])         once, magic last
//! 256             WriterCtl (128 bytes)                  atomics
//! 384             ReaderCtl × max_readers (128 each)     atomics
//! descs_offset    BlockDesc × blocks (32 each)           by the writer, per block
//! meta_offset     transfer headers: meta_size × blocks   by the writer, per transfer
//! data_offset     blocks × block_size                    the data; page-aligned
//!                 (2 MiB-aligned with huge pages)
//! ```
//!
//! A segment is taken as valid only when its magic, layout version, header
//! size, geometry checksum and every offset recomputed from the geometry
//! agree, and the file is exactly as long as the layout says. The creator
//! writes the header in full before it stores the magic (release) and
//! before the file gets its name, so a half-made segment is never seen.

use std::mem::{align_of, size_of};

use super::atomic::{AtomicU32, AtomicU64};
use super::error::RingError;
use super::limits::{MAX_BLOCKS, MAX_META_SIZE, MAX_READERS};
use super::protocol::{ReaderCtl, WriterCtl};

/// `"NUMARING"`, little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"NUMARING");
/// Bumped whenever anything in this file changes meaning. 2: a reader's
/// `state` word carries a flag once it has finished joining, which the
/// writer's `wait_for_readers` waits for.
pub(crate) const LAYOUT_VERSION: u32 = 2;

/// Byte of the segment file the writer locks (open-file-description lock).
pub(crate) const LOCK_WRITER: u64 = 0;
/// First byte of the readers' locks (one per slot).
pub(crate) const LOCK_READERS: u64 = 1;
/// Byte the creating process keeps a shared lock on while it lives.
pub(crate) const LOCK_CREATOR: u64 = LOCK_READERS + MAX_READERS as u64;
/// Every lock byte: a segment with none of them locked is stale.
pub(crate) const LOCK_SPAN: u64 = LOCK_CREATOR + 1;

/// Header flag: the data is on hugetlbfs 2 MiB pages.
pub(crate) const FLAG_HUGE_2M: u32 = 1;
/// Header flag: transparent huge pages were asked for.
pub(crate) const FLAG_THP: u32 = 2;
/// Header flag: the creator locked the pages in memory.
pub(crate) const FLAG_LOCKED: u32 = 4;
/// Header flag: readers default to lag mode.
pub(crate) const FLAG_LAG_DEFAULT: u32 = 8;
const FLAGS_KNOWN: u32 = FLAG_HUGE_2M | FLAG_THP | FLAG_LOCKED | FLAG_LAG_DEFAULT;

/// Block flag: the first block of a transfer; its header is in the block's
/// metadata slot.
pub(crate) const BLOCK_START: u32 = 1;
/// Block flag: the last block of a transfer.
pub(crate) const BLOCK_END: u32 = 2;

/// The fixed header at offset 0 (`#[repr(C)]`, 256 bytes). Everything but
/// `magic` is written once, before `magic`, and never changes.
#[repr(C)]
pub(crate) struct Header {
    /// [`MAGIC`] once the segment is complete (stored last, release).
    pub magic: AtomicU64,
    /// [`LAYOUT_VERSION`].
    pub layout_version: u32,
    /// `size_of::<Header>()`.
    pub header_size: u32,
    /// Length of the whole file.
    pub total_size: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks in the ring.
    pub blocks: u64,
    /// Reader slots.
    pub max_readers: u32,
    /// Bytes per transfer-header slot.
    pub meta_size: u32,
    /// Offset of the reader slots.
    pub readers_offset: u64,
    /// Offset of the block descriptors.
    pub descs_offset: u64,
    /// Offset of the transfer-header slots.
    pub meta_offset: u64,
    /// Offset of the data.
    pub data_offset: u64,
    /// `FLAG_*`.
    pub flags: u32,
    /// Process that made the segment.
    pub creator_pid: u32,
    /// When it was made, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// The memory policy asked for, as text, NUL-padded.
    pub policy: [u8; 64],
    /// FNV-1a of bytes 8..(offset of this field).
    pub checksum: u64,
    _reserved: [u8; 88],
}

/// The descriptor of one block (`#[repr(C)]`, 32 bytes), written by the
/// writer before it publishes the block.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct BlockDesc {
    /// The block's sequence number (a check against stale reads).
    pub seq: AtomicU64,
    /// Payload bytes in the block.
    pub len: AtomicU64,
    /// Transfer the block belongs to.
    pub transfer: AtomicU64,
    /// `BLOCK_*`.
    pub flags: AtomicU32,
    _reserved: AtomicU32,
}

const CHECKSUM_OFFSET: usize = 160;
const _: () = {
    assert!(size_of::<Header>() == 256);
    assert!(std::mem::offset_of!(Header, checksum) == CHECKSUM_OFFSET);
    assert!(size_of::<BlockDesc>() == 32);
};

#[cfg(not(loom))]
const _: () = {
    assert!(size_of::<WriterCtl>() == 128);
    assert!(size_of::<ReaderCtl>() == 128);
    assert!(align_of::<WriterCtl>() == 128);
};

/// Where everything is, for a given geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub block_size: u64,
    pub blocks: u64,
    pub max_readers: u32,
    pub meta_size: u32,
    pub flags: u32,
    pub readers_offset: u64,
    pub descs_offset: u64,
    pub meta_offset: u64,
    pub data_offset: u64,
    pub total_size: u64,
}

fn align_up(value: u64, align: u64) -> Option<u64> {
    value.checked_add(align - 1).map(|v| v / align * align)
}

impl Geometry {
    /// The layout for these sizes; `None` when they are out of range.
    pub fn compute(
        block_size: u64,
        blocks: u64,
        max_readers: u32,
        meta_size: u32,
        flags: u32,
        page: u64,
    ) -> Option<Geometry> {
        let valid = block_size >= 64
            && block_size.is_multiple_of(64)
            && (2..=MAX_BLOCKS).contains(&blocks)
            && (1..=MAX_READERS).contains(&max_readers)
            && (64..=MAX_META_SIZE).contains(&meta_size)
            && meta_size.is_multiple_of(64)
            && flags & !FLAGS_KNOWN == 0;
        if !valid {
            return None;
        }
        let data_align = if flags & (FLAG_HUGE_2M | FLAG_THP) != 0 {
            2 << 20
        } else {
            page
        };
        let readers_offset = (size_of::<Header>() + size_of::<WriterCtl>()) as u64;
        let descs_offset = readers_offset + u64::from(max_readers) * size_of::<ReaderCtl>() as u64;
        let meta_offset =
            descs_offset.checked_add(blocks.checked_mul(size_of::<BlockDesc>() as u64)?)?;
        let meta_end = meta_offset.checked_add(blocks.checked_mul(u64::from(meta_size))?)?;
        let data_offset = align_up(meta_end, data_align)?;
        let data_end = data_offset.checked_add(blocks.checked_mul(block_size)?)?;
        let total_size = align_up(data_end, data_align)?;
        usize::try_from(total_size).ok()?;
        Some(Geometry {
            block_size,
            blocks,
            max_readers,
            meta_size,
            flags,
            readers_offset,
            descs_offset,
            meta_offset,
            data_offset,
            total_size,
        })
    }
}

/// FNV-1a, 64 bits.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What the header says besides the geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderInfo {
    pub geometry: Geometry,
    pub creator_pid: u32,
    pub created_unix_ns: u64,
    pub policy: String,
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap_or([0; 4]))
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap_or([0; 8]))
}

/// Writes a complete header, magic excepted, into `bytes` (256 bytes).
pub(crate) fn encode_header(info: &HeaderInfo, bytes: &mut [u8; 256]) {
    let g = &info.geometry;
    bytes.fill(0);
    let mut put =
        |offset: usize, value: &[u8]| bytes[offset..offset + value.len()].copy_from_slice(value);
    put(8, &LAYOUT_VERSION.to_le_bytes());
    put(12, &(size_of::<Header>() as u32).to_le_bytes());
    put(16, &g.total_size.to_le_bytes());
    put(24, &g.block_size.to_le_bytes());
    put(32, &g.blocks.to_le_bytes());
    put(40, &g.max_readers.to_le_bytes());
    put(44, &g.meta_size.to_le_bytes());
    put(48, &g.readers_offset.to_le_bytes());
    put(56, &g.descs_offset.to_le_bytes());
    put(64, &g.meta_offset.to_le_bytes());
    put(72, &g.data_offset.to_le_bytes());
    put(80, &g.flags.to_le_bytes());
    put(84, &info.creator_pid.to_le_bytes());
    put(88, &info.created_unix_ns.to_le_bytes());
    let policy = info.policy.as_bytes();
    let n = policy.len().min(63);
    put(96, &policy[..n]);
    let checksum = fnv1a(&bytes[8..CHECKSUM_OFFSET]);
    bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&checksum.to_le_bytes());
}

/// Bytes of the fixed header at the start of every segment file.
pub const HEADER_SIZE: usize = size_of::<Header>();

/// Checks the fixed header of a ring segment — its first
/// [`HEADER_SIZE`] bytes, as another process wrote them — against the
/// length of the file they came from, as every process does before it maps
/// a segment: the magic, layout version, header size, checksum, every size
/// and count within its limit ([`MAX_BLOCKS`], [`MAX_READERS`],
/// [`MAX_META_SIZE`]), every offset recomputed from them, and the file
/// exactly as long as they say. Any byte string gives `Ok` or a typed
/// [`RingError`] (`Incomplete`, `Foreign`, `Version` or `Corrupt`), never a
/// panic, and it allocates nothing beyond the error's message: a fuzz
/// target can call it directly.
///
/// ```
/// use numalab::ring::{validate_header, RingError, HEADER_SIZE};
///
/// let zeros = [0u8; HEADER_SIZE];
/// assert!(matches!(validate_header(&zeros, 1 << 20), Err(RingError::Incomplete)));
/// let err = validate_header(b"NUMARING", 1 << 20).unwrap_err();
/// assert!(matches!(err, RingError::Corrupt { .. }), "{err}");
/// ```
pub fn validate_header(bytes: &[u8], file_len: u64) -> Result<(), RingError> {
    decode_header(bytes, file_len, crate::sys::linux::page_size() as u64).map(|_| ())
}

/// Validates a header (its first 256 bytes, magic included) against the
/// file's length. Never trusts a field before checking it.
pub(crate) fn decode_header(
    bytes: &[u8],
    file_len: u64,
    page: u64,
) -> Result<HeaderInfo, RingError> {
    let corrupt = |reason: String| RingError::Corrupt { reason };
    if file_len < size_of::<Header>() as u64 {
        return Err(corrupt(format!(
            "the file is {file_len} bytes, shorter than a ring header ({} bytes)",
            size_of::<Header>()
        )));
    }
    if bytes.len() < size_of::<Header>() {
        return Err(corrupt(format!(
            "{} bytes of header were read, fewer than a ring header ({} bytes)",
            bytes.len(),
            size_of::<Header>()
        )));
    }
    let magic = u64_at(bytes, 0);
    if magic == 0 {
        return Err(RingError::Incomplete);
    }
    if magic != MAGIC {
        return Err(RingError::Foreign { magic });
    }
    let version = u32_at(bytes, 8);
    if version != LAYOUT_VERSION {
        return Err(RingError::Version {
            found: version,
            supported: LAYOUT_VERSION,
        });
    }
    let header_size = u32_at(bytes, 12);
    if header_size as usize != size_of::<Header>() {
        return Err(corrupt(format!(
            "header size {header_size}, expected {}",
            size_of::<Header>()
        )));
    }
    let checksum = u64_at(bytes, CHECKSUM_OFFSET);
    if checksum != fnv1a(&bytes[8..CHECKSUM_OFFSET]) {
        return Err(corrupt(
            "the header's checksum does not match its contents".into(),
        ));
    }
    let geometry = Geometry::compute(
        u64_at(bytes, 24),
        u64_at(bytes, 32),
        u32_at(bytes, 40),
        u32_at(bytes, 44),
        u32_at(bytes, 80),
        page,
    )
    .ok_or_else(|| corrupt("block size, block count, reader slots or flags out of range".into()))?;
    let stated = (
        u64_at(bytes, 16),
        u64_at(bytes, 48),
        u64_at(bytes, 56),
        u64_at(bytes, 64),
        u64_at(bytes, 72),
    );
    let expected = (
        geometry.total_size,
        geometry.readers_offset,
        geometry.descs_offset,
        geometry.meta_offset,
        geometry.data_offset,
    );
    if stated != expected {
        return Err(corrupt(format!(
            "offsets {stated:?} differ from those the sizes imply {expected:?}"
        )));
    }
    if file_len != geometry.total_size {
        return Err(corrupt(format!(
            "the file is {file_len} bytes but its header says {}",
            geometry.total_size
        )));
    }
    let policy = &bytes[96..160];
    let end = policy.iter().position(|&b| b == 0).unwrap_or(policy.len());
    Ok(HeaderInfo {
        geometry,
        creator_pid: u32_at(bytes, 84),
        created_unix_ns: u64_at(bytes, 88),
        policy: String::from_utf8_lossy(&policy[..end]).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> HeaderInfo {
        HeaderInfo {
            geometry: Geometry::compute(1 << 20, 8, 4, 4096, 0, 4096).unwrap(),
            creator_pid: 42,
            created_unix_ns: 7,
            policy: "bind:0".into(),
        }
    }

    fn valid() -> [u8; 256] {
        let mut bytes = [0u8; 256];
        encode_header(&info(), &mut bytes);
        bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
        bytes
    }

    #[test]
    fn geometry_is_aligned_and_adds_up() {
        let g = info().geometry;
        assert_eq!(g.data_offset % 4096, 0);
        assert_eq!(g.total_size, g.data_offset + 8 * (1 << 20));
        assert!(g.meta_offset + 8 * 4096 <= g.data_offset);
        let huge = Geometry::compute(1 << 20, 8, 4, 4096, FLAG_HUGE_2M, 4096).unwrap();
        assert_eq!(huge.data_offset % (2 << 20), 0);
        assert_eq!(huge.total_size % (2 << 20), 0);
        assert!(Geometry::compute(100, 8, 4, 4096, 0, 4096).is_none());
        assert!(Geometry::compute(1 << 20, 1, 4, 4096, 0, 4096).is_none());
        assert!(Geometry::compute(1 << 20, 8, 0, 4096, 0, 4096).is_none());
        assert!(Geometry::compute((u64::MAX / 2) & !63, 8, 4, 4096, 0, 4096).is_none());
    }

    #[test]
    fn a_valid_header_round_trips() {
        let g = info().geometry;
        assert_eq!(decode_header(&valid(), g.total_size, 4096).unwrap(), info());
    }

    #[test]
    fn half_made_foreign_and_other_versions_are_refused() {
        let g = info().geometry;
        let mut bytes = valid();
        bytes[..8].fill(0);
        assert!(matches!(
            decode_header(&bytes, g.total_size, 4096),
            Err(RingError::Incomplete)
        ));
        bytes[..8].copy_from_slice(b"PSRDADA!");
        assert!(matches!(
            decode_header(&bytes, g.total_size, 4096),
            Err(RingError::Foreign { .. })
        ));
        let mut bytes = valid();
        bytes[8] = 9;
        let err = decode_header(&bytes, g.total_size, 4096).unwrap_err();
        assert!(matches!(err, RingError::Version { found: 9, .. }), "{err}");
        let err = decode_header(&valid(), g.total_size - 4096, 4096).unwrap_err();
        assert!(
            err.to_string().contains("bytes but its header says"),
            "{err}"
        );
    }

    /// A small deterministic generator for the fuzz tests (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn random_headers_are_refused_without_panicking() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let cases = if cfg!(miri) { 200 } else { 200_000 };
        for _ in 0..cases {
            let mut bytes = [0u8; 256];
            bytes.iter_mut().for_each(|b| *b = rng.next() as u8);
            if rng.next().is_multiple_of(2) {
                bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
                bytes[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
            }
            let len = rng.next() % (1 << 40);
            assert!(decode_header(&bytes, len, 4096).is_err());
        }
    }

    #[test]
    fn mutated_headers_are_refused_without_panicking() {
        let mut rng = Rng(12345);
        let g = info().geometry;
        let cases = if cfg!(miri) { 200 } else { 100_000 };
        for _ in 0..cases {
            let mut bytes = valid();
            let flips = 1 + rng.next() % 4;
            for _ in 0..flips {
                let at = (rng.next() % 168) as usize; // up to the checksum's end
                bytes[at] ^= 1 << (rng.next() % 8);
            }
            match decode_header(&bytes, g.total_size, 4096) {
                // Only flips that cancel out leave a valid header.
                Ok(found) => assert_eq!(bytes, valid(), "accepted {found:?}"),
                Err(err) => assert!(!err.to_string().is_empty()),
            }
        }
    }
}
