//! The Rust side of the bindings' benchmarks (`bash bench/python.sh`,
//! `bash bench/c.sh`): the loops a Python or C program runs through
//! numalab, written in Rust against the library, so the scripts can put
//! the two side by side.
//!
//! * `ring-sum NAME [TIMEOUT_S]`: joins ring `NAME` as a reader and sums
//!   every block in place as 64-bit words (wrapping), as the Python reader
//!   does with `block.view(np.uint64).sum()`; prints one JSON line: bytes,
//!   blocks, seconds from its first block to the end of the stream, and
//!   the sum.
//! * `ring-commit NAME VOLUME`: the writer both readers are timed
//!   against: waits for one reader, then claims and commits whole blocks
//!   until VOLUME bytes, writing nothing into them, so that the reader,
//!   not the writer, sets the pace.
//! * `ring-copy BLOCK_BYTES BLOCKS VOLUME_BYTES WRITER_CPU READER_CPU`:
//!   what `bench/ring-c.c` does through libnumalab, through the Rust API:
//!   a ring of BLOCKS blocks, a writer pinned on WRITER_CPU copying each
//!   block in from a hot source of at most 4 MiB, a reader process pinned
//!   on READER_CPU copying each out into a private buffer; prints the
//!   reader's MB/s from its first block to the end of the stream.
//! * `locate BYTES ROUNDS`: a `NodeBuffer` of BYTES, touched, located
//!   (every page) ROUNDS times; prints the seconds of each round.
//!
//! Run by the script; `cargo bench -p numalab --bench bindings_reference --
//! ring-sum NAME` by hand.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use numalab::locate::Sample;
use numalab::ring::{Ring, RingOptions};
use numalab::sets::CpuSet;
use numalab::{affinity, MemPolicy, NodeBuffer};

const SOURCE_MAX: usize = 4 << 20;

fn ring_sum(name: &str, timeout: Duration) -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: the benchmark's writer is numalab's own ring worker.
    let ring = unsafe { Ring::open(name)? };
    let mut reader = ring.reader()?;
    reader.set_timeout(Some(timeout));
    let (mut bytes, mut blocks, mut sum) = (0u64, 0u64, 0u64);
    let mut first: Option<Instant> = None;
    while let Some(block) = reader.borrow()? {
        first.get_or_insert_with(Instant::now);
        let (words, _) = block.as_chunks::<8>();
        for word in words {
            sum = sum.wrapping_add(u64::from_le_bytes(*word));
        }
        bytes += block.len() as u64;
        blocks += 1;
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    println!(r#"{{"bytes": {bytes}, "blocks": {blocks}, "seconds": {seconds}, "sum": {sum}}}"#);
    Ok(())
}

fn ring_commit(name: &str, volume: u64) -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: as in ring_sum.
    let ring = unsafe { Ring::open(name)? };
    let mut writer = ring.writer()?;
    writer.set_timeout(Some(Duration::from_secs(60)));
    writer.wait_for_readers(1, Duration::from_secs(60))?;
    let block = ring.block_size() as u64;
    let mut sent = 0;
    while sent < volume {
        let len = (volume - sent).min(block);
        writer.claim()?.commit(len as usize)?;
        sent += len;
    }
    writer.finish()?;
    Ok(())
}

fn ring_copy(
    block: usize,
    blocks: usize,
    volume: u64,
    writer_cpu: u32,
    reader_cpu: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let name = format!("bench-ring-rust-{}", std::process::id());
    let options = RingOptions::new(&name, block * blocks, block).policy(MemPolicy::Local);
    let ring = Ring::create(&options)?;
    let mut reader = Command::new(std::env::current_exe()?)
        .args(["ring-copy-reader", &name, &reader_cpu.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    affinity::bind_thread_to_cpus(&CpuSet::single(writer_cpu))?;
    let source = vec![2u8; block.min(SOURCE_MAX)];
    let mut writer = ring.writer()?;
    writer.set_timeout(Some(Duration::from_secs(60)));
    writer.wait_for_readers(1, Duration::from_secs(60))?;
    for _ in 0..(volume / block as u64).max(1) {
        let mut slot = writer.claim()?;
        for chunk in slot.chunks_mut(source.len()) {
            chunk.copy_from_slice(&source[..chunk.len()]);
        }
        slot.commit(block)?;
    }
    writer.finish()?;
    let mut printed = String::new();
    reader.stdout.take().unwrap().read_to_string(&mut printed)?;
    if !reader.wait()?.success() {
        return Err("the reader failed".into());
    }
    print!("{printed}");
    Ok(())
}

fn ring_copy_reader(name: &str, cpu: u32) -> Result<(), Box<dyn std::error::Error>> {
    affinity::bind_thread_to_cpus(&CpuSet::single(cpu))?;
    // SAFETY: the writer is ring_copy, in the parent process.
    let ring = unsafe { Ring::open(name)? };
    let mut reader = ring.reader()?;
    reader.set_timeout(Some(Duration::from_secs(60)));
    let mut out = vec![1u8; ring.block_size()];
    let (mut bytes, mut first) = (0u64, None);
    while let Some(block) = reader.borrow()? {
        first.get_or_insert_with(Instant::now);
        out[..block.len()].copy_from_slice(&block);
        std::hint::black_box(&mut out);
        bytes += block.len() as u64;
    }
    let seconds = first.map_or(f64::INFINITY, |t: Instant| t.elapsed().as_secs_f64());
    println!("{:.1}", bytes as f64 / seconds / 1e6);
    Ok(())
}

fn locate_rounds(bytes: usize, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let buffer = NodeBuffer::new(bytes, MemPolicy::Local)?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let found = buffer.locate(Sample::All)?;
        times.push(start.elapsed().as_secs_f64());
        assert_eq!(
            found.present() as usize * found.page_size as usize,
            bytes.next_multiple_of(found.page_size as usize)
        );
    }
    let list: Vec<String> = times.iter().map(|t| format!("{t}")).collect();
    println!(r#"{{"seconds": [{}]}}"#, list.join(", "));
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["ring-sum", name] => ring_sum(name, Duration::from_secs(60)),
        ["ring-sum", name, timeout] => ring_sum(name, Duration::from_secs_f64(timeout.parse()?)),
        ["ring-commit", name, volume] => ring_commit(name, volume.parse()?),
        ["ring-copy", block, blocks, volume, writer_cpu, reader_cpu] => ring_copy(
            block.parse()?,
            blocks.parse()?,
            volume.parse()?,
            writer_cpu.parse()?,
            reader_cpu.parse()?,
        ),
        ["ring-copy-reader", name, cpu] => ring_copy_reader(name, cpu.parse()?),
        ["locate", bytes, rounds] => locate_rounds(bytes.parse()?, rounds.parse()?),
        _ => {
            eprintln!(
                "usage: bindings_reference ring-sum NAME [TIMEOUT_S] | ring-commit NAME VOLUME \
                 | ring-copy BLOCK_BYTES BLOCKS VOLUME_BYTES WRITER_CPU READER_CPU | locate BYTES ROUNDS"
            );
            std::process::exit(2)
        }
    }
}
