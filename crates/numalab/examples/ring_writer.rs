//! The writer of a shared-memory ring: makes ring NAME on NODE and sends
//! one transfer of MIB mebibytes, then ends the stream.
//!
//! ```sh
//! cargo run --release --example ring_reader -- demo &   # start the readers first
//! cargo run --release --example ring_writer -- demo 0 1024
//! ```

use std::time::Duration;

use numalab::ring::{Ring, RingOptions, TransferHeader};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("demo", String::as_str);
    let node: u32 = args.get(2).map_or(Ok(0), |n| n.parse())?;
    let mib: usize = args.get(3).map_or(Ok(1024), |n| n.parse())?;

    // 8 blocks of 4 MiB, on `node`, placed before the first touch.
    let ring = Ring::create(&RingOptions::new(name, 8 << 22, 4 << 20).node(node))?;
    eprintln!("ring {name}: {}", ring.audit());
    let mut writer = ring.writer()?;
    eprintln!("waiting for a reader (ring_reader {name})");
    // Readers see blocks from the moment they join: wait for one.
    writer.wait_for_readers(1, Duration::from_secs(600))?;

    let mut header = TransferHeader::new();
    header.set("SOURCE", "J0437-4715")?;
    header.set("BYTES", &(mib << 20).to_string())?;
    writer.begin_transfer(&header)?;
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..mib {
        writer.write(&chunk)?;
    }
    writer.finish()?;
    eprintln!("sent {mib} MiB; stats: {:?}", ring.stats().writer);
    // The creator's handle removes the name when dropped; a reader that
    // still has the ring open reads on.
    Ok(())
}
