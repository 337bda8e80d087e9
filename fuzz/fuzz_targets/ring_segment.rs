//! A ring's shared segment as another local process may have left it in
//! `/dev/shm`: what `numalab ring --monitor`/`--list`/`--cleanup` and a
//! reader or writer joining it do with its bytes. The header, the writer's
//! and readers' control blocks, the block descriptors and the transfer
//! headers all come from the input.
//!
//! Input: one byte of switches, then the file's bytes. The switches let
//! the fuzzer past the checks a random header fails, to what lies behind
//! them: bit 0 stores the magic, bit 1 the layout version and header size,
//! bit 2 the offsets and total size the header's geometry implies (and
//! sizes the file to match), bit 3 the header's checksum (last).
#![no_main]
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use numalab::ring::{self, Ring, RingMonitor, TransferHeader};

/// The layout of crates/numalab/src/ring/layout.rs, as a hostile process
/// would write it.
const MAGIC: u64 = u64::from_le_bytes(*b"NUMARING");
const LAYOUT_VERSION: u32 = 2;
const HEADER: u64 = 256;
const WRITER_CTL: u64 = 128;
const READER_CTL: u64 = 128;
const BLOCK_DESC: u64 = 32;
const CHECKSUM_OFFSET: usize = 160;
const FLAG_HUGE_2M: u32 = 1;
const FLAG_THP: u32 = 2;
const PAGE: u64 = 4096;
/// Files are made no larger than this.
const MAX_FILE: u64 = 8 << 20;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap())
}

fn align_up(value: u64, align: u64) -> Option<u64> {
    value.checked_add(align - 1).map(|v| v / align * align)
}

/// Offsets and total size for the header's sizes, without range checks
/// (the ring's own checks are what is under test).
fn implied(header: &[u8]) -> Option<[u64; 5]> {
    let (block_size, blocks) = (u64_at(header, 24), u64_at(header, 32));
    let (readers, meta_size, flags) = (u32_at(header, 40), u32_at(header, 44), u32_at(header, 80));
    let align = if flags & (FLAG_HUGE_2M | FLAG_THP) != 0 {
        2 << 20
    } else {
        PAGE
    };
    let readers_offset = HEADER + WRITER_CTL;
    let descs_offset = readers_offset.checked_add(u64::from(readers) * READER_CTL)?;
    let meta_offset = descs_offset.checked_add(blocks.checked_mul(BLOCK_DESC)?)?;
    let meta_end = meta_offset.checked_add(blocks.checked_mul(u64::from(meta_size))?)?;
    let data_offset = align_up(meta_end, align)?;
    let total = align_up(
        data_offset.checked_add(blocks.checked_mul(block_size)?)?,
        align,
    )?;
    Some([
        total,
        readers_offset,
        descs_offset,
        meta_offset,
        data_offset,
    ])
}

fn name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| format!("fuzz-{}", std::process::id()))
}

fn path() -> PathBuf {
    PathBuf::from(format!("/dev/shm/numalab-ring.{}", name()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&switches, file)) = data.split_first() else {
        return;
    };
    let mut bytes = file.to_vec();
    if bytes.len() < HEADER as usize {
        bytes.resize(HEADER as usize, 0);
    }
    let put = |bytes: &mut Vec<u8>, offset: usize, value: &[u8]| {
        bytes[offset..offset + value.len()].copy_from_slice(value)
    };
    if switches & 1 != 0 {
        put(&mut bytes, 0, &MAGIC.to_le_bytes());
    }
    if switches & 2 != 0 {
        put(&mut bytes, 8, &LAYOUT_VERSION.to_le_bytes());
        put(&mut bytes, 12, &(HEADER as u32).to_le_bytes());
    }
    if switches & 4 != 0 {
        let Some(offsets) = implied(&bytes) else {
            return;
        };
        if offsets[0] > MAX_FILE {
            return;
        }
        for (value, at) in offsets.iter().zip([16, 48, 56, 64, 72]) {
            put(&mut bytes, at, &value.to_le_bytes());
        }
        bytes.resize(offsets[0] as usize, 0);
    }
    if switches & 8 != 0 {
        let checksum = fnv1a(&bytes[8..CHECKSUM_OFFSET]);
        put(&mut bytes, CHECKSUM_OFFSET, &checksum.to_le_bytes());
    }

    let path = path();
    let _ = std::fs::remove_file(&path);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("a segment file in /dev/shm");
    out.write_all(&bytes).expect("the segment's bytes");
    drop(out);

    // The check every process makes of a segment's header before it maps
    // it, as a library function.
    let header = &bytes[..bytes.len().min(ring::HEADER_SIZE)];
    let verdict = ring::validate_header(header, bytes.len() as u64);
    // `numalab ring --monitor NAME`: read-only, any bytes. It maps nothing
    // the check refuses.
    if let Ok(monitor) = RingMonitor::open(name()) {
        assert!(
            verdict.is_ok(),
            "the monitor opened a segment validate_header refuses: {verdict:?}"
        );
        let _ = format!("{:?}", monitor.stats());
    }
    // A reader and a writer joining it (as a program linking numalab does).
    // SAFETY: nothing else maps this file while the target runs; the bytes
    // are hostile, which is what the segment's checks are for.
    if let Ok(ring) = unsafe { Ring::open(name()) } {
        let _ = ring.stats();
        if let Ok(mut reader) = ring.reader() {
            reader.set_timeout(Some(Duration::from_millis(1)));
            let mut buf = [0u8; 256];
            for _ in 0..4 {
                match reader.next_transfer() {
                    Ok(Some(transfer)) => drop(transfer.header.to_string()),
                    Ok(None) | Err(_) => break,
                }
                match reader.borrow() {
                    Ok(Some(block)) => drop(block.iter().map(|&b| u64::from(b)).sum::<u64>()),
                    Ok(None) | Err(_) => break,
                }
                if reader.read(&mut buf).is_err() {
                    break;
                }
            }
        }
        if let Ok(mut writer) = ring.writer() {
            writer.set_timeout(Some(Duration::from_millis(1)));
            let mut header = TransferHeader::new();
            let _ = header.set("SOURCE", "fuzz");
            if writer.begin_transfer(&header).is_ok() && writer.write(&[7; 300]).is_ok() {
                let _ = writer.finish();
            }
        }
    }
    // `numalab ring --list` and `--cleanup NAME`.
    let _ = ring::list();
    let _ = ring::remove(name(), false);
    let _ = std::fs::remove_file(&path);
});
