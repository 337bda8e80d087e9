//! `pagecache::file_cache` against util-linux `fincore`, which counts the
//! same cached pages by its own `mincore` calls: the counts must agree,
//! and asking must not bring a page into the cache.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use numalab::pagecache::{file_cache, file_cache_threads, FileCacheBatch, PageCacheError, PART};

/// A directory on the file system under the build tree (a disk file
/// system, where evicted pages really leave the cache; on tmpfs they
/// cannot), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("pagecache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A new file `name` in `scratch`, open for reading and writing.
fn new_file(scratch: &Scratch, name: &str) -> (PathBuf, File) {
    let path = scratch.0.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    (path, file)
}

/// util-linux `fincore`'s count of `path`'s cached pages, or why it
/// cannot be had (printed; under CI a missing `fincore` fails).
fn fincore_pages(path: &Path) -> Option<u64> {
    let out = match Command::new("fincore")
        .args(["--bytes", "--noheadings", "--raw", "--output", "PAGES"])
        .arg(path)
        .output()
    {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("fincore failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(err) => {
            numalab::testing::cannot_check(format!("fincore (util-linux) cannot run here: {err}"));
            return None;
        }
    };
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .expect("fincore prints a page count"),
    )
}

/// Writes `len` bytes at `offset` and makes them clean (so they can be
/// evicted).
fn write_at(file: &File, offset: u64, len: usize) {
    file.write_all_at(&vec![0x5a; len], offset).unwrap();
    file.sync_all().unwrap();
}

/// Drops `len` bytes from `offset` of the file from the page cache.
fn evict(file: &File, offset: u64, len: u64) {
    // SAFETY: posix_fadvise only advises the kernel about the file.
    let ret = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    assert_eq!(ret, 0, "posix_fadvise");
}

#[test]
fn cached_pages_agree_with_fincore_and_asking_caches_nothing() {
    let scratch = Scratch::new("half");
    let (path, file) = new_file(&scratch, "half");
    write_at(&file, 0, 8 << 20);
    // The second half leaves the cache; a partial page at the end stays.
    write_at(&file, 8 << 20, 100);
    evict(&file, 4 << 20, 4 << 20);
    let Some(before) = fincore_pages(&path) else {
        return;
    };
    let cache = file_cache(&file).unwrap();
    let page = cache.page_size;
    assert_eq!(cache.size, (8 << 20) + 100);
    assert_eq!(cache.pages, (8 << 20) / page + 1);
    assert_eq!(cache.cached, before, "fincore counted {before}: {cache:?}");
    assert!(
        cache.cached < cache.pages,
        "half was evicted: {cache:?} (a file system whose pages cannot be dropped?)"
    );
    let located: u64 = cache.per_node.values().sum();
    assert_eq!(located + cache.unknown, cache.cached);
    assert_eq!(cache.unknown, 0, "every cached page has a node: {cache:?}");
    // Asking read nothing in: fincore finds what it found before.
    assert_eq!(fincore_pages(&path), Some(before));
    assert_eq!(file_cache(&file).unwrap(), cache);
}

#[test]
fn a_sparse_file_past_one_window_is_counted_window_by_window() {
    let scratch = Scratch::new("sparse");
    let (path, file) = new_file(&scratch, "sparse");
    let size = 3 * numalab::pagecache::WINDOW + 12345;
    file.set_len(size).unwrap();
    // One page in each window, and one in the last, partial one.
    for offset in [
        0,
        (3 << 30) / 2,
        2 * numalab::pagecache::WINDOW + 4096,
        size - 1,
    ] {
        write_at(&file, offset, 1);
    }
    let Some(expected) = fincore_pages(&path) else {
        return;
    };
    let cache = file_cache(&file).unwrap();
    assert_eq!(cache.size, size);
    assert_eq!(cache.pages, size.div_ceil(cache.page_size));
    assert_eq!(cache.cached, expected, "{cache:?}");
    assert_eq!(cache.cached, 4, "the four pages written");
    assert_eq!(fincore_pages(&path), Some(expected), "nothing read in");
}

#[test]
fn a_file_shared_among_threads_counts_as_one_thread_and_fincore_do() {
    let scratch = Scratch::new("threads");
    let (path, file) = new_file(&scratch, "parts");
    // Three parts for three threads; pages written on both sides of
    // each part's edge (the parts are a page-aligned third each).
    let size = 3 * PART - 4096 * 3 + 100;
    file.set_len(size).unwrap();
    let third = size.div_ceil(3).next_multiple_of(4096);
    for offset in [
        0,
        third - 4096,
        third,
        2 * third - 8192,
        2 * third,
        size - 1,
    ] {
        write_at(&file, offset, 4096.min((size - offset) as usize));
    }
    write_at(&file, PART / 2, 3 << 20);
    let Some(expected) = fincore_pages(&path) else {
        return;
    };
    let threads = file_cache_threads(&file, 3).unwrap();
    assert_eq!(threads.size, size);
    assert_eq!(threads.pages, size.div_ceil(threads.page_size));
    assert_eq!(threads.cached, expected, "{threads:?}");
    assert_eq!(threads, file_cache(&file).unwrap());
    let located: u64 = threads.per_node.values().sum();
    assert_eq!(located + threads.unknown, threads.cached);
    assert_eq!(fincore_pages(&path), Some(expected), "nothing read in");
}

