//! `numalab pagecache load` and `drop` for people: each file's cached
//! pages per node before and after, and why pages stayed where they are;
//! `numalab pagecache bench`: the readers' table and remote/local ratios.

use numalab::pagecache::FileCache;
use numalab::units::{count, Size};
use numalab_bench::pagecache::{BenchCell, PagecacheReport, ReaderPlace};
use numalab_bench::pagecache::{CacheAction, CacheChangeReport};
use numalab_bench::ring::CellStatus;

use super::experiment::text::{num, time};

use super::{Render, Style};
use crate::output::Csv;

impl Render for CacheChangeReport {
    fn text(&self, style: Style) -> String {
        human(self, style)
    }

    fn csv(&self) -> String {
        csv(self)
    }

    fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .failed
            .iter()
            .map(super::fincore::unreadable_line)
            .collect();
        out.extend(notes(self));
        out
    }
}

/// `1025 (node0 1000, node1 25)`.
fn per_node(cache: &FileCache) -> String {
    let nodes: Vec<String> = cache
        .per_node
        .iter()
        .map(|(n, p)| format!("node{n} {p}"))
        .chain((cache.unknown > 0).then(|| format!("unknown {}", cache.unknown)))
        .collect();
    if nodes.is_empty() {
        cache.cached.to_string()
    } else {
        format!("{} ({})", cache.cached, nodes.join(", "))
    }
}

/// Why pages are not where the action put them, one line per file.
fn notes(change: &CacheChangeReport) -> Vec<String> {
    let mut out = Vec::new();
    for file in &change.files {
        match change.action {
            CacheAction::Load { node } => {
                if file.after.cached < file.after.pages && !file.in_memory {
                    out.push(format!(
                        "{}: only {} of its {} stayed cached after the load: memory pressure, or this process's memory limit (its cgroup), evicted the rest",
                        file.path,
                        file.after.cached,
                        count(file.after.pages, "page")
                    ));
                }
                let elsewhere = file.elsewhere(node);
                if elsewhere == 0 {
                    continue;
                }
                let before = file.before.off_node(node);
                if before > 0 {
                    out.push(format!(
                        "{}: {} {} cached off node {node}: {before} {} cached elsewhere before the load, and the kernel does not move cached pages; run `numalab pagecache drop {}` first (or load with --drop-first)",
                        file.path,
                        count(elsewhere, "page"),
                        if elsewhere == 1 { "stays" } else { "stay" },
                        if before == 1 { "was" } else { "were" },
                        file.path
                    ));
                } else {
                    out.push(format!(
                        "{}: {} {} cached off node {node}: node {node} was full (its policy prefers, then falls back)",
                        file.path,
                        count(elsewhere, "page"),
                        if elsewhere == 1 { "was" } else { "were" }
                    ));
                }
            }
            CacheAction::Drop => {
                if file.after.cached == 0 {
                    continue;
                }
                if file.in_memory {
                    out.push(format!(
                        "{}: {} stayed: it lives in memory (tmpfs or shared memory), its pages are the file itself and cannot be dropped",
                        file.path,
                        count(file.after.cached, "page")
                    ));
                    continue;
                }
                let unflushed = match file.unflushed_pages {
                    Some(0) => "none of them dirty; mapped by a process or read again meanwhile".to_owned(),
                    Some(n) => format!("{n} dirty or being written back: written, not yet on disk (sync, then drop again)"),
                    None => "dirty ones cannot be told on this kernel (cachestat(2) is Linux 6.5)".to_owned(),
                };
                out.push(format!(
                    "{}: {} stayed cached: {unflushed}",
                    file.path,
                    count(file.after.cached, "page")
                ));
            }
        }
    }
    out
}

fn human(change: &CacheChangeReport, style: Style) -> String {
    let mut out = style.heading(&format!("numalab pagecache: {}", change.action));
    let mut table = style.table(vec![
        "FILE".to_string(),
        "SIZE".into(),
        "cached before".into(),
        "cached after".into(),
    ]);
    for file in &change.files {
        table.add_row(vec![
            style.field(&file.path),
            Size(file.before.size).to_string(),
            per_node(&file.before),
            per_node(&file.after),
        ]);
    }
    out.push_str(&style.render(&table));
    out.push('\n');
    out.push_str(&style.line("(cached pages, per node)"));
    for note in notes(change) {
        out.push_str(&style.warning(&note));
    }
    out
}

