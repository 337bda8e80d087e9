//! `numalab profile` for people: a timeline of memory per node (at most
//! [`ROWS`] rows, evenly spread; `--json` and `--csv` have every sample),
//! then the peak per node and kind, the counters, what the sampling cost
//! and what each figure rests on.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use numalab::launch::Exit;
use numalab::locate::MemoryKind;
use numalab::profile::ProfileSample;
use numalab::units::count;
use numalab_bench::profile::ProfileReport;

use super::{Render, Style};
use crate::output::{self, mib_figure, Csv};

/// The most timeline rows in a table.
pub const ROWS: usize = 30;

impl Render for ProfileReport {
    fn text(&self, _style: Style) -> String {
        human(self)
    }

    fn csv(&self) -> String {
        csv(self)
    }
}

/// Every node some sample saw memory on.
fn nodes(report: &ProfileReport) -> Vec<u32> {
    let nodes: BTreeSet<u32> = report
        .timeline
        .samples
        .iter()
        .flat_map(|s| s.memory.per_node().into_keys())
        .collect();
    nodes.into_iter().collect()
}

fn kind_bytes(sample: &ProfileSample, kinds: &[MemoryKind]) -> u64 {
    kinds
        .iter()
        .filter_map(|k| sample.memory.bytes.get(k))
        .flat_map(|per_node| per_node.values())
        .sum()
}

const PRIVATE: [MemoryKind; 4] = [
    MemoryKind::Private,
    MemoryKind::Heap,
    MemoryKind::Stack,
    MemoryKind::Huge,
];

