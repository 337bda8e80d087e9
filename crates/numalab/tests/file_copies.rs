//! `ReplicatedFile`: readers get the file's bytes from per-node copies,
//! a write through it is never read stale afterwards (by threads, and by
//! readers in another process than the writer), budgets and the
//! watermark hold, and memory given back leaves the segment (the
//! kernel's count of its allocated blocks, `fstat`).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use numalab::replicated::{FileCopyError, FileCopyOptions, ReplicatedFile};

const CHUNK: u64 = 64 << 10;

/// An unnamed file of `len` bytes with a pattern no two chunks share.
fn patterned(len: usize) -> (File, Vec<u8>) {
    let bytes: Vec<u8> = (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut file = numalab::files::scratch_file(&std::env::temp_dir()).unwrap();
    file.write_all(&bytes).unwrap();
    (file, bytes)
}

/// An unnamed file of `chunks` chunks of zeros: every chunk's stamp 0.
fn zeros(chunks: u64) -> File {
    let file = numalab::files::scratch_file(&std::env::temp_dir()).unwrap();
    file.write_all_at(&vec![0u8; (chunks * CHUNK) as usize], 0)
        .unwrap();
    file
}

/// Bytes of memory the kernel has given the segment (tmpfs blocks).
fn allocated(copies: &ReplicatedFile) -> u64 {
    let meta = copies.segment().metadata().unwrap();
    std::os::unix::fs::MetadataExt::blocks(&meta) * 512
}

fn read_all(reader: &mut numalab::replicated::FileReader<'_>, len: usize, block: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let end = (at + block).min(len);
        let n = reader.read_at(&mut out[at..end], at as u64).unwrap();
        assert_eq!(n, end - at);
        at = end;
    }
    out
}

#[test]
fn readers_get_the_files_bytes_from_copies_that_take_memory() {
    // Not a whole number of chunks: the last one is short.
    let len = 40 * CHUNK as usize + 1234;
    let (file, bytes) = patterned(len);
    let copies = ReplicatedFile::new(file, FileCopyOptions::default()).unwrap();
    let node = copies.nodes()[0];
    let empty = allocated(&copies);
    let mut reader = copies.reader(node);
    assert_eq!(read_all(&mut reader, len, 8192), bytes, "first pass");
    assert_eq!(reader.copied, 41, "one copy per chunk");
    let mut again = copies.reader(node);
    assert_eq!(read_all(&mut again, len, 3000), bytes, "second pass");
    assert_eq!(again.from_copies, len as u64, "all from the copies");
    assert_eq!(again.copied, 0);
    // The kernel gave the segment the copies' memory (whole pages of
    // whole chunks, the last one rounded to pages), and a page or three
    // of metadata.
    let page = numalab::pagecache::file_cache(copies.file())
        .unwrap()
        .page_size;
    let full = allocated(&copies);
    let expected = 40 * CHUNK + 1234u64.div_ceil(page) * page;
    assert!(
        (expected..=expected + 3 * page).contains(&(full - empty)),
        "{full} - {empty}"
    );
    let stats = copies.stats();
    assert_eq!(stats[0].copies_made, 41);
    let pages = copies.copy_pages().unwrap();
    assert_eq!(pages[0].1.cached, expected / page);
    assert_eq!(
        pages[0].1.on_node(node),
        expected / page,
        "on the reader's node"
    );
    copies.drop_copies();
    assert_eq!(allocated(&copies), full - expected, "every copy given back");
    assert_eq!(copies.copy_pages().unwrap()[0].1.cached, 0);
    assert_eq!(copies.stats()[0].resident_bytes, 0);
    let mut after = copies.reader(node);
    assert_eq!(read_all(&mut after, len, 65536), bytes, "made again");
}

