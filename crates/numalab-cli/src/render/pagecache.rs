//! `numalab pagecache load` and `drop` for people: each file's cached
//! pages per node before and after, and why pages stayed where they are.

use numalab::pagecache::FileCache;
use numalab::units::Size;
use numalab_bench::fincore::{CacheAction, CacheChange};

use super::{Render, Style};
use crate::output::Csv;

impl Render for CacheChange {
    fn text(&self, style: Style) -> String {
        human(self, style)
    }

    fn csv(&self) -> String {
        csv(self)
    }

    fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self.failed.iter().map(ToString::to_string).collect();
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
fn notes(change: &CacheChange) -> Vec<String> {
    let mut out = Vec::new();
    for file in &change.files {
        match change.action {
            CacheAction::Load { node } => {
                let elsewhere = file.elsewhere(node);
                if elsewhere == 0 {
                    continue;
                }
                let before =
                    file.before.cached - file.before.per_node.get(&node).copied().unwrap_or(0);
                if before > 0 {
                    out.push(format!(
                        "{}: {elsewhere} pages stay cached off node {node}: {before} were cached elsewhere before the load, and the kernel does not move cached pages; run `numalab pagecache drop {}` first (or load with --drop-first)",
                        file.path, file.path
                    ));
                } else {
                    out.push(format!(
                        "{}: {elsewhere} pages were cached off node {node}: node {node} was full (its policy prefers, then falls back)",
                        file.path
                    ));
                }
            }
            CacheAction::Drop => {
                if file.after.cached == 0 {
                    continue;
                }
                let unflushed = match file.unflushed_pages {
                    Some(0) => "none of them dirty; mapped by a process or read again meanwhile".to_owned(),
                    Some(n) => format!("{n} dirty or being written back: written, not yet on disk (sync, then drop again)"),
                    None => "dirty ones cannot be told on this kernel (cachestat(2) is Linux 6.5)".to_owned(),
                };
                out.push(format!(
                    "{}: {} pages stayed cached: {unflushed}",
                    file.path, file.after.cached
                ));
            }
        }
    }
    out
}

fn human(change: &CacheChange, style: Style) -> String {
    let mut out = style.heading(&format!("numalab pagecache: {}", change.action));
    let mut table = style.table(vec![
        "FILE".to_string(),
        "SIZE".into(),
        "cached before".into(),
        "cached after".into(),
    ]);
    for file in &change.files {
        table.add_row(vec![
            file.path.clone(),
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

fn csv(change: &CacheChange) -> String {
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
