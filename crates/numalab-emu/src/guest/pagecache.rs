//! `numalab fincore` where the nodes really differ: a file written in the
//! guest's memory file system by a thread bound to each node in turn has
//! its pages on that node (the kernel allocates a tmpfs page by the
//! policy of the task that writes it), and the node's own page-cache
//! count (`FilePages`) grew by the file. `numalab pagecache bench` puts
//! its readers on the CPUs the preset gives each node and its file's
//! cache on the node asked, and its SLIT ratio is the preset's.

use std::collections::BTreeMap;
use std::fs;

use anyhow::Result;
use numalab::system::NodeMemory;
use numalab::units::count;
use numalab::{MemPolicy, NodeSet};
use numalab_bench::fincore::FincoreReport;
use numalab_bench::pagecache::PagecacheReport;

use super::{Guest, Outcome};
use crate::harness::{DISK_MISSING, DISK_MODULES};

/// The file: 8 MiB, 2048 pages.
const BYTES: usize = 8 << 20;
const PAGES: u64 = 2048;

/// Writes `path` from a thread bound to `node`.
fn write_on(node: u32, path: &std::path::Path) -> Result<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<()> {
                MemPolicy::Bind(NodeSet::single(node)).apply_to_thread()?;
                fs::write(path, vec![0x5a; BYTES])?;
                Ok(())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the writing thread panicked"))?
    })
}

/// Every node of the preset: a file written under `bind:N` is found on N
/// by `numalab fincore`, page for page, and node N's `FilePages` grew by
/// about its size.
pub fn nodes(guest: &Guest, out: &mut Outcome) -> Result<()> {
    for node in guest.preset.memory_nodes().iter() {
        let path = std::env::temp_dir().join(format!("emu-fincore-{node}"));
        let before = NodeMemory::read(node)?.file_bytes;
        write_on(node, &path)?;
        let grew = NodeMemory::read(node)?.file_bytes.saturating_sub(before);
        let report: FincoreReport =
            guest.numalab_result(&["fincore", "--json", path.to_str().unwrap_or_default()])?;
        let _ = fs::remove_file(&path);
        let Some(file) = report.files.first() else {
            out.same(format!("node {node}: files counted"), 1, 0);
            continue;
        };
        out.same(
            format!("node {node}: cached pages"),
            PAGES,
            file.cache.cached,
        );
        out.same(
            format!("node {node}: pages on node {node}"),
            PAGES,
            file.cache.on_node(node),
        );
        file_pages_grew(out, node, grew);
    }
    Ok(())
}

/// Node `node`'s `FilePages` grew by the file: the kernel's own count,
/// independent of numalab's, within 1 MiB (other activity in the guest
/// is small).
fn file_pages_grew(out: &mut Outcome, node: u32, grew: u64) {
    out.check(
        format!("node {node}: its FilePages grew by"),
        "8 MiB ± 1 MiB",
        format!("{:.1} MiB", grew as f64 / (1 << 20) as f64),
        grew.abs_diff(BYTES as u64) <= 1 << 20,
    );
}

