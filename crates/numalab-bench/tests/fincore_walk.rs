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

use numalab_bench::fincore;

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
            reports.push(fincore::run(std::slice::from_ref(&tree)).unwrap());
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

mod renames {
    //! The same promise for any tree and any renames: a random tree of
    //! directories and files (each file a size of its own), and a
    //! neighbour that keeps applying and undoing random renames — a
    //! directory moved into another, a file moved to another directory, a
    //! directory swapped for a link to one outside holding FIFOs and files
    //! of the outside's own size — while the tree is walked. Every file
    //! counted is one of the tree's, under the tree's root; nothing fails
    //! but a name that vanished; and once the neighbour stops, a walk
    //! counts exactly what `find -type f` lists. (Whether a walk meets a
    //! directory in the instant it becomes a link is up to the scheduler;
    //! that such a directory is not entered is checked without a race in
    //! `TreeDir::open_child`'s example, which fails for a walk that
    //! follows it.)

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    /// Walks of each tree while the neighbour renames.
    const WALKS_PER_TREE: usize = 20;

    /// Files of the root besides the tree's own.
    const FILLER: usize = 100;

    /// The outside's files: a size no file of the tree has.
    const OUTSIDE_SIZE: u64 = 7;

    #[derive(Debug, Clone)]
    enum Rename {
        /// Directory `a` (not the root) moved into directory `b`.
        DirInto(usize, usize),
        /// File `f` moved into directory `d`.
        FileInto(usize, usize),
        /// Directory `a` (not the root) swapped for a link outside.
        DirForLink(usize),
    }

    #[derive(Debug, Clone)]
    struct Tree {
        /// Each directory's parent (directory 0 is the root).
        parents: Vec<usize>,
        /// Each file's directory.
        files: Vec<usize>,
        renames: Vec<Rename>,
    }

    fn trees() -> impl Strategy<Value = Tree> {
        (1usize..8)
            .prop_flat_map(|dirs| {
                let parents: Vec<BoxedStrategy<usize>> = (0..dirs)
                    .map(|i| {
                        if i == 0 {
                            Just(0).boxed()
                        } else {
                            (0..i).boxed()
                        }
                    })
                    .collect();
                let files = prop::collection::vec(0..dirs, 1..24);
                (parents, files, Just(dirs))
            })
            .prop_flat_map(|(parents, files, dirs)| {
                let count = files.len();
                let rename = prop_oneof![
                    (1..dirs.max(2), 0..dirs).prop_map(|(a, b)| Rename::DirInto(a, b)),
                    (0..count, 0..dirs).prop_map(|(f, d)| Rename::FileInto(f, d)),
                    (1..dirs.max(2)).prop_map(Rename::DirForLink),
                ];
                (
                    Just(parents),
                    Just(files),
                    prop::collection::vec(rename, 1..6),
                )
            })
            .prop_map(|(parents, files, renames)| Tree {
                parents,
                files,
                renames,
            })
    }

    /// Directory `d`'s path under `root`.
    fn dir_path(tree: &Tree, root: &Path, d: usize) -> PathBuf {
        let mut chain = vec![d];
        while *chain.last().unwrap() != 0 {
            chain.push(tree.parents[*chain.last().unwrap()]);
        }
        chain
            .iter()
            .rev()
            .skip(1)
            .fold(root.to_owned(), |path, d| path.join(format!("d{d}")))
    }

    /// Whether directory `inner` is `outer` or inside it.
    fn within(tree: &Tree, mut inner: usize, outer: usize) -> bool {
        loop {
            if inner == outer {
                return true;
            }
            if inner == 0 {
                return false;
            }
            inner = tree.parents[inner];
        }
    }