fn csv(change: &CacheChangeReport) -> String {
    let mut nodes: Vec<u32> = change.nodes.iter().map(|n| n.node).collect();
    for file in &change.files {
        for cache in [&file.before, &file.after] {
            nodes.extend(
                cache
                    .per_node
                    .keys()
                    .filter(|n| !nodes.contains(n))
                    .collect::<Vec<_>>(),
            );
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    let names: Vec<String> = ["before", "after"]
        .iter()
        .flat_map(|when| nodes.iter().map(move |n| format!("{when}_node{n}_pages")))
        .collect();
    let mut header = vec![
        "file",
        "size_bytes",
        "before_cached_pages",
        "after_cached_pages",
        "unflushed_pages",
    ];
    header.extend(names.iter().map(String::as_str));
    let mut csv = Csv::new(&header);
    for file in &change.files {
        let mut row = vec![
            file.path.clone(),
            file.before.size.to_string(),
            file.before.cached.to_string(),
            file.after.cached.to_string(),
            file.unflushed_pages
                .map_or(String::new(), |p| p.to_string()),
        ];
        for cache in [&file.before, &file.after] {
            row.extend(
                nodes
                    .iter()
                    .map(|n| cache.per_node.get(n).copied().unwrap_or(0).to_string()),
            );
        }
        csv.row(row);
    }
    csv.finish()
}

// ---------------------------------------------------------------------------
// `numalab pagecache bench`
// ---------------------------------------------------------------------------

impl Render for PagecacheReport {
    fn text(&self, style: Style) -> String {
        bench_human(self, style)
    }

    fn csv(&self) -> String {
        bench_csv(self)
    }

    fn warnings(&self) -> Vec<String> {
        bench_notes(self)
    }
}

/// `same (node 0)`, `other (node 1)`, `node 2`: where a cell's readers
/// were asked to run and the node that meant.
fn place(cell: &BenchCell) -> String {
    let label = place_label(cell.place, cell.reader_node);
    if cell.copies {
        format!("{label}, copies")
    } else {
        label
    }
}

fn place_label(place: ReaderPlace, node: Option<u32>) -> String {
    match (place, node) {
        (ReaderPlace::Node(n), _) => format!("node {n}"),
        (place, Some(n)) => format!("{place} (node {n})"),
        (place, None) => place.to_string(),
    }
}

fn gbps(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{} GB/s", num(v)))
}

fn times(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn bench_human<'a>(report: &'a PagecacheReport, style: Style) -> String {
    let s = &report.settings;
    let mut out = style.heading(&format!(
        "numalab pagecache bench: {}, {}, cached on node {}",
        s.file,
        Size(s.size),
        s.cache_node
    ));
    let stagger = if s.stagger_s > 0.0 {
        format!(
            "; groups of {} started {} apart",
            count(s.group, "reader"),
            time(s.stagger_s)
        )
    } else {
        String::new()
    };
    out.push_str(&style.line(&format!(
        "{} of {} blocks{stagger}; median of {} per cell",
        s.method,
        Size(s.block_size),
        count(s.repeats, "run")
    )));
    let mut table = style.table(vec![
        "READERS",
        "ON",
        "TIME TO LAST",
        "PER READER",
        "ALL READERS",
        "CACHE BEFORE",
        "CACHE AFTER",
    ]);
    // Why cells did not run: each reason once, numbered under the table.
    let mut reasons: Vec<&str> = Vec::new();
    let mut status_of = |cell: &'a BenchCell| -> String {
        match &cell.reason {
            Some(reason) => {
                let i = reasons.iter().position(|r| r == reason).unwrap_or_else(|| {
                    reasons.push(reason);
                    reasons.len() - 1
                });
                format!("{} ({})", cell.status.as_str(), i + 1)
            }
            None => cell.status.as_str().to_string(),
        }
    };
    let mut statuses = Vec::new();
    for cell in &report.cells {
        let status = status_of(cell);
        let mut row = vec![cell.readers.to_string(), place(cell)];
        if cell.status == CellStatus::Ran {
            row.extend([
                cell.time_to_last_s.map_or("-".into(), time),
                gbps(cell.reader_gbps),
                gbps(cell.aggregate_gbps),
                cell.cache_before.as_ref().map_or("-".into(), per_node),
                cell.cache_after.as_ref().map_or("-".into(), per_node),
            ]);
        } else {
            row.push(status.clone());
        }
        statuses.push(status);
        table.add_row(row);
    }
    out.push_str(&style.render(&table));
    out.push('\n');
    for (i, reason) in reasons.iter().enumerate() {
        out.push_str(&style.line(&format!("({}) {reason}", i + 1)));
    }
    out.push_str(&pivot(report, &statuses, style));
    out.push_str(&copies_table(report, style));
    for note in bench_notes(report) {
        out.push_str(&style.warning(&note));
    }
    out
}

/// The post's table: time to the last reader, a row per reader count, a
/// column per placement, then remote/local beside SLIT/10 and memory
/// reads (printed when there is more than one placement).
fn pivot(report: &PagecacheReport, statuses: &[String], style: Style) -> String {
    let mut columns: Vec<(ReaderPlace, Option<u32>)> = Vec::new();
    let mut rows: Vec<usize> = Vec::new();
    for cell in report.cells.iter().filter(|c| !c.copies) {
        if !columns.iter().any(|c| c.0 == cell.place) {
            columns.push((cell.place, cell.reader_node));
        }
        if !rows.contains(&cell.readers) {
            rows.push(cell.readers);
        }
    }
    if columns.len() < 2 {
        return String::new();
    }
    let mut header = vec!["READERS".to_string()];
    header.extend(
        columns
            .iter()
            .map(|&(place, node)| place_label(place, node)),
    );
    let with_ratios = !report.ratios.is_empty();
    if with_ratios {
        header.extend([
            "REMOTE/LOCAL".into(),
            "SLIT/10".into(),
            "MEMORY READS".into(),
        ]);
    }
    let mut table = style.table(header);
    for &readers in &rows {
        let mut row = vec![readers.to_string()];
        for &(place, _) in &columns {
            let found = report
                .cells
                .iter()
                .zip(statuses)
                .find(|(c, _)| !c.copies && c.readers == readers && c.place == place);
            row.push(match found {
                Some((cell, _)) if cell.status == CellStatus::Ran => {
                    cell.time_to_last_s.map_or("-".into(), time)
                }
                Some((_, status)) => status.clone(),
                None => "-".into(),
            });
        }
        if with_ratios {
            match report.ratios.iter().find(|r| r.readers == readers) {
                Some(r) => row.extend([
                    times(Some(r.time_ratio)),
                    times(r.slit_ratio),
                    times(r.matrix_ratio),
                ]),
                None => row.extend(["-".into(), "-".into(), "-".into()]),
            }
        }
        table.add_row(row);
    }
    let mut out = String::from("\n");
    out.push_str(&style.line(if with_ratios {
        "time to the last reader (remote/local 1.40x = the other node takes 40% longer; \
         MEMORY READS: one CPU's plain memory reads, local over remote):"
    } else {
        "time to the last reader:"
    }));
    out.push_str(&style.render(&table));
    out.push('\n');
    if report
        .ratios
        .iter()
        .any(|r| (r.reader_ratio / r.time_ratio - 1.0).abs() > 0.1)
    {
        let per_reader: Vec<String> = report
            .ratios
            .iter()
            .map(|r| format!("{}: {:.2}x", r.readers, r.reader_ratio))
            .collect();
        out.push_str(&style.line(&format!(
            "median reader's read time, remote/local: {}",
            per_reader.join(", ")
        )));
    }
    out
}

/// Reading through copies against the shared cache, a row per cell that
/// ran both ways.
fn copies_table(report: &PagecacheReport, style: Style) -> String {
    if report.gains.is_empty() {
        return String::new();
    }
    let mut table = style.table(vec![
        "READERS",
        "ON",
        "SHARED CACHE",
        "COPIES",
        "GAIN",
        "VS LOCAL CACHE",
        "FIRST RUN",
        "COPY MEMORY",
        "COPIES MADE",
        "WRITES",
    ]);
    for gain in &report.gains {
        let through = report.cells.iter().find(|c| {
            c.copies && c.readers == gain.readers && c.reader_node == Some(gain.reader_node)
        });
        let writes: u64 = through.map_or(0, |c| c.repeats.iter().map(|r| r.writes).sum());
        table.add_row(vec![
            gain.readers.to_string(),
            through.map_or_else(
                || format!("node {}", gain.reader_node),
                |c| place_label(c.place, c.reader_node),
            ),
            time(gain.shared_s),
            time(gain.copies_s),
            times(Some(gain.gain())),
            times(gain.vs_local()),
            time(gain.first_s),
            Size(gain.memory_bytes).to_string(),
            gain.copies_made.to_string(),
            writes.to_string(),
        ]);
    }
    let mut out = String::from("\n");
    let chunk = report
        .settings
        .copies
        .as_ref()
        .map_or(String::new(), |c| format!(" of {}", Size(c.chunk_size)));
    out.push_str(&style.line(&format!(
        "reading through copies{chunk} on the readers' node (time to the last reader; GAIN = shared cache / copies; \
         VS LOCAL CACHE = copies / the shared cache read on its own node; FIRST RUN made the copies, the medians are of the runs after it):"
    )));
    out.push_str(&style.render(&table));
    out.push('\n');
    out
}

/// Cells whose cache moved or had to be placed again.
fn bench_notes(report: &PagecacheReport) -> Vec<String> {
    let node = report.settings.cache_node;
    let mut out = Vec::new();
    for cell in &report.cells {
        let readers = count(cell.readers, "reader");
        // The readers, after their count: `it` for one, `they` for more.
        let they = if cell.readers == 1 { "it" } else { "they" };
        // Read partly from the disk: the cache did not hold the file.
        if let Some(before) = cell.cache_before.as_ref().filter(|c| c.cached < c.pages) {
            out.push(format!(
                "{readers} on {}: only {} of the file's {} {} cached when {they} started: memory pressure or this process's memory limit (its cgroup) kept the rest out, so part of what {they} read came from the disk",
                place(cell),
                before.cached,
                count(before.pages, "page"),
                if before.cached == 1 { "was" } else { "were" }
            ));
        }
        let moved = cell.moved_pages(node);
        if moved > 0 {
            out.push(format!(
                "{readers} on {}: {} left node {node} while {they} read (migrated or evicted: NUMA balancing migrates mapped page-cache pages, reclaim evicts them; numalab topo shows whether balancing is on)",
                place(cell),
                count(moved, "cached page")
            ));
        }
        if let (Some(audit), Some(reader_node)) = (&cell.copy_audit, cell.reader_node) {
            let elsewhere: u64 = audit
                .pages
                .iter()
                .filter(|(&n, _)| n != reader_node)
                .map(|(_, p)| p)
                .sum();
            if elsewhere > 0 {
                out.push(format!(
                    "{readers} on {}: {} of copies {} off node {reader_node} (it was full: copies prefer their node and spill rather than fail)",
                    place(cell),
                    count(elsewhere, "page"),
                    if elsewhere == 1 { "is" } else { "are" }
                ));
            }
            if audit.stats.refused > 0 {
                out.push(format!(
                    "{readers} on {}: {} found no copy and could not make one ({}); {they} read the shared cache",
                    place(cell),
                    count(audit.stats.refused, "read"),
                    if audit.stats.under_pressure {
                        "node memory below the 64 MiB watermark"
                    } else {
                        "the --copy-budget was reached"
                    }
                ));
            }
        }
        let off = cell.cache_before.as_ref().map_or(0, |c| c.off_node(node));
        if off > 0 {
            out.push(format!(
                "{readers} on {}: {off} of the file's cached pages {} off node {node} when {they} started (node {node} full, or pages that could not be dropped: mapped, dirty, or on tmpfs)",
                place(cell),
                if off == 1 { "was" } else { "were" }
            ));
        }
    }
    // Copies on the cache's own node spare the readers the page cache's
    // path (read(2), its locks, its lookups), not any distance: a gain
    // there says nothing of NUMA.
    let same_node: Vec<usize> = report
        .gains
        .iter()
        .filter(|g| g.reader_node == node)
        .map(|g| g.readers)
        .collect();
    if !same_node.is_empty() {
        let readers: Vec<String> = same_node.iter().map(usize::to_string).collect();
        out.push(format!(
            "copies for {} {} on node {node}, the cache's own: their GAIN is what reading a private copy instead of the page cache saves (read(2), the cache's locks and lookups), not distance; only readers on another node show what copies save across nodes",
            readers.join(", "),
            if same_node == [1] { "reader" } else { "readers" }
        ));
    }
    out
}

fn bench_csv(report: &PagecacheReport) -> String {
    let mut csv = Csv::new(&[
        "readers",
        "place",
        "copies",
        "reader_node",
        "cpus",
        "status",
        "reason",
        "time_to_last_s",
        "reader_gbps",
        "aggregate_gbps",
        "cache_node_pages_before",
        "cache_node_pages_after",
        "remote_local_time_ratio",
        "remote_local_reader_ratio",
        "slit_ratio",
        "memory_read_ratio",
        "copies_made",
        "copy_memory_bytes",
        "copies_gain",
        "copies_vs_local_cache",
        "writes",
    ]);
    let node = report.settings.cache_node;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    let on_node = |c: &Option<FileCache>| {
        c.as_ref()
            .map_or(String::new(), |c| c.on_node(node).to_string())
    };
    for cell in &report.cells {
        let ratio = report.ratios.iter().find(|r| {
            !cell.copies && r.readers == cell.readers && Some(r.reader_node) == cell.reader_node
        });
        let gain = report.gains.iter().find(|g| {
            cell.copies && g.readers == cell.readers && Some(g.reader_node) == cell.reader_node
        });
        let cpus: Vec<String> = cell.cpus.iter().map(u32::to_string).collect();
        csv.row([
            cell.readers.to_string(),
            cell.place.to_string(),
            cell.copies.to_string(),
            cell.reader_node.map_or(String::new(), |n| n.to_string()),
            cpus.join(" "),
            cell.status.as_str().to_string(),
            cell.reason.clone().unwrap_or_default(),
            opt(cell.time_to_last_s),
            opt(cell.reader_gbps),
            opt(cell.aggregate_gbps),
            on_node(&cell.cache_before),
            on_node(&cell.cache_after),
            opt(ratio.map(|r| r.time_ratio)),
            opt(ratio.map(|r| r.reader_ratio)),
            opt(ratio.and_then(|r| r.slit_ratio)),
            opt(ratio.and_then(|r| r.matrix_ratio)),
            gain.map_or(String::new(), |g| g.copies_made.to_string()),
            gain.map_or(String::new(), |g| g.memory_bytes.to_string()),
            opt(gain.map(|g| g.gain())),
            opt(gain.and_then(|g| g.vs_local())),
            if cell.copies {
                cell.repeats
                    .iter()
                    .map(|r| r.writes)
                    .sum::<u64>()
                    .to_string()
            } else {
                String::new()
            },
        ]);
    }
    csv.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::pagecache::FileCache;
    use numalab_bench::pagecache::ChangedFile;

    #[test]
    fn a_load_that_did_not_stay_cached_is_said() {
        let cache = |cached| FileCache {
            size: 8 << 30,
            page_size: 4096,
            pages: 2 << 20,
            cached,
            per_node: [(0, cached)].into(),
            unknown: 0,
        };
        let change = CacheChangeReport {
            action: CacheAction::Load { node: 0 },
            files: vec![ChangedFile {
                path: "/data/big".into(),
                before: cache(0),
                after: cache(1 << 20),
                read_bytes: Some(8 << 30),
                unflushed_pages: Some(0),
                in_memory: false,
            }],
            nodes: Vec::new(),
            failed: Vec::new(),
        };
        let said = notes(&change);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("/data/big: only 1048576 of its 2097152 pages stayed cached"),
            "{said:?}"
        );
    }
}

