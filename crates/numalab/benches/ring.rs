//! The shared-memory ring's speed, as ratios against references measured
//! in the same run (`cargo bench -p numalab --bench ring`), for blocks of
//! 64 KiB to 256 MiB, 8 blocks per ring, writer on the first allowed CPU
//! and reader on the second, every ring between two processes:
//!
//! * **copy**: the library's ring, a writer thread of the benchmark and a
//!   reader process it forks: the writer copies into the ring from a
//!   source of at most 4 MiB (as PSRDada's `dada_junkdb` does), the reader
//!   copies each block out into a block-sized buffer (as `dada_dbnull -l`
//!   does); both buffers start on page boundaries, as `numalab ring`'s
//!   and the C ring's do, and are written before the clock starts;
//! * **memcpy**, the reference of the target "copy ≥ 0.9× a single-core
//!   memcpy of the same volume": one core `memcpy`s the same volume, one
//!   block per call, from a 512 MiB source into a 512 MiB destination,
//!   both written before the clock starts — memory to memory, the kind of
//!   figure the issue quotes (about 8.5 GB/s), with `memcpy` called the
//!   way a program moving the stream itself would call it, once per
//!   block. Two other single-core copies are printed beside
//!   it and are *not* the target's reference: the same volume in one call
//!   per 512 MiB (glibc then switches to streaming stores), and a
//!   block-sized source copied into a ring-sized area, which for blocks up
//!   to 1 MiB stays in that one core's L2 cache. A ring cannot reach that
//!   one at any block size that fits: every line it moves passes from the
//!   writer's core to the reader's, and even the in-place ring, which
//!   copies nothing, stays well below it (21 GB/s against 33 GB/s at
//!   256 KiB on the project's VM). "Memcpy of the same volume" is taken at
//!   its word: the volume (gigabytes) does not fit in any cache;
//! * **in place**: the writer fills each block where it lies, with the
//!   stores the ring's own copy-in uses for that block size (streaming
//!   from 8 MiB, [`Writer::streams`](numalab::ring::Writer::streams)), and
//!   the reader reads every byte of it with the widest vector loads the
//!   CPU has, each line prefetched 512 bytes ahead inside the block (the
//!   copying reader's `memcpy`, `rep movsb` at these sizes, fetches the
//!   writer's lines on its own); against copy;
//! * against a minimal C ring (`bench/cring.c`, built here with `cc -O2`
//!   into `target/bench-cring`): two processes, the writer `memcpy`ing
//!   each block in from the same hot source, the reader `memcpy`ing it out
//!   into a private block-sized buffer, both spinning on two counters —
//!   the least any ring moving the bytes must do (target: copy ≥ 1.0×);
//! * against PSRDada when `PSRDADA_BIN` names a directory holding
//!   `dada_db`, `dada_junkdb` and `dada_dbnull` (built from its public
//!   sources; not part of numalab): its writer copies in (`-z`), its reader
//!   copies out (`-z -l`) or only maps (`-z`);
//! * `numalab ring`, the command, which starts a writer and a reader
//!   process, against the library's copy ring measured in the same round
//!   (target: ≥ 1.0×, and ≥ 1.0× the C ring);
//! * the CPU time an idle reader uses while waiting for data.
//!
//! The goals where physics sets them lower: up to 256 KiB two cores hand a
//! block over at one rate whether the reader copies it or not (in place
//! ≥ 1.0× copy there, and the one-core `memcpy` is no reference: the C
//! ring is); from 64 MiB the copying ring moves every byte through memory
//! three times where `memcpy` moves it twice (≥ 0.6×, 0.9 of 2/3).
//!
//! Every round's ratios end the output as `GOAL` and `ROUND` lines, which
//! `bash bench/all.sh` judges at 95% (`numalab_bench::goals`); the table
//! above them shows medians, for reading.
//!
//! `NUMALAB_BENCH_VOLUME` (bytes, default 2 GiB) sets the volume per
//! measurement, `NUMALAB_BENCH_BLOCKS` (e.g. `256K,64M`) the block sizes,
//! `NUMALAB_BENCH_COPY_STORES` (`auto`, `cached`, `streaming`) the ring's
//! [`CopyStores`] (`cached` is the ring as it was before it streamed),
//! `NUMALAB_BENCH_HUGE_PAGES` (`none`, `thp`, `2M`) the ring's pages;
//! `NUMALAB_BENCH_SAMPLES` (set) prints every run's figure to standard
//! error; each figure is the median of `NUMALAB_BENCH_REPEATS` (default 3) runs.
//!
//! Each block size first measures its single-core references, all rounds
//! of them, then warms the two CPUs up with an untimed ring, then runs the
//! rounds: every ring once a round, back to back, in an order that turns
//! by one each round, with the untimed ring again after every PSRDada run
//! (whose writer leaves the reader's CPU idle for up to a second). A CPU
//! left idle (as the reader's is while one core copies alone, or while a
//! program waits for another to start) makes the next ring on some
//! virtual machines start slow for up to a tenth of a second
//! (docs/figures.md, "The host's hand-over phases"), so no ring may always
//! run first or after the references. For the same reason every ring but
//! PSRDada first moves `NUMALAB_BENCH_RAMP` bytes untimed (default: twice
//! the volume; `numalab ring --ramp`, the C ring's `ramp=`), and its
//! reader times the volume from the ramp's last block on. PSRDada's
//! programs have no such setting: its figures keep the start of its
//! processes (its writer busy-waits for the next whole second, its reader
//! sleeps meanwhile).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use numalab::affinity;
use numalab::ring::{CopyStores, Ring, RingOptions};
use numalab::{CpuSet, HugePages, MemPolicy, NodeBuffer};

