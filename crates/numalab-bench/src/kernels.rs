//! Memory kernels: the loops that touch memory while numalab measures.
//!
//! They are written to be limited by memory, not by their own
//! instructions: sequential kernels move 256 bytes per iteration with the
//! widest vector loads and stores the CPU has (AVX-512 or AVX2, chosen at
//! run time, scalar otherwise), optionally with non-temporal stores that
//! bypass the caches; the latency kernel follows a pointer through a
//! random single-cycle permutation of cache lines (Sattolo's algorithm), so
//! every load depends on the one before and the hardware prefetchers cannot
//! guess the next line; random operations use a generator costing a
//! multiply and a shift.

use std::hint::black_box;

/// Bytes of a cache line on every CPU numalab targets.
pub const LINE: usize = 64;

/// The vector instructions a kernel uses.
///
/// ```
/// use numalab_bench::kernels::{self, Isa};
/// let isa = Isa::detect();
/// assert!(isa.is_available() && Isa::Scalar.is_available());
/// assert_eq!("avx".parse::<Isa>()?, Isa::Avx2);
/// // Every ISA computes the same checksum; only the speed differs.
/// let buf: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
/// assert_eq!(kernels::read(&buf, isa), kernels::read(&buf, Isa::Scalar));
/// # Ok::<(), String>(())
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// 64-bit scalar loads and stores.
    Scalar,
    /// 256-bit AVX2 loads and stores.
    Avx2,
    /// 512-bit AVX-512 loads and stores.
    Avx512,
}

impl Isa {
    /// The widest the running CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }

    /// Whether the running CPU can execute this ISA.
    pub fn is_available(self) -> bool {
        self <= Isa::detect()
    }

    /// Name as likwid-bench spells the suffix (`avx512`, `avx`, ``).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

impl std::str::FromStr for Isa {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "scalar" => Ok(Isa::Scalar),
            "avx2" | "avx" => Ok(Isa::Avx2),
            "avx512" => Ok(Isa::Avx512),
            _ => Err(format!(
                "unknown ISA {s:?}; expected scalar, avx2 or avx512"
            )),
        }
    }
}

/// Stores that go through the caches, or around them.
///
/// ```
/// use numalab_bench::kernels::{self, Isa, Store};
/// assert_eq!(Store::default(), Store::Cached);
/// let mut buf = vec![0u8; 1 << 20];
/// kernels::write(&mut buf, 7, Isa::detect(), Store::NonTemporal);
/// assert!(buf.iter().all(|&b| b == 7)); // the same bytes, by another path
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Store {
    /// Ordinary stores: each line is read for ownership, then written back.
    #[default]
    Cached,
    /// Non-temporal (streaming) stores: written straight to memory.
    NonTemporal,
}

/// Reads every byte of `buf` once and returns a checksum (the XOR of its
/// 64-bit words), so the loads cannot be optimised away.
pub fn read(buf: &[u8], isa: Isa) -> u64 {
    let (head, body, tail) = split_aligned(buf);
    let mut sum = scalar_xor(head) ^ scalar_xor(tail);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the ISA is checked to be available; body is 256-byte
        // granular and 64-byte aligned, as the kernels require.
        sum ^= unsafe {
            match isa {
                Isa::Avx512 if isa.is_available() => x86::read_avx512(body),
                Isa::Avx2 | Isa::Avx512 if Isa::Avx2.is_available() => x86::read_avx2(body),
                _ => scalar_xor(body),
            }
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        sum ^= scalar_xor(body);
    }
    sum
}

/// Writes `value` into every byte of `buf`.
pub fn write(buf: &mut [u8], value: u8, isa: Isa, store: Store) {
    let (head, body, tail) = split_aligned_mut(buf);
    head.fill(value);
    tail.fill(value);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as for read.
        unsafe {
            match (isa, store) {
                (Isa::Avx512, _) if isa.is_available() => x86::write_avx512(body, value, store),
                (Isa::Avx2 | Isa::Avx512, _) if Isa::Avx2.is_available() => {
                    x86::write_avx2(body, value, store)
                }
                _ => body.fill(value),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, store);
        body.fill(value);
    }
}

