//! Sweeps: every cell of an experiment's `[sweep]` grid, each planned
//! (so an impossible cell is refused before the first one runs), run and
//! placement-checked, then each policy compared against `local`.

use numalab::system::Environment;
use numalab::units::count;
use numalab::Topology;

use crate::control::Control;

use super::config::{ConfigError, Experiment, RunOrder};
use super::execute::{
    floor_warning, interrupted_warning, length_key, lengthening, noise_warning, run_plan,
    ExecuteError,
};
use super::floor::Lengthened;
use super::plan::{Plan, PlanError};
use super::result::{
    compare, figures, thread_figures, Cause, Looks, RunReport, Stopped, SweepCell, SweepReport,
    Warning, WarningKind, SCHEMA_VERSION, SWEEP_SCHEMA,
};
use super::values::PolicySpec;

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
    /// `run.control` without a `local` cell to repeat.
    #[error("run.control repeats the local cells as an A/A control, and this sweep has none: add \"local\" to [sweep] \"memory.policy\"")]
    NoLocalForControl,
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
    /// A second run of a `local` cell, as an A/A control (`run.control`).
    pub control: bool,
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
                control: false,
            })
        })
        .collect::<Result<Vec<_>, SweepError>>()
        .and_then(|cells| with_controls(exp, cells))
}

/// A cell as progress names it: its settings, and "A/A control" for one.
fn label(settings: &[(String, String)], control: bool) -> String {
    let text = describe(settings);
    if control {
        format!("{text}, A/A control")
    } else {
        text
    }
}

/// With `run.control`, each `local` cell followed by its A/A control.
fn with_controls(
    exp: &Experiment,
    cells: Vec<PlannedCell>,
) -> Result<Vec<PlannedCell>, SweepError> {
    if !exp.run.control {
        return Ok(cells);
    }
    let mut out = Vec::with_capacity(cells.len() * 2);
    for cell in cells {
        let local = cell.experiment.memory.policy == PolicySpec::Local;
        let control = local.then(|| PlannedCell {
            control: true,
            ..cell.clone()
        });
        out.push(cell);
        out.extend(control);
    }
    if !out.iter().any(|c| c.control) {
        return Err(SweepError::NoLocalForControl);
    }
    Ok(out)
}

/// Runs every cell of `exp`'s grid in order, each named in the control's
/// progress label as it starts ("cell 2/6 (threads.count=2, …)").
/// Ctrl-C (a stop asked through `control`) ends the sweep
/// after the current cell, whose result is kept, marked interrupted. A
/// cell that fails while running (every cell is planned before the first
/// runs, so this is the machine changing under the sweep, such as memory
/// taken by another program) is kept with its error and a warning, and
/// the sweep goes on: hours of earlier cells are never lost to one.
pub fn run_sweep(
    exp: &Experiment,
    topology: &Topology,
    control: &Control,
) -> Result<SweepReport, SweepError> {
    let label = |i: usize, n: usize, cell: &str| {
        control
            .progress
            .set_label(format!("cell {}/{n} ({cell})", i + 1));
    };
    run_cells(exp, topology, control, label, run_plan)
}

/// [`run_sweep`] with the way a cell runs passed in.
fn run_cells(
    exp: &Experiment,
    topology: &Topology,
    control: &Control,
    on_cell: impl FnMut(usize, usize, &str),
    execute: impl FnMut(&Experiment, &Topology, Plan, &Control) -> Result<RunReport, ExecuteError>,
) -> Result<SweepReport, SweepError> {
    let planned = plan_sweep(exp, topology)?;
    let n = planned.len();
    let (cells, interrupted, looks) = if exp.run.order == RunOrder::Interleaved && n > 1 {
        run_interleaved(exp, planned, topology, control, on_cell, execute)
    } else {
        let (cells, interrupted) = run_grouped(planned, topology, control, on_cell, execute);
        (cells, interrupted, None)
    };
    finish(exp, topology, cells, interrupted, looks)
}

/// The swept keys with their values as text, in file order.
pub fn axes_of(exp: &Experiment) -> Vec<(String, Vec<String>)> {
    exp.sweep
        .axes
        .iter()
        .map(|(k, values)| (k.clone(), values.iter().map(value_text).collect()))
        .collect()
}

/// Whether every difference the sweep reports (controls aside) is told
/// apart from the rounds run so far, with intervals made for `looks`
/// looks: then more rounds cannot change a verdict's direction, only
/// narrow it. A sweep with no difference to report is decided.
fn decided(
    exp: &Experiment,
    planned: &[PlannedCell],
    parts: &[Vec<RunReport>],
    errors: &[Option<String>],
    looks: u32,
) -> bool {
    let cells: Vec<SweepCell> = planned
        .iter()
        .zip(parts)
        .zip(errors)
        .map(|((cell, parts), error)| SweepCell {
            settings: cell.settings.clone(),
            result: match error {
                Some(_) => None,
                None => merge_rounds(&cell.experiment, &cell.plan, parts.clone()),
            },
            error: error.clone(),
            control: cell.control,
        })
        .collect();
    let (against_local, against_first) = compare(&axes_of(exp), &cells, looks);
    let told = |d: Option<&crate::stats::Difference>| {
        d.is_some_and(|d| d.verdict != crate::stats::Verdict::Indistinguishable)
    };
    against_local
        .iter()
        .filter(|c| !c.control)
        .all(|c| told(c.difference.as_ref()))
        && against_first.iter().all(|d| told(d.difference.as_ref()))
}