const BLOCK_SIZES: [usize; 7] = [
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];
const BLOCKS: usize = 8;
/// The largest source the copying writer copies from, as `dada_junkdb`.
const SOURCE_MAX: usize = 4 << 20;
/// Each buffer of the memory-to-memory references: far larger than any
/// cache.
const REFERENCE_SPAN: usize = 512 << 20;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_parse<T: std::str::FromStr<Err = String>>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|e| panic!("{name}={text}: {e}")),
        Err(_) => default,
    }
}

/// How the benchmark's rings are made and copied into.
struct Options {
    stores: CopyStores,
    huge_pages: HugePages,
}

impl Options {
    fn ring(&self, name: &str, block: usize) -> RingOptions {
        RingOptions::new(name, block * BLOCKS, block).huge_pages(self.huge_pages)
    }

    /// Transparent huge pages on tmpfs are advice the mount may ignore:
    /// says once whether the ring got any.
    fn check_huge_pages(&self) {
        static CHECKED: std::sync::Once = std::sync::Once::new();
        if self.huge_pages != HugePages::Transparent {
            return;
        }
        CHECKED.call_once(|| {
            let mapped = std::fs::read_to_string("/proc/meminfo")
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with("ShmemPmdMapped:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .unwrap_or(0);
            if mapped == 0 {
                eprintln!(
                    "note: the ring got no transparent huge pages: /dev/shm must be mounted \
                     with huge=advise (mount -o remount,huge=advise /dev/shm)"
                );
            }
        });
    }
}

fn pin(cpu: u32) {
    affinity::bind_thread_to_cpus(&CpuSet::single(cpu)).expect("pin to a CPU");
}

/// `len` bytes of ones on whole base pages, written here: the buffers the
/// library's ring copies from and into, laid out as `numalab ring`'s
/// workers and the C ring lay out theirs (a `Vec` this large starts 16
/// bytes past a page, or anywhere in a heap the benchmark has used, and a
/// copy's speed depends on where its two ends lie within their pages).
fn page_buffer(len: usize) -> NodeBuffer {
    let mut buffer = NodeBuffer::new(len, MemPolicy::Default).expect("map a buffer");
    buffer.as_mut_slice().fill(1);
    buffer
}

/// One thread on `cpu` copying `volume` bytes with `memcpy` (`copy_from_slice`),
/// `chunk` bytes per call, from a source of `source` bytes into a
/// destination of `destination` bytes, each cycled; both are written
/// before the clock starts, so no page fault is timed. MB/s.
fn single_core_copy(cpu: u32, chunk: usize, source: usize, destination: usize, volume: u64) -> f64 {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpu);
            let source = vec![1u8; source];
            let mut destination = vec![2u8; destination];
            std::hint::black_box(&mut destination);
            let start = Instant::now();
            let (mut done, mut from, mut to) = (0u64, 0, 0);
            while done < volume {
                destination[to..to + chunk].copy_from_slice(&source[from..from + chunk]);
                std::hint::black_box(&mut destination);
                from = (from + chunk) % source.len();
                to = (to + chunk) % destination.len();
                done += chunk as u64;
            }
            done as f64 / start.elapsed().as_secs_f64() / 1e6
        })
        .join()
        .unwrap()
    })
}

/// The in-place reader's work: reads every byte of a block once (the XOR
/// of its 64-bit words, so the loads cannot be optimised away) with the
/// widest vector loads the CPU has, each line prefetched [`x86::AHEAD`]
/// bytes before it is loaded. The copying reader's `memcpy` (`rep movsb`
/// up to half the last-level cache) fetches the writer's lines from the
/// other core on its own; vector loads alone fetched them ~4% slower on
/// a Zen 4 at 64 KiB (docs/figures.md), with the prefetch as fast.
fn consume(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked).
            return unsafe { x86::xor_avx512(bytes) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked).
            return unsafe { x86::xor_avx2(bytes) };
        }
    }
    bytes
        .chunks(8)
        .map(|c| c.iter().fold(0u64, |w, &b| w << 8 | u64::from(b)))
        .fold(0, |sum, word| sum ^ word)
}

