//! What other processes and users can put where ring segments live
//! (`/dev/shm`): FIFOs and other files under a segment's name, other
//! users' segments, corrupt headers; and the checks on many rings at once.

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use numalab::ring::{self, Ring, RingError, RingMonitor, RingOptions, HEADER_SIZE};
use proptest::prelude::*;

/// A unique ring name whose files are removed when the guard drops, even
/// when the test fails.
struct Name(String);

impl Name {
    fn new(tag: &str) -> Name {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        Name(format!("segtest-{}-{tag}-{n}", std::process::id()))
    }

    fn shm_path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/shm/numalab-ring.{}", self.0))
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let path = self.shm_path();
        if let Ok(meta) = fs::symlink_metadata(&path) {
            if meta.is_dir() {
                let _ = fs::remove_dir(&path);
            } else {
                let _ = fs::remove_file(&path);
            }
        }
    }
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is NUL-terminated (a test may call libc directly).
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo");
}

/// Runs `f` on another thread; fails the test if it has not returned
/// within a minute (the bug this guards against is a hang).
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(f());
    });
    receive
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not return within 60 s"))
}

#[test]
fn a_fifo_under_a_segment_name_is_listed_as_not_a_segment_and_never_removed() {
    let name = Name::new("fifo");
    mkfifo(&name.shm_path());
    let wanted = name.0.clone();
    let entry = within_a_minute("ring::list", move || {
        ring::list().into_iter().find(|e| e.name == wanted)
    })
    .expect("the FIFO is listed");
    assert_eq!(
        entry.problem.as_deref(),
        Some("not a ring segment: FIFO"),
        "{entry:?}"
    );
    assert!(entry.stats.is_none());
    for force in [false, true] {
        let wanted = name.0.clone();
        let err = within_a_minute("ring::remove", move || ring::remove(&wanted, force))
            .expect_err("a FIFO is not removed");
        assert!(
            err.to_string().contains("not a ring segment: FIFO"),
            "{err}"
        );
        assert!(fs::symlink_metadata(name.shm_path())
            .unwrap()
            .file_type()
            .is_fifo());
    }
    let wanted = name.0.clone();
    let err = within_a_minute("RingMonitor::open", move || {
        RingMonitor::open(&wanted).map(|_| ())
    })
    .unwrap_err();
    assert!(
        matches!(err, RingError::NotASegment { kind: "FIFO", .. }),
        "{err}"
    );
    let wanted = name.0.clone();
    let err = within_a_minute("Ring::open", move || {
        // SAFETY: refused before anything is mapped.
        unsafe { Ring::open(&wanted) }.map(|_| ())
    })
    .unwrap_err();
    assert!(
        matches!(err, RingError::NotASegment { kind: "FIFO", .. }),
        "{err}"
    );
}

#[test]
fn directories_and_links_under_a_segment_name_are_never_removed() {
    let dir = Name::new("dir");
    fs::create_dir(dir.shm_path()).unwrap();
    let link = Name::new("link");
    std::os::unix::fs::symlink("/etc/hostname", link.shm_path()).unwrap();
    let list = ring::list();
    for (name, kind) in [(&dir, "directory"), (&link, "symbolic link")] {
        let entry = list.iter().find(|e| e.name == name.0).expect("listed");
        assert_eq!(
            entry.problem.as_deref(),
            Some(format!("not a ring segment: {kind}").as_str())
        );
        let err = ring::remove(&name.0, true).unwrap_err();
        assert!(matches!(err, RingError::NotRemoved { .. }), "{err}");
        assert!(fs::symlink_metadata(name.shm_path()).is_ok());
    }
}

