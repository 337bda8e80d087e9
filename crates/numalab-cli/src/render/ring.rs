//! `numalab ring` for people: the blog's tables (GB/s per stream and per
//! cell, placement verified; GB/s as every other command's tables, the
//! JSON and CSV keep the blog's MB/s), and the ring segments of `--list`.

use std::fmt::Write as _;

use numalab::ring::SegmentEntry;
use numalab::units::count;
use numalab_bench::ring::{
    CellResult, CellStatus, RingListReport, RingReport, Settings, StreamResult,
};

use super::{Render, Style};
use crate::output::{self, Csv};
use numalab::units::format_size;

impl Render for RingReport {
    fn text(&self, style: Style) -> String {
        human(self, style == Style::Markdown)
    }

    fn csv(&self) -> String {
        csv(self)
    }
}

impl Render for RingListReport {
    fn text(&self, style: Style) -> String {
        list_text(self, style)
    }

    fn csv(&self) -> String {
        list_csv(self)
    }
}

/// `(a 40 MiB segment per ring: 8 MiB more than the data)` when the
/// descriptors, transfer-header slots and page rounding beside the blocks
/// are worth saying (a tenth of the data or more).
fn segment_note(s: &Settings) -> String {
    let data = s.blocks.saturating_mul(s.block_size);
    let overhead = s.segment_bytes.saturating_sub(data);
    if s.segment_bytes == 0 || overhead.saturating_mul(10) < data {
        return String::new();
    }
    format!(
        " (a {} segment per ring: {} more than the data)",
        format_size(s.segment_bytes),
        format_size(overhead)
    )
}

/// MB/s as GB/s with about three significant digits.
fn gbps(mb_per_s: f64) -> String {
    super::experiment::text::num(mb_per_s / 1e3)
}

fn stream_cell(stream: &StreamResult) -> String {
    format!(
        "{}{}",
        gbps(stream.mb_per_s),
        if stream.placement_ok { "" } else { " (!)" }
    )
}

