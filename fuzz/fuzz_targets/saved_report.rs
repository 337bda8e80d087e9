//! `numalab report --from FILE` and `numalab fleet`'s whole-report path:
//! a saved `numalab.report` read as the command reads it, its sizes
//! checked (the bound on nodes and cells that keeps a hostile file from
//! taking gigabytes), then what the command derives from it: the
//! findings, the fingerprint, and the report written back, which must
//! read again. Never a panic, never a wrap.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_bench::document::Document;
use numalab_bench::report::Report;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let report = match Document::<Report>::parse(text) {
        Ok(report) => report,
        Err(err) => {
            drop(err.to_string());
            return;
        }
    };
    // As crates/numalab-cli/src/cmd/report.rs: nothing is derived from a
    // report past its bounds.
    if report.check_sizes().is_err() {
        return;
    }
    let findings = numalab_bench::report::findings::findings(
        &report.topology,
        &report.matrix,
        &report.sweep,
    );
    for finding in &findings {
        drop(finding.to_string());
    }
    let _ = report.machine_fingerprint();
    let saved = Document::new(&report).to_json().expect("a report serialises");
    if let Err(err) = Document::<Report>::parse(&saved) {
        panic!("a report read from a file does not read back: {err}");
    }
});
