//! `numalab plot`: a result file (run, sweep, matrix, profile) read as
//! the command reads it, then drawn
//! by the command's own figure code (crates/numalab-cli/src/plot.rs and
//! render/figures.rs, compiled in here) into SVG and PNG files in a
//! scratch directory. A hang shows as libFuzzer's timeout.
#![no_main]
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use numalab_bench::document::{Document, Schema};
use numalab_bench::experiment::result::{RunReport, SweepReport, RUN_SCHEMA, SWEEP_SCHEMA};
use numalab_bench::matrix::MatrixReport;
use numalab_bench::profile::ProfileReport;

#[path = "../../crates/numalab-cli/src/plot.rs"]
mod plot;

#[path = "../../crates/numalab-cli/src/render/figures.rs"]
mod figures;

/// The helpers of the CLI's output module the figure code uses, on the
/// library's safe file functions as the CLI's are.
mod output {
    use std::path::Path;

    pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(numalab::files::write_output(path, bytes)?)
    }

    pub fn check_target(path: &Path) -> anyhow::Result<()> {
        numalab::files::check_output(path)?;
        Ok(())
    }
}

/// A directory of this process's on tmpfs, for the figures.
fn stem() -> &'static PathBuf {
    static STEM: OnceLock<PathBuf> = OnceLock::new();
    STEM.get_or_init(|| {
        let base = std::env::var_os("NUMALAB_FUZZ_SCRATCH")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("numalab-fuzz-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir.join("figure")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // As crates/numalab-cli/src/cmd/plot.rs dispatches: the envelope
    // first, then the text straight into the result its schema names.
    #[derive(serde::Deserialize)]
    struct Header {
        schema: Option<String>,
    }
    let Ok(header) = serde_json::from_str::<Header>(text) else {
        return;
    };
    let drawn = match header.schema.as_deref().unwrap_or("") {
        SWEEP_SCHEMA => match serde_json::from_str::<SweepReport>(text) {
            Ok(sweep) => figures::draw_sweep(&sweep, stem()),
            Err(_) => return,
        },
        RUN_SCHEMA => match serde_json::from_str::<RunReport>(text) {
            Ok(run) => figures::draw_run(&run, stem()),
            Err(_) => return,
        },
        MatrixReport::NAME => match Document::<MatrixReport>::parse(text) {
            Ok(result) => figures::draw_matrix(&result, stem()),
            Err(_) => return,
        },
        ProfileReport::NAME => match Document::<ProfileReport>::parse(text) {
            Ok(report) if report.check_saved_size().is_ok() => {
                figures::draw_profile(&report, stem())
            }
            _ => return,
        },
        _ => return,
    };
    if let Err(err) = drawn {
        drop(err.to_string());
    }
});