/// The in-place writer's work: fills a block with `value`, with streaming
/// stores if `streaming` (as the ring's copy-in for this block size).
fn produce(block: &mut [u8], value: u8, streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        // SAFETY: SSE2 is part of x86-64; AVX-512F is checked.
        unsafe {
            if std::arch::is_x86_feature_detected!("avx512f") {
                x86::fill_streaming_avx512(block, value)
            } else {
                x86::fill_streaming_sse2(block, value)
            }
        }
        return;
    }
    let _ = streaming;
    block.fill(value);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// How far ahead of its loads [`consume`](super::consume) prefetches:
    /// eight lines, inside the block only (the next block may be the
    /// writer's, still being filled).
    pub const AHEAD: usize = 512;

    /// Prefetches the lines of `chunk`'s 256 bytes `AHEAD` on, when they
    /// lie inside `bytes`.
    #[inline(always)]
    fn prefetch_ahead(bytes: &[u8], chunk: &[u8]) {
        let at = chunk.as_ptr() as usize - bytes.as_ptr() as usize + AHEAD;
        if at + 256 <= bytes.len() {
            for line in (0..256).step_by(64) {
                // SAFETY: a prefetch is a hint; the address lies inside
                // `bytes` (checked above) and cannot fault.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at + line).cast()) };
            }
        }
    }

    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn xor_avx512(bytes: &[u8]) -> u64 {
        let mut acc = [_mm512_setzero_si512(); 4];
        let mut chunks = bytes.chunks_exact(256);
        for chunk in &mut chunks {
            prefetch_ahead(bytes, chunk);
            for (k, lane) in acc.iter_mut().enumerate() {
                // SAFETY: 64 bytes at 64 * k lie inside the 256-byte chunk.
                let v = unsafe { _mm512_loadu_si512(chunk.as_ptr().add(64 * k).cast()) };
                *lane = _mm512_xor_si512(*lane, v);
            }
        }
        let all = _mm512_xor_si512(
            _mm512_xor_si512(acc[0], acc[1]),
            _mm512_xor_si512(acc[2], acc[3]),
        );
        let mut words = [0u64; 8];
        // SAFETY: words has room for 64 bytes.
        unsafe { _mm512_storeu_si512(words.as_mut_ptr().cast(), all) };
        words
            .iter()
            .fold(tail(chunks.remainder()), |sum, w| sum ^ w)
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn xor_avx2(bytes: &[u8]) -> u64 {
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut chunks = bytes.chunks_exact(128);
        for chunk in &mut chunks {
            if (chunk.as_ptr() as usize - bytes.as_ptr() as usize).is_multiple_of(256) {
                prefetch_ahead(bytes, chunk);
            }
            for (k, lane) in acc.iter_mut().enumerate() {
                // SAFETY: 32 bytes at 32 * k lie inside the 128-byte chunk.
                let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().add(32 * k).cast()) };
                *lane = _mm256_xor_si256(*lane, v);
            }
        }
        let all = _mm256_xor_si256(
            _mm256_xor_si256(acc[0], acc[1]),
            _mm256_xor_si256(acc[2], acc[3]),
        );
        let mut words = [0u64; 4];
        // SAFETY: words has room for 32 bytes.
        unsafe { _mm256_storeu_si256(words.as_mut_ptr().cast(), all) };
        words
            .iter()
            .fold(tail(chunks.remainder()), |sum, w| sum ^ w)
    }

    fn tail(bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .fold(0, |sum, &b| sum.rotate_left(8) ^ u64::from(b))
    }

    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fill_streaming_avx512(block: &mut [u8], value: u8) {
        let v = _mm512_set1_epi8(value as i8);
        let (head, lines, tail) = split(block);
        head.fill(value);
        tail.fill(value);
        for line in lines.chunks_exact_mut(64) {
            // SAFETY: line is 64 bytes, 64-byte aligned (split).
            unsafe { _mm512_stream_si512(line.as_mut_ptr().cast(), v) };
        }
        _mm_sfence();
    }

    /// # Safety
    /// None beyond x86-64 (SSE2).
    pub unsafe fn fill_streaming_sse2(block: &mut [u8], value: u8) {
        // SAFETY: SSE2 is part of x86-64.
        let v = unsafe { _mm_set1_epi8(value as i8) };
        let (head, lines, tail) = split(block);
        head.fill(value);
        tail.fill(value);
        for part in lines.chunks_exact_mut(16) {
            // SAFETY: part is 16 bytes, 16-byte aligned (split).
            unsafe { _mm_stream_si128(part.as_mut_ptr().cast(), v) };
        }
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() };
    }

    /// An unaligned head, whole 64-byte-aligned lines, a tail.
    fn split(block: &mut [u8]) -> (&mut [u8], &mut [u8], &mut [u8]) {
        let head = block.as_ptr().align_offset(64).min(block.len());
        let lines = (block.len() - head) / 64 * 64;
        let (h, rest) = block.split_at_mut(head);
        let (l, t) = rest.split_at_mut(lines);
        (h, l, t)
    }
}