#[test]
fn a_write_is_never_read_stale_after_it_returns() {
    let len = 16 * CHUNK as usize;
    let (file, mut bytes) = patterned(len);
    let copies = ReplicatedFile::new(file, FileCopyOptions::default()).unwrap();
    let node = copies.nodes()[0];
    let mut reader = copies.reader(node);
    read_all(&mut reader, len, 8192);
    // Straddles chunks 2 and 3.
    let at = 3 * CHUNK as usize - 10;
    copies.write_at(&[0xAB; 20], at as u64).unwrap();
    bytes[at..at + 20].fill(0xAB);
    let mut after = copies.reader(node);
    assert_eq!(read_all(&mut after, len, 8192), bytes);
    assert_eq!(after.copied, 2, "the two chunks written were copied again");
    let mut on_disk = vec![0u8; len];
    copies.file().read_exact_at(&mut on_disk, 0).unwrap();
    assert_eq!(on_disk, bytes, "the file itself has the write");
    let err = copies.write_at(&[1; 8], len as u64 - 4).unwrap_err();
    assert!(matches!(err, FileCopyError::OutOfRange { .. }), "{err}");
}

/// Chunk stamps: the writer writes `v` at the start of every chunk, then
/// says `v` is done; any read after that must see `v` or later.
#[test]
fn threads_never_read_a_write_stale() {
    let chunks = 32u64;
    let copies = ReplicatedFile::new(zeros(chunks), FileCopyOptions::default()).unwrap();
    let node = copies.nodes()[0];
    let done = std::sync::atomic::AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for v in 1..=300u64 {
                for c in 0..chunks {
                    copies.write_at(&v.to_le_bytes(), c * CHUNK).unwrap();
                }
                done.store(v, Ordering::SeqCst);
            }
            stop.store(true, Ordering::SeqCst);
        });
        let mut readers = Vec::new();
        for _ in 0..2 {
            readers.push(s.spawn(|| {
                let mut reader = copies.reader(node);
                let mut stamp = [0u8; 8];
                while !stop.load(Ordering::SeqCst) {
                    let floor = done.load(Ordering::SeqCst);
                    for c in 0..chunks {
                        reader.read_at(&mut stamp, c * CHUNK).unwrap();
                        let seen = u64::from_le_bytes(stamp);
                        assert!(seen >= floor, "chunk {c}: {seen} after {floor}");
                    }
                }
                reader.from_copies
            }));
        }
        let served: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(
            served > 0,
            "no read came from a copy: the test proved nothing"
        );
    });
}

/// The same across processes: this test runs itself again as the writer,
/// which attaches to the copies through /proc/PID/fd.
#[test]
fn another_processs_write_is_never_read_stale() {
    if let Ok(paths) = std::env::var("NUMALAB_TEST_COPY_WRITER") {
        return be_the_writer(&paths);
    }
    let chunks = 32u64;
    let copies = ReplicatedFile::new(zeros(chunks), FileCopyOptions::default()).unwrap();
    let node = copies.nodes()[0];
    let done = numalab::files::scratch_file(&std::env::temp_dir()).unwrap();
    done.write_all_at(&0u64.to_le_bytes(), 0).unwrap();
    let pid = std::process::id();
    let paths = format!(
        "/proc/{pid}/fd/{}:/proc/{pid}/fd/{}:/proc/{pid}/fd/{}",
        copies.file().as_raw_fd(),
        copies.segment().as_raw_fd(),
        done.as_raw_fd()
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "another_processs_write_is_never_read_stale",
            "--nocapture",
        ])
        .env("NUMALAB_TEST_COPY_WRITER", paths)
        .spawn()
        .unwrap();
    let mut reader = copies.reader(node);
    let mut stamp = [0u8; 8];
    let mut overlapped = 0u64;
    loop {
        let exited = child.try_wait().unwrap();
        done.read_exact_at(&mut stamp, 0).unwrap();
        let floor = u64::from_le_bytes(stamp);
        for c in 0..chunks {
            reader.read_at(&mut stamp, c * CHUNK).unwrap();
            let seen = u64::from_le_bytes(stamp);
            assert!(seen >= floor, "chunk {c}: {seen} after {floor}");
            overlapped += u64::from(floor > 0 && floor < 300);
        }
        if let Some(status) = exited {
            assert!(status.success(), "the writer failed: {status}");
            assert_eq!(floor, 300, "the writer finished");
            break;
        }
    }
    // Reads while the writer wrote, some from copies: else the test
    // proved nothing.
    assert!(
        overlapped > 100,
        "only {overlapped} reads overlapped the writes"
    );
    assert!(reader.from_copies > 0, "no read came from a copy");
    let made: u64 = copies.stats().iter().map(|s| s.copies_made).sum();
    assert!(made > chunks, "writes made copies stale: {made} made");
}

