//! `numalab run` and `numalab sweep` for people: a run's figures, threads
//! and regions, a sweep's cells and each policy's difference from `local`
//! (tables, Markdown, CSV). The JSON is the result type itself, whose
//! schema fields (`numalab.run`, `numalab.sweep`) it carries.

pub mod csv;
#[cfg(test)]
mod fixtures;
pub mod text;

use anyhow::Result;
use numalab_bench::experiment::{RunReport, SweepReport, Warning};
use serde::Serialize;

use super::{Render, Style};

/// Pretty JSON ending in a newline: a run or sweep result carries its own
/// schema, version and date, so it is written as it is.
fn own_document<T: Serialize>(result: &T) -> Result<String> {
    let mut text = serde_json::to_string_pretty(result)?;
    text.push('\n');
    Ok(text)
}

fn messages(warnings: &[Warning]) -> Vec<String> {
    warnings.iter().map(|w| w.message.clone()).collect()
}

impl Render for RunReport {
    fn text(&self, style: Style) -> String {
        text::run_report(self, style)
    }

    fn csv(&self) -> String {
        csv::run(self)
    }

    fn json(&self) -> Result<String> {
        own_document(self)
    }

    fn warnings(&self) -> Vec<String> {
        messages(&self.warnings)
    }
}

impl Render for SweepReport {
    fn text(&self, style: Style) -> String {
        text::sweep_report(self, style)
    }

    fn csv(&self) -> String {
        csv::sweep(self)
    }

    fn json(&self) -> Result<String> {
        own_document(self)
    }

    fn warnings(&self) -> Vec<String> {
        messages(&self.warnings)
    }
}