/// One run of the library's ring between two processes, as the C ring,
/// PSRDada and the command run: a reader process forked once the ring is
/// made, pinned to `cpus.1`, and a writer thread of this process pinned
/// to `cpus.0`. `ramp` bytes (rounded up to whole blocks) move first,
/// untimed, as the command's and the C ring's do. MB/s of the volume:
/// with a ramp, timed by the reader from the ramp's last block on (as the
/// C ring's reader and the command time it); without, from the writer's
/// first byte to the reader's last.
/// (Two threads of one process moved 256 MiB blocks at 0.65–0.77 of two
/// processes on the Zen 4 VM, the same C ring either way, shared or
/// private memory, huge pages or not: a ring between threads is not what
/// the other rings measure.)
fn ring_run(
    cpus: (u32, u32),
    block: usize,
    volume: u64,
    ramp: u64,
    in_place: bool,
    options: &Options,
) -> f64 {
    let stores = options.stores;
    let ramp_blocks = ramp.div_ceil(block as u64);
    let name = format!("bench-{}", std::process::id());
    let ring = Ring::create(&options.ring(&name, block)).expect("ring");
    options.check_huge_pages();
    let (mut from_reader, to_parent) = std::io::pipe().expect("pipe");
    // SAFETY: this thread is the process's only one here (every thread
    // the benchmark starts is joined before the next ring), so the child
    // inherits no lock another thread held; it opens the ring, allocates,
    // and leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        let read = std::panic::catch_unwind(|| {
            read_side(&name, cpus.1, block, ramp_blocks, in_place, stores)
        });
        let code = match read {
            Ok(told) => {
                let mut message = [0u8; 24];
                for (part, word) in message.chunks_mut(8).zip(told) {
                    part.copy_from_slice(&word.to_le_bytes());
                }
                let mut to_parent = to_parent;
                i32::from(std::io::Write::write_all(&mut to_parent, &message).is_err())
            }
            Err(_) => 1,
        };
        // SAFETY: ends the child without running this process's
        // destructors (the ring's would remove the parent's segment).
        unsafe { libc::_exit(code) };
    }
    drop(to_parent);
    let blocks = ramp_blocks + volume.div_ceil(block as u64);
    let writer_thread = std::thread::spawn(move || {
        pin(cpus.0);
        let mut writer = ring.writer().expect("writer");
        writer.set_copy_stores(stores);
        let source = page_buffer(block.min(SOURCE_MAX));
        let source = source.as_slice();
        let streaming = writer.streams();
        // The reader pins itself and writes its buffer before it joins.
        writer
            .wait_for_readers(1, Duration::from_secs(60))
            .expect("the reader joins");
        let mut start = numalab::system::monotonic();
        for index in 0..blocks {
            if index == ramp_blocks {
                start = numalab::system::monotonic();
            }
            if in_place {
                let mut slot = writer.claim().unwrap();
                produce(&mut slot, index as u8, streaming);
                slot.commit(block).unwrap();
            } else {
                for _ in 0..block / source.len() {
                    writer.write(source).unwrap();
                }
            }
        }
        writer.finish().unwrap();
        start
    });
    let writer_start = writer_thread.join().unwrap();
    let mut message = [0u8; 24];
    let told = std::io::Read::read_exact(&mut from_reader, &mut message);
    let mut status = 0;
    // SAFETY: `child` is this process's child, waited for once.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert!(
        told.is_ok()
            && waited == child
            && libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0,
        "the ring's reader process failed (status {status:#x})"
    );
    let word = |i: usize| u64::from_le_bytes(message[i * 8..i * 8 + 8].try_into().unwrap());
    let (done, reader_start, end) = (word(0), word(1), word(2));
    assert_eq!(done, (blocks - ramp_blocks) * block as u64);
    let start = if ramp_blocks == 0 {
        writer_start
    } else {
        Duration::from_nanos(reader_start)
    };
    done as f64 / (Duration::from_nanos(end) - start).as_secs_f64() / 1e6
}

/// The reader's side of [`ring_run`], in the forked process: bytes read
/// after the ramp's `ramp_blocks`, and `CLOCK_MONOTONIC` once it had read
/// them (before the first read without a ramp) and after the last, in
/// nanoseconds. It opens the ring by name, as a reader process does
/// (which fills its page tables: the mapping inherited through `fork` has
/// none, and 2 GiB of ring would otherwise be faulted in while timed).
fn read_side(
    name: &str,
    cpu: u32,
    block: usize,
    ramp_blocks: u64,
    in_place: bool,
    stores: CopyStores,
) -> [u64; 3] {
    pin(cpu);
    let mut buffer = (!in_place).then(|| page_buffer(block));
    let buf = buffer
        .as_mut()
        .map(NodeBuffer::as_mut_slice)
        .unwrap_or_default();
    std::hint::black_box(&mut *buf);
    // SAFETY: the benchmark made the ring; only numalab's ring API (this
    // process and the writer thread) touches it.
    let ring = unsafe { Ring::open(name) }.expect("open the ring");
    let mut reader = ring.reader().expect("reader");
    reader.set_copy_stores(stores);
    let now = || numalab::system::monotonic().as_nanos() as u64;
    let (mut done, mut sum, mut seen) = (0u64, 0u64, 0u64);
    let mut start = now();
    loop {
        let n = if in_place {
            let Some(slot) = reader.borrow().unwrap() else {
                break;
            };
            sum ^= consume(&slot);
            slot.len()
        } else {
            let n = reader.read(buf).unwrap();
            if n == 0 && reader.read(buf).unwrap() == 0 {
                break;
            }
            n
        };
        seen += 1;
        if seen <= ramp_blocks {
            if seen == ramp_blocks {
                start = now();
            }
            continue;
        }
        done += n as u64;
    }
    std::hint::black_box(sum);
    [done, start, now()]
}

/// The rings a round measures, each once.
#[derive(Clone, Copy)]
enum Contender {
    Copy,
    InPlace,
    CRing,
    Cli,
    DadaCopy,
    DadaMap,
}