fn be_the_writer(paths: &str) {
    let open = |path: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    };
    let parts: Vec<&str> = paths.split(':').collect();
    let copies = ReplicatedFile::attach(open(parts[0]), open(parts[1])).unwrap();
    let done = open(parts[2]);
    let chunks = copies.len() / CHUNK;
    for v in 1..=300u64 {
        for c in 0..chunks {
            copies.write_at(&v.to_le_bytes(), c * CHUNK).unwrap();
        }
        done.write_all_at(&v.to_le_bytes(), 0).unwrap();
        // Long enough for the reader to read between versions.
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

#[test]
fn the_budget_caps_each_nodes_copies() {
    let len = 32 * CHUNK as usize;
    let (file, bytes) = patterned(len);
    let options = FileCopyOptions::default().budget_per_node(Some(4 * CHUNK));
    let copies = ReplicatedFile::new(file, options).unwrap();
    let empty = allocated(&copies);
    let mut reader = copies.reader(copies.nodes()[0]);
    assert_eq!(read_all(&mut reader, len, 8192), bytes);
    assert_eq!(reader.copied, 4);
    let stats = &copies.stats()[0];
    assert_eq!(stats.resident_bytes, 4 * CHUNK);
    assert!(stats.refused >= 28, "{stats:?}");
    let page = numalab::pagecache::file_cache(copies.file())
        .unwrap()
        .page_size;
    let grown = allocated(&copies) - empty;
    assert!(
        (4 * CHUNK..=4 * CHUNK + 3 * page).contains(&grown),
        "{grown}"
    );
}

#[test]
fn below_the_watermark_copies_are_given_back_and_none_made() {
    let len = 32 * CHUNK as usize;
    let (file, bytes) = patterned(len);
    let copies = ReplicatedFile::new(file, FileCopyOptions::default().min_free_bytes(0)).unwrap();
    let empty = allocated(&copies);
    let node = copies.nodes()[0];
    read_all(&mut copies.reader(node), len, 8192);
    let full = allocated(&copies);
    let page = numalab::pagecache::file_cache(copies.file())
        .unwrap()
        .page_size;
    assert!((len as u64..=len as u64 + 3 * page).contains(&(full - empty)));
    // No node has this much free: every copy goes back, cold ones first.
    copies.set_min_free_bytes(u64::MAX);
    copies.check_memory();
    let stats = &copies.stats()[0];
    assert!(stats.under_pressure);
    assert_eq!(stats.resident_bytes, 0);
    assert_eq!(
        allocated(&copies),
        full - len as u64,
        "the kernel has the memory back"
    );
    let mut reader = copies.reader(node);
    assert_eq!(read_all(&mut reader, len, 8192), bytes);
    assert_eq!((reader.copied, reader.from_file), (0, len as u64));
}

#[test]
fn copies_of_another_file_or_a_foreign_segment_are_refused() {
    let (file, _) = patterned(1 << 20);
    let copies = ReplicatedFile::new(file, FileCopyOptions::default()).unwrap();
    let (other, _) = patterned(1 << 20);
    let segment = copies.segment().try_clone().unwrap();
    let err = ReplicatedFile::attach(other, segment).unwrap_err();
    assert!(err.to_string().contains("made for another file"), "{err}");
    let (file, _) = patterned(1 << 20);
    let (foreign, _) = patterned(1 << 20);
    let err = ReplicatedFile::attach(file, foreign).unwrap_err();
    assert!(
        err.to_string().contains("no numalab file-copies header"),
        "{err}"
    );
    let (file, _) = patterned(1 << 20);
    let err = ReplicatedFile::new(file, FileCopyOptions::default().chunk_size(1000)).unwrap_err();
    assert!(err.to_string().contains("power of two"), "{err}");
    let (file, _) = patterned(1 << 20);
    let err = ReplicatedFile::new(
        file,
        FileCopyOptions::default().nodes(Some("999".parse().unwrap())),
    )
    .unwrap_err();
    assert!(err.to_string().contains("node 999"), "{err}");
}
