//! What the guest reports and how the host reads it.
//!
//! The guest writes one line per event to its second serial port, which
//! QEMU keeps in a file: a start line naming the checks it will run, one
//! result line (JSON) per check, and an end line. Kernel messages never mix
//! into these lines, as they can on the console. A guest that hangs or
//! crashes leaves a report without its end line, and the host says which
//! check was running.

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

/// Prefix of the line the guest writes before any check.
pub const BEGIN: &str = "NUMALAB-EMU-BEGIN ";
/// Prefix of a check's result line.
pub const RESULT: &str = "NUMALAB-EMU-RESULT ";
/// Prefix of the line the guest writes after its last check.
pub const END: &str = "NUMALAB-EMU-END ";

/// One thing a check compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    /// What was compared, e.g. `distance 0 -> 2`.
    pub what: String,
    /// What the preset says.
    pub expected: String,
    /// What the guest found.
    pub found: String,
    /// Whether they agree.
    pub ok: bool,
}

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything compared agreed.
    Pass,
    /// Something differed, or the check could not run its steps.
    Fail,
    /// The preset has nothing this check applies to (e.g. no memory-only
    /// node); says why in `detail`.
    NotApplicable,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::NotApplicable => "n/a",
        })
    }
}

/// The result of one check in one guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The check's name.
    pub check: String,
    /// How it ended.
    pub status: Status,
    /// Notes, or the error that stopped it.
    pub detail: String,
    /// Everything it compared.
    pub comparisons: Vec<Comparison>,
    /// How long it took inside the guest (TCG time: meaningless as a
    /// measurement of numalab).
    pub seconds: f64,
}

/// The guest's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestStart {
    /// The preset the guest was told it runs on.
    pub preset: String,
    /// The guest kernel's release.
    pub kernel: String,
    /// The checks it is about to run, in order.
    pub checks: Vec<String>,
}

/// The guest's last line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestEnd {
    /// Checks that passed.
    pub passed: usize,
    /// Checks that failed.
    pub failed: usize,
    /// Checks that did not apply.
    pub not_applicable: usize,
}

/// Everything read back from a guest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GuestReport {
    /// The start line, if the guest got that far.
    pub start: Option<GuestStart>,
    /// One result per check that finished.
    pub results: Vec<CheckReport>,
    /// The end line, if the guest finished.
    pub end: Option<GuestEnd>,
    /// Lines with a marker that could not be read.
    pub unreadable: Vec<String>,
}

impl GuestReport {
    /// Reads a report from the text of the results port.
    pub fn parse(text: &str) -> GuestReport {
        let mut report = GuestReport::default();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            let mut bad = |line: &str| report.unreadable.push(line.to_owned());
            if let Some(json) = line.strip_prefix(BEGIN) {
                match serde_json::from_str(json) {
                    Ok(start) => report.start = Some(start),
                    Err(_) => bad(line),
                }
            } else if let Some(json) = line.strip_prefix(RESULT) {
                match serde_json::from_str(json) {
                    Ok(result) => report.results.push(result),
                    Err(_) => bad(line),
                }
            } else if let Some(json) = line.strip_prefix(END) {
                match serde_json::from_str(json) {
                    Ok(end) => report.end = Some(end),
                    Err(_) => bad(line),
                }
            }
        }
        report
    }

    /// The checks announced that never reported (the guest stopped
    /// during the first of them).
    pub fn missing(&self) -> Vec<String> {
        let Some(start) = &self.start else {
            return Vec::new();
        };
        start
            .checks
            .iter()
            .filter(|c| !self.results.iter().any(|r| &r.check == *c))
            .cloned()
            .collect()
    }

    /// Whether the guest finished and every check passed or did not apply.
    pub fn passed(&self) -> bool {
        self.start.is_some()
            && self.end.is_some()
            && self.missing().is_empty()
            && self.unreadable.is_empty()
            && self.results.iter().all(|r| r.status != Status::Fail)
    }
}