impl Contender {
    const ALL: [Contender; 6] = [
        Contender::Copy,
        Contender::InPlace,
        Contender::CRing,
        Contender::Cli,
        Contender::DadaCopy,
        Contender::DadaMap,
    ];
}

/// One round's MB/s, of what was measured.
#[derive(Default)]
struct Figures {
    copy: Option<f64>,
    in_place: Option<f64>,
    c_ring: Option<f64>,
    cli: Option<f64>,
    dada_l: Option<f64>,
    dada_z: Option<f64>,
}

/// Untimed: the library's copy ring moves four times the volume, so that
/// the ring timed next finds both CPUs as busy as the rest do. Run after
/// the single-core references, and after every PSRDada run: its writer,
/// `dada_junkdb`, busy-waits for the wall clock's next second before it
/// writes (up to a second) while the reader's CPU sleeps.
fn warm_up(cpus: (u32, u32), block: usize, volume: u64, options: &Options) {
    ring_run(cpus, block, volume * 4, 0, false, options);
}

/// PSRDada's `dada_junkdb -z` → `dada_dbnull -z [-l]` on the same CPUs;
/// the reader's MB/s (it prints MiB/s: converted).
fn psrdada_run(
    bin: &Path,
    cpus: (u32, u32),
    block: usize,
    volume: u64,
    copy_out: bool,
) -> Option<f64> {
    let key = "b0b0";
    let run = |program: &str, args: &[&str]| {
        Command::new(bin.join(program))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()
    };
    let _ = run("dada_db", &["-k", key, "-d"]);
    run(
        "dada_db",
        &[
            "-k",
            key,
            "-b",
            &block.to_string(),
            "-n",
            &BLOCKS.to_string(),
            "-p",
        ],
    )?
    .success()
    .then_some(())?;
    let header = std::env::temp_dir().join(format!("numalab-bench-header-{}", std::process::id()));
    std::fs::write(
        &header,
        "HDR_VERSION 1.0\nHDR_SIZE 4096\nNBIT 8\nNDIM 1\nNPOL 1\nNCHAN 1\nOBS_OFFSET 0\nRESOLUTION 1\n",
    )
    .ok()?;
    let mut reader_args = vec!["-k", key, "-z", "-s"];
    if copy_out {
        reader_args.push("-l");
    }
    let reader = Command::new("taskset")
        .args(["-c", &cpus.1.to_string()])
        .arg(bin.join("dada_dbnull"))
        .args(&reader_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    // The writer starts once the reader waits for its header (the reader's
    // clock starts at the header), not after a fixed sleep: an idle pause
    // would start the run slow (see `warm_up`).
    if !attached(reader.id(), key, BLOCKS + 1) {
        let _ = run("dada_db", &["-k", key, "-d"]);
        return None;
    }
    let writer = Command::new("taskset")
        .args(["-c", &cpus.0.to_string()])
        .arg(bin.join("dada_junkdb"))
        .args(["-k", key, "-z", "-R", "1000000", "-b", &volume.to_string()])
        .arg(&header)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let out = reader.wait_with_output().ok()?;
    let _ = run("dada_db", &["-k", key, "-d"]);
    let _ = std::fs::remove_file(&header);
    writer.ok()?.success().then_some(())?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("bytes transferred"))?;
    let mib_s: f64 = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(mib_s * 1024.0 * 1024.0 / 1e6)
}