/// The command line as a shell would take it back: words with spaces or
/// quotes in single quotes, control characters escaped.
pub(crate) fn command_line(words: &[String]) -> String {
    words
        .iter()
        .map(|word| {
            let word: String = word
                .chars()
                .flat_map(char::escape_default)
                .collect::<String>();
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                word
            } else {
                format!("'{}'", word.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn human(report: &ProfileReport) -> String {
    let mut out = String::new();
    let samples = &report.timeline.samples;
    let what = match report.exit {
        Some(Exit::Code(code)) => format!("`{}` exited {code}", command_line(&report.command)),
        Some(Exit::Signal(signal)) => {
            format!(
                "`{}` was killed by signal {signal}",
                command_line(&report.command)
            )
        }
        None if report.ended => format!(
            "process {} ({}) ended",
            report.pid,
            report.command.join(" ")
        ),
        None => format!(
            "process {} ({}) watched",
            report.pid,
            report.command.join(" ")
        ),
    };
    let apart = match (samples.first(), samples.last()) {
        (Some(first), Some(last)) if samples.len() > 1 => format!(
            ", {:.0} ms apart on average",
            (last.at_s - first.at_s) * 1e3 / (samples.len() - 1) as f64
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "\nnumalab profile: {what} after {:.2} s; {}{apart}{}",
        report.elapsed_s,
        count(samples.len(), "sample"),
        if report.timeline.thinned > 0 {
            format!(
                " ({} thinned out)",
                count(report.timeline.thinned, "older one")
            )
        } else {
            String::new()
        }
    );
    let nodes = nodes(report);
    let writes = samples.iter().any(|s| s.written.is_some());
    if !samples.is_empty() {
        out.push_str("memory per node, MiB (private: anonymous, heap, stack, huge pages):\n");
        let mut header = vec!["time s".to_string()];
        header.extend(nodes.iter().map(|n| format!("node{n}")));
        header.extend(
            [
                "private",
                "file",
                "threads by node",
                "minor faults",
                "CPU migrations",
            ]
            .map(String::from),
        );
        if writes {
            header.push("written".into());
        }
        let mut table = output::table(header);
        let step = samples.len().div_ceil(ROWS).max(1);
        let mut shown: Vec<&ProfileSample> = samples.iter().step_by(step).collect();
        if let Some(last) = samples.last() {
            if !std::ptr::eq(*shown.last().unwrap_or(&last), last) {
                shown.push(last);
            }
        }
        for sample in shown {
            let per_node = sample.memory.per_node();
            let mut row = vec![format!("{:.2}", sample.at_s)];
            row.extend(
                nodes
                    .iter()
                    .map(|n| mib_figure(per_node.get(n).copied().unwrap_or(0))),
            );
            row.push(mib_figure(kind_bytes(sample, &PRIVATE)));
            row.push(mib_figure(kind_bytes(sample, &[MemoryKind::File])));
            row.push(
                sample
                    .threads_by_node
                    .iter()
                    .map(|(node, n)| format!("{node}:{n}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            row.push(sample.minor_faults.to_string());
            row.push(sample.cpu_migrations.to_string());
            if writes {
                row.push(
                    sample
                        .written
                        .map_or("–".into(), |w| format!("{:.0}%", w.share() * 100.0)),
                );
            }
            table.add_row(row);
        }
        out.push_str(&output::render(&table));
    }
    let peak = report.peak_per_node();
    let _ = writeln!(
        out,
        "peak per node: {}",
        if peak.is_empty() {
            "nothing seen (the program ended before the first sample?)".to_owned()
        } else {
            peak.iter()
                .map(|(node, bytes)| format!("node{node} {} MiB", mib_figure(*bytes)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    if let Some(at_exit) = &report.at_exit {
        let _ = writeln!(
            out,
            "at exit (read as each process exited): {}",
            at_exit
                .per_node()
                .iter()
                .map(|(node, bytes)| format!("node{node} {} MiB", mib_figure(*bytes)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(last) = report.last() {
        let _ = writeln!(
            out,
            "at the last sample: {} minor and {} major page faults, {:.2} s of CPU, {}, {} moved by NUMA balancing; {}, {}",
            last.minor_faults,
            last.major_faults,
            last.cpu_s,
            count(last.cpu_migrations, "CPU migration"),
            count(last.numa_pages_migrated, "page"),
            count(last.processes, "process"),
            count(last.threads, "thread")
        );
    }
    if let Some(share) = report.written_share() {
        let _ = writeln!(
            out,
            "pages written between samples (estimated, soft-dirty bits): {:.0}% of the private writable pages present, over the samples (median {:.0}%)",
            share.0 * 100.0,
            share.1 * 100.0
        );
    }
    if !report.memory_events.is_empty() {
        let events = &report.memory_events;
        let count = |name: &str| events.get(name).map_or("-".to_owned(), |c| c.to_string());
        let _ = writeln!(
            out,
            "memory events (PMU): {} loads, {} stores{}; from memory {} loads ({} from another node), {} stores ({} to another node){}",
            count("loads"),
            count("stores"),
            report
                .store_share()
                .map_or(String::new(), |s| format!(" ({:.1}% stores)", s * 100.0)),
            count("node-loads"),
            count("node-load-misses"),
            count("node-stores"),
            count("node-store-misses"),
            report
                .remote_share()
                .map_or(String::new(), |s| format!("; {:.1}% of memory accesses remote", s * 100.0)),
        );
    }
    match (report.numa_balancing, report.machine_hint_faults) {
        (Some(0), _) => out.push_str(
            "NUMA balancing is off (kernel.numa_balancing = 0): no hinting faults or page moves to report\n",
        ),
        (Some(mode), Some(faults)) => {
            let _ = writeln!(
                out,
                "NUMA balancing (mode {mode}), the whole machine meanwhile: {}, {} local, {} remote; {} moved",
                count(faults.faults, "hinting fault"),
                faults.local,
                faults.remote(),
                count(faults.pages_migrated, "page")
            );
        }
        _ => out.push_str("NUMA balancing: not in this kernel\n"),
    }
    let _ = writeln!(
        out,
        "sampling took {:.1} ms of CPU over {:.2} s ({:.2}% of one CPU)",
        report.timeline.sampling_cpu_s * 1e3,
        report.elapsed_s,
        report.overhead_share() * 100.0
    );
    for source in &report.sources {
        let _ = writeln!(out, "  {source}");
    }
    out
}

fn csv(report: &ProfileReport) -> String {
    let mut csv = Csv::new(&[
        "time_s",
        "node",
        "private_bytes",
        "file_bytes",
        "threads",
        "minor_faults",
        "major_faults",
        "cpu_s",
        "cpu_migrations",
        "numa_pages_migrated",
        "written_pages",
        "present_writable_pages",
    ]);
    let nodes = nodes(report);
    for sample in &report.timeline.samples {
        for &node in &nodes {
            let on = |kinds: &[MemoryKind]| -> u64 {
                kinds
                    .iter()
                    .filter_map(|k| sample.memory.bytes.get(k))
                    .filter_map(|per_node| per_node.get(&node))
                    .sum()
            };
            csv.row([
                format!("{:.3}", sample.at_s),
                node.to_string(),
                on(&PRIVATE).to_string(),
                on(&[MemoryKind::File]).to_string(),
                sample
                    .threads_by_node
                    .get(&node)
                    .copied()
                    .unwrap_or(0)
                    .to_string(),
                sample.minor_faults.to_string(),
                sample.major_faults.to_string(),
                format!("{:.3}", sample.cpu_s),
                sample.cpu_migrations.to_string(),
                sample.numa_pages_migrated.to_string(),
                sample
                    .written
                    .map_or(String::new(), |w| w.written.to_string()),
                sample
                    .written
                    .map_or(String::new(), |w| w.present.to_string()),
            ]);
        }
    }
    csv.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_events_are_shown_with_their_shares_only_when_counted() {
        let mut report = ProfileReport::empty(vec!["app".into()], 42);
        assert!(!human(&report).contains("memory events"));
        // Counts as a PMU would give them (made up here: this shows the
        // rendering, not a measurement).
        report.memory_events = [
            ("loads", 900u64),
            ("stores", 100),
            ("node-loads", 80),
            ("node-load-misses", 20),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect();
        let text = human(&report);
        let line = text
            .lines()
            .find(|l| l.starts_with("memory events (PMU)"))
            .unwrap();
        assert!(
            line.contains("900 loads, 100 stores (10.0% stores)"),
            "{line}"
        );
        assert!(line.contains("80 loads (20 from another node)"), "{line}");
        assert!(line.contains("- stores (- to another node)"), "{line}");
        assert!(line.contains("25.0% of memory accesses remote"), "{line}");
    }
}
