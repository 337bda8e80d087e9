//! `numalab exec` for people: how the command ended, its resident memory
//! per node in `numastat -p`'s columns at its peak and at exit, and the
//! placement of its private memory against the policy.

use std::fmt::Write as _;

use numalab::launch::{Exit, Observation};
use numalab::locate::MemoryKind;
use numalab_bench::exec::ExecReport;

use super::{Render, Style};
use crate::output::{self, mib_figure, Csv};

impl Render for ExecReport {
    /// The same columns in both styles.
    fn text(&self, _style: Style) -> String {
        human(self)
    }

    fn csv(&self) -> String {
        csv(self)
    }
}

/// The columns, in `numastat -p`'s order.
const KINDS: [MemoryKind; 5] = [
    MemoryKind::Private,
    MemoryKind::Heap,
    MemoryKind::Stack,
    MemoryKind::Huge,
    MemoryKind::File,
];

fn kind_name(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Huge => "huge",
        MemoryKind::Heap => "heap",
        MemoryKind::Stack => "stack",
        MemoryKind::Private => "private",
        MemoryKind::File => "file",
    }
}

fn human(report: &ExecReport) -> String {
    let run = &report.run;
    let mut out = String::new();
    let ended = match run.exit {
        Exit::Code(code) => format!("exited {code}"),
        Exit::Signal(signal) => format!("was killed by signal {signal}"),
    };
    let how = match run.observation {
        Observation::AtExit => "",
        Observation::Sampled => " (tracing not permitted here: sampled only)",
    };
    let _ = writeln!(
        out,
        "\nnumalab exec: `{}` {ended} after {:.2} s; {}{how}",
        report.command.join(" "),
        run.elapsed.as_secs_f64(),
        numalab::units::count(run.processes, "process")
    );
    out.push_str("peak resident memory per node, MiB (numastat -p columns):\n");
    let mut header = vec!["node".to_string()];
    header.extend(KINDS.iter().map(|k| kind_name(*k).to_string()));
    header.push("total".into());
    header.push("at exit".into());
    let mut table = output::table(header);
    let peak = run.peak.per_node();
    let at_exit = run.memory.per_node();
    for node in report.nodes_seen() {
        let mut row = vec![node.to_string()];
        for kind in KINDS {
            let bytes = run
                .peak
                .bytes
                .get(&kind)
                .and_then(|m| m.get(&node))
                .copied()
                .unwrap_or(0);
            row.push(mib_figure(bytes));
        }
        row.push(mib_figure(peak.get(&node).copied().unwrap_or(0)));
        row.push(mib_figure(at_exit.get(&node).copied().unwrap_or(0)));
        table.add_row(row);
    }
    out.push_str(&output::render(&table));
    let mark = if report.audit.is_match() {
        ""
    } else {
        "warning: "
    };
    let _ = writeln!(
        out,
        "{mark}placement of private memory at its peak: {}",
        report.audit.note
    );
    out
}

fn csv(report: &ExecReport) -> String {
    let mut csv = Csv::new(&["when", "node", "kind", "bytes"]);
    for (when, memory) in [("peak", &report.run.peak), ("exit", &report.run.memory)] {
        for kind in KINDS {
            if let Some(per_node) = memory.bytes.get(&kind) {
                for (node, bytes) in per_node {
                    csv.row([
                        when.to_string(),
                        node.to_string(),
                        kind_name(kind).into(),
                        bytes.to_string(),
                    ]);
                }
            }
        }
    }
    csv.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_the_json_names() {
        for kind in KINDS {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                kind_name(kind),
                "{kind:?}"
            );
        }
    }
}
