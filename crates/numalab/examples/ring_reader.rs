//! A reader of a shared-memory ring: joins ring NAME (made by
//! `ring_writer`), reads every transfer in place and prints what came. If
//! the writer dies, it says so once it has read everything that arrived.

use std::time::{Duration, Instant};

use numalab::ring::{Ring, RingError};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "demo".into());
    // The writer makes the ring: wait for it to appear.
    let start = Instant::now();
    let ring = loop {
        // SAFETY: the processes using this ring all go through numalab's
        // ring API (ring_writer and other ring_readers).
        match unsafe { Ring::open(&name) } {
            Ok(ring) => break ring,
            Err(RingError::NotFound { .. }) if start.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(err) => return Err(err.into()),
        }
    };
    let mut reader = ring.reader()?;
    loop {
        let transfer = match reader.next_transfer() {
            Ok(Some(transfer)) => transfer,
            Ok(None) => break, // the writer ended the stream
            Err(err @ RingError::WriterDied { .. }) => {
                eprintln!("stopping: {err}");
                std::process::exit(1);
            }
            Err(err) => return Err(err.into()),
        };
        let started = Instant::now();
        let mut bytes = 0u64;
        let mut checksum = 0u64;
        while let Some(block) = reader.borrow()? {
            bytes += block.len() as u64;
            checksum = block
                .iter()
                .fold(checksum, |c, &b| c.wrapping_add(u64::from(b)));
            if block.ends_transfer() {
                break;
            }
        }
        println!(
            "transfer {} ({}): {bytes} bytes, checksum {checksum}, {:.0} MB/s",
            transfer.id,
            transfer.header.to_string().replace('\n', "; "),
            bytes as f64 / started.elapsed().as_secs_f64() / 1e6
        );
    }
    Ok(())
}