/// Copies `src` into `dst` (same length).
///
/// # Panics
/// If the lengths differ.
pub fn copy(dst: &mut [u8], src: &[u8], isa: Isa, store: Store) {
    assert_eq!(dst.len(), src.len(), "copy needs equal lengths");
    // The vector path needs both sides aligned alike.
    let same_phase = (dst.as_ptr() as usize % LINE) == (src.as_ptr() as usize % LINE);
    if !same_phase || isa == Isa::Scalar {
        dst.copy_from_slice(src);
        return;
    }
    let head_len = split_aligned(src).0.len();
    let body_len = split_aligned(&src[head_len..]).1.len();
    let (dst_head, rest) = dst.split_at_mut(head_len);
    let (dst_body, dst_tail) = rest.split_at_mut(body_len);
    let (src_head, rest) = src.split_at(head_len);
    let (src_body, src_tail) = rest.split_at(body_len);
    dst_head.copy_from_slice(src_head);
    dst_tail.copy_from_slice(src_tail);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as for read; both bodies are aligned alike and equally long.
        unsafe {
            match isa {
                Isa::Avx512 if isa.is_available() => x86::copy_avx512(dst_body, src_body, store),
                Isa::Avx2 | Isa::Avx512 if Isa::Avx2.is_available() => {
                    x86::copy_avx2(dst_body, src_body, store)
                }
                _ => dst_body.copy_from_slice(src_body),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = store;
        dst_body.copy_from_slice(src_body);
    }
}

fn scalar_xor(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut sum = 0u64;
    for chunk in &mut chunks {
        sum ^= u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    }
    for &b in chunks.remainder() {
        sum ^= u64::from(b);
    }
    sum
}

/// Splits into an unaligned head, a 64-byte-aligned body that is a
/// multiple of 256 bytes, and a tail.
fn split_aligned(buf: &[u8]) -> (&[u8], &[u8], &[u8]) {
    let head = buf.as_ptr().align_offset(LINE).min(buf.len());
    let body = (buf.len() - head) / 256 * 256;
    let (h, rest) = buf.split_at(head);
    let (b, t) = rest.split_at(body);
    (h, b, t)
}

fn split_aligned_mut(buf: &mut [u8]) -> (&mut [u8], &mut [u8], &mut [u8]) {
    let head = buf.as_ptr().align_offset(LINE).min(buf.len());
    let body = (buf.len() - head) / 256 * 256;
    let (h, rest) = buf.split_at_mut(head);
    let (b, t) = rest.split_at_mut(body);
    (h, b, t)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The vector loops. Each takes a 64-byte-aligned slice whose length is
    //! a multiple of 256 and moves 256 bytes per iteration through four
    //! independent registers.
    use std::arch::x86_64::*;

    use super::Store;

    /// # Safety
    /// AVX-512F available; `buf` 64-byte aligned, length a multiple of 256.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn read_avx512(buf: &[u8]) -> u64 {
        let mut acc = [_mm512_setzero_si512(); 4];
        let p = buf.as_ptr();
        let mut off = 0;
        while off < buf.len() {
            // SAFETY: off + 256 <= len and p + off is 64-byte aligned.
            unsafe {
                acc[0] = _mm512_xor_si512(acc[0], _mm512_load_si512(p.add(off).cast()));
                acc[1] = _mm512_xor_si512(acc[1], _mm512_load_si512(p.add(off + 64).cast()));
                acc[2] = _mm512_xor_si512(acc[2], _mm512_load_si512(p.add(off + 128).cast()));
                acc[3] = _mm512_xor_si512(acc[3], _mm512_load_si512(p.add(off + 192).cast()));
            }
            off += 256;
        }
        let all = _mm512_xor_si512(
            _mm512_xor_si512(acc[0], acc[1]),
            _mm512_xor_si512(acc[2], acc[3]),
        );
        let mut lanes = [0u64; 8];
        // SAFETY: lanes is 64 bytes long; unaligned store.
        unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), all) };
        lanes.iter().fold(0, |a, b| a ^ b)
    }

    /// # Safety
    /// AVX2 available; `buf` 64-byte aligned, length a multiple of 256.
    #[target_feature(enable = "avx2")]
    pub unsafe fn read_avx2(buf: &[u8]) -> u64 {
        let mut acc = [_mm256_setzero_si256(); 4];
        let p = buf.as_ptr();
        let mut off = 0;
        while off < buf.len() {
            // SAFETY: off + 256 <= len; 32-byte aligned loads.
            unsafe {
                for k in 0..8 {
                    let v = _mm256_load_si256(p.add(off + 32 * k).cast());
                    acc[k % 4] = _mm256_xor_si256(acc[k % 4], v);
                }
            }
            off += 256;
        }
        let all = _mm256_xor_si256(
            _mm256_xor_si256(acc[0], acc[1]),
            _mm256_xor_si256(acc[2], acc[3]),
        );
        let mut lanes = [0u64; 4];
        // SAFETY: lanes is 32 bytes long; unaligned store.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), all) };
        lanes.iter().fold(0, |a, b| a ^ b)
    }

    /// # Safety
    /// As [`read_avx512`].
    #[target_feature(enable = "avx512f")]
    pub unsafe fn write_avx512(buf: &mut [u8], value: u8, store: Store) {
        let v = _mm512_set1_epi8(value as i8);
        let p = buf.as_mut_ptr();
        let mut off = 0;
        match store {
            Store::Cached => {
                while off < buf.len() {
                    // SAFETY: off + 256 <= len, aligned.
                    unsafe {
                        _mm512_store_si512(p.add(off).cast(), v);
                        _mm512_store_si512(p.add(off + 64).cast(), v);
                        _mm512_store_si512(p.add(off + 128).cast(), v);
                        _mm512_store_si512(p.add(off + 192).cast(), v);
                    }
                    off += 256;
                }
            }
            Store::NonTemporal => {
                while off < buf.len() {
                    // SAFETY: off + 256 <= len, aligned.
                    unsafe {
                        _mm512_stream_si512(p.add(off).cast(), v);
                        _mm512_stream_si512(p.add(off + 64).cast(), v);
                        _mm512_stream_si512(p.add(off + 128).cast(), v);
                        _mm512_stream_si512(p.add(off + 192).cast(), v);
                    }
                    off += 256;
                }
                _mm_sfence();
            }
        }
    }

    /// # Safety
    /// As [`read_avx2`].
    #[target_feature(enable = "avx2")]
    pub unsafe fn write_avx2(buf: &mut [u8], value: u8, store: Store) {
        let v = _mm256_set1_epi8(value as i8);
        let p = buf.as_mut_ptr();
        let mut off = 0;
        while off < buf.len() {
            for k in 0..8 {
                // SAFETY: off + 256 <= len, aligned.
                unsafe {
                    let dst = p.add(off + 32 * k).cast();
                    match store {
                        Store::Cached => _mm256_store_si256(dst, v),
                        Store::NonTemporal => _mm256_stream_si256(dst, v),
                    }
                }
            }
            off += 256;
        }
        if store == Store::NonTemporal {
            _mm_sfence();
        }
    }

    /// # Safety
    /// As [`read_avx512`], for both slices, which have equal lengths.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn copy_avx512(dst: &mut [u8], src: &[u8], store: Store) {
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut off = 0;
        while off < src.len() {
            // SAFETY: off + 256 <= len for both, aligned.
            unsafe {
                let a = _mm512_load_si512(s.add(off).cast());
                let b = _mm512_load_si512(s.add(off + 64).cast());
                let c = _mm512_load_si512(s.add(off + 128).cast());
                let e = _mm512_load_si512(s.add(off + 192).cast());
                match store {
                    Store::Cached => {
                        _mm512_store_si512(d.add(off).cast(), a);
                        _mm512_store_si512(d.add(off + 64).cast(), b);
                        _mm512_store_si512(d.add(off + 128).cast(), c);
                        _mm512_store_si512(d.add(off + 192).cast(), e);
                    }
                    Store::NonTemporal => {
                        _mm512_stream_si512(d.add(off).cast(), a);
                        _mm512_stream_si512(d.add(off + 64).cast(), b);
                        _mm512_stream_si512(d.add(off + 128).cast(), c);
                        _mm512_stream_si512(d.add(off + 192).cast(), e);
                    }
                }
            }
            off += 256;
        }
        if store == Store::NonTemporal {
            _mm_sfence();
        }
    }

    /// # Safety
    /// As [`read_avx2`], for both slices, which have equal lengths.
    #[target_feature(enable = "avx2")]
    pub unsafe fn copy_avx2(dst: &mut [u8], src: &[u8], store: Store) {
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut off = 0;
        while off < src.len() {
            for k in 0..8 {
                // SAFETY: off + 256 <= len for both, aligned.
                unsafe {
                    let v = _mm256_load_si256(s.add(off + 32 * k).cast());
                    let dst = d.add(off + 32 * k).cast();
                    match store {
                        Store::Cached => _mm256_store_si256(dst, v),
                        Store::NonTemporal => _mm256_stream_si256(dst, v),
                    }
                }
            }
            off += 256;
        }
        if store == Store::NonTemporal {
            _mm_sfence();
        }
    }
}