#[cfg(test)]
mod bench_tests {
    use super::*;
    use numalab_bench::pagecache::{self as bench, BenchConfig, FileSource};

    /// The bench of a 1 MiB file it makes, one reader on the cache's
    /// node, `repeats` times, through copies too with `copies`.
    fn bench_here(repeats: usize, copies: Option<bench::CopyConfig>) -> PagecacheReport {
        let topology = numalab::Topology::system().unwrap();
        let config = BenchConfig {
            file: FileSource::Create {
                dir: std::env::temp_dir(),
                size: 1 << 20,
            },
            repeats,
            places: vec![bench::ReaderPlace::Same],
            compare_matrix: false,
            copies,
            ..BenchConfig::default()
        };
        let plan = bench::plan(&config, &topology).unwrap();
        let control = numalab_bench::control::Control::new();
        bench::run(&plan, &topology, &control).unwrap()
    }

    #[test]
    fn a_cell_read_from_a_cache_that_did_not_hold_the_file_is_said() {
        let mut report = bench_here(1, None);
        assert!(
            bench_notes(&report).is_empty(),
            "all cached: nothing to say"
        );
        // As under a memory limit that kept half of it out.
        let node = report.settings.cache_node;
        let before = report.cells[0].cache_before.as_mut().unwrap();
        let pages = before.pages;
        before.per_node.insert(node, pages / 2);
        before.cached = pages / 2;
        let said = bench_notes(&report);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains(&format!(
                "only {} of the file's {pages} pages were cached",
                pages / 2
            )),
            "{said:?}"
        );
    }

    #[test]
    fn a_gain_of_copies_on_the_caches_own_node_is_not_called_numas() {
        let report = bench_here(2, Some(bench::CopyConfig::default()));
        assert_eq!(report.gains.len(), 1, "one cell through copies");
        let said = bench_notes(&report);
        let node = report.settings.cache_node;
        assert!(
            said.iter().any(|s| s.starts_with(&format!(
                "copies for 1 reader on node {node}, the cache's own: their GAIN is what reading a private copy"
            ))),
            "{said:?}"
        );
    }
}