/// `numalab pagecache bench` with its cache on a memory-only node where
/// the preset has one (else the last node), two readers on every node
/// with CPUs: each reader on a CPU the preset gives that node and on
/// that node by the kernel, the whole file read, every cached page on the
/// cache node before and after, and remote/local SLIT as the preset's.
pub fn bench(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let (cache, cpu_nodes, report) = bench_on_every_cpu_node(
        guest,
        &[
            "--readers",
            "2",
            "--oversubscribe",
            "--repeats",
            "1",
            "--no-matrix",
        ],
    )?;
    out.same("cells", cpu_nodes.len(), report.cells.len());
    for cell in &report.cells {
        let node = cell.reader_node.unwrap_or(u32::MAX);
        let cpus = preset.cpus_of(node);
        let readers: Vec<_> = cell.repeats.iter().flat_map(|r| &r.readers).collect();
        out.same(format!("readers on node {node}: ran"), 2, readers.len());
        for reader in readers {
            out.check(
                format!("readers on node {node}: CPU {}", reader.cpu),
                format!("in {cpus}"),
                reader.cpu,
                cpus.contains(reader.cpu),
            );
            out.same(
                format!("readers on node {node}: the kernel's node"),
                node,
                reader.node,
            );
            out.same(
                format!("readers on node {node}: bytes read"),
                4 << 20,
                reader.bytes,
            );
        }
        for (when, found) in [("before", &cell.cache_before), ("after", &cell.cache_after)] {
            let on_cache = found.as_ref().map_or(0, |c| c.on_node(cache));
            out.same(
                format!("readers on node {node}: pages on node {cache} {when}"),
                1024,
                on_cache,
            );
        }
    }
    for ratio in &report.ratios {
        let expected = match (
            preset.distance(ratio.reader_node, cache),
            preset.distance(cache, cache),
        ) {
            (Some(far), Some(near)) => format!("{:.2}", far as f64 / near as f64),
            _ => "none".into(),
        };
        out.same(
            format!("remote/local SLIT, readers on node {}", ratio.reader_node),
            expected,
            ratio
                .slit_ratio
                .map_or("none".into(), |r| format!("{r:.2}")),
        );
    }
    if report.ratios.is_empty() && preset.cpus_of(cache).is_empty() {
        out.note(format!(
            "node {cache} has no CPUs: no local readers, so no remote/local ratio"
        ));
    }
    Ok(())
}

/// `numalab pagecache bench --replicate` with the cache on a memory-only
/// node (else the last), one reader per CPU node and a writer: each node's
/// copies are on that node, every page of the file, later repeats read
/// them, and the writer wrote meanwhile.
pub fn replicate(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let (_, cpu_nodes, report) = bench_on_every_cpu_node(
        guest,
        &[
            "--repeats",
            "2",
            "--replicate",
            "--write-every",
            "1ms",
            "--no-matrix",
        ],
    )?;
    let through: Vec<_> = report.cells.iter().filter(|c| c.copies).collect();
    out.same("cells through copies", cpu_nodes.len(), through.len());
    for cell in through {
        let reader = cell.reader_node.unwrap_or(u32::MAX);
        // A memory-less node reads the copies of the nearest node with
        // memory.
        let node = guest.preset.home_node(reader);
        let pages = cell
            .copy_audit
            .as_ref()
            .map(|a| a.pages.clone())
            .unwrap_or_default();
        out.same(
            format!("copies for node {reader}: pages on node {node}"),
            1024,
            pages.get(&node).copied().unwrap_or(0),
        );
        out.same(
            format!("copies for node {reader}: pages elsewhere"),
            0,
            pages
                .iter()
                .filter(|(&n, _)| n != node)
                .map(|(_, p)| p)
                .sum::<u64>(),
        );
        let later: u64 = cell
            .repeats
            .iter()
            .skip(1)
            .flat_map(|r| &r.readers)
            .map(|r| r.from_copies)
            .sum();
        out.check(
            format!("copies for node {reader}: the second repeat read them"),
            "over half the file",
            later,
            later > 2 << 20,
        );
        // The readers of each repeat start after the writer's first
        // write: every repeat has one, whatever the host's speed.
        let writes: Vec<u64> = cell.repeats.iter().map(|r| r.writes).collect();
        out.check(
            format!("copies for node {reader}: writes while reading, per repeat"),
            "at least 1 in each of 2 repeats",
            format!("{writes:?}"),
            writes.len() == 2 && writes.iter().all(|&w| w >= 1),
        );
    }
    collapse(guest, out)
}

/// The file `collapse` replicates: 8 MiB, 128 chunks of 64 KiB.
const COPIED: usize = 8 << 20;
const CHUNKS: u64 = (COPIED >> 16) as u64;