/// A fast 64-bit generator (wyrand: one add, one 128-bit multiply, one
/// xor), good enough to scatter accesses and cheap enough not to show in a
/// memory-bound loop.
///
/// ```
/// use numalab_bench::kernels::Rng;
/// let (mut a, mut b) = (Rng::new(42), Rng::new(42));
/// assert_eq!(a.next_u64(), b.next_u64()); // a seed repeats its sequence
/// let mut seen = [false; 10];
/// for _ in 0..1000 {
///     seen[a.below(10) as usize] = true;
/// }
/// assert!(seen.iter().all(|&s| s));
/// ```
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        (t >> 64) as u64 ^ t as u64
    }

    /// A uniform value in `0..n` (Lemire's multiply-shift, no division).
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A random single-cycle permutation of `0..n` (Sattolo's algorithm): from
/// any start, following `next[i]` visits every index once before returning.
pub fn sattolo(n: usize, rng: &mut Rng) -> Vec<usize> {
    let mut next: Vec<usize> = (0..n).collect();
    // Fisher-Yates with j drawn strictly below i: the result is a uniformly
    // random cyclic permutation (Sattolo, 1986).
    for i in (1..n).rev() {
        let j = rng.below(i as u64) as usize;
        next.swap(i, j);
    }
    next
}

/// Lays a pointer chain through `buf`: one pointer per `stride`-byte slot,
/// linked in a random single cycle. Returns the first slot's address.
///
/// # Panics
/// If `stride` is smaller than a pointer or `buf` holds fewer than two slots.
pub fn build_chase(buf: &mut [u8], stride: usize, rng: &mut Rng) -> *const u8 {
    assert!(
        stride >= std::mem::size_of::<usize>(),
        "stride below pointer size"
    );
    let slots = buf.len() / stride;
    assert!(slots >= 2, "a chase needs at least two slots");
    let next = sattolo(slots, rng);
    let base = buf.as_mut_ptr();
    for (i, &n) in next.iter().enumerate() {
        // SAFETY: i * stride and n * stride are slot starts inside buf;
        // unaligned writes are allowed.
        unsafe {
            let target = base.add(n * stride) as usize;
            base.add(i * stride).cast::<usize>().write_unaligned(target);
        }
    }
    base
}

/// Follows `steps` pointers from `start` and returns where it ended (which
/// the caller passes on, so the chain cannot be optimised away).
///
/// # Safety
/// `start` must begin a chain laid by [`build_chase`] in memory that stays
/// alive and unmodified for the call.
#[inline(never)]
pub unsafe fn chase(start: *const u8, steps: u64) -> *const u8 {
    let mut p = start;
    let mut left = steps;
    while left >= 8 {
        // SAFETY: every slot holds the address of another slot (caller).
        unsafe {
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
            p = p.cast::<*const u8>().read_unaligned();
        }
        left -= 8;
    }
    while left > 0 {
        // SAFETY: as above.
        p = unsafe { p.cast::<*const u8>().read_unaligned() };
        left -= 1;
    }
    black_box(p)
}

/// A read/write schedule: `reads` reads then `writes` writes, repeated, so
/// the counts follow the ratio exactly (`2:1` is R R W R R W …).
///
/// ```
/// use numalab_bench::kernels::Mix;
/// let mix: Mix = "2:1".parse()?;
/// let schedule: String = (0..6).map(|i| if mix.is_write(i) { 'W' } else { 'R' }).collect();
/// assert_eq!(schedule, "RRWRRW");
/// assert_eq!(mix.writes_in(1000), 333);
/// assert_eq!(mix.to_string(), "2:1");
/// assert!("0:0".parse::<Mix>().is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mix {
    /// Reads per cycle.
    pub reads: u32,
    /// Writes per cycle.
    pub writes: u32,
}