/// Writes `bytes` as a would-be segment for `name`, with `mode`.
fn plant(name: &Name, bytes: &[u8], len: u64, mode: u32) {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(name.shm_path())
        .unwrap();
    file.write_all(bytes).unwrap();
    file.set_len(len).unwrap();
    fs::set_permissions(name.shm_path(), fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_file_that_is_not_verified_as_a_segment_is_never_removed() {
    for (tag, bytes) in [
        ("zeros", vec![0u8; 8192]),
        ("text", b"my notes\n".repeat(100)),
    ] {
        let name = Name::new(tag);
        plant(&name, &bytes, bytes.len() as u64, 0o600);
        let entry = ring::list().into_iter().find(|e| e.name == name.0).unwrap();
        assert!(entry.problem.is_some(), "{entry:?}");
        let err = ring::remove(&name.0, true).unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot verify that it is a ring segment"),
            "{err}"
        );
        assert!(name.shm_path().exists(), "{tag} was removed");
    }
}

#[test]
fn a_segment_of_another_layout_version_is_listed_and_removed() {
    let name = Name::new("old-version");
    let mut made = Ring::create(&RingOptions::new(&name.0, 4 * 4096, 4096)).unwrap();
    made.keep();
    drop(made);
    let mut bytes = fs::read(name.shm_path()).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    fix_checksum(&mut bytes);
    fs::write(name.shm_path(), &bytes).unwrap();
    let entry = ring::list().into_iter().find(|e| e.name == name.0).unwrap();
    assert!(
        entry
            .problem
            .as_deref()
            .unwrap_or("")
            .contains("layout version 1"),
        "{entry:?}"
    );
    assert_eq!(ring::remove(&name.0, false).unwrap(), [name.shm_path()]);
}

/// A user id that is not this process's (nobody).
const OTHER_USER: u32 = 65534;

fn chown(path: &Path, uid: u32) -> bool {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).is_ok()
}

#[test]
fn another_users_segment_is_listed_and_removed_only_as_root_rules_say() {
    // A valid segment, stale (its creator handle dropped), given to another
    // user: only root can do that.
    let name = Name::new("others");
    let mut made = Ring::create(&RingOptions::new(&name.0, 4 * 4096, 4096)).unwrap();
    made.keep();
    drop(made);
    if !chown(&name.shm_path(), OTHER_USER) {
        numalab::testing::cannot_check("chown to another user needs root");
        return;
    }
    // Listing never fails on it, and says whose it is.
    let entry = ring::list().into_iter().find(|e| e.name == name.0).unwrap();
    let problem = entry.problem.clone().unwrap_or_default();
    assert!(problem.contains(&format!("user {OTHER_USER}")), "{entry:?}");
    assert!(!entry.in_use);
    // As root: a valid header and nobody holding it, so it is removed.
    assert_eq!(ring::remove(&name.0, false).unwrap(), [name.shm_path()]);

    // Another user's file that is not a valid segment stays, even forced.
    let name = Name::new("others-corrupt");
    plant(&name, &[0x5a; 8192], 8192, 0o600);
    assert!(chown(&name.shm_path(), OTHER_USER));
    let err = ring::remove(&name.0, true).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot verify that it is a ring segment"),
        "{err}"
    );
    assert!(name.shm_path().exists());

    // Another user's segment some process holds stays, even forced.
    let name = Name::new("others-held");
    let held = Ring::create(&RingOptions::new(&name.0, 4 * 4096, 4096)).unwrap();
    assert!(chown(&name.shm_path(), OTHER_USER));
    let err = ring::remove(&name.0, true).unwrap_err();
    assert!(err.to_string().contains("no process holds it"), "{err}");
    assert_eq!(
        fs::symlink_metadata(name.shm_path()).unwrap().uid(),
        OTHER_USER
    );
    drop(held);
}

#[test]
fn remove_abandoned_removes_only_a_segment_whose_creator_is_gone() {
    let name = Name::new("abandoned");
    let mut made = Ring::create(&RingOptions::new(&name.0, 4 * 4096, 4096)).unwrap();
    // A reader of it, as a worker: its lock does not keep the segment.
    // SAFETY: only this test touches the ring.
    let opened = unsafe { Ring::open(&name.0) }.unwrap();
    let _reader = opened.reader().unwrap();
    assert!(!ring::remove_abandoned(&name.0).unwrap(), "creator alive");
    assert!(name.shm_path().exists());
    made.keep();
    drop(made);
    assert!(ring::remove_abandoned(&name.0).unwrap());
    assert!(!name.shm_path().exists());
    // A corrupt file under the name is not touched.
    let name = Name::new("abandoned-corrupt");
    plant(&name, &[0x5a; 8192], 8192, 0o600);
    assert!(!ring::remove_abandoned(&name.0).unwrap());
    assert!(name.shm_path().exists());
}

