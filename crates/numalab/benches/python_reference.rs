//! The Rust side of the Python package's benchmark (`bash bench/python.sh`):
//! the loops a Python program runs through `import numalab`, written in
//! Rust against the library, so the script can put the two side by side.
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
//! * `locate BYTES ROUNDS`: a `NodeBuffer` of BYTES, touched, located
//!   (every page) ROUNDS times; prints the seconds of each round.
//!
//! Run by the script; `cargo bench -p numalab --bench python_reference --
//! ring-sum NAME` by hand.

use std::time::{Duration, Instant};

use numalab::locate::Sample;
use numalab::ring::Ring;
use numalab::{MemPolicy, NodeBuffer};

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
        ["locate", bytes, rounds] => locate_rounds(bytes.parse()?, rounds.parse()?),
        _ => {
            eprintln!("usage: python_reference ring-sum NAME [TIMEOUT_S] | ring-commit NAME VOLUME | locate BYTES ROUNDS");
            std::process::exit(2)
        }
    }
}
