//! Sweeps: every cell of an experiment's `[sweep]` grid, each planned
//! (so an impossible cell is refused before the first one runs), run and
//! placement-checked, then each policy compared against `local`.

use numalab::system::Environment;
use numalab::Topology;

use super::config::{ConfigError, Experiment};
use super::execute::{execute_plan, Control, ExecuteError};
use super::plan::{Plan, PlanError};
use super::result::{
    compare_with_local, SweepCell, SweepResult, Warning, WarningKind, SCHEMA_VERSION, SWEEP_SCHEMA,
};

/// Why a sweep could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The grid itself is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A cell cannot be placed on this machine.
    #[error("sweep cell {cell}: {source}")]
    Plan {
        /// The cell's settings.
        cell: String,
        /// Why.
        source: Box<PlanError>,
    },
    /// A cell failed while running.
    #[error("sweep cell {cell}: {source}")]
    Execute {
        /// The cell's settings.
        cell: String,
        /// Why.
        source: Box<ExecuteError>,
    },
}

/// A TOML value as a person reads it: strings without quotes.
pub fn value_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn describe(settings: &[(String, String)]) -> String {
    settings
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A cell of the grid, planned.
#[derive(Debug, Clone)]
pub struct PlannedCell {
    /// Its settings (key, value as text), in axis order.
    pub settings: Vec<(String, String)>,
    /// The experiment it is.
    pub experiment: Experiment,
    /// Its plan on this machine.
    pub plan: Plan,
}

/// Every cell of the grid, planned: refuses the sweep before anything runs
/// when one cell cannot be placed.
pub fn plan_sweep(exp: &Experiment, topology: &Topology) -> Result<Vec<PlannedCell>, SweepError> {
    exp.cells()?
        .into_iter()
        .map(|(settings, experiment)| {
            let settings: Vec<(String, String)> = settings
                .iter()
                .map(|(k, v)| (k.clone(), value_text(v)))
                .collect();
            let plan = Plan::resolve(&experiment, topology).map_err(|source| SweepError::Plan {
                cell: describe(&settings),
                source: Box::new(source),
            })?;
            Ok(PlannedCell {
                settings,
                experiment,
                plan,
            })
        })
        .collect()
}

/// Runs every cell of `exp`'s grid in order; `on_cell(i, n, settings)` is
/// called before each. Ctrl-C (the control's stop flag) ends the sweep
/// after the current cell, whose result is kept, marked interrupted.
pub fn run_sweep(
    exp: &Experiment,
    topology: &Topology,
    control: &Control,
    mut on_cell: impl FnMut(usize, usize, &str),
) -> Result<SweepResult, SweepError> {
    let planned = plan_sweep(exp, topology)?;
    let n = planned.len();
    let mut cells = Vec::with_capacity(n);
    let mut interrupted = false;
    for (i, cell) in planned.into_iter().enumerate() {
        let PlannedCell {
            settings,
            experiment: cell,
            plan,
        } = cell;
        if control.stop.load(std::sync::atomic::Ordering::Relaxed) {
            interrupted = true;
            cells.push(SweepCell {
                settings,
                result: None,
            });
            continue;
        }
        on_cell(i, n, &describe(&settings));
        let result =
            execute_plan(&cell, topology, plan, control).map_err(|source| SweepError::Execute {
                cell: describe(&settings),
                source: Box::new(source),
            })?;
        interrupted |= result.interrupted;
        cells.push(SweepCell {
            settings,
            result: Some(result),
        });
    }
    let mut warnings = Vec::new();
    let mismatched = cells
        .iter()
        .filter(|c| {
            c.result
                .as_ref()
                .is_some_and(|r| !r.placement_as_requested())
        })
        .count();
    if mismatched > 0 {
        warnings.push(Warning::new(
            WarningKind::Placement,
            format!("placement did not match the request in {mismatched} of {n} cells (the placement column says which):"),
        ));
        // Each distinct reason once.
        let mut reasons: Vec<&Warning> = Vec::new();
        for w in cells
            .iter()
            .filter_map(|c| c.result.as_ref())
            .flat_map(|r| r.warnings.iter())
            .filter(|w| w.kind == WarningKind::Placement)
        {
            if !reasons.iter().any(|r| r.message == w.message) {
                reasons.push(w);
            }
        }
        warnings.extend(reasons.into_iter().cloned());
    }
    let noisy = cells
        .iter()
        .filter(|c| {
            c.result
                .as_ref()
                .is_some_and(|r| r.warnings.iter().any(|w| w.kind == WarningKind::Noisy))
        })
        .count();
    if noisy > 0 {
        warnings.push(Warning::new(
            WarningKind::Noisy,
            format!("{noisy} of {n} cells were noisy (repeats varied by more than 5%)"),
        ));
    }
    // What some cells cannot show (replication on one node): each reason once.
    let mut inconclusive: Vec<&Warning> = Vec::new();
    for w in cells
        .iter()
        .filter_map(|c| c.result.as_ref())
        .flat_map(|r| r.warnings.iter())
        .filter(|w| w.kind == WarningKind::Inconclusive)
    {
        if !inconclusive.iter().any(|i| i.message == w.message) {
            inconclusive.push(w);
        }
    }
    warnings.extend(inconclusive.into_iter().cloned());
    for kind in [WarningKind::NoPmu, WarningKind::Oversubscribed] {
        if let Some(w) = cells
            .iter()
            .filter_map(|c| c.result.as_ref())
            .flat_map(|r| r.warnings.iter())
            .find(|w| w.kind == kind)
        {
            warnings.push(w.clone());
        }
    }
    if interrupted {
        warnings.push(Warning::new(
            WarningKind::Interrupted,
            format!(
                "interrupted: {} of {n} cells ran",
                cells.iter().filter(|c| c.result.is_some()).count()
            ),
        ));
    }
    Ok(SweepResult {
        schema: SWEEP_SCHEMA.to_owned(),
        schema_version: SCHEMA_VERSION,
        numalab_version: env!("CARGO_PKG_VERSION").to_owned(),
        created: String::new(),
        experiment: exp.clone(),
        environment: Environment::current(topology),
        axes: exp
            .sweep
            .axes
            .iter()
            .map(|(k, values)| (k.clone(), values.iter().map(value_text).collect()))
            .collect(),
        comparison: compare_with_local(&cells),
        cells,
        warnings,
        interrupted,
    })
}