impl CheckReport {
    /// A readable account of a failed check: its error, then a table of
    /// what was expected and what was found, mismatches marked with `!`
    /// (all rows when there are few, else only the mismatches).
    pub fn render_diff(&self) -> String {
        let mut out = String::new();
        let bad = self.comparisons.iter().filter(|c| !c.ok).count();
        let _ = writeln!(
            out,
            "{} {}: {} of {} comparisons differ",
            self.status,
            self.check,
            bad,
            self.comparisons.len()
        );
        if !self.detail.is_empty() {
            for line in self.detail.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
        let rows: Vec<&Comparison> = if self.comparisons.len() <= 24 {
            self.comparisons.iter().collect()
        } else {
            self.comparisons.iter().filter(|c| !c.ok).collect()
        };
        if rows.is_empty() {
            return out;
        }
        let width = |f: &dyn Fn(&Comparison) -> usize, title: &str| {
            rows.iter()
                .map(|c| f(c))
                .max()
                .unwrap_or(0)
                .max(title.len())
        };
        let w_what = width(&|c| c.what.chars().count(), "what");
        let w_expected = width(&|c| c.expected.chars().count(), "expected");
        let _ = writeln!(
            out,
            "      {:<w_what$}  {:<w_expected$}  found",
            "what", "expected"
        );
        for c in rows {
            let mark = if c.ok { ' ' } else { '!' };
            let _ = writeln!(
                out,
                "    {mark} {:<w_what$}  {:<w_expected$}  {}",
                c.what, c.expected, c.found
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(check: &str, status: Status, comparisons: Vec<Comparison>) -> String {
        let report = CheckReport {
            check: check.into(),
            status,
            detail: String::new(),
            comparisons,
            seconds: 0.1,
        };
        format!("{RESULT}{}", serde_json::to_string(&report).unwrap())
    }

    fn cmp(what: &str, expected: &str, found: &str) -> Comparison {
        Comparison {
            what: what.into(),
            expected: expected.into(),
            found: found.into(),
            ok: expected == found,
        }
    }

    #[test]
    fn reads_a_complete_report_among_noise() {
        let start = GuestStart {
            preset: "cxl".into(),
            kernel: "6.1.0".into(),
            checks: vec!["topo.nodes".into(), "topo.distances".into()],
        };
        let text = format!(
            "garbage\r\n{BEGIN}{}\r\n{}\n[ 1.0] kernel says hi\n{}\n{END}{}\n",
            serde_json::to_string(&start).unwrap(),
            result("topo.nodes", Status::Pass, vec![cmp("nodes", "0-3", "0-3")]),
            result(
                "topo.distances",
                Status::Fail,
                vec![
                    cmp("distance 0 -> 1", "21", "21"),
                    cmp("distance 0 -> 2", "24", "26")
                ]
            ),
            serde_json::to_string(&GuestEnd {
                passed: 1,
                failed: 1,
                not_applicable: 0
            })
            .unwrap()
        );
        let report = GuestReport::parse(&text);
        assert_eq!(report.start, Some(start));
        assert_eq!(report.results.len(), 2);
        assert!(report.end.is_some() && report.missing().is_empty());
        assert!(!report.passed(), "a failed check fails the guest");
        let diff = report.results[1].render_diff();
        assert!(
            diff.contains("FAIL topo.distances: 1 of 2 comparisons differ"),
            "{diff}"
        );
        assert!(diff.contains("  ! distance 0 -> 2  24        26"), "{diff}");
        assert!(diff.contains("    distance 0 -> 1  21        21"), "{diff}");
    }

    #[test]
    fn a_guest_that_stopped_names_the_missing_checks() {
        let start = GuestStart {
            preset: "two-socket".into(),
            kernel: "6.1.0".into(),
            checks: vec!["a".into(), "b".into(), "c".into()],
        };
        let text = format!(
            "{BEGIN}{}\n{}\n{RESULT}{{truncated\n",
            serde_json::to_string(&start).unwrap(),
            result("a", Status::Pass, vec![])
        );
        let report = GuestReport::parse(&text);
        assert_eq!(report.missing(), ["b", "c"]);
        assert_eq!(report.unreadable.len(), 1);
        assert!(!report.passed());
        assert!(!GuestReport::parse("").passed(), "no report is no pass");
    }
}