/// Each cell's repeats back to back (`run.order = "grouped"`).
fn run_grouped(
    planned: Vec<PlannedCell>,
    topology: &Topology,
    control: &Control,
    mut on_cell: impl FnMut(usize, usize, &str),
    mut execute: impl FnMut(&Experiment, &Topology, Plan, &Control) -> Result<RunReport, ExecuteError>,
) -> (Vec<SweepCell>, bool) {
    let n = planned.len();
    let mut cells = Vec::with_capacity(n);
    let mut interrupted = false;
    // The first cell that runs sizes the runs of all (every cell does the
    // same operations, so their times compare).
    let sizing = sized_by_numalab(&planned);
    let mut sized: Option<Option<Lengthened>> = None;
    for (i, cell) in planned.into_iter().enumerate() {
        let PlannedCell {
            settings,
            experiment: cell,
            mut plan,
            control: is_control,
        } = cell;
        let given = cell.clone();
        let mut cell = cell;
        if let (true, Some(lengthened)) = (sizing, &sized) {
            if let Some(l) = lengthened {
                plan.scale_ops(l.factor);
            }
            cell.access.ops = Some(plan.total_ops());
        }
        if control.is_stopped() {
            interrupted = true;
            cells.push(SweepCell {
                settings,
                result: None,
                error: None,
                control: is_control,
            });
            continue;
        }
        on_cell(i, n, &label(&settings, is_control));
        match execute(&cell, topology, plan, control) {
            Ok(result) => {
                interrupted |= result.interrupted;
                let result = match (sizing, &sized) {
                    (true, None) => {
                        sized = Some(result.lengthened.clone());
                        result
                    }
                    (true, Some(lengthened)) => as_sized(result, &given, lengthened.as_ref()),
                    (false, _) => result,
                };
                cells.push(SweepCell {
                    settings,
                    result: Some(result),
                    error: None,
                    control: is_control,
                });
            }
            Err(err) => cells.push(SweepCell {
                settings,
                result: None,
                error: Some(err.to_string()),
                control: is_control,
            }),
        }
    }
    (cells, interrupted)
}