#[test]
fn many_rings_are_checked_against_free_memory_together() {
    // Each ring fits on its own; a thousand of them do not: the total is
    // what counts, and the error names it.
    let free = fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .expect("MemTotal in /proc/meminfo")
        * 1024;
    let block = 1u64 << 20;
    let blocks = (free / 200 / block).max(2);
    let one = |i: usize| {
        RingOptions::new(
            &format!("room-{i}"),
            (blocks * block) as usize,
            block as usize,
        )
        .node(0)
    };
    ring::check_room(&[one(0)]).unwrap();
    let many: Vec<RingOptions> = (0..1000).map(one).collect();
    match ring::check_room(&many) {
        Err(RingError::NoRoom {
            rings,
            needed,
            data,
            ..
        }) => {
            assert!(rings <= 1000);
            assert!(needed > free, "{needed} <= {free}");
            assert!(data < needed);
        }
        other => panic!("expected NoRoom, got {other:?}"),
    }
    // Nothing was made.
    assert!(ring::list().iter().all(|e| !e.name.starts_with("room-")));
}

#[test]
fn a_ring_with_tiny_blocks_states_its_overhead() {
    // 1 Mi blocks of 64 bytes: 64 MiB of data; by default each block also
    // has a 4 KiB transfer-header slot and a 32-byte descriptor.
    let options = RingOptions::new("overhead", 64 << 20, 64);
    let size = options.segment_size().unwrap();
    assert!(size >= (64 + 4096 + 32) << 20, "{size}");
    let small = options.header_size(64).segment_size().unwrap();
    assert!(small < (64 + 64 + 32 + 1) << 20, "{small}");
}

// ---------------------------------------------------------------------------
// The segment header, as another process may have written it.
// ---------------------------------------------------------------------------

/// FNV-1a, as the layout checksums header bytes 8..160.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn fix_checksum(header: &mut [u8]) {
    let sum = fnv1a(&header[8..160]);
    header[160..168].copy_from_slice(&sum.to_le_bytes());
}

/// A valid segment's first page and its length, made once.
fn template() -> &'static (Vec<u8>, u64) {
    static TEMPLATE: std::sync::OnceLock<(Vec<u8>, u64)> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let name = Name::new("template");
        let made = Ring::create(&RingOptions::new(&name.0, 4 * 4096, 4096).max_readers(2)).unwrap();
        let bytes = fs::read(made.path()).unwrap();
        let len = bytes.len() as u64;
        drop(made);
        (bytes[..4096].to_vec(), len)
    })
}

/// Header fields worth aiming at: (offset, width).
const FIELDS: [(usize, usize); 17] = [
    (0, 8),   // magic
    (8, 4),   // layout version
    (12, 4),  // header size
    (16, 8),  // total size
    (24, 8),  // block size
    (32, 8),  // blocks
    (40, 4),  // reader slots
    (44, 4),  // transfer-header slot size
    (48, 8),  // readers offset
    (56, 8),  // descriptors offset
    (64, 8),  // transfer headers offset
    (72, 8),  // data offset
    (80, 4),  // flags
    (84, 4),  // creator pid
    (88, 8),  // created
    (96, 64), // policy text
    (160, 8), // checksum
];

#[derive(Debug, Clone)]
enum Mutation {
    /// A field set to a value (boundaries included).
    Field { field: usize, value: u64 },
    /// A byte anywhere in the first page.
    Byte { at: usize, value: u8 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let value = prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(63),
        Just(64),
        Just(4096),
        Just(1 << 20),
        Just((1 << 20) + 1),
        Just(u64::from(u32::MAX)),
        Just(u64::MAX),
        Just(u64::MAX / 64 * 64),
        any::<u64>(),
    ];
    prop_oneof![
        (0..FIELDS.len(), value).prop_map(|(field, value)| Mutation::Field { field, value }),
        (0..4096usize, any::<u8>()).prop_map(|(at, value)| Mutation::Byte { at, value }),
    ]
}