impl Mix {
    /// The longest cycle of reads and writes: a ratio is a mix, not a
    /// count, so a million operations per cycle is more than any
    /// workload needs, and reads + writes never overflows.
    pub const MAX_CYCLE: u32 = 1_000_000;

    /// Whether operation number `i` (from 0) is a write.
    #[inline(always)]
    pub fn is_write(&self, i: u64) -> bool {
        let period = u64::from(self.reads + self.writes);
        i % period >= u64::from(self.reads)
    }

    /// How many of the first `n` operations are writes.
    pub fn writes_in(&self, n: u64) -> u64 {
        let period = u64::from(self.reads + self.writes);
        let full = n / period * u64::from(self.writes);
        full + (n % period).saturating_sub(u64::from(self.reads))
    }
}

impl std::str::FromStr for Mix {
    type Err = String;
    /// Parses `R:W` such as `2:1`, `1:0` (reads only) or `0:1` (writes only).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("invalid read:write ratio {s:?}; write it as R:W, e.g. 2:1");
        let (r, w) = s.split_once(':').ok_or_else(bad)?;
        let mix = Mix {
            reads: r.trim().parse().map_err(|_| bad())?,
            writes: w.trim().parse().map_err(|_| bad())?,
        };
        let cycle = u64::from(mix.reads) + u64::from(mix.writes);
        if cycle == 0 {
            return Err(format!("read:write ratio {s:?} has no operation"));
        }
        if cycle > u64::from(Mix::MAX_CYCLE) {
            return Err(format!(
                "read:write ratio {s:?} is a cycle of {cycle} operations; at most {} \
                 (write the ratio in lowest terms)",
                Mix::MAX_CYCLE
            ));
        }
        Ok(mix)
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.reads, self.writes)
    }
}

