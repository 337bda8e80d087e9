//! Result files as `numalab plot` and the emulated suite read them back:
//! a JSON document, its schema named inside, read as that schema's type;
//! then the figures `plot` computes from it. Never a panic, and whatever
//! reads is written back as a document that reads again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_bench::document::{Document, Schema};
use numalab_bench::experiment::result::{
    compare, figures, RunReport, SweepReport, RUN_SCHEMA, SWEEP_SCHEMA,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Reads `value` as `T`'s document; when it reads, writes it and reads it
/// again.
fn document<T: Schema + Serialize + DeserializeOwned>(value: &serde_json::Value) -> Option<T> {
    match Document::<T>::from_value(value.clone()) {
        Ok(body) => {
            let saved = Document::new(&body).to_json().expect("a result serialises");
            if let Err(err) = Document::<T>::parse(&saved) {
                panic!(
                    "a {} read from a file does not read back: {err}\n{saved}",
                    T::NAME
                );
            }
            Some(body)
        }
        Err(err) => {
            drop(err.to_string());
            None
        }
    }
}

fn run_figures(run: &RunReport) {
    let _ = run.time_to_last();
    let _ = run.placement_as_requested();
    let _ = figures(&run.repeats);
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    // `numalab plot`: run and sweep results carry their schema fields
    // themselves and are read as their type.
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(RUN_SCHEMA) => {
            if let Ok(run) = serde_json::from_value::<RunReport>(value.clone()) {
                run_figures(&run);
                let saved = serde_json::to_string(&run).expect("a run serialises");
                serde_json::from_str::<RunReport>(&saved).expect("a run reads back");
            }
        }
        Some(SWEEP_SCHEMA) => {
            if let Ok(sweep) = serde_json::from_value::<SweepReport>(value.clone()) {
                for cell in &sweep.cells {
                    if let Some(run) = &cell.result {
                        run_figures(run);
                    }
                    for (key, _) in &sweep.axes {
                        let _ = cell.setting(key);
                    }
                }
                // The saved looks, as untrusted as the rest.
                let _ = compare(
                    &sweep.axes,
                    &sweep.cells,
                    sweep.looks.map_or(1, |l| l.planned),
                );
                let saved = serde_json::to_string(&sweep).expect("a sweep serialises");
                serde_json::from_str::<SweepReport>(&saved).expect("a sweep reads back");
            }
        }
        _ => {}
    }
    // Every other document type, as the emulated suite and `plot` read them.
    let _ = document::<numalab_bench::matrix::MatrixReport>(&value);
    let _ = document::<numalab_bench::matrix::PlanReport>(&value);
    let _ = document::<numalab_bench::topo::TopoReport>(&value);
    let _ = document::<numalab_bench::exec::ExecReport>(&value);
    let _ = document::<numalab_bench::fill::FillReport>(&value);
    let _ = document::<numalab_bench::ring::RingReport>(&value);
    let _ = document::<numalab_bench::ring::RingListReport>(&value);
    let _ = document::<numalab_bench::report::Report>(&value);
});
