//! The shared-memory ring within one process (threads as the two sides);
//! the multi-process tests, deaths included, are in the CLI's tests.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use numalab::ring::{
    self, Backpressure, CopyStores, Ring, RingError, RingOptions, TransferHeader, STREAMING_FROM,
};
use numalab::{MemPolicy, NodeSet};

/// A unique ring name whose segment is removed when the guard drops, even
/// when the test fails.
struct Name(String);

impl Name {
    fn new(tag: &str) -> Name {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        Name(format!("test-{}-{tag}-{n}", std::process::id()))
    }

    fn shm_path(&self) -> String {
        format!("/dev/shm/numalab-ring.{}", self.0)
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = ring::remove(&self.0, true);
        let _ = fs::remove_file(self.shm_path());
    }
}

fn pattern(seq: u64, offset: usize) -> u8 {
    (seq.wrapping_mul(31) as usize + offset * 7) as u8
}

#[test]
fn copy_in_copy_out_keeps_every_byte_in_order() {
    let name = Name::new("copy");
    let ring = Ring::create(&RingOptions::new(&name.0, 4 * 4096, 4096).node(0)).unwrap();
    let audit = ring.audit();
    assert!(audit.is_match(), "{audit}");
    assert_eq!(audit.found.present(), 4, "every data page prefaulted");
    let mut reader = ring.reader().unwrap();
    let total = 1_000_003usize;
    let data: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
    let expected = data.clone();
    let consumer = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 3000];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        // The end of the one transfer, then the end of the stream.
        assert_eq!(reader.read(&mut buf).unwrap(), 0);
        got
    });
    let mut writer = ring.writer().unwrap();
    for chunk in data.chunks(7777) {
        writer.write(chunk).unwrap();
    }
    writer.finish().unwrap();
    assert_eq!(consumer.join().unwrap(), expected);
    let stats = ring.stats();
    assert_eq!(stats.writer.bytes, total as u64);
    assert_eq!(stats.writer.state, "finished");
}