/// What [`random_ops`] did.
///
/// ```
/// use numalab_bench::kernels::{random_ops, Isa, Rng};
/// let mut buf = vec![0u8; 1 << 16];
/// let mut rng = Rng::new(1);
/// // 1000 operations of 64 bytes, three reads to a write.
/// let counts = random_ops(&mut buf, 64, "3:1".parse()?, 1000, 0, &mut rng, Isa::detect());
/// assert_eq!((counts.reads, counts.writes), (750, 250));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Reads done.
    pub reads: u64,
    /// Writes done.
    pub writes: u64,
    /// Checksum of the bytes read.
    pub checksum: u64,
}

/// Performs `ops` operations of `op_size` bytes at random `op_size`-aligned
/// offsets of `buf`, reads and writes following `mix`, starting at
/// operation number `first` of the schedule (so a run split in chunks keeps
/// the ratio).
///
/// # Panics
/// If `op_size` is zero or larger than `buf`.
pub fn random_ops(
    buf: &mut [u8],
    op_size: usize,
    mix: Mix,
    ops: u64,
    first: u64,
    rng: &mut Rng,
    isa: Isa,
) -> OpCounts {
    assert!(
        op_size > 0 && op_size <= buf.len(),
        "op size must fit the buffer"
    );
    let slots = (buf.len() / op_size) as u64;
    let mut counts = OpCounts::default();
    let stamp = first as u8;
    for i in first..first + ops {
        let offset = rng.below(slots) as usize * op_size;
        let op = &mut buf[offset..offset + op_size];
        if mix.is_write(i) {
            write_small(op, stamp, isa);
            counts.writes += 1;
        } else {
            counts.checksum ^= read_small(op, isa);
            counts.reads += 1;
        }
    }
    black_box(counts)
}

