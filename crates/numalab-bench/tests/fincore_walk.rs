//! The fincore walk under a hostile neighbour: while it walks a tree,
//! another thread keeps swapping a directory inside the tree for a link
//! to a directory outside it holding FIFOs of the same names. A walk that
//! opened paths would follow the link and open the FIFOs (a device there
//! would be opened just the same); one that opens each level from the
//! descriptor of the one above never leaves the tree.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use numalab_bench::fincore::fincore;

/// Walks of the tree while the swapping goes on (the path-following walk
/// opened a FIFO in 6 of 40).
const WALKS: usize = 200;
const FILES: usize = 40;

#[test]
fn fincore_walk_never_leaves_the_tree_while_a_directory_is_swapped_for_a_link() {
    let base = std::env::temp_dir().join(format!("numalab-walk-race-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    let (tree, outside) = (base.join("tree"), base.join("outside"));
    fs::create_dir_all(tree.join("d")).unwrap();
    fs::create_dir_all(outside.join("d")).unwrap();
    let names: Vec<String> = (0..FILES).map(|i| format!("f{i:03}")).collect();
    for name in &names {
        fs::write(tree.join("d").join(name), [1u8; 4096]).unwrap();
    }
    let made = Command::new("mkfifo")
        .args(names.iter().map(|n| outside.join("d").join(n)))
        .status()
        .expect("mkfifo (coreutils)");
    assert!(made.success());

    let stop = AtomicBool::new(false);
    let (real, moved, link) = (tree.join("d"), tree.join("d.real"), outside.join("d"));
    let mut swaps = 0u64;
    let mut reports = Vec::new();
    std::thread::scope(|scope| {
        let swapper = scope.spawn(|| {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fs::rename(&real, &moved).unwrap();
                std::os::unix::fs::symlink(&link, &real).unwrap();
                std::thread::yield_now();
                fs::remove_file(&real).unwrap();
                fs::rename(&moved, &real).unwrap();
                std::thread::yield_now();
                swaps += 1;
            }
            swaps
        });
        for _ in 0..WALKS {
            reports.push(fincore(std::slice::from_ref(&tree)).unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        swaps = swapper.join().unwrap();
    });
    let _ = fs::remove_dir_all(&base);

    let mut saw_link = 0;
    for report in &reports {
        for failed in &report.failed {
            assert!(
                !failed.error.contains("FIFO"),
                "the walk opened a FIFO outside the tree: {failed}"
            );
            // A name gone between listing and opening is all that may
            // fail; a link met is skipped as one, not an error.
            assert!(
                failed.error.contains("No such file or directory"),
                "{failed}"
            );
        }
        for file in &report.files {
            assert!(
                Path::new(&file.path).starts_with(&tree),
                "counted outside the tree: {}",
                file.path
            );
            assert_eq!(
                file.cache.size, 4096,
                "{} is not a file of the tree",
                file.path
            );
        }
        saw_link += usize::from(report.skipped.links > 0);
    }
    eprintln!(
        "{WALKS} walks during {swaps} swaps: {saw_link} met the link and did not follow it, \
         none left the tree"
    );
}