    /// The rename's two steps: do, undo (each a rename, or a rename and a
    /// link). `None` when it cannot be done (a directory into itself).
    fn apply(tree: &Tree, root: &Path, outside: &Path, rename: &Rename) -> Option<()> {
        match *rename {
            Rename::DirInto(a, b) => {
                if a >= tree.parents.len() || within(tree, b, a) {
                    return None;
                }
                let (from, to) = (
                    dir_path(tree, root, a),
                    dir_path(tree, root, b).join("moved"),
                );
                fs::rename(&from, &to).ok()?;
                std::thread::yield_now();
                fs::rename(&to, &from).unwrap();
            }
            Rename::FileInto(f, d) => {
                let from = dir_path(tree, root, tree.files[f]).join(format!("f{f}"));
                let to = dir_path(tree, root, d).join(format!("moved-f{f}"));
                fs::rename(&from, &to).ok()?;
                std::thread::yield_now();
                fs::rename(&to, &from).unwrap();
            }
            Rename::DirForLink(a) => {
                if a >= tree.parents.len() {
                    return None;
                }
                let real = dir_path(tree, root, a);
                let away = real.with_extension("away");
                fs::rename(&real, &away).ok()?;
                std::os::unix::fs::symlink(outside, &real).unwrap();
                // Held a while: the walk is to meet the link both when it
                // lists the directory and between listing and opening it.
                for _ in 0..8 {
                    std::thread::yield_now();
                }
                fs::remove_file(&real).unwrap();
                fs::rename(&away, &real).unwrap();
            }
        }
        Some(())
    }

    fn build(tree: &Tree, base: &Path) -> (PathBuf, PathBuf, BTreeSet<u64>) {
        let (root, outside) = (base.join("tree"), base.join("outside"));
        for d in 0..tree.parents.len() {
            fs::create_dir_all(dir_path(tree, &root, d)).unwrap();
        }
        let mut sizes = BTreeSet::new();
        for (f, &d) in tree.files.iter().enumerate() {
            let size = 100 + f as u64;
            fs::write(
                dir_path(tree, &root, d).join(format!("f{f}")),
                vec![1u8; size as usize],
            )
            .unwrap();
            sizes.insert(size);
        }
        // Files the walk lists before it opens the root's directories, so
        // a directory may change between listing and opening.
        for i in 0..FILLER {
            fs::write(root.join(format!("fill{i:03}")), [1u8; 99]).unwrap();
        }
        sizes.insert(99);
        // The outside: the tree's names, as FIFOs and as files of its own size.
        fs::create_dir_all(&outside).unwrap();
        for f in 0..tree.files.len() {
            let fifo = outside.join(format!("f{f}"));
            assert!(Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success());
        }
        for d in 0..tree.parents.len() {
            fs::create_dir_all(outside.join(format!("d{d}"))).unwrap();
            fs::write(
                outside.join(format!("d{d}/f0")),
                [0u8; OUTSIDE_SIZE as usize],
            )
            .unwrap();
        }
        (root, outside, sizes)
    }

    /// `find ROOT -type f`: the files of the tree, by another program.
    fn find_files(root: &Path) -> BTreeSet<String> {
        let out = Command::new("find")
            .arg(root)
            .args(["-type", "f"])
            .output()
            .expect("find (findutils)");
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn a_walk_under_random_renames_counts_only_the_trees_files(tree in trees()) {
            static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let base = std::env::temp_dir().join(format!(
                "numalab-walk-renames-{}-{}",
                std::process::id(),
                CASE.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&base);
            let (root, outside, sizes) = build(&tree, &base);
            let stop = AtomicBool::new(false);
            let mut reports = Vec::new();
            std::thread::scope(|scope| {
                let neighbour = scope.spawn(|| {
                    let mut done = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        for rename in &tree.renames {
                            done += usize::from(apply(&tree, &root, &outside, rename).is_some());
                        }
                    }
                    done
                });
                for _ in 0..WALKS_PER_TREE {
                    reports.push(fincore::run(std::slice::from_ref(&root)).unwrap());
                }
                stop.store(true, Ordering::Relaxed);
                neighbour.join().unwrap();
            });
            for report in &reports {
                for failed in &report.failed {
                    prop_assert!(!failed.error.contains("FIFO"), "opened outside the tree: {}", failed);
                    prop_assert!(failed.error.contains("No such file or directory"), "{}", failed);
                }
                for file in &report.files {
                    prop_assert!(Path::new(&file.path).starts_with(&root), "{}", file.path);
                    prop_assert!(
                        sizes.contains(&file.cache.size),
                        "{} ({} bytes) is not a file of the tree",
                        file.path,
                        file.cache.size
                    );
                }
            }
            // At rest: exactly the files another program lists.
            let quiet = fincore::run(std::slice::from_ref(&root)).unwrap();
            let counted: BTreeSet<String> = quiet.files.iter().map(|f| f.path.clone()).collect();
            let listed = find_files(&root);
            let _ = fs::remove_dir_all(&base);
            prop_assert_eq!(counted, listed);
            prop_assert_eq!(quiet.files.len(), tree.files.len() + FILLER);
        }
    }
}