/// Sequential counterpart of [`random_ops`]: walks `buf` in `stride`-byte
/// steps (wrapping), `op_size` bytes per operation.
#[allow(clippy::too_many_arguments)]
pub fn strided_ops(
    buf: &mut [u8],
    op_size: usize,
    stride: usize,
    mix: Mix,
    ops: u64,
    first: u64,
    start: usize,
    isa: Isa,
) -> (OpCounts, usize) {
    assert!(
        op_size > 0 && op_size <= buf.len(),
        "op size must fit the buffer"
    );
    let mut counts = OpCounts::default();
    let last_start = buf.len() - op_size;
    let mut offset = start.min(last_start);
    for i in first..first + ops {
        let op = &mut buf[offset..offset + op_size];
        if mix.is_write(i) {
            write_small(op, i as u8, isa);
            counts.writes += 1;
        } else {
            counts.checksum ^= read_small(op, isa);
            counts.reads += 1;
        }
        offset += stride;
        if offset > last_start {
            offset = 0;
        }
    }
    (black_box(counts), offset)
}

/// One small operation's read: every 64-bit word, XOR-ed. Random
/// operations miss the caches, so the load latency, not these few
/// instructions, sets the pace.
#[inline(always)]
fn read_small(op: &[u8], _isa: Isa) -> u64 {
    scalar_xor(op)
}