/// Streaming copies (forced on a small and on a large ring) and whatever
/// `Auto` chooses for large blocks on this machine carry every byte in
/// order, whatever the pieces' sizes and alignments.
#[test]
fn streaming_copies_keep_every_byte_in_order() {
    for (tag, block, stores) in [
        ("stream-small", 64 << 10, CopyStores::Streaming),
        ("stream-large", STREAMING_FROM, CopyStores::Streaming),
        ("auto-large", STREAMING_FROM, CopyStores::Auto),
    ] {
        let name = Name::new(tag);
        let ring = Ring::create(&RingOptions::new(&name.0, 2 * block, block)).unwrap();
        let mut reader = ring.reader().unwrap();
        reader.set_copy_stores(stores);
        let total = 5 * block + 12_345;
        let data: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
        let expected = data.clone();
        let consumer = std::thread::spawn(move || {
            let mut got = Vec::new();
            // Reads of a whole block (streaming under Auto) and odd pieces.
            let mut buf = vec![0u8; block + 1];
            let mut small = vec![0u8; 40_001];
            for round in 0.. {
                let buf = if round % 3 == 2 { &mut small } else { &mut buf };
                let n = reader.read(buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        let mut writer = ring.writer().unwrap();
        writer.set_copy_stores(stores);
        assert_eq!(
            writer.streams(),
            stores.streams(block),
            "{tag}: the writer streams as its stores say"
        );
        // Pieces that start and end off line boundaries.
        for chunk in data.chunks(block / 3 + 17) {
            writer.write(chunk).unwrap();
        }
        writer.finish().unwrap();
        assert!(consumer.join().unwrap() == expected, "{tag}: bytes differ");
    }
    let name = Name::new("cached");
    let ring = Ring::create(&RingOptions::new(&name.0, 2 * (512 << 10), 512 << 10)).unwrap();
    let mut writer = ring.writer().unwrap();
    assert!(
        !writer.streams(),
        "512 KiB blocks (below any machine's threshold) are copied through the caches"
    );
    writer.set_copy_stores(CopyStores::Streaming);
    assert!(writer.streams());
}

#[test]
fn in_place_blocks_and_transfer_headers_arrive() {
    let name = Name::new("inplace");
    let ring = Ring::create(&RingOptions::new(&name.0, 2 * 1024, 1024)).unwrap();
    let mut reader = ring.reader_with(Backpressure::Block).unwrap();
    let consumer = std::thread::spawn(move || {
        let mut transfers = Vec::new();
        while let Some(transfer) = reader.next_transfer().unwrap() {
            let mut blocks = Vec::new();
            while let Some(block) = reader.borrow().unwrap() {
                let fine = block
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(block.seq(), i));
                blocks.push((block.seq(), block.len(), fine));
                if block.ends_transfer() {
                    break;
                }
            }
            transfers.push((transfer, blocks));
        }
        transfers
    });
    let mut writer = ring.writer().unwrap();
    writer.set_timeout(Some(Duration::from_secs(20)));
    for obs in 1..=3u64 {
        let mut header = TransferHeader::new();
        header.set("OBS_ID", &obs.to_string()).unwrap();
        writer.begin_transfer(&header).unwrap();
        for _ in 0..5 {
            let mut block = writer.claim().unwrap();
            let seq = block.seq();
            block
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = pattern(seq, i));
            block.commit(1000).unwrap();
        }
        writer.end_transfer().unwrap();
    }
    // A transfer without data still reaches the readers.
    let mut header = TransferHeader::new();
    header.set("EMPTY", "yes").unwrap();
    writer.begin_transfer(&header).unwrap();
    writer.finish().unwrap();

    let transfers = consumer.join().unwrap();
    assert_eq!(transfers.len(), 4);
    for (i, (transfer, blocks)) in transfers.iter().take(3).enumerate() {
        assert_eq!(transfer.id, i as u64 + 1);
        assert_eq!(transfer.header.get("OBS_ID"), Some(&*(i + 1).to_string()));
        // Five data blocks, then the empty block carrying the end.
        assert_eq!(blocks.len(), 6, "{blocks:?}");
        assert!(blocks[..5]
            .iter()
            .all(|&(_, len, fine)| len == 1000 && fine));
        assert_eq!(blocks[5].1, 0);
    }
    assert_eq!(transfers[3].0.header.get("EMPTY"), Some("yes"));
}

#[test]
fn lagging_reader_is_moved_on_and_the_writer_never_waits() {
    let name = Name::new("lag");
    let ring =
        Ring::create(&RingOptions::new(&name.0, 4 * 256, 256).backpressure(Backpressure::Lag))
            .unwrap();
    let mut slow = ring.reader().unwrap();
    let mut writer = ring.writer().unwrap();
    for seq in 0..20u64 {
        let mut block = writer.claim().unwrap();
        block.fill(seq as u8);
        block.commit(256).unwrap();
    }
    // Nobody read: the writer went on; the reader now sees the last 4.
    assert_eq!(slow.skipped(), 16);
    let mut seen = Vec::new();
    writer.finish().unwrap();
    while let Some(block) = slow.borrow().unwrap() {
        assert!(block.iter().all(|&b| b == block.seq() as u8));
        seen.push(block.seq());
    }
    // The empty end-of-transfer block pushed block 16 out too.
    assert_eq!(seen, vec![17, 18, 19, 20]);
    let stats = ring.stats();
    assert_eq!(stats.readers[0].mode, "lag");
    assert_eq!(stats.readers[0].skipped, 17);
}

#[test]
fn a_blocking_reader_holds_the_writer_until_the_timeout() {
    let name = Name::new("block");
    let ring = Ring::create(&RingOptions::new(&name.0, 2 * 128, 128)).unwrap();
    let _reader = ring.reader().unwrap();
    let mut writer = ring.writer().unwrap();
    writer.set_timeout(Some(Duration::from_millis(300)));
    writer.write(&[0u8; 256]).unwrap();
    let err = writer.write(&[0u8; 1]).unwrap_err();
    assert!(matches!(err, RingError::Timeout { .. }), "{err}");
    let stats = ring.stats();
    assert_eq!(stats.readers[0].lag_blocks, 2);
    assert!(
        stats.writer.waits >= 1 && stats.writer.sleeps >= 1,
        "{stats:?}"
    );
}

#[test]
fn a_reader_waiting_for_data_times_out() {
    let name = Name::new("idle");
    let ring = Ring::create(&RingOptions::new(&name.0, 2 * 128, 128)).unwrap();
    let mut reader = ring.reader().unwrap();
    reader.set_timeout(Some(Duration::from_millis(250)));
    let err = reader.read(&mut [0u8; 16]).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[test]
fn one_writer_at_a_time_and_slots_are_reused() {
    let name = Name::new("single");
    let ring = Ring::create(&RingOptions::new(&name.0, 2 * 128, 128).max_readers(2)).unwrap();
    let writer = ring.writer().unwrap();
    let err = ring.writer().unwrap_err();
    assert!(
        matches!(err, RingError::WriterBusy { pid } if pid == std::process::id()),
        "{err}"
    );
    drop(writer);
    let _again = ring.writer().unwrap();
    let a = ring.reader().unwrap();
    let b = ring.reader().unwrap();
    let err = ring.reader().unwrap_err();
    assert!(matches!(err, RingError::NoReaderSlot { slots: 2 }), "{err}");
    let slot = a.slot();
    drop(a);
    assert_eq!(ring.reader().unwrap().slot(), slot);
    drop(b);
}

#[test]
fn bad_options_are_refused_before_anything_is_made() {
    let name = Name::new("bad");
    for (options, needle) in [
        (RingOptions::new(&name.0, 4096, 100), "multiple of 64"),
        (RingOptions::new(&name.0, 4096 + 64, 4096), "whole number"),
        (RingOptions::new(&name.0, 4096, 4096), "2 to"),
        (
            RingOptions::new(&name.0, 8192, 4096).node(7),
            "node 7 does not exist",
        ),
        (RingOptions::new(&name.0, 1 << 46, 1 << 30).node(0), "free"),
        (RingOptions::new("a/../etc", 8192, 4096), "only letters"),
        (RingOptions::new(".hidden", 8192, 4096), "dot"),
    ] {
        let err = Ring::create(&options).unwrap_err().to_string();
        assert!(err.contains(needle), "{err} (wanted {needle:?})");
    }
    assert!(
        fs::symlink_metadata(name.shm_path()).is_err(),
        "nothing left behind"
    );
}

#[test]
fn a_name_is_made_once_and_removed_by_its_creator() {
    let name = Name::new("excl");
    let path = name.shm_path();
    let ring = Ring::create(&RingOptions::new(&name.0, 8192, 4096)).unwrap();
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let err = Ring::create(&RingOptions::new(&name.0, 8192, 4096)).unwrap_err();
    assert!(matches!(err, RingError::Exists { .. }), "{err}");
    drop(ring);
    assert!(fs::symlink_metadata(&path).is_err());
}

#[test]
fn stale_segments_are_listed_and_removed() {
    let name = Name::new("stale");
    let mut ring = Ring::create(&RingOptions::new(&name.0, 8192, 4096)).unwrap();
    let entry = ring::list().into_iter().find(|e| e.name == name.0).unwrap();
    assert!(entry.in_use && entry.stats.is_some());
    // A live creator: cleanup refuses unless forced.
    let err = ring::remove(&name.0, false).unwrap_err().to_string();
    assert!(err.contains("live process"), "{err}");
    ring.keep();
    drop(ring);
    let entry = ring::list().into_iter().find(|e| e.name == name.0).unwrap();
    assert!(entry.is_stale(), "{entry:?}");
    assert_eq!(ring::remove(&name.0, false).unwrap().len(), 1);
    assert!(ring::list().iter().all(|e| e.name != name.0));
    assert!(matches!(
        ring::remove(&name.0, false),
        Err(RingError::NotFound { .. })
    ));
}

/// Writes `bytes` as a would-be segment for `name`, owner-only.
fn plant(name: &Name, bytes: &[u8], mode: u32) {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(name.shm_path())
        .unwrap();
    file.write_all(bytes).unwrap();
    fs::set_permissions(name.shm_path(), fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn foreign_incomplete_and_unsafe_files_are_refused() {
    let open = |name: &Name| {
        // SAFETY: these segments are refused before anything is lent.
        unsafe { Ring::open(&name.0) }.unwrap_err()
    };
    let name = Name::new("zeros");
    plant(&name, &[0u8; 8192], 0o600);
    assert!(matches!(open(&name), RingError::Incomplete));

    let name = Name::new("foreign");
    plant(&name, &[0x5a; 8192], 0o600);
    assert!(matches!(open(&name), RingError::Foreign { .. }));

    let name = Name::new("short");
    plant(&name, b"NUMARING", 0o600);
    assert!(matches!(open(&name), RingError::Corrupt { .. }));

    let name = Name::new("loose");
    plant(&name, &[0u8; 8192], 0o644);
    let err = open(&name);
    assert!(err.to_string().contains("owner-only"), "{err}");

    let name = Name::new("link");
    let target = Name::new("target");
    let ring = Ring::create(&RingOptions::new(&target.0, 8192, 4096)).unwrap();
    std::os::unix::fs::symlink(ring.path(), name.shm_path()).unwrap();
    let err = open(&name);
    assert!(err.to_string().contains("symbolic link"), "{err}");
    // Creating over a link does not follow it either.
    let err = Ring::create(&RingOptions::new(&name.0, 8192, 4096)).unwrap_err();
    assert!(matches!(err, RingError::Exists { .. }), "{err}");
}

#[test]
fn fuzzed_segment_files_never_crash_an_opener() {
    // A valid segment's bytes, then random damage to the first page.
    let template = Name::new("template");
    let ring = Ring::create(&RingOptions::new(&template.0, 8192, 4096)).unwrap();
    let original = fs::read(ring.path()).unwrap();
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let rounds = if cfg!(miri) { 4 } else { 300 };
    for _ in 0..rounds {
        let name = Name::new("fuzz");
        let mut bytes = original.clone();
        for _ in 0..1 + next() % 8 {
            let at = (next() % 256) as usize;
            bytes[at] = next() as u8;
        }
        if next() % 4 == 0 {
            bytes.truncate((next() % bytes.len() as u64) as usize);
        }
        plant(&name, &bytes, 0o600);
        // SAFETY: no other process touches these files.
        match unsafe { Ring::open(&name.0) } {
            Ok(opened) => {
                // Only damage outside the checked bytes (reserved header
                // bytes) leaves a usable ring.
                assert_eq!(bytes.len(), original.len());
                assert_eq!(bytes[..168], original[..168]);
                drop(opened.reader().unwrap());
            }
            Err(err) => assert!(!err.to_string().is_empty()),
        }
    }
    drop(ring);
}

#[test]
fn the_monitor_reads_counters_without_joining() {
    let name = Name::new("monitor");
    let ring = Ring::create(
        &RingOptions::new(&name.0, 4 * 4096, 4096).policy(MemPolicy::Bind(NodeSet::single(0))),
    )
    .unwrap();
    let mut reader = ring.reader().unwrap();
    let mut writer = ring.writer().unwrap();
    writer.write(&[7u8; 3 * 4096]).unwrap();
    let mut buf = [0u8; 4096];
    assert_eq!(reader.read(&mut buf).unwrap(), 4096);
    let monitor = ring::RingMonitor::open(&name.0).unwrap();
    let stats = monitor.stats();
    assert_eq!(stats.policy, "bind:0");
    assert_eq!(stats.writer.blocks, 3);
    assert_eq!(stats.writer.state, "active");
    assert!(stats.creator_alive);
    assert_eq!(stats.readers.len(), 1, "the monitor did not join");
    assert_eq!(stats.readers[0].lag_blocks, 2);
    assert_eq!(stats.readers[0].bytes, 4096);
    assert_eq!(stats.readers[0].state, "active");
}