fn human(report: &RingReport, markdown: bool) -> String {
    let s = &report.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "numalab ring: {} per stream{}, {} blocks of {}{}, {}{}, {} per stream",
        format_size(s.volume_bytes),
        if s.ramp_bytes > 0 {
            format!(" after {} untimed", format_size(s.ramp_bytes))
        } else {
            String::new()
        },
        s.blocks,
        format_size(s.block_size),
        segment_note(s),
        s.mode.as_str(),
        if s.verify {
            ", every byte verified"
        } else {
            ""
        },
        count(s.readers_per_stream, "reader")
    );
    let new_table = |header: Vec<&str>| {
        if markdown {
            output::markdown_table(header)
        } else {
            output::table(header)
        }
    };
    for table_name in ["single-stream", "two-stream", "custom"] {
        let cells: Vec<&CellResult> = report
            .cells
            .iter()
            .filter(|c| c.table == table_name)
            .collect();
        if cells.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{table_name}:");
        let mut table = new_table(vec!["cell", "stream GB/s", "total GB/s", "placement"]);
        for cell in &cells {
            let (streams, placement) = match cell.status {
                CellStatus::Ran => (
                    cell.streams
                        .iter()
                        .map(stream_cell)
                        .collect::<Vec<_>>()
                        .join(" + "),
                    if cell.placement_ok {
                        "verified".to_owned()
                    } else {
                        "MISMATCH".to_owned()
                    },
                ),
                status => (
                    status.as_str().to_owned(),
                    cell.reason.clone().unwrap_or_default(),
                ),
            };
            table.add_row(vec![
                cell.name.clone(),
                streams,
                cell.total_mb_per_s.map_or("-".into(), gbps),
                placement,
            ]);
        }
        out.push_str(&output::render(&table));
    }
    for cell in report.cells.iter().filter(|c| c.status == CellStatus::Ran) {
        for (i, stream) in cell.streams.iter().enumerate() {
            if !stream.placement_ok {
                let _ = writeln!(
                    out,
                    "warning: {} stream {i}: memory {}; writer ran on CPUs {}, readers on {}",
                    cell.name,
                    stream.memory.note,
                    stream.writer.cpus_seen,
                    stream
                        .readers
                        .iter()
                        .map(|r| r.cpus_seen.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
    }
    if report.interrupted {
        let finished = report
            .cells
            .iter()
            .filter(|c| c.status == CellStatus::Ran)
            .count();
        let _ = writeln!(
            out,
            "\ninterrupted: {} finished; the others did not run to the end",
            count(finished, "cell")
        );
    }
    let skipped = report
        .cells
        .iter()
        .filter(|c| c.status == CellStatus::Skipped)
        .count();
    if skipped > 0 {
        let _ = writeln!(
            out,
            "\n{} {} nodes this machine does not have; the others ran",
            count(skipped, "cell"),
            if skipped == 1 { "needs" } else { "need" }
        );
    }
    out
}

fn csv(report: &RingReport) -> String {
    let mut csv = Csv::new(&[
        "table",
        "cell",
        "status",
        "stream",
        "memory_node",
        "writer_cpus",
        "reader_cpus",
        "bytes",
        "seconds",
        "mb_per_s",
        "memory_on_node",
        "placement_ok",
        "reason",
    ]);
    for cell in &report.cells {
        if cell.streams.is_empty() {
            csv.row([
                cell.table.clone(),
                cell.name.clone(),
                cell.status.as_str().to_owned(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                "false".into(),
                cell.reason.clone().unwrap_or_default(),
            ]);
        }
        for (i, stream) in cell.streams.iter().enumerate() {
            csv.row([
                cell.table.clone(),
                cell.name.clone(),
                cell.status.as_str().to_owned(),
                i.to_string(),
                stream.plan.memory_node.to_string(),
                stream.plan.writer_cpus.to_string(),
                stream.plan.reader_cpus.to_string(),
                stream.bytes.to_string(),
                format!("{:.6}", stream.seconds),
                format!("{:.1}", stream.mb_per_s),
                format!("{:.4}", stream.memory.on_expected),
                stream.placement_ok.to_string(),
                String::new(),
            ]);
        }
    }
    csv.finish()
}

fn not_a_segment(entry: &SegmentEntry) -> bool {
    entry
        .problem
        .as_deref()
        .is_some_and(|p| p.starts_with("not a ring segment"))
}

fn state_of(entry: &SegmentEntry) -> &'static str {
    if not_a_segment(entry) {
        "-"
    } else if entry.in_use {
        "in use"
    } else {
        "stale"
    }
}

fn list_csv(list: &RingListReport) -> String {
    let mut csv = Csv::new(&[
        "name", "path", "bytes", "state", "writer", "readers", "problem",
    ]);
    for e in &list.segments {
        csv.row([
            e.name.clone(),
            e.path.display().to_string(),
            e.size.to_string(),
            state_of(e).into(),
            e.stats
                .as_ref()
                .map_or(String::new(), |s| s.writer.state.clone()),
            e.stats
                .as_ref()
                .map_or(String::new(), |s| s.readers.len().to_string()),
            e.problem.clone().unwrap_or_default(),
        ]);
    }
    csv.finish()
}

/// The segments as a table; `--markdown` prints the same columns as a
/// terminal does.
fn list_text(list: &RingListReport, _style: Style) -> String {
    let entries = &list.segments;
    if entries.is_empty() {
        return "no numalab ring segments on this machine\n".to_owned();
    }
    let mut table = output::table(vec![
        "name", "size", "state", "writer", "readers", "written", "note",
    ]);
    for e in entries {
        let (writer, readers, written) = match &e.stats {
            Some(s) => (
                format!("{} (pid {})", s.writer.state, s.writer.pid),
                s.readers
                    .iter()
                    .map(|r| format!("{}:{} lag {}", r.pid, r.state, r.lag_blocks))
                    .collect::<Vec<_>>()
                    .join(", "),
                format_size(s.writer.bytes),
            ),
            None => Default::default(),
        };
        table.add_row(vec![
            e.name.clone(),
            format_size(e.size),
            state_of(e).into(),
            writer,
            readers,
            written,
            e.problem.clone().unwrap_or_default(),
        ]);
    }
    let mut text = output::render(&table);
    // Only what --cleanup removes: valid segments and unfinished creations.
    if entries
        .iter()
        .any(|e| e.is_stale() && (e.problem.is_none() || e.temporary))
    {
        text.push_str("remove a stale segment with `numalab ring --cleanup NAME`\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::system::Environment;
    use numalab::{HugePages, Topology};
    use numalab_bench::ring::Mode;

    fn report(cells: Vec<CellResult>) -> RingReport {
        let topology = Topology::from_synthetic("pack:1 numa:1 core:1 pu:1").unwrap();
        RingReport {
            environment: Environment::current(&topology),
            settings: Settings {
                volume_bytes: 1 << 30,
                block_size: 4 << 20,
                blocks: 8,
                mode: Mode::InPlace,
                huge_pages: HugePages::None,
                readers_per_stream: 1,
                verify: false,
                segment_bytes: (32 << 20) + 8192,
                ramp_bytes: 0,
            },
            cells,
            interrupted: false,
        }
    }

    #[test]
    fn skipped_cells_show_their_reason_in_the_table_and_csv() {
        let report = report(vec![CellResult {
            table: "two-stream".into(),
            name: "crossed".into(),
            status: CellStatus::Skipped,
            reason: Some("memory on node 1: node 1 does not exist".into()),
            streams: Vec::new(),
            total_mb_per_s: None,
            placement_ok: false,
        }]);
        let text = report.text(Style::Plain);
        assert!(
            text.starts_with("numalab ring: 1 GiB per stream, 8 blocks of 4 MiB, in-place,"),
            "{text}"
        );
        assert!(text.contains("two-stream:"), "{text}");
        assert!(text.contains("skipped"), "{text}");
        assert!(text.contains("1 cell needs nodes"), "{text}");
        let csv = report.csv();
        assert!(
            csv.lines()
                .nth(1)
                .unwrap()
                .starts_with("two-stream,crossed,skipped,"),
            "{csv}"
        );
    }

    #[test]
    fn an_interrupted_table_and_a_large_segment_are_said() {
        let mut report = report(vec![CellResult {
            table: "single-stream".into(),
            name: "memory 0, writer 0, reader 0".into(),
            status: CellStatus::Interrupted,
            reason: Some("SIGINT (Ctrl-C) stopped it".into()),
            streams: Vec::new(),
            total_mb_per_s: None,
            placement_ok: false,
        }]);
        report.interrupted = true;
        report.settings.block_size = 64;
        report.settings.blocks = 1 << 20;
        report.settings.segment_bytes = 160 << 20;
        let text = report.text(Style::Plain);
        assert!(
            text.contains(
                "1048576 blocks of 64 B (a 160 MiB segment per ring: 96 MiB more than the data)"
            ),
            "{text}"
        );
        assert!(text.contains("interrupted: 0 cells finished"), "{text}");
        assert!(report.csv().contains(",interrupted,"), "{}", report.csv());
    }

    #[test]
    fn an_empty_list_says_so() {
        let list = RingListReport {
            segments: Vec::new(),
        };
        assert_eq!(
            list.text(Style::Plain),
            "no numalab ring segments on this machine\n"
        );
        assert_eq!(list.csv().lines().count(), 1);
    }
}
