//! Sweeps: every cell of an experiment's `[sweep]` grid, each planned
//! (so an impossible cell is refused before the first one runs), run and
//! placement-checked, then each policy compared against `local`.

use numalab::system::Environment;
use numalab::Topology;

use super::config::{ConfigError, Experiment};
use super::execute::{execute_plan, Control, ExecuteError};
use super::plan::{Plan, PlanError};
use super::result::{
    compare_with_local, Cause, RunResult, SweepCell, SweepResult, Warning, WarningKind,
    SCHEMA_VERSION, SWEEP_SCHEMA,
};

/// Why a sweep could not run.
///
/// Every cell is planned before the first runs, so a cell that cannot be
/// placed refuses the whole sweep.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::sweep::{plan_sweep, SweepError};
/// use numalab_bench::experiment::{Experiment, PlanError};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?; // 4 CPUs
/// let exp = Experiment::from_toml_str("[sweep]\n\"threads.count\" = [2, 8]\n", "x")?;
/// match plan_sweep(&exp, &topo) {
///     Err(SweepError::Plan { cell, source }) => {
///         assert_eq!(cell, "threads.count = 8");
///         assert!(matches!(*source, PlanError::TooManyThreads { .. }));
///     }
///     Err(other) => panic!("unexpected: {other}"),
///     Ok(_) => panic!("8 threads on 4 CPUs"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::sweep::plan_sweep;
/// use numalab_bench::experiment::Experiment;
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let exp = Experiment::from_toml_str(
///     "[memory]\nsize = \"1MiB\"\n[sweep]\n\"threads.count\" = [1, 4]\n\"memory.policy\" = [\"local\", \"remote\"]\n",
///     "x")?;
/// let cells = plan_sweep(&exp, &topo)?;
/// assert_eq!(cells.len(), 4, "first axis slowest");
/// let last = &cells[3];
/// assert_eq!(last.settings, [("threads.count".into(), "4".into()), ("memory.policy".into(), "remote".into())]);
/// assert_eq!(last.experiment.threads.count, 4);
/// assert_eq!(last.plan.threads.len(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
/// after the current cell, whose result is kept, marked interrupted. A
/// cell that fails while running (every cell is planned before the first
/// runs, so this is the machine changing under the sweep, such as memory
/// taken by another program) is kept with its error and a warning, and
/// the sweep goes on: hours of earlier cells are never lost to one.
pub fn run_sweep(
    exp: &Experiment,
    topology: &Topology,
    control: &Control,
    on_cell: impl FnMut(usize, usize, &str),
) -> Result<SweepResult, SweepError> {
    run_cells(exp, topology, control, on_cell, execute_plan)
}

/// [`run_sweep`] with the way a cell runs passed in.
fn run_cells(
    exp: &Experiment,
    topology: &Topology,
    control: &Control,
    mut on_cell: impl FnMut(usize, usize, &str),
    mut execute: impl FnMut(&Experiment, &Topology, Plan, &Control) -> Result<RunResult, ExecuteError>,
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
                error: None,
            });
            continue;
        }
        on_cell(i, n, &describe(&settings));
        match execute(&cell, topology, plan, control) {
            Ok(result) => {
                interrupted |= result.interrupted;
                cells.push(SweepCell {
                    settings,
                    result: Some(result),
                    error: None,
                });
            }
            Err(err) => cells.push(SweepCell {
                settings,
                result: None,
                error: Some(err.to_string()),
            }),
        }
    }
    let mut warnings: Vec<Warning> = cells
        .iter()
        .filter_map(|c| {
            let error = c.error.as_ref()?;
            Some(
                Warning::new(
                    WarningKind::Failed,
                    format!(
                        "sweep cell {} failed: {error}; the sweep went on",
                        describe(&c.settings)
                    ),
                )
                .because(Cause::Cell {
                    settings: c.settings.clone(),
                }),
            )
        })
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep of three small cells.
    const GRID: &str = "[threads]\ncount = 1\n[memory]\nsize = \"1MiB\"\n[access]\nops = 5_000\n[run]\nrepeats = 1\nwarmup = 0\n[sweep]\n\"access.op_size\" = [64, 128, 256]\n";

    #[test]
    fn a_failing_cell_is_kept_with_its_error_and_the_sweep_goes_on() {
        let exp = Experiment::from_toml_str(GRID, "grid.toml").unwrap();
        let topology = Topology::system().unwrap();
        let mut seen = Vec::new();
        let result = run_cells(
            &exp,
            &topology,
            &Control::default(),
            |i, _, _| seen.push(i),
            |cell, topology, plan, control| {
                if cell.access.op_size.0 == 128 {
                    // What a cell meets when the machine changes under the
                    // sweep after planning.
                    Err(ExecuteError::Plan(PlanError::NoCpus {
                        placement: "nodes:0".into(),
                    }))
                } else {
                    execute_plan(cell, topology, plan, control)
                }
            },
        )
        .unwrap();
        assert_eq!(seen, [0, 1, 2], "every cell was started");
        let ran: Vec<bool> = result.cells.iter().map(|c| c.result.is_some()).collect();
        assert_eq!(ran, [true, false, true]);
        let failed = &result.cells[1];
        let error = failed.error.as_deref().unwrap();
        assert!(error.contains("leaves no CPU"), "{error}");
        assert!(result.cells[0].error.is_none() && result.cells[2].error.is_none());
        assert!(!result.interrupted);
        let warning = result
            .warnings
            .iter()
            .find(|w| w.kind == WarningKind::Failed)
            .expect("a warning for the failed cell");
        assert_eq!(
            warning.cause,
            Some(Cause::Cell {
                settings: failed.settings.clone()
            })
        );
        assert_eq!(failed.setting("access.op_size"), Some("128"));
        assert!(warning.message.contains(error), "{}", warning.message);
        // The JSON keeps the error; cells that ran carry none.
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["cells"][1]["error"], error);
        assert!(json["cells"][0].get("error").is_none());
    }
}