/// A would-be segment: a valid one's first page with mutations, the
/// checksum recomputed (or not), the file at some length.
fn segment_case() -> impl Strategy<Value = (Vec<Mutation>, bool, Option<u64>, bool)> {
    (
        prop::collection::vec(mutation(), 0..6),
        any::<bool>(),
        prop_oneof![
            Just(None),
            (0u64..(64 << 20)).prop_map(Some),
            Just(Some(HEADER_SIZE as u64 - 1)),
        ],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Mutated headers, written into a segment file, are refused with a
    /// typed error by every opener (never a panic, a hang or a huge
    /// mapping), and listing shows them with their problem; the pure check
    /// a fuzz target calls agrees with the openers.
    #[test]
    fn mutated_segment_headers_are_refused_with_a_typed_error(
        (mutations, fix, len, scramble_control) in segment_case()
    ) {
        let (page, valid_len) = template().clone();
        let mut bytes = page;
        for m in &mutations {
            match *m {
                Mutation::Field { field, value } => {
                    let (at, width) = FIELDS[field];
                    let le = value.to_le_bytes();
                    for i in 0..width {
                        bytes[at + i] = le[i % 8];
                    }
                }
                Mutation::Byte { at, value } => bytes[at] = value,
            }
        }
        if fix {
            fix_checksum(&mut bytes);
        }
        if scramble_control {
            // The writer's and readers' control words after the header:
            // counters a monitor reads as numbers, never as sizes.
            for (i, b) in bytes[HEADER_SIZE..].iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(151) ^ 0xa5;
            }
        }
        let len = len.unwrap_or(valid_len);
        let name = Name::new("prop");
        let written = &bytes[..bytes.len().min(len as usize)];
        plant(&name, written, len, 0o600);

        let header = &bytes[..HEADER_SIZE.min(written.len())];
        let pure = ring::validate_header(header, len);
        let monitor = RingMonitor::open(&name.0);
        match (&pure, &monitor) {
            (Ok(()), Ok(monitor)) => {
                // A valid header: counters, whatever the control words say.
                let stats = monitor.stats();
                prop_assert!(stats.readers.len() <= 64);
            }
            (Err(_), Err(err)) => prop_assert!(
                matches!(
                    err,
                    RingError::Incomplete
                        | RingError::Foreign { .. }
                        | RingError::Version { .. }
                        | RingError::Corrupt { .. }
                ),
                "{err}"
            ),
            (pure, monitor) => prop_assert!(
                false,
                "the pure check said {pure:?}, the monitor {:?}",
                monitor.as_ref().map(|_| ())
            ),
        }
        // SAFETY: only this test touches the file; a valid one is dropped
        // at once.
        let opened = unsafe { Ring::open(&name.0) };
        prop_assert_eq!(opened.is_ok(), pure.is_ok());
        drop(opened);
        let entry = ring::list().into_iter().find(|e| e.name == name.0);
        let entry = entry.expect("listed");
        prop_assert_eq!(entry.problem.is_none(), pure.is_ok(), "{:?}", entry);
        match pure {
            // A numalab header of another layout version may be removed.
            Ok(()) | Err(RingError::Version { .. }) => {}
            // Anything else is never removed: not verified as a segment.
            Err(_) => {
                prop_assert!(ring::remove(&name.0, true).is_err());
                prop_assert!(name.shm_path().exists());
            }
        }
    }

    /// Any bytes at all, at any claimed length: the pure check returns.
    #[test]
    fn any_bytes_are_a_header_or_a_typed_error(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        len in any::<u64>(),
        magic in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 12 {
            bytes[..8].copy_from_slice(b"NUMARING");
            bytes[8..12].copy_from_slice(&2u32.to_le_bytes()); // the layout version
        }
        if bytes.len() >= 168 {
            fix_checksum(&mut bytes);
        }
        match ring::validate_header(&bytes, len) {
            Ok(()) => prop_assert!(bytes.len() >= HEADER_SIZE),
            Err(err) => prop_assert!(!err.to_string().is_empty()),
        }
    }
}