#[inline(always)]
fn write_small(op: &mut [u8], value: u8, _isa: Isa) {
    op.fill(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aligned(len: usize) -> Vec<u64> {
        vec![0u64; len / 8 + 16]
    }

    fn bytes(v: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64 storage viewed as bytes.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 8) }
    }

    #[test]
    fn every_isa_reads_the_same_checksum() {
        let mut store = aligned(4096 + 100);
        let buf = bytes(&mut store);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        for offset in [0usize, 1, 8, 63, 64] {
            let reference = read(&buf[offset..offset + 4000], Isa::Scalar);
            for isa in [Isa::Avx2, Isa::Avx512] {
                assert_eq!(
                    read(&buf[offset..offset + 4000], isa),
                    reference,
                    "offset {offset} {isa:?}"
                );
            }
            // Every byte counts: changing one in the vector body changes it.
            buf[offset + 2000] ^= 0x10;
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
                assert_ne!(
                    read(&buf[offset..offset + 4000], isa),
                    reference,
                    "offset {offset} {isa:?}"
                );
            }
            buf[offset + 2000] ^= 0x10;
        }
    }

    #[test]
    fn write_and_copy_fill_every_byte() {
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            for store in [Store::Cached, Store::NonTemporal] {
                let mut a = aligned(5000);
                let mut b = aligned(5000);
                let src = &mut bytes(&mut a)[3..4003];
                write(src, 0x5a, isa, store);
                assert!(src.iter().all(|&x| x == 0x5a), "{isa:?} {store:?}");
                src[100] = 1;
                let dst = &mut bytes(&mut b)[3..4003];
                copy(dst, &bytes(&mut a)[3..4003], isa, store);
                assert_eq!(dst[100], 1);
                assert!(dst
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == if i == 100 { 1 } else { 0x5a }));
            }
        }
        // Misaligned relative phase falls back to a plain copy.
        let mut a = aligned(1000);
        let mut b = aligned(1000);
        bytes(&mut a)[..512].fill(9);
        let src: Vec<u8> = bytes(&mut a)[..512].to_vec();
        copy(&mut bytes(&mut b)[1..513], &src, Isa::Avx512, Store::Cached);
        assert!(bytes(&mut b)[1..513].iter().all(|&x| x == 9));
    }

    #[test]
    fn sattolo_is_one_cycle() {
        let mut rng = Rng::new(7);
        for n in [2usize, 3, 10, 1000] {
            let next = sattolo(n, &mut rng);
            let mut seen = vec![false; n];
            let mut i = 0;
            for _ in 0..n {
                assert!(!seen[i], "n={n}: revisited {i} early");
                seen[i] = true;
                i = next[i];
            }
            assert_eq!(i, 0, "n={n}: did not return to start");
        }
    }

    #[test]
    fn chase_walks_the_whole_cycle() {
        let mut store = aligned(64 * 512);
        let buf = &mut bytes(&mut store)[..64 * 512];
        let mut rng = Rng::new(1);
        let start = build_chase(buf, 64, &mut rng);
        // SAFETY: the chain was just built in buf, which outlives the calls.
        unsafe {
            assert_eq!(
                chase(start, 512),
                start,
                "a full cycle returns to the start"
            );
            assert_ne!(chase(start, 511), start);
            assert_eq!(chase(start, 512 * 3), start);
        }
    }

    #[test]
    fn rng_is_uniform_enough() {
        let mut rng = Rng::new(42);
        let mut buckets = [0u32; 10];
        for _ in 0..100_000 {
            buckets[rng.below(10) as usize] += 1;
        }
        for b in buckets {
            assert!((9_000..11_000).contains(&b), "{buckets:?}");
        }
    }

    #[test]
    fn mix_follows_the_ratio_exactly() {
        let mix: Mix = "2:1".parse().unwrap();
        let pattern: Vec<bool> = (0..6).map(|i| mix.is_write(i)).collect();
        assert_eq!(pattern, [false, false, true, false, false, true]);
        assert_eq!(mix.writes_in(7), 2);
        assert_eq!(mix.writes_in(9), 3);
        let mut store = aligned(1 << 16);
        let buf = bytes(&mut store);
        let mut rng = Rng::new(3);
        let counts = random_ops(buf, 128, mix, 3000, 0, &mut rng, Isa::detect());
        assert_eq!((counts.reads, counts.writes), (2000, 1000));
        let reads_only: Mix = "1:0".parse().unwrap();
        assert_eq!(reads_only.writes_in(100), 0);
        assert!("0:0".parse::<Mix>().is_err());
        assert!("2".parse::<Mix>().is_err());
        // A cycle past the limit is refused, not wrapped (reads + writes
        // overflowed u32 before the limit).
        let err = "4294967295:1".parse::<Mix>().unwrap_err();
        assert!(err.contains("at most 1000000"), "{err}");
        assert!("1000000:0".parse::<Mix>().is_ok());
        let (counts, next) = strided_ops(buf, 64, 256, mix, 30, 0, 0, Isa::detect());
        assert_eq!((counts.reads, counts.writes), (20, 10));
        assert_eq!(next, 30 * 256, "no wrap within 64 KiB");
    }
}