#[test]
fn a_batch_counts_each_file_as_fincore_does_and_reads_nothing_in() {
    let scratch = Scratch::new("batch");
    // Small files wholly cached (mapped side by side: 80 MiB of them,
    // more than one reservation holds), partly cached, not cached,
    // empty, with a partial last page, and one too large to share.
    let mut paths = Vec::new();
    for i in 0..80 {
        let (path, file) = new_file(&scratch, &format!("whole{i}"));
        write_at(&file, 0, (1 << 20) - (i % 3) * 1000);
        paths.push(path);
    }
    let (path, file) = new_file(&scratch, "part");
    // A page at a time, so no folio spans the part evicted.
    for page in 0..128 {
        file.write_all_at(&[7; 4096], page * 4096).unwrap();
    }
    file.sync_all().unwrap();
    evict(&file, 128 << 10, 128 << 10);
    paths.push(path);
    let (path, file) = new_file(&scratch, "cold");
    write_at(&file, 0, 64 << 10);
    evict(&file, 0, 64 << 10);
    paths.push(path);
    paths.push(new_file(&scratch, "empty").0);
    let (path, file) = new_file(&scratch, "large");
    write_at(&file, 0, 3 << 20);
    paths.push(path);
    let Some(before) = paths
        .iter()
        .map(|p| fincore_pages(p))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let mut batch = FileCacheBatch::new();
    for path in &paths {
        // Each file is closed once added.
        batch.add(&File::open(path).unwrap());
    }
    let caches: Vec<_> = batch.finish().into_iter().map(Result::unwrap).collect();
    let again: Vec<_> = paths
        .iter()
        .map(|p| file_cache(&File::open(p).unwrap()).unwrap())
        .collect();
    // util-linux's count after: nothing reads the files, so the kernel can
    // only have evicted pages between the two (a VM may take idle page
    // cache back, as the one this was written on does, and a busy host's
    // did, a 512 KiB folio of one file): every count in between lies
    // between fincore's before and after, and equals both when nothing
    // was evicted.
    let after: Vec<_> = paths.iter().filter_map(|p| fincore_pages(p)).collect();
    assert_eq!(after.len(), before.len());
    assert_eq!(caches.len(), paths.len());
    for (i, (path, cache)) in paths.iter().zip(&caches).enumerate() {
        for (what, count) in [("batch", cache), ("file_cache", &again[i])] {
            assert!(
                (after[i]..=before[i]).contains(&count.cached),
                "{}: {what} counted {}, fincore {} before and {} after: {count:?}",
                path.display(),
                count.cached,
                before[i],
                after[i]
            );
            assert_eq!(count.size, fs::metadata(path).unwrap().len());
            let located: u64 = count.per_node.values().sum();
            assert_eq!(located + count.unknown, count.cached, "{}", path.display());
            assert_eq!(count.unknown, 0, "{}: {count:?}", path.display());
        }
    }
    assert!(before[80] > 0 && before[80] < 128, "part: {}", before[80]);
    assert_eq!(before[81], 0, "cold");
    // Nothing read in: no file has more pages cached than before.
    for ((path, after), before) in paths.iter().zip(&after).zip(&before) {
        assert!(
            after <= before,
            "{}: {before} pages cached before, {after} after: read in",
            path.display()
        );
    }
    assert_eq!(after[81], 0, "the cold file stays cold");
}

#[test]
fn an_empty_file_has_nothing_cached() {
    let scratch = Scratch::new("empty");
    let path = scratch.0.join("empty");
    File::create(&path).unwrap();
    let cache = file_cache(&File::open(&path).unwrap()).unwrap();
    assert_eq!((cache.size, cache.pages, cache.cached), (0, 0, 0));
    assert!(cache.per_node.is_empty());
}

#[test]
fn what_is_not_a_regular_file_is_named() {
    let scratch = Scratch::new("kinds");
    let dir = File::open(&scratch.0).unwrap();
    let err = file_cache(&dir).unwrap_err();
    assert!(
        matches!(err, PageCacheError::NotRegular("directory")),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("is a directory, not a regular file"),
        "{err}"
    );
    let fifo = scratch.0.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Opened without blocking for a writer.
    let fifo = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let err = file_cache(&fifo).unwrap_err();
    assert!(matches!(err, PageCacheError::NotRegular("FIFO")), "{err}");
    let null = File::open("/dev/null").unwrap();
    assert!(matches!(
        file_cache(&null).unwrap_err(),
        PageCacheError::NotRegular("character device")
    ));
}

use std::os::unix::fs::OpenOptionsExt;