/// `Shmem` of node `node` in bytes, as the kernel counts it
/// (`/sys/devices/system/node/nodeN/meminfo`), read here, not by numalab.
fn node_shmem(node: u32) -> Result<u64> {
    let text = fs::read_to_string(format!("/sys/devices/system/node/node{node}/meminfo"))?;
    let kb: u64 = text
        .lines()
        .find(|l| l.contains(" Shmem:"))
        .and_then(|l| l.split_whitespace().nth(3))
        .ok_or_else(|| anyhow::anyhow!("no Shmem in node {node}'s meminfo"))?
        .parse()?;
    Ok(kb * 1024)
}

/// The library: from a thread on each CPU node, an 8 MiB file read twice
/// through `ReplicatedFile` makes its 128 copies on that node, the second
/// read is all from them, and the kernel's own count of the node's shared
/// memory (the copies' segment is a memfd) grew by the file, on that node
/// and no other; after a write to one chunk, every node reads the new
/// bytes, each copying that one chunk again.
fn collapse(guest: &Guest, out: &mut Outcome) -> Result<()> {
    use numalab::replicated::{FileCopyOptions, ReplicatedFile};
    // Copies where there is memory: on each CPU node's own.
    let cpu_nodes = guest
        .preset
        .cpu_nodes()
        .intersection(&guest.preset.memory_nodes());
    let file = numalab::files::scratch_file(&std::env::temp_dir())?;
    std::os::unix::fs::FileExt::write_all_at(&file, &vec![1u8; COPIED], 0)?;
    let nodes = guest.preset.node_ids();
    let shmem = || -> Result<BTreeMap<u32, u64>> {
        nodes.iter().map(|n| Ok((n, node_shmem(n)?))).collect()
    };
    let before = shmem()?;
    let options = FileCopyOptions::default().nodes(Some(cpu_nodes.clone()));
    let copies = ReplicatedFile::new(file, options)?;
    let read = |node: u32| {
        guest.on_node(node, || {
            let mut reader = copies.reader(node);
            let mut all = vec![0u8; COPIED];
            let mut block = vec![0u8; 8192];
            for at in (0..COPIED).step_by(8192) {
                let n = reader.read_at(&mut block, at as u64).unwrap_or(0);
                all[at..at + n].copy_from_slice(&block[..n]);
            }
            (reader.copied, reader.from_copies, all)
        })
    };
    for node in cpu_nodes.iter() {
        let (_, (made, _, _)) = read(node)?;
        let (_, (again, from_copies, _)) = read(node)?;
        out.same(format!("file copies on node {node}: made"), CHUNKS, made);
        out.same(format!("file copies on node {node}: made again"), 0, again);
        out.same(
            format!("file copies on node {node}: second read from them"),
            COPIED,
            from_copies,
        );
    }
    // The kernel's count: each copying node's Shmem grew by the file
    // (within 1 MiB: the guest's own activity), every other node's not.
    let after = shmem()?;
    for node in nodes.iter() {
        let grew = after[&node] as i64 - before[&node] as i64;
        let expected = if cpu_nodes.contains(node) {
            COPIED as i64
        } else {
            0
        };
        out.check(
            format!("file copies, node {node}: the kernel's Shmem grew by"),
            format!("{} MiB ± 1 MiB", expected >> 20),
            format!("{:.2} MiB", grew as f64 / (1 << 20) as f64),
            (grew - expected).abs() <= 1 << 20,
        );
    }
    for (node, cache) in copies.copy_pages()? {
        out.same(
            format!("file copies on node {node}: pages on node {node}"),
            COPIED as u64 / 4096,
            cache.on_node(node),
        );
    }
    copies.write_at(&[9u8; 100], 3 << 16)?;
    for node in cpu_nodes.iter() {
        let (_, (made, _, all)) = read(node)?;
        out.same(
            format!("after a write, node {node}: copies made again"),
            1,
            made,
        );
        out.same(
            format!("after a write, node {node}: reads the new bytes"),
            "[9; 100]",
            if all[3 << 16..(3 << 16) + 100].iter().all(|&b| b == 9) {
                "[9; 100]"
            } else {
                "old bytes"
            },
        );
    }
    Ok(())
}

