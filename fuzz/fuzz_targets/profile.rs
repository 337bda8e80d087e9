//! `numalab plot` and `numalab profile`'s readers of a saved
//! `numalab.profile` document: read as the commands read it, then every
//! figure the report and the plot compute from it, and the experiment
//! file `--emit` writes from it, which `numalab run` must read. Never a
//! panic, never a wrap.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_bench::document::Document;
use numalab_bench::experiment::Experiment;
use numalab_bench::profile::{EmitMachine, ProfileReport};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let report = match Document::<ProfileReport>::parse(text) {
        Ok(report) => report,
        Err(err) => {
            drop(err.to_string());
            return;
        }
    };
    let _ = report.peak_per_node();
    let _ = report.last();
    let _ = report.written_share();
    let _ = report.store_share();
    let _ = report.remote_share();
    let _ = report.overhead_share();
    let machine = EmitMachine {
        cpu_nodes: "0-1".parse().expect("a node set"),
        memory_nodes: 2,
        date: "2026-11-27".into(),
    };
    let emitted = report.experiment(&machine);
    if let Err(err) = Experiment::from_toml_str(&emitted, "emitted.toml") {
        panic!("profile --emit wrote an experiment numalab run refuses: {err}\n{emitted}");
    }
    let saved = Document::new(&report).to_json().expect("a profile serialises");
    if let Err(err) = Document::<ProfileReport>::parse(&saved) {
        panic!("a profile read from a file does not read back: {err}");
    }
});