/// Round by round (`run.order = "interleaved"`): round r runs repeat r of
/// every cell that has one, each as a run of its own (set-up, warm-ups,
/// one measured repeat, with a seed of its own so repeats draw distinct
/// random streams as they do back to back), and each cell's rounds are
/// then merged into one result. A cell that fails keeps its error and is
/// left out of later rounds; Ctrl-C ends the sweep after the current
/// run, each cell keeping the rounds it finished.
///
/// With `run.max_repeats` above `run.repeats` the sweep looks at its
/// differences after every `run.repeats` rounds and stops at the first
/// look that finds them all told apart ([`decided`]), or at
/// `run.max_repeats`.
fn run_interleaved(
    exp: &Experiment,
    planned: Vec<PlannedCell>,
    topology: &Topology,
    control: &Control,
    mut on_cell: impl FnMut(usize, usize, &str),
    mut execute: impl FnMut(&Experiment, &Topology, Plan, &Control) -> Result<RunReport, ExecuteError>,
) -> (Vec<SweepCell>, bool, Option<Looks>) {
    let n = planned.len();
    let rounds = planned
        .iter()
        .map(|c| c.experiment.run.repeats)
        .max()
        .unwrap_or(0);
    // More than one look: every cell has the same run.repeats (they
    // cannot be swept then), so every look sees the same rounds of all.
    let planned_looks = exp.run.looks();
    let most = exp.run.most_repeats();
    let mut looks = Looks {
        planned: planned_looks,
        taken: 0,
        every: rounds,
        stopped: Stopped::MostRepeats,
    };
    let mut last = rounds;
    let mut planned = planned;
    let mut parts: Vec<Vec<RunReport>> = planned.iter().map(|_| Vec::new()).collect();
    let mut errors: Vec<Option<String>> = vec![None; n];
    let mut interrupted = false;
    // Where numalab sizes the runs, the first round of every cell runs at
    // the given count; if the shortest cell fell under the noise floor,
    // every cell is lengthened by the same factor (so their times still
    // compare) and that round is kept as a warm-up.
    let mut sizing = sized_by_numalab(&planned);
    let sized = sizing;
    let mut calibration: Vec<Option<RunReport>> = planned.iter().map(|_| None).collect();
    let mut lengthened: Option<Lengthened> = None;
    let mut round = 0;
    'rounds: loop {
        if round >= last {
            looks.taken += 1;
            if looks.taken >= planned_looks {
                break;
            }
            if decided(exp, &planned, &parts, &errors, planned_looks) {
                looks.stopped = Stopped::Decided;
                break;
            }
            last += rounds;
        }
        for (i, cell) in planned.iter().enumerate() {
            let repeats = if planned_looks > 1 {
                last
            } else {
                cell.experiment.run.repeats
            };
            if round >= repeats || errors[i].is_some() {
                continue;
            }
            if control.is_stopped() {
                interrupted = true;
                break 'rounds;
            }
            let what = if sizing {
                "sizing run".to_owned()
            } else if planned_looks > 1 {
                format!("repeat {}/{repeats}, up to {most}", round + 1)
            } else {
                format!("repeat {}/{repeats}", round + 1)
            };
            on_cell(
                i,
                n,
                &format!("{}; {what}", label(&cell.settings, cell.control)),
            );
            let mut one = cell.experiment.clone();
            if sized {
                // The sweep sizes the runs, not each run by itself.
                one.access.ops = Some(cell.plan.total_ops());
            }
            one.run.repeats = 1;
            one.access.seed = cell
                .experiment
                .access
                .seed
                .wrapping_add(u64::from(round).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            match execute(&one, topology, cell.plan.clone(), control) {
                Ok(result) => {
                    interrupted |= result.interrupted;
                    parts[i].push(result);
                }
                Err(err) => errors[i] = Some(err.to_string()),
            }
        }
        if sizing {
            sizing = false;
            let shortest = parts
                .iter()
                .filter_map(|p| p.first())
                .filter(|r| !r.interrupted)
                .filter_map(|r| Some((r.time_to_last()?, r.noise_floor?)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let longer = shortest.and_then(|(time, floor)| {
                // One factor for all, within every cell's limits.
                let each: Option<Vec<Lengthened>> = planned
                    .iter()
                    .map(|c| lengthening(&c.experiment, &c.plan, &floor, time))
                    .collect();
                each?.into_iter().min_by_key(|l| l.factor)
            });
            if let Some(l) = longer {
                for (i, cell) in planned.iter_mut().enumerate() {
                    cell.plan.scale_ops(l.factor);
                    calibration[i] = parts[i].pop();
                }
                lengthened = Some(l);
                continue;
            }
        }
        round += 1;
    }
    let cells = planned
        .into_iter()
        .zip(parts)
        .zip(errors)
        .zip(calibration)
        .map(|(((cell, parts), error), calibration)| {
            let result = match error {
                Some(_) => None,
                None => merge_rounds(&cell.experiment, &cell.plan, parts).map(|mut merged| {
                    if let Some(first) = calibration {
                        let mut warmups = first.warmups;
                        warmups.extend(first.repeats);
                        warmups.append(&mut merged.warmups);
                        for (i, repeat) in warmups.iter_mut().enumerate() {
                            repeat.index = i;
                        }
                        merged.warmups = warmups;
                    }
                    if sized {
                        as_sized(merged, &cell.experiment, lengthened.as_ref())
                    } else {
                        merged
                    }
                }),
            };
            SweepCell {
                settings: cell.settings,
                result,
                error,
                control: cell.control,
            }
        })
        .collect();
    if interrupted {
        looks.stopped = Stopped::Interrupted;
    }
    (cells, interrupted, (planned_looks > 1).then_some(looks))
}

/// Whether numalab sizes every cell's runs: no cell was given a count
/// of operations or a duration.
fn sized_by_numalab(planned: &[PlannedCell]) -> bool {
    planned
        .iter()
        .all(|c| c.experiment.access.ops.is_none() && c.experiment.access.duration.is_none())
}

/// A cell's result in the user's terms after the sweep gave it its count
/// of operations: the experiment as given, the sweep's lengthening, and
/// the floor's warning said for that.
fn as_sized(
    mut result: RunReport,
    given: &Experiment,
    lengthened: Option<&Lengthened>,
) -> RunReport {
    result.experiment = given.clone();
    result.lengthened = lengthened.cloned();
    result
        .warnings
        .retain(|w| !matches!(w.kind, WarningKind::ShortRuns | WarningKind::Lengthened));
    if let Some(floor) = result.noise_floor {
        result.warnings.extend(floor_warning(
            given,
            &floor,
            lengthened,
            result.figures.as_ref(),
        ));
    }
    result
}

/// One result of a cell's rounds: their warm-ups and repeats in order,
/// figures, per-thread figures and the noise warning over all repeats,
/// each region's check the worst of the rounds', the other warnings once
/// each. `None` when no round ran.
fn merge_rounds(exp: &Experiment, plan: &Plan, rounds: Vec<RunReport>) -> Option<RunReport> {
    let mut rounds = rounds.into_iter();
    let mut merged = rounds.next()?;
    merged.experiment = exp.clone();
    for round in rounds {
        merged.warmups.extend(round.warmups);
        merged.repeats.extend(round.repeats);
        for (mine, theirs) in merged.regions.iter_mut().zip(round.regions) {
            if mine.as_requested && !theirs.as_requested {
                *mine = theirs;
            }
        }
        for warning in round.warnings {
            if !merged.warnings.iter().any(|w| w.message == warning.message) {
                merged.warnings.push(warning);
            }
        }
        merged.interrupted |= round.interrupted;
    }
    for (i, repeat) in merged.warmups.iter_mut().enumerate() {
        repeat.index = i;
    }
    for (i, repeat) in merged.repeats.iter_mut().enumerate() {
        repeat.index = i;
    }
    merged.warnings.retain(|w| {
        !matches!(
            w.kind,
            WarningKind::Noisy | WarningKind::Interrupted | WarningKind::ShortRuns
        )
    });
    merged.figures = figures(&merged.repeats);
    merged
        .warnings
        .extend(noise_warning(merged.figures.as_ref()));
    if let Some(floor) = merged.noise_floor {
        merged
            .warnings
            .extend(floor_warning(exp, &floor, None, merged.figures.as_ref()));
    }
    let completed = merged.repeats.iter().filter(|r| !r.interrupted).count();
    if merged.interrupted || completed < exp.run.repeats as usize {
        merged.interrupted = true;
        merged
            .warnings
            .push(interrupted_warning(&merged.repeats, exp.run.repeats));
    }
    merged.threads = thread_figures(plan, &merged.regions, &merged.repeats);
    Some(merged)
}

/// The sweep's result from its cells: warnings over all cells, each
/// policy against local.
fn finish(
    exp: &Experiment,
    topology: &Topology,
    cells: Vec<SweepCell>,
    interrupted: bool,
    looks: Option<Looks>,
) -> Result<SweepReport, SweepError> {
    let n = cells.len();
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
            format!(
                "placement did not match the request in {mismatched} of {} (the placement column says which):",
                count(n, "cell")
            ),
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
            format!(
                "{noisy} of {} {} noisy (repeats varied by more than 5%)",
                count(n, "cell"),
                if noisy == 1 { "was" } else { "were" }
            ),
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
    let short = cells
        .iter()
        .filter_map(|c| c.result.as_ref())
        .filter(|r| r.warnings.iter().any(|w| w.kind == WarningKind::ShortRuns))
        .collect::<Vec<_>>();
    if let Some(floor) = short.first().and_then(|r| r.noise_floor) {
        let (key, _) = length_key(exp);
        warnings.push(Warning::new(
            WarningKind::ShortRuns,
            format!(
                "{} of {} ran shorter than this machine's noise floor of {}: the machine, not the workload, moves such times; raise {key}",
                short.len(),
                count(n, "cell"),
                floor.describe()
            ),
        ));
    }
    for kind in [
        WarningKind::NoPmu,
        WarningKind::Oversubscribed,
        WarningKind::Lengthened,
        WarningKind::FewHugePages,
    ] {
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
                "interrupted: {} of {} ran",
                cells.iter().filter(|c| c.result.is_some()).count(),
                count(n, "cell")
            ),
        ));
    }
    let axes = axes_of(exp);
    let (comparison, differences) = compare(&axes, &cells, looks.map_or(1, |l| l.planned));
    Ok(SweepReport {
        schema: SWEEP_SCHEMA.to_owned(),
        schema_version: SCHEMA_VERSION,
        numalab_version: numalab::VERSION.to_owned(),
        created: String::new(),
        experiment: exp.clone(),
        environment: Environment::current(topology),
        axes,
        comparison,
        differences,
        looks,
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
                    run_plan(cell, topology, plan, control)
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

    /// The sweep's line on noisy cells counts them in the right number:
    /// one cell was noisy, two were.
    #[test]
    fn the_noisy_cells_line_agrees_with_how_many_were_noisy() {
        for (noisy, line) in [
            (
                &[64][..],
                "1 of 3 cells was noisy (repeats varied by more than 5%)",
            ),
            (
                &[64, 256][..],
                "2 of 3 cells were noisy (repeats varied by more than 5%)",
            ),
        ] {
            // Grouped: each cell's warnings are its run's own.
            let grouped = GRID.replace("[run]\n", "[run]\norder = \"grouped\"\n");
            let exp = Experiment::from_toml_str(&grouped, "grid.toml").unwrap();
            let result = changed(&exp, |cell, result| {
                result.warnings.retain(|w| w.kind != WarningKind::Noisy);
                if noisy.contains(&cell.access.op_size.0) {
                    result
                        .warnings
                        .push(Warning::new(WarningKind::Noisy, "noisy: planted"));
                }
            });
            let lines: Vec<&str> = result
                .warnings
                .iter()
                .filter(|w| w.kind == WarningKind::Noisy)
                .map(|w| w.message.as_str())
                .collect();
            assert_eq!(lines, [line]);
        }
    }

    /// Two policies, identical here, five repeats each, on a machine that
    /// slows down by 2% with every run: `order` decides whether the drift
    /// reads as a difference.
    fn drifting(order: &str) -> (SweepReport, Vec<(u32, u64, u32)>) {
        let exp = Experiment::from_toml_str(
            &format!(
                "[threads]\ncount = 1\n[memory]\nsize = \"1MiB\"\n[access]\nops = 2_000\n\
                 [run]\nrepeats = 5\nwarmup = 0\ncounters = false\norder = \"{order}\"\n\
                 [sweep]\n\"memory.policy\" = [\"local\", \"interleave\"]\n"
            ),
            "drift.toml",
        )
        .unwrap();
        let topology = Topology::system().unwrap();
        let mut calls = Vec::new();
        let mut runs = 0u32;
        let result = run_cells(
            &exp,
            &topology,
            &Control::default(),
            |_, _, _| {},
            |cell, topology, plan, control| {
                let mut result = run_plan(cell, topology, plan, control)?;
                calls.push((
                    u32::from(cell.memory.policy != super::super::values::PolicySpec::Local),
                    cell.access.seed,
                    cell.run.repeats,
                ));
                for repeat in &mut result.repeats {
                    repeat.time_to_last_s = 1.0 + 0.02 * f64::from(runs);
                    runs += 1;
                }
                result.figures = figures(&result.repeats);
                Ok(result)
            },
        )
        .unwrap();
        (result, calls)
    }

    /// A sweep numalab sizes (no `access.ops`), whose cells run cut
    /// down to a thousandth of their operations so the test is quick;
    /// each run is given a time of one nanosecond per operation the sweep
    /// asked for, the second cell twice that: `calls` records the
    /// operations and seeds each run was handed.
    fn sized(order: &str) -> (SweepReport, Vec<(usize, u64)>) {
        let exp = Experiment::from_toml_str(
            &format!(
                "[threads]\ncount = 1\n[memory]\nsize = \"1MiB\"\n[run]\nrepeats = 2\nwarmup = 0\n\
                 counters = false\nmin_time = \"50ms\"\norder = \"{order}\"\n\
                 [sweep]\n\"access.op_size\" = [64, 128]\n"
            ),
            "sized.toml",
        )
        .unwrap();
        let topology = Topology::system().unwrap();
        let mut calls = Vec::new();
        let result = run_cells(
            &exp,
            &topology,
            &Control::default(),
            |_, _, _| {},
            |cell, topology, plan, control| {
                let asked = plan.total_ops();
                let slow = usize::from(cell.access.op_size.0 == 128);
                calls.push((slow, asked));
                let mut tiny = plan.clone();
                for t in &mut tiny.threads {
                    t.ops = t.ops.map(|o| (o / 1000).max(1));
                }
                let mut result = run_plan(cell, topology, tiny, control)?;
                for repeat in result.warmups.iter_mut().chain(&mut result.repeats) {
                    repeat.time_to_last_s = asked as f64 * 1e-9 * (1 + slow) as f64;
                }
                result.figures = figures(&result.repeats);
                Ok(result)
            },
        )
        .unwrap();
        (result, calls)
    }

    /// 10 million operations take 10 ms (and 20 ms) here, under the
    /// 50 ms floor: the first round sizes both cells by one factor from
    /// the shorter, ⌈1.5 × 50 / 10⌉ = 8, is kept as a warm-up, and both
    /// cells run 80 million operations in every repeat, so their times
    /// still compare.
    #[test]
    fn an_interleaved_sweep_lengthens_every_cell_by_one_factor() {
        let (result, calls) = sized("interleaved");
        let ten = super::super::config::DEFAULT_OPS;
        assert_eq!(
            calls,
            [
                (0, ten),
                (1, ten),
                (0, 8 * ten),
                (1, 8 * ten),
                (0, 8 * ten),
                (1, 8 * ten)
            ]
        );
        for cell in &result.cells {
            let run = cell.result.as_ref().unwrap();
            let l = run.lengthened.as_ref().unwrap();
            assert_eq!((l.factor, l.from_ops, l.to_ops), (8, ten, 8 * ten));
            assert_eq!(
                (run.warmups.len(), run.repeats.len()),
                (1, 2),
                "the sizing round is a warm-up"
            );
            assert_eq!(
                run.experiment.access.ops, None,
                "the experiment as the user gave it"
            );
            assert!(run
                .warnings
                .iter()
                .any(|w| w.kind == WarningKind::Lengthened));
            assert!(
                !run.warnings
                    .iter()
                    .any(|w| w.kind == WarningKind::ShortRuns),
                "{:?}",
                run.warnings
            );
        }
        let notes = result
            .warnings
            .iter()
            .filter(|w| w.kind == WarningKind::Lengthened)
            .count();
        assert_eq!(notes, 1, "{:?}", result.warnings);
    }

    /// Grouped, the first cell's own run decides (from its real, cut
    /// down run: a thousandth of 10 million operations is far under
    /// 50 ms), and the second cell is handed the same factor.
    #[test]
    fn a_grouped_sweep_gives_every_cell_the_first_cells_length() {
        let (result, calls) = sized("grouped");
        let ten = super::super::config::DEFAULT_OPS;
        let first = result.cells[0].result.as_ref().unwrap();
        let factor = first
            .lengthened
            .as_ref()
            .expect("10 000 operations are under 50 ms")
            .factor;
        assert_eq!(calls, [(0, ten), (1, factor * ten)]);
        let second = result.cells[1].result.as_ref().unwrap();
        assert_eq!(second.lengthened, first.lengthened);
        assert_eq!(second.experiment.access.ops, None);
        assert!(second
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::Lengthened));
    }

    #[test]
    fn interleaved_repeats_spread_drift_over_every_cell() {
        let (result, calls) = drifting("interleaved");
        // Round by round, one repeat per run, a seed per round.
        let cells: Vec<u32> = calls.iter().map(|c| c.0).collect();
        assert_eq!(cells, [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
        assert!(calls.iter().all(|c| c.2 == 1), "{calls:?}");
        let seeds: std::collections::BTreeSet<u64> = calls.iter().map(|c| c.1).collect();
        assert_eq!(seeds.len(), 5, "{calls:?}");
        assert_eq!(calls[0].1, 1, "round 0 keeps the file's seed");
        // Each cell is one result of five repeats, numbered in order.
        for cell in &result.cells {
            let run = cell.result.as_ref().unwrap();
            let index: Vec<usize> = run.repeats.iter().map(|r| r.index).collect();
            assert_eq!(index, [0, 1, 2, 3, 4]);
            assert_eq!(run.figures.as_ref().unwrap().time_to_last_s.n, 5);
            assert_eq!(run.experiment.run.repeats, 5);
            assert_eq!(run.threads.len(), 1);
            assert!(!run.interrupted);
        }
        // The drift is in both cells' spread: no difference claimed.
        let d = result.comparison[0].difference.as_ref().unwrap();
        assert_eq!(d.verdict, crate::stats::Verdict::Indistinguishable, "{d:?}");
        // A CV of about 6% in each cell: both flagged noisy, as they were.
        assert!(result.warnings.iter().any(|w| w.kind == WarningKind::Noisy));
    }

    #[test]
    fn grouped_repeats_let_drift_read_as_a_difference() {
        let (result, calls) = drifting("grouped");
        let cells: Vec<u32> = calls.iter().map(|c| c.0).collect();
        assert_eq!(cells, [0, 1]);
        assert!(calls.iter().all(|c| c.2 == 5));
        // What interleaving guards against: 10% "slower", "for sure".
        let d = result.comparison[0].difference.as_ref().unwrap();
        assert_eq!(d.verdict, crate::stats::Verdict::Higher, "{d:?}");
        assert!((0.08..0.12).contains(&d.relative), "{d:?}");
    }

    #[test]
    fn ctrl_c_between_rounds_keeps_the_rounds_each_cell_finished() {
        let exp =
            Experiment::from_toml_str(&GRID.replace("repeats = 1", "repeats = 3"), "grid.toml")
                .unwrap();
        let topology = Topology::system().unwrap();
        let control = Control::default();
        let mut started = 0;
        let result = run_cells(
            &exp,
            &topology,
            &control,
            |_, _, _| {
                started += 1;
                if started == 4 {
                    // Ctrl-C during the second round's first run.
                    control.stop();
                }
            },
            run_plan,
        )
        .unwrap();
        assert!(result.interrupted);
        let repeats: Vec<usize> = result
            .cells
            .iter()
            .map(|c| {
                c.result
                    .as_ref()
                    .map_or(0, |r| r.repeats.iter().filter(|r| !r.interrupted).count())
            })
            .collect();
        assert!(
            repeats[0] <= 2 && repeats[1] == 1 && repeats[2] == 1,
            "{repeats:?}"
        );
        for cell in &result.cells {
            let run = cell.result.as_ref().unwrap();
            assert!(run.interrupted);
            let warning = run
                .warnings
                .iter()
                .find(|w| w.kind == WarningKind::Interrupted)
                .expect("an interrupted warning");
            assert!(
                warning.message.contains("of 3 repeats completed"),
                "{}",
                warning.message
            );
        }
    }

    #[test]
    fn a_sweep_without_local_compares_each_value_of_its_first_axis_with_the_first() {
        // A first axis of one value is no comparison; the next one is:
        // two threads take half the time of one (the times given below),
        // the op size changes nothing.
        let grid = "[memory]\nsize = \"1MiB\"\n[access]\nops = 2_000\n[run]\nrepeats = 4\nwarmup = 0\ncounters = false\n[sweep]\n\"access.pattern\" = [\"random\"]\n\"threads.count\" = [1, 2]\n\"access.op_size\" = [64, 128]\n";
        let exp = Experiment::from_toml_str(grid, "first.toml").unwrap();
        let result = timed(&exp, |cell, run| {
            let base = if cell.threads.count == 2 { 0.5 } else { 1.0 };
            // A little spread, so the intervals have a width.
            base * (1.0 + 0.01 * f64::from(run % 3))
        });
        let topology = Topology::system().unwrap();
        assert!(result.comparison.is_empty(), "no policy is swept");
        let d = &result.differences;
        assert_eq!(d.len(), 2, "two threads against one, per op size: {d:?}");
        for (line, op_size) in d.iter().zip(["64", "128"]) {
            assert_eq!(
                (
                    line.axis.as_str(),
                    line.value.as_str(),
                    line.baseline.as_str()
                ),
                ("threads.count", "2", "1")
            );
            let settings = [
                ("access.pattern".to_owned(), "random".to_owned()),
                ("access.op_size".to_owned(), op_size.to_owned()),
            ];
            assert_eq!(line.settings, settings);
            assert!((line.percent + 50.0).abs() < 2.5, "{line:?}");
            let interval = line.difference.as_ref().expect("four repeats a side");
            assert_eq!(interval.verdict, crate::stats::Verdict::Lower, "{line:?}");
            // Two differences in the table: each at 1 - 0.05 / 2.
            assert!((interval.confidence - 0.975).abs() < 1e-12);
        }
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["differences"][0]["baseline"], "1");
        // One value per axis: nothing to compare.
        let single = grid.replace("[1, 2]", "[1]").replace("[64, 128]", "[64]");
        let exp = Experiment::from_toml_str(&single, "first.toml").unwrap();
        let result = run_sweep(&exp, &topology, &Control::default()).unwrap();
        assert!(result.differences.is_empty());
        assert!(serde_json::to_value(&result)
            .unwrap()
            .get("differences")
            .is_none());
    }

    /// `exp`'s sweep with every repeat's time given by `time(cell, run)`,
    /// `run` counting the sweep's repeats in the order they ran.
    fn timed(exp: &Experiment, mut time: impl FnMut(&Experiment, u32) -> f64) -> SweepReport {
        with_repeats(exp, |cell, run, repeat| {
            repeat.time_to_last_s = time(cell, run)
        })
    }

    /// `exp`'s sweep with every repeat set by `set(cell, run, repeat)`.
    fn with_repeats(
        exp: &Experiment,
        mut set: impl FnMut(&Experiment, u32, &mut crate::experiment::result::Repeat),
    ) -> SweepReport {
        let mut runs = 0u32;
        changed(exp, |cell, result| {
            for repeat in &mut result.repeats {
                set(cell, runs, repeat);
                runs += 1;
            }
            result.figures = figures(&result.repeats);
        })
    }

    /// `exp`'s sweep, each cell's run changed by `change(cell, run)` once
    /// it ran.
    fn changed(
        exp: &Experiment,
        mut change: impl FnMut(&Experiment, &mut RunReport),
    ) -> SweepReport {
        let topology = Topology::system().unwrap();
        run_cells(
            exp,
            &topology,
            &Control::default(),
            |_, _, _| {},
            |cell, topology, plan, control| {
                let mut result = run_plan(cell, topology, plan, control)?;
                change(cell, &mut result);
                Ok(result)
            },
        )
        .unwrap()
    }

    #[test]
    fn runs_of_a_fixed_duration_are_compared_by_their_time_per_operation() {
        // What `numalab profile --emit` writes: every repeat runs 20 ms,
        // so the time to the last thread is the same in every cell by
        // construction; interleave here does half the operations.
        let exp = Experiment::from_toml_str(
            "[memory]\nsize = \"1MiB\"\n[access]\nduration = \"20ms\"\n[run]\nrepeats = 3\nwarmup = 0\ncounters = false\n[sweep]\n\"memory.policy\" = [\"local\", \"interleave\"]\n",
            "emitted.toml",
        )
        .unwrap();
        let result = with_repeats(&exp, |cell, run, repeat| {
            let local = cell.memory.policy == PolicySpec::Local;
            repeat.time_to_last_s = 0.020;
            // A 1% spread, so the interval is not of nothing.
            repeat.ops = (if local { 1_000_000 } else { 500_000 }) + 10_000 * u64::from(run % 3);
        });
        let line = &result.comparison[0];
        assert_eq!(
            line.compared,
            crate::experiment::result::Compared::TimePerMillionOps
        );
        assert!((line.vs_local_percent - 100.0).abs() < 5.0, "{line:?}");
        assert_eq!(
            line.difference.as_ref().unwrap().verdict,
            crate::stats::Verdict::Higher
        );
        // Per million operations: 20 ms over one million.
        assert!((line.local_s - 0.0198).abs() < 0.0005, "{line:?}");
    }

    /// One thread against two, three repeats a cell and up to twelve,
    /// two threads taking `gap` less time (the times given here, with a
    /// repeating 0–2% spread): the sweep and how many repeats each cell
    /// ran.
    fn looking(gap: f64) -> (SweepReport, Vec<usize>) {
        let exp = Experiment::from_toml_str(
            "[memory]\nsize = \"1MiB\"\n[access]\nops = 2_000\n[run]\nrepeats = 3\nmax_repeats = 12\nwarmup = 0\ncounters = false\n[sweep]\n\"threads.count\" = [1, 2]\n",
            "looks.toml",
        )
        .unwrap();
        let result = timed(&exp, |cell, run| {
            let base = if cell.threads.count == 2 {
                1.0 - gap
            } else {
                1.0
            };
            base * (1.0 + 0.01 * f64::from((run / 2) % 3))
        });
        let repeats = result
            .cells
            .iter()
            .map(|c| c.result.as_ref().map_or(0, |r| r.repeats.len()))
            .collect();
        (result, repeats)
    }

    #[test]
    fn a_sweep_looks_again_only_while_a_difference_is_not_told_apart() {
        let level = crate::stats::repeated_confidence(4, 0.95);
        // Half the time: told apart at the first look, after 3 rounds.
        let (told, repeats) = looking(0.5);
        assert_eq!(repeats, [3, 3]);
        let looks = told.looks.expect("up to four looks");
        assert_eq!((looks.planned, looks.taken, looks.every), (4, 1, 3));
        assert_eq!(looks.stopped, Stopped::Decided);
        let d = told.differences[0].difference.as_ref().unwrap();
        assert_eq!(d.verdict, crate::stats::Verdict::Lower);
        // The interval is made for four looks, wherever the sweep stopped.
        assert!((d.confidence - level).abs() < 1e-12, "{}", d.confidence);
        // The same times: never told apart, so all twelve rounds.
        let (same, repeats) = looking(0.0);
        assert_eq!(repeats, [12, 12]);
        let looks = same.looks.unwrap();
        assert_eq!((looks.taken, looks.stopped), (4, Stopped::MostRepeats));
        let d = same.differences[0].difference.as_ref().unwrap();
        assert_eq!(d.verdict, crate::stats::Verdict::Indistinguishable);
        let json = serde_json::to_value(&same).unwrap();
        assert_eq!(json["looks"]["stopped"], "most_repeats");
        assert_eq!(json["experiment"]["run"]["max_repeats"], 12);
    }

    #[test]
    fn a_control_repeats_each_local_cell_and_is_compared_with_it() {
        let grid = "[memory]\nsize = \"1MiB\"\n[access]\nops = 2_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false\ncontrol = true\n[sweep]\n\"access.op_size\" = [64, 128]\n\"memory.policy\" = [\"local\", \"interleave\"]\n";
        let exp = Experiment::from_toml_str(grid, "aa.toml").unwrap();
        let topology = Topology::system().unwrap();
        let planned = plan_sweep(&exp, &topology).unwrap();
        let shape: Vec<(String, bool)> = planned
            .iter()
            .map(|c| (c.settings[1].1.clone(), c.control))
            .collect();
        let local = |control| ("local".to_owned(), control);
        let interleave = ("interleave".to_owned(), false);
        assert_eq!(
            shape,
            [
                local(false),
                local(true),
                interleave.clone(),
                local(false),
                local(true),
                interleave
            ]
        );
        let result = run_sweep(&exp, &topology, &Control::default()).unwrap();
        assert_eq!(result.cells.iter().filter(|c| c.control).count(), 2);
        // Per row: interleave against local, and local against itself.
        let controls: Vec<_> = result.comparison.iter().filter(|c| c.control).collect();
        assert_eq!(controls.len(), 2, "{:?}", result.comparison);
        for c in controls {
            assert_eq!(c.policy, PolicySpec::Local);
            assert!(c.difference.is_some(), "two repeats give an interval");
        }
        assert_eq!(result.comparison.iter().filter(|c| !c.control).count(), 2);
        assert!(
            result.differences.is_empty(),
            "policies are compared with local, not with the first axis"
        );
        // Four differences in the table: each interval at 1 - 0.05 / 4,
        // so that the four hold together at 95%.
        for c in &result.comparison {
            let level = c.difference.as_ref().unwrap().confidence;
            assert!((level - 0.9875).abs() < 1e-12, "{level}");
        }
        // Only control cells say so in the JSON.
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["cells"][1]["control"], true);
        assert!(json["cells"][0].get("control").is_none());
        // Without a local cell there is nothing to control.
        let none = Experiment::from_toml_str(
            &grid.replace("[\"local\", \"interleave\"]", "[\"interleave\"]"),
            "aa.toml",
        )
        .unwrap();
        let err = plan_sweep(&none, &topology).unwrap_err();
        assert!(matches!(err, SweepError::NoLocalForControl), "{err}");
        assert!(err.to_string().contains("add \"local\""), "{err}");
    }
}