/// Whether PSRDada's reader `pid` has attached the ring's shared memory:
/// at least `blocks` segments of the data block (`key`) and two of the
/// header block (the next key) in its `/proc/<pid>/maps`, checked every
/// millisecond for at most ten seconds.
fn attached(pid: u32, key: &str, blocks: usize) -> bool {
    let header_key = format!("{:x}", u32::from_str_radix(key, 16).unwrap_or(0) + 1);
    let count = |maps: &str, key: &str| {
        maps.lines()
            .filter(|l| l.contains("/SYSV") && l.trim_end_matches(" (deleted)").ends_with(key))
            .count()
    };
    for _ in 0..10_000 {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if count(&maps, key) >= blocks && count(&maps, &header_key) >= 2 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// `numalab ring` (the command line, its own writer and reader processes)
/// in copy mode on the same CPUs, blocks and volume: its MB/s.
fn cli_run(bin: &Path, cpus: (u32, u32), block: usize, volume: u64, ramp: u64) -> Option<f64> {
    let out = Command::new(bin)
        .args(["ring", "--mode", "copy", "--json", "--blocks"])
        .arg(BLOCKS.to_string())
        .arg("--ramp")
        .arg(ramp.to_string())
        .arg("--block-size")
        .arg(block.to_string())
        .arg("--volume")
        .arg(volume.to_string())
        .arg("--writer-cpus")
        .arg(cpus.0.to_string())
        .arg("--reader-cpus")
        .arg(cpus.1.to_string())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(())?;
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    result["cells"][0]["total_mb_per_s"].as_f64()
}

/// The repository's root.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repository().join("target"), PathBuf::from)
}

/// `numalab` built in release mode beside this benchmark
/// (`NUMALAB_BENCH_CLI` names another), if there is one.
fn cli_binary() -> Option<PathBuf> {
    let path = std::env::var_os("NUMALAB_BENCH_CLI")
        .map_or_else(|| target_dir().join("release/numalab"), PathBuf::from);
    path.is_file().then_some(path)
}

/// `bench/cring.c` built into `target/bench-cring` with `$CC` (default
/// `cc`), or why it could not be.
fn build_cring() -> Result<PathBuf, String> {
    let source = repository().join("bench/cring.c");
    let target = target_dir().join("bench-cring");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args(["-O2", "-o"])
        .arg(&target)
        .arg(&source)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cc} {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(target)
}

/// The C ring on the same CPUs, blocks and volume, after `ramp` bytes
/// untimed: the reader's MB/s.
fn cring_run(bin: &Path, cpus: (u32, u32), block: usize, volume: u64, ramp: u64) -> Option<f64> {
    let out = Command::new(bin)
        .args([
            block.to_string(),
            BLOCKS.to_string(),
            volume.to_string(),
            cpus.0.to_string(),
            cpus.1.to_string(),
        ])
        .args((ramp > 0).then(|| format!("ramp={ramp}")))
        .output()
        .ok()?;
    out.status.success().then_some(())?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// CPU time a reader uses over `wait` while no data comes.
fn idle_reader_cpu(wait: Duration) -> Duration {
    let name = format!("bench-idle-{}", std::process::id());
    let ring = Ring::create(&RingOptions::new(&name, 2 << 20, 1 << 20)).expect("ring");
    let _writer = ring.writer().expect("writer");
    let mut reader = ring.reader().expect("reader");
    reader.set_timeout(Some(wait));
    std::thread::scope(|s| {
        s.spawn(|| {
            let before = numalab::system::thread_cpu_time();
            let result = reader.read(&mut [0u8; 64]);
            assert!(result.is_err(), "no data was expected");
            numalab::system::thread_cpu_time() - before
        })
        .join()
        .unwrap()
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Each block size's ratio: "256 KiB 0.95, 1 MiB 0.97".
fn ratios(ratios: &[(usize, f64)]) -> String {
    ratios
        .iter()
        .map(|(block, r)| format!("{} KiB {r:.2}", block >> 10))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The targets `bash bench/all.sh` judges, by name.
const DADA: &str = "ring copy / PSRDada dada_dbnull -l";
const C_RING: &str = "ring copy / C fork-and-spin ring";
const CLI_DADA: &str = "numalab ring (command, copy) / PSRDada dada_dbnull -l";
const CLI_C_RING: &str = "numalab ring (command, copy) / C fork-and-spin ring";
const CLI_LIBRARY: &str = "numalab ring (command, copy) / ring copy (library)";
const MEMCPY: &str = "ring copy / memcpy memory to memory";
const IN_PLACE: &str = "ring in place / ring copy";

/// Blocks up to this size move at the rate two cores hand a block over,
/// whatever the ring does with it (the reader's block-sized buffer stays
/// in its L2, so copying into it adds little): the C ring, which does the
/// least, is their reference, not a one-core `memcpy`, and in place
/// cannot beat copy by much when the hand-over is slow
/// (docs/figures.md, "Goals the physics sets").
const HAND_OVER_BOUND: usize = 256 << 10;

/// Blocks from this size on leave every cache: the copying ring moves
/// each byte through memory three times (the writer's store, the reader's
/// load and its store into its own buffer) where `memcpy` moves it twice,
/// so memory's bandwidth caps the ring at 2/3 of `memcpy`.
const MEMORY_BOUND: usize = 64 << 20;

/// The goals, as `GOAL<tab>target<tab>cell<tab>goal` lines: an empty cell
/// is every block size without a goal of its own.
fn goals(blocks: &[usize]) {
    for name in [DADA, C_RING, CLI_DADA, CLI_C_RING, CLI_LIBRARY] {
        println!("GOAL\t{name}\t\t>= 1.0");
    }
    println!("GOAL\t{MEMCPY}\t\t>= 0.9");
    println!("GOAL\t{IN_PLACE}\t\t>= 1.2");
    for &block in blocks {
        if block >= MEMORY_BOUND {
            // 0.9 of the 2/3 memory leaves a ring that copies.
            println!("GOAL\t{MEMCPY}\t{}\t>= 0.6", cell_name(block));
        }
        if block <= HAND_OVER_BOUND {
            println!("GOAL\t{IN_PLACE}\t{}\t>= 1.0", cell_name(block));
        }
    }
}

/// `64 KiB`, `16 MiB`: a block size as a cell of the table.
fn cell_name(block: usize) -> String {
    if block >= 1 << 20 && block.is_multiple_of(1 << 20) {
        format!("{} MiB", block >> 20)
    } else {
        format!("{} KiB", block >> 10)
    }
}

/// One round's ratio of a target, `ROUND<tab>target<tab>cell<tab>ratio`,
/// when both sides were measured.
fn round_line(
    target: &str,
    cell: &str,
    numalab: Option<f64>,
    reference: Option<f64>,
) -> Option<String> {
    let (a, b) = (numalab?, reference?);
    (b > 0.0).then(|| format!("ROUND\t{target}\t{cell}\t{:.4}", a / b))
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not run
    // this harness-less target's body.
    if !std::env::args().any(|a| a == "--bench") {
        println!("ring benchmark: run with `cargo bench -p numalab --bench ring`");
        return;
    }
    let volume = env_u64("NUMALAB_BENCH_VOLUME", 2 << 30);
    let ramp = env_u64("NUMALAB_BENCH_RAMP", volume.saturating_mul(2));
    let repeats = env_u64("NUMALAB_BENCH_REPEATS", 3).max(1) as usize;
    let blocks: Vec<usize> = match std::env::var("NUMALAB_BENCH_BLOCKS") {
        Ok(list) => list
            .split(',')
            .map(|size| {
                numalab::units::parse_size(size.trim())
                    .map(|b| b as usize)
                    .unwrap_or_else(|e| panic!("NUMALAB_BENCH_BLOCKS={list}: {e}"))
            })
            .collect(),
        Err(_) => BLOCK_SIZES.to_vec(),
    };
    let options = Options {
        stores: env_parse("NUMALAB_BENCH_COPY_STORES", CopyStores::Auto),
        huge_pages: env_parse("NUMALAB_BENCH_HUGE_PAGES", HugePages::None),
    };
    let stores = options.stores;
    let allowed: Vec<u32> = affinity::thread_cpus().unwrap().iter().collect();
    let cpus = (allowed[0], *allowed.get(1).unwrap_or(&allowed[0]));
    let dada = std::env::var_os("PSRDADA_BIN").map(PathBuf::from);
    let cli = cli_binary();
    if cli.is_none() {
        eprintln!(
            "note: numalab ring (the command) is not measured: build it first \
             (cargo build --release -p numalab-cli) or set NUMALAB_BENCH_CLI"
        );
    }
    let cring = build_cring()
        .map_err(|e| eprintln!("note: the C ring reference is not measured: {e}"))
        .ok();
    println!(
        "numalab ring benchmark: {} GiB per run (after {} GiB untimed, but PSRDada's), \
         median of {repeats}, {BLOCKS} blocks per ring, writer on CPU {}, reader on CPU {}, \
         copy stores {stores}, huge pages {}; MB/s = 10^6 bytes/s",
        volume as f64 / (1u64 << 30) as f64,
        ramp as f64 / (1u64 << 30) as f64,
        cpus.0,
        cpus.1,
        options.huge_pages,
    );
    print!(
        "{:>9} {:>10} {:>10} {:>8} {:>10} {:>9}",
        "block", "memcpy", "ring copy", "/memcpy", "in place", "/copy"
    );
    if cring.is_some() {
        print!(" {:>10} {:>8}", "C ring", "copy/");
    }
    if cli.is_some() {
        print!(
            " {:>10} {:>8} {:>8} {:>8}",
            "CLI", "/C ring", "/copy", "/dada -l"
        );
    }
    if dada.is_some() {
        print!(
            " {:>10} {:>8} {:>10} {:>8}",
            "dada -l", "copy/", "dada -z", "copy/"
        );
    }
    println!();
    let mut rounds: Vec<String> = vec![];
    let mut vs_cached = vec![];
    let mut others = vec![];
    for &block in &blocks {
        let volume = volume / block as u64 * block as u64;
        let (mut memcpy, mut whole, mut cached) = (vec![], vec![], vec![]);
        let (mut copy, mut in_place, mut dada_l, mut dada_z) = (vec![], vec![], vec![], vec![]);
        let mut c_ring = vec![];
        let mut by_cli = vec![];
        // The single-core references first, all of them: each leaves the
        // reader's CPU idle for a while, and a virtual machine's host may
        // then hand cache lines between the two CPUs slowly for up to a
        // tenth of a second (docs/figures.md, "The host's hand-over
        // phases"): whatever ran right after them would start slow.
        let span = REFERENCE_SPAN.max(block);
        for _ in 0..repeats {
            memcpy.push(single_core_copy(cpus.0, block, span, span, volume));
            whole.push(single_core_copy(cpus.0, span, span, span, volume));
            cached.push(single_core_copy(
                cpus.0,
                block,
                block,
                block * BLOCKS,
                volume,
            ));
        }
        warm_up(cpus, block, volume, &options);
        for (round, &memcpy_now) in memcpy.iter().enumerate() {
            // The rings, one after another with no idle CPU between them,
            // in an order that turns by one each round: none always runs
            // first or after the same other.
            let mut now = Figures::default();
            for turn in 0..Contender::ALL.len() {
                let ran = Contender::ALL[(round + turn) % Contender::ALL.len()];
                match ran {
                    Contender::Copy => {
                        now.copy = Some(ring_run(cpus, block, volume, ramp, false, &options))
                    }
                    Contender::InPlace => {
                        now.in_place = Some(ring_run(cpus, block, volume, ramp, true, &options))
                    }
                    Contender::CRing => {
                        now.c_ring = cring
                            .as_ref()
                            .and_then(|bin| cring_run(bin, cpus, block, volume, ramp))
                    }
                    Contender::Cli => {
                        now.cli = cli
                            .as_ref()
                            .and_then(|bin| cli_run(bin, cpus, block, volume, ramp))
                    }
                    Contender::DadaCopy => {
                        now.dada_l = dada
                            .as_ref()
                            .and_then(|bin| psrdada_run(bin, cpus, block, volume, true))
                    }
                    Contender::DadaMap => {
                        now.dada_z = dada
                            .as_ref()
                            .and_then(|bin| psrdada_run(bin, cpus, block, volume, false))
                    }
                }
                if matches!(ran, Contender::DadaCopy | Contender::DadaMap) && dada.is_some() {
                    warm_up(cpus, block, volume, &options);
                }
            }
            let copy_now = now.copy.expect("the copy ring ran");
            let in_place_now = now.in_place.expect("the in-place ring ran");
            // This round's figures, each against its reference measured
            // in the same round (bench/all.sh judges these); the memcpy
            // reference is the round's own of the references' pass.
            let cell = cell_name(block);
            let mut round_of = |target, numalab, reference| {
                rounds.extend(round_line(target, &cell, numalab, reference));
            };
            round_of(DADA, Some(copy_now), now.dada_l);
            round_of(C_RING, Some(copy_now), now.c_ring);
            round_of(CLI_DADA, now.cli, now.dada_l);
            round_of(CLI_C_RING, now.cli, now.c_ring);
            round_of(CLI_LIBRARY, now.cli, Some(copy_now));
            if block > HAND_OVER_BOUND {
                round_of(MEMCPY, Some(copy_now), Some(memcpy_now));
            }
            round_of(IN_PLACE, Some(in_place_now), Some(copy_now));
            copy.push(copy_now);
            in_place.push(in_place_now);
            c_ring.extend(now.c_ring);
            by_cli.extend(now.cli);
            dada_l.extend(now.dada_l);
            dada_z.extend(now.dada_z);
        }
        if std::env::var_os("NUMALAB_BENCH_SAMPLES").is_some() {
            eprintln!(
                "{} KiB samples: memcpy {memcpy:.0?}, copy {copy:.0?}, in place {in_place:.0?}, \
                 C ring {c_ring:.0?}, CLI {by_cli:.0?}, dada -l {dada_l:.0?}",
                block >> 10
            );
        }
        let (memcpy, copy, in_place) = (median(memcpy), median(copy), median(in_place));
        let cached = median(cached);
        others.push((block, copy, median(whole), cached));
        vs_cached.push((block, copy / cached));
        print!(
            "{:>6} KiB {memcpy:>10.0} {copy:>10.0} {:>8.2} {in_place:>10.0} {:>9.2}",
            block >> 10,
            copy / memcpy,
            in_place / copy
        );
        let c_ring = (!c_ring.is_empty()).then(|| median(c_ring));
        let dada_l_median = (!dada_l.is_empty()).then(|| median(dada_l.clone()));
        if cring.is_some() {
            match c_ring {
                None => print!(" {:>10} {:>8}", "failed", "-"),
                Some(m) => print!(" {m:>10.0} {:>8.2}", copy / m),
            }
        }
        if cli.is_some() {
            if by_cli.is_empty() {
                print!(" {:>10} {:>8} {:>8} {:>8}", "failed", "-", "-", "-");
            } else {
                let m = median(by_cli);
                let against = |reference: Option<f64>| reference.map(|r| m / r);
                let text = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.2}"));
                print!(
                    " {m:>10.0} {:>8} {:>8} {:>8}",
                    text(against(c_ring)),
                    text(against(Some(copy))),
                    text(against(dada_l_median))
                );
            }
        }
        if dada.is_some() {
            for runs in [dada_l, dada_z] {
                if runs.is_empty() {
                    print!(" {:>10} {:>8}", "failed", "-");
                } else {
                    let m = median(runs);
                    print!(" {m:>10.0} {:>8.2}", copy / m);
                }
            }
        }
        println!();
    }
    println!(
        "other single-core copies (not the target's reference), MB/s and ring copy against them:"
    );
    println!(
        "{:>9} {:>16} {:>8} {:>18} {:>8}",
        "block", "one 512 MiB call", "copy/", "ring-sized area", "copy/"
    );
    for (block, copy, whole, cached) in others {
        println!(
            "{:>6} KiB {whole:>16.0} {:>8.2} {cached:>18.0} {:>8.2}",
            block >> 10,
            copy / whole,
            copy / cached
        );
    }
    let wait = Duration::from_secs(3);
    let cpu = idle_reader_cpu(wait);
    let idle_share = cpu.as_secs_f64() / wait.as_secs_f64();
    println!(
        "idle reader: {:.3} ms of CPU in {} s waiting for data ({:.4}% of a CPU)",
        cpu.as_secs_f64() * 1e3,
        wait.as_secs(),
        100.0 * idle_share
    );
    if dada.is_none() {
        println!("PSRDada not measured (set PSRDADA_BIN to a directory with PSRDada's dada_db, dada_junkdb and dada_dbnull)");
    }
    println!(
        "copy against memcpy within the cache (a block into a ring-sized area; not a target): \
         copy/memcpy {}",
        ratios(&vs_cached)
    );
    println!(
        "idle ring uses no CPU: {}",
        if idle_share < 0.001 {
            "met (under 0.1% of a CPU)"
        } else {
            "missed"
        }
    );
    // Every round's ratios, for bench/all.sh to judge the goals by (the
    // medians above are for reading, not for verdicts).
    goals(&blocks);
    for line in rounds {
        println!("{line}");
    }
}