/// Runs a busybox applet (or another guest program); its output when it
/// fails.
fn sh(program: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(program).args(args).output()?;
    if !out.status.success() {
        anyhow::bail!(
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// util-linux `fincore`'s count of `path`'s cached pages.
fn util_linux_pages(path: &str) -> Result<u64> {
    let out = std::process::Command::new("/bin/fincore")
        .args([
            "--bytes",
            "--noheadings",
            "--raw",
            "--output",
            "PAGES",
            path,
        ])
        .output()?;
    if !out.status.success() {
        anyhow::bail!("fincore {path}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// An ext2 file system on a loop device over a file in the guest's
/// tmpfs, mounted at `/mnt/disk`: a file system whose page cache can be
/// dropped and read in again (tmpfs's cannot). Unmounted when dropped.
struct Disk;

impl Disk {
    fn mount() -> Result<Disk> {
        for module in fs::read_to_string(DISK_MODULES)?.lines() {
            match sh("/bin/insmod", &[module]) {
                // Already loaded: the next one.
                Err(err) if !err.to_string().contains("exists") => return Err(err),
                _ => {}
            }
        }
        sh(
            "/bin/dd",
            &["if=/dev/zero", "of=/tmp/disk.img", "bs=1M", "count=24"],
        )?;
        sh("/bin/mke2fs", &["-F", "-b", "4096", "/tmp/disk.img"])?;
        sh("/bin/losetup", &["/dev/loop0", "/tmp/disk.img"])?;
        fs::create_dir_all("/mnt/disk")?;
        if let Err(err) = sh("/bin/mount", &["-t", "ext2", "/dev/loop0", "/mnt/disk"]) {
            let _ = sh("/bin/losetup", &["-d", "/dev/loop0"]);
            let known = fs::read_to_string("/proc/filesystems").unwrap_or_default();
            let loops: Vec<String> = fs::read_dir("/dev")?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("loop"))
                .collect();
            anyhow::bail!(
                "{err} (file systems: {}; devices: {})",
                known
                    .split_whitespace()
                    .filter(|w| *w != "nodev")
                    .collect::<Vec<_>>()
                    .join(" "),
                loops.join(" ")
            );
        }
        Ok(Disk)
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = sh("/bin/umount", &["/mnt/disk"]);
        let _ = sh("/bin/losetup", &["-d", "/dev/loop0"]);
        let _ = fs::remove_file("/tmp/disk.img");
    }
}

/// A file on a disk file system, for every node with memory: `numalab
/// pagecache drop` leaves util-linux `fincore` counting none of its
/// pages, `numalab pagecache load --node N` every page, `numalab fincore`
/// finds them on N and agrees with util-linux's count, and node N's
/// `FilePages` grew by the file.
pub fn load_drop(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if let Ok(why) = fs::read_to_string(DISK_MISSING) {
        out.not_applicable(format!("no disk file system in the guest: {}", why.trim()));
        return Ok(());
    }
    let _disk = Disk::mount()?;
    let path = "/mnt/disk/data";
    fs::write(path, vec![0x5a; BYTES])?;
    fs::File::open(path)?.sync_all()?;
    for node in guest.preset.memoryless_nodes().iter() {
        let loaded = guest.numalab(&["pagecache", "load", path, "--node", &node.to_string()])?;
        let needle = format!("node {node} has no memory");
        out.check(
            format!("node {node}: load refused"),
            format!("exit 1, naming {needle}"),
            format!("{:?}: {}", loaded.code, loaded.stderr.trim()),
            loaded.code == Some(1) && loaded.stderr.contains(&needle),
        );
    }
    for node in guest.preset.memory_nodes().iter() {
        let dropped = guest.numalab(&["pagecache", "drop", path])?;
        out.same(
            format!("node {node}: drop's exit status"),
            "Some(0)",
            format!("{:?}", dropped.code),
        );
        out.same(
            format!("node {node}: util-linux fincore after drop"),
            0,
            util_linux_pages(path)?,
        );
        let before = NodeMemory::read(node)?.file_bytes;
        let loaded = guest.numalab(&["pagecache", "load", path, "--node", &node.to_string()])?;
        out.same(
            format!("node {node}: load's exit status"),
            "Some(0)",
            format!("{:?}", loaded.code),
        );
        let grew = NodeMemory::read(node)?.file_bytes.saturating_sub(before);
        let counted = util_linux_pages(path)?;
        out.same(
            format!("node {node}: util-linux fincore after load"),
            PAGES,
            counted,
        );
        let report: FincoreReport = guest.numalab_result(&["fincore", "--json", path])?;
        let cache = report
            .files
            .first()
            .map(|f| f.cache.clone())
            .unwrap_or_default();
        out.same(
            format!("node {node}: numalab fincore = util-linux"),
            counted,
            cache.cached,
        );
        out.same(
            format!("node {node}: pages on node {node}"),
            PAGES,
            cache.on_node(node),
        );
        file_pages_grew(out, node, grew);
    }
    Ok(())
}

/// `numalab pagecache bench --json` of a 4 MiB file cached on a
/// memory-only node (else the last), readers on every CPU node, with
/// `more` flags: the cache node, the CPU nodes and the report.
fn bench_on_every_cpu_node(
    guest: &Guest,
    more: &[&str],
) -> Result<(u32, Vec<String>, PagecacheReport)> {
    let preset = &guest.preset;
    let cache = preset
        .memory_only_nodes()
        .iter()
        .next()
        .or_else(|| preset.memory_nodes().iter().last())
        .unwrap_or(0);
    let cpu_nodes: Vec<String> = preset.cpu_nodes().iter().map(|n| n.to_string()).collect();
    let dir = std::env::temp_dir();
    let (cache_arg, nodes_arg) = (cache.to_string(), cpu_nodes.join(","));
    let mut args = vec![
        "pagecache",
        "bench",
        "--json",
        "--size",
        "4M",
        "--dir",
        dir.to_str().unwrap_or("/tmp"),
        "--cache-node",
        &cache_arg,
        "--reader-node",
        &nodes_arg,
    ];
    args.extend_from_slice(more);
    let report = guest.numalab_result(&args)?;
    Ok((cache, cpu_nodes, report))
}

/// The nearest node with CPUs to `from` other than itself, by the
/// preset's distances (the lowest id among equals): what `--reader-node
/// other` must pick, worked out from the preset alone.
fn nearest_cpu_node(guest: &Guest, from: u32) -> Option<u32> {
    let preset = &guest.preset;
    preset
        .cpu_nodes()
        .iter()
        .filter(|&n| n != from)
        .min_by_key(|&n| (preset.distance(from, n).unwrap_or(u64::MAX), n))
}

/// The mailing-list post's table, `numalab pagecache bench --layout post`,
/// of an 8 MiB file written on the first node with CPUs and memory: the
/// rows and columns the post has (1, 5, 10, 15, 30 readers; same and
/// other); `other` is the preset's nearest other node with CPUs (on
/// `memless`, the memory-less node 2, 12 away, not node 1, 21 away);
/// every reader that ran is on a CPU the preset gives its node and on that
/// node by the kernel; a cell with more readers than its node has CPUs is
/// skipped, its reason numbered under the text table; util-linux
/// `fincore` counts the whole file cached before and after, and the cache
/// node's `FilePages` holds it; the remote/local ratio is given beside
/// the preset's SLIT ratio.
pub fn post(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let cache = preset
        .cpu_nodes()
        .intersection(&preset.memory_nodes())
        .iter()
        .next()
        .unwrap_or(0);
    let Some(other) = nearest_cpu_node(guest, cache) else {
        out.not_applicable("one node with CPUs: no other node to read from");
        return Ok(());
    };
    let path = std::env::temp_dir().join("emu-post");
    let before = NodeMemory::read(cache)?.file_bytes;
    write_on(cache, &path)?;
    let file = path.to_str().unwrap_or_default();
    out.same("util-linux fincore before", PAGES, util_linux_pages(file)?);
    let cache_arg = cache.to_string();
    let args = [
        "pagecache",
        "bench",
        file,
        "--layout",
        "post",
        "--cache-node",
        &cache_arg,
        "--repeats",
        "1",
        "--no-matrix",
    ];
    let report: PagecacheReport = guest.numalab_result(&[&args[..], &["--json"]].concat())?;
    let table = guest.numalab(&args)?;
    out.same("util-linux fincore after", PAGES, util_linux_pages(file)?);
    let held = NodeMemory::read(cache)?.file_bytes.saturating_sub(before);
    let _ = fs::remove_file(&path);
    file_pages_grew(out, cache, held);

    let shape: Vec<String> = report
        .cells
        .iter()
        .map(|c| format!("{}@{}", c.readers, c.place))
        .collect();
    let expected: Vec<String> = [1, 5, 10, 15, 30]
        .iter()
        .flat_map(|r| [format!("{r}@same"), format!("{r}@other")])
        .collect();
    out.same("cells (readers@place)", expected.join(" "), shape.join(" "));
    for cell in &report.cells {
        let name = format!("{} on {}", count(cell.readers, "reader"), cell.place);
        let node = match cell.place.to_string().as_str() {
            "same" => cache,
            _ => other,
        };
        out.same(
            format!("{name}: node"),
            node,
            cell.reader_node.map_or("none".into(), |n| n.to_string()),
        );
        let cpus = preset.cpus_of(node);
        if cell.readers > cpus.len() {
            out.check(
                format!("{name}: skipped, with why"),
                format!("skipped, naming node {node}'s CPUs"),
                format!("{} {:?}", cell.status.as_str(), cell.reason),
                cell.status.as_str() == "skipped"
                    && cell.reason.as_deref().is_some_and(|r| r.contains("CPU")),
            );
            continue;
        }
        out.same(format!("{name}: status"), "ran", cell.status.as_str());
        for reader in cell.repeats.iter().flat_map(|r| &r.readers) {
            out.check(
                format!("{name}: CPU {}", reader.cpu),
                format!("in {cpus}"),
                reader.cpu,
                cpus.contains(reader.cpu),
            );
            out.same(format!("{name}: the kernel's node"), node, reader.node);
            out.same(format!("{name}: bytes read"), BYTES, reader.bytes);
        }
        let on_cache = cell.cache_after.as_ref().map_or(0, |c| c.on_node(cache));
        out.same(
            format!("{name}: pages on node {cache} after"),
            PAGES,
            on_cache,
        );
    }
    let slit = |from| match (preset.distance(from, cache), preset.distance(cache, cache)) {
        (Some(far), Some(near)) => format!("{:.2}", far as f64 / near as f64),
        _ => "none".into(),
    };
    let ratios: Vec<String> = report
        .ratios
        .iter()
        .map(|r| {
            format!(
                "{}, node {}: SLIT {}",
                count(r.readers, "reader"),
                r.reader_node,
                r.slit_ratio.map_or("none".into(), |s| format!("{s:.2}"))
            )
        })
        .collect();
    out.same(
        "remote/local rows",
        format!("1 reader, node {other}: SLIT {}", slit(other)),
        ratios.join("; "),
    );
    // The text table: each skipped cell points at a numbered reason.
    let skipped = report
        .cells
        .iter()
        .filter(|c| c.status.as_str() == "skipped")
        .count();
    let numbered = table
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("(1) "))
        .count();
    out.check(
        "text table: skipped cells and numbered reasons",
        format!(
            "{}, each marked in every table; a line \"(1) why\"",
            count(skipped, "skipped cell")
        ),
        format!(
            "exit {:?}; {} marked \"skipped (N)\"; {} \"(1) …\"",
            table.code,
            count(table.stdout.matches("skipped (").count(), "cell"),
            count(numbered, "line")
        ),
        table.code == Some(0)
            && table.stdout.matches("skipped (").count() >= skipped
            && (skipped == 0 || numbered == 1),
    );
    Ok(())
}
