//! `numalab fleet DIR` under a hostile neighbour: while root merges a
//! directory of reports, the directory's owner keeps swapping one entry
//! between a real report and a symbolic link to another report, one only
//! root may read, whose host name gives it away. A merge that judged the
//! entry by the listing and then opened its path would follow the link
//! and merge the other file (2 runs of 10 did); one that opens each entry
//! from the directory's descriptor without following links never does.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};

use numalab_bench::fleet::{fleet, FleetOptions};

/// Merges while the swapping goes on.
const MERGES: usize = 200;

/// The host name of the file the link leads to.
const SECRET: &str = "secret-host-behind-the-link";

fn saved(name: &str) -> String {
    fs::read_to_string(format!(
        "{}/../../tests/results/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// `text`, a report, naming `host`.
fn with_host(text: &str, host: &str) -> String {
    let mut doc: serde_json::Value = serde_json::from_str(text).unwrap();
    doc["host"] = host.into();
    serde_json::to_string(&doc).unwrap()
}

#[test]
fn fleet_never_merges_the_file_behind_an_entry_swapped_for_a_link() {
    let base = std::env::temp_dir().join(format!("numalab-fleet-swap-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    let (dir, outside) = (base.join("results"), base.join("outside"));
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let text = saved("report-two-socket.json");
    for i in 0..8 {
        fs::write(
            dir.join(format!("n{i}.json")),
            with_host(&text, &format!("n{i}")),
        )
        .unwrap();
    }
    let secret = outside.join("secret.json");
    fs::write(&secret, with_host(&text, SECRET)).unwrap();
    let real = base.join("zz.real");
    fs::write(&real, with_host(&text, "zz")).unwrap();
    let (entry, link, staged) = (
        dir.join("zz.json"),
        base.join("zz.link"),
        base.join("zz.next"),
    );
    std::os::unix::fs::symlink(&secret, &link).unwrap();

    let stop = AtomicBool::new(false);
    let mut swaps = 0u64;
    let mut reports = Vec::new();
    std::thread::scope(|scope| {
        let swapper = scope.spawn(|| {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Each swap a rename, so the entry is always one or the
                // other: a hard link of the real report, then the link.
                fs::hard_link(&real, &staged).unwrap();
                fs::rename(&staged, &entry).unwrap();
                std::thread::yield_now();
                let _ = fs::remove_file(&staged);
                std::os::unix::fs::symlink(&secret, &staged).unwrap();
                fs::rename(&staged, &entry).unwrap();
                std::thread::yield_now();
                swaps += 1;
            }
            swaps
        });
        let options = FleetOptions {
            threads: 2,
            ..FleetOptions::default()
        };
        for _ in 0..MERGES {
            reports.push(fleet(std::slice::from_ref(&dir), &options).unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        swaps = swapper.join().unwrap();
    });
    let _ = fs::remove_dir_all(&base);

    let (mut merged, mut left_as_link) = (0, 0);
    for report in &reports {
        for host in &report.hosts {
            assert_ne!(host.host, SECRET, "merged the file behind the link");
        }
        merged += usize::from(report.hosts.iter().any(|h| h.host == "zz"));
        for left in &report.left_out {
            if left.path.ends_with("zz.json") {
                assert!(
                    left.reason.starts_with("a symbolic link: not followed")
                        || left.reason.starts_with("cannot be opened: No such file"),
                    "{left}"
                );
                left_as_link += 1;
            }
        }
    }
    eprintln!(
        "{MERGES} merges during {swaps} swaps: zz merged {merged} times, left out {left_as_link} \
         times, the file behind the link never"
    );
}
