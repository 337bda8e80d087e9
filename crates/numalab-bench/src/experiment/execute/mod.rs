//! Running an experiment: plan it, allocate and place its regions,
//! prefault them, check where the pages landed, then run pinned workers —
//! warm-ups, then repeats — and gather every raw figure into a
//! [`RunReport`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use numalab::affinity::BindError;
use numalab::audit::{audit, audit_in_units, PlacementAudit};
use numalab::locate::{PageHistogram, Sample};
use numalab::replicated::{Mode, ReplicaSet, Replicated, ReplicatedError};
use numalab::system::Environment;
use numalab::system::{local_memory_node, local_memory_nodes};
use numalab::units::{count, count_as};
use numalab::{
    BufferError, BufferOptions, HugePages, InterleaveWeights, MemPolicy, NodeBuffer, NodeSet,
    PolicyError, Topology,
};

use super::access::{self, Done, Job, Library, RegionPtr, Samples};
use super::clock::Clock;
use super::config::{Experiment, MAX_BYTES_PER_RUN, MAX_OPS};
use super::counters::{Available, ThreadCounters};
use super::floor::{short_runs, Lengthened, NoiseFloor};
use super::plan::{Plan, PlanError, RegionPlan};
use super::result::{
    figures, thread_figures, Cause, CounterInfo, EngineCost, Percentiles, RegionCheck, Repeat,
    ReplicaCheck, RunReport, ThreadRun, Warning, WarningKind, RUN_SCHEMA, SCHEMA_VERSION,
};
use super::rwlock::StripeLock;
use super::values::{PolicySpec, Sync};
use crate::control::Control;
use crate::kernels::Rng;
use crate::stats::NOISY_CV;
use crate::workers::{run_pinned, WorkerError};

/// Why an experiment could not run.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::experiment::{run, ExecuteError, Experiment, PlanError};
/// // More threads than this machine has CPUs, without threads.oversubscribe.
/// let exp = Experiment::from_toml_str("[threads]\ncount = 4000\n[memory]\nsize = \"1MiB\"", "x")?;
/// match run(&exp, &Topology::system()?, &Control::default()) {
///     Err(ExecuteError::Plan(PlanError::TooManyThreads { count, .. })) => assert_eq!(count, 4000),
///     Err(other) => panic!("unexpected: {other}"),
///     Ok(_) => panic!("refused before anything runs"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecuteError {
    /// The plan cannot be placed on this machine.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A region could not be allocated or placed.
    #[error("region {region} ({} bytes, {policy}): {source}", bytes)]
    Buffer {
        /// Region number.
        region: usize,
        /// Its size.
        bytes: u64,
        /// Its policy.
        policy: String,
        /// Why.
        source: BufferError,
    },
    /// A replicated region could not be made.
    #[error("region {region} (replicated on nodes {nodes}): {source}")]
    Replicated {
        /// Region number.
        region: usize,
        /// The nodes of its copies.
        nodes: NodeSet,
        /// Why.
        source: ReplicatedError,
    },
    /// Weighted-interleave weights could not be installed.
    #[error("memory.policy = \"{policy}\": {source}")]
    Weights {
        /// The policy.
        policy: String,
        /// Why.
        source: PolicyError,
    },
    /// A worker could not be pinned.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A worker thread could not be started (the ones started were
    /// stopped).
    #[error(transparent)]
    Workers(WorkerError),
}

impl From<WorkerError> for ExecuteError {
    fn from(err: WorkerError) -> ExecuteError {
        match err {
            WorkerError::Bind(err) => ExecuteError::Bind(err),
            other => ExecuteError::Workers(other),
        }
    }
}

/// A region's memory and its locks.
struct Region {
    memory: Memory,
    /// With `sync = "rwlock"`: the stripe locks, one array per copy (each
    /// on its copy's node); empty otherwise.
    locks: Vec<NodeBuffer>,
    stripes: usize,
}

/// One buffer, or one copy per node (`replicate`).
enum Memory {
    Plain(NodeBuffer),
    Replicated(Box<Replicated<NodeBuffer>>),
}

impl Region {
    /// The region as the access loops see it, one entry per copy (one for
    /// a region that is not replicated).
    fn copies(&self) -> Vec<RegionPtr> {
        let bases: Vec<(*const u8, usize)> = match &self.memory {
            Memory::Plain(buffer) => vec![(buffer.as_ptr(), buffer.len())],
            Memory::Replicated(value) => value.regions().iter().map(|r| (r.ptr, r.len)).collect(),
        };
        bases
            .into_iter()
            .enumerate()
            .map(|(i, (base, len))| RegionPtr {
                base: base.cast_mut(),
                len,
                locks: self
                    .locks
                    .get(i)
                    .map_or(std::ptr::null(), |l| l.as_ptr().cast::<StripeLock>()),
                stripes: self.stripes,
            })
            .collect()
    }

    /// The first (or only) copy.
    fn ptr(&self) -> RegionPtr {
        self.copies()[0]
    }

    /// The library's replicated value, when reads and writes go through it.
    fn library(&self, exp: &Experiment) -> Option<&Replicated<NodeBuffer>> {
        match &self.memory {
            Memory::Replicated(value) if exp.memory.replication.library_mode().is_some() => {
                Some(value)
            }
            _ => None,
        }
    }
}

/// Runs `exp` on this machine (described by `topology`).
pub fn run(
    exp: &Experiment,
    topology: &Topology,
    control: &Control,
) -> Result<RunReport, ExecuteError> {
    let plan = Plan::resolve(exp, topology)?;
    run_plan(exp, topology, plan, control)
}

/// Runs an already resolved plan.
pub fn run_plan(
    exp: &Experiment,
    topology: &Topology,
    mut plan: Plan,
    control: &Control,
) -> Result<RunReport, ExecuteError> {
    // Ranges first (a caller may have built the experiment by hand):
    // nothing below runs with a count past its limit.
    exp.validate().map_err(PlanError::from)?;
    let environment = Environment::current(topology);
    let mut warnings = plan.warnings.clone();

    // Weighted interleave follows the kernel's global weights: install
    // the ones asked for, for the run (restored when dropped).
    let _weights = install_weights(&plan)?;

    let regions = allocate(exp, &plan)?;
    first_touch(&plan, &regions)?;
    let checks = check_regions(&plan, &regions);
    for check in checks.iter().filter(|c| !c.as_requested) {
        // The plan already explained this region (e.g. `remote` on a
        // one-node machine): one line is enough.
        let already = plan.warnings.iter().any(|w| {
            w.kind == WarningKind::Placement
                && (w.is_about_region(check.region)
                    || (check.requested == PolicySpec::Remote
                        && matches!(w.cause, Some(Cause::NoRemoteNode { .. }))))
        });
        if !already {
            warnings.push(
                Warning::new(
                    WarningKind::Placement,
                    format!(
                        "placement did not match the request: region {}: {}",
                        check.region, check.note
                    ),
                )
                .because(Cause::Mismatch {
                    region: check.region,
                }),
            );
        }
    }

    warnings.extend(checks.iter().filter_map(|c| few_huge_pages(exp, c)));

    let available = if exp.run.counters {
        Available::probe()
    } else {
        Available::none()
    };
    if let Some(note) = &available.note {
        warnings.push(Warning::new(WarningKind::NoPmu, note.clone()));
    }
    let clock = Clock::calibrate();
    let loop_ns = loop_cost(exp, &plan, &clock);
    let floor = NoiseFloor::on_cpus(&plan.cpus())?.or_given(exp.run.min_time.map(|t| t.0));
    // Runs numalab sizes itself (no count or duration given) are
    // lengthened when the first one falls under the noise floor.
    let mut sizing = exp.access.ops.is_none() && exp.access.duration.is_none();
    let mut lengthened = None;

    let mut warmup = exp.run.warmup;
    let mut runs = warmup.saturating_add(exp.run.repeats);
    let progress = &control.progress;
    let totals = |plan: &Plan, runs: u32| {
        let per_run = plan.total_ops();
        progress.runs_total.store(runs, Ordering::Relaxed);
        progress
            .ops_total
            .store(per_run.saturating_mul(u64::from(runs)), Ordering::Relaxed);
    };
    progress.runs_done.store(0, Ordering::Relaxed);
    progress.ops_done.store(0, Ordering::Relaxed);
    totals(&plan, runs);

    let mut warmups = Vec::new();
    let mut repeats = Vec::new();
    let mut run = 0;
    while run < runs {
        if control.is_stopped() {
            break;
        }
        let mut is_warmup = run < warmup;
        let index = if is_warmup { run } else { run - warmup } as usize;
        let mut repeat = one_run(
            exp, &plan, &regions, &available, &clock, control, run as u64, index,
        )?;
        progress.runs_done.fetch_add(1, Ordering::Relaxed);
        if sizing && !repeat.interrupted {
            sizing = false;
            if let Some(l) = lengthening(exp, &plan, &floor, repeat.time_to_last_s) {
                plan.scale_ops(l.factor);
                lengthened = Some(l);
                if !is_warmup {
                    // Measured with the old count: it becomes a warm-up,
                    // and every repeat is run at the new one.
                    is_warmup = true;
                    repeat.index = warmups.len();
                    warmup += 1;
                    runs = runs.saturating_add(1);
                }
                totals(&plan, runs);
            }
        }
        if is_warmup {
            warmups.push(repeat);
        } else {
            repeats.push(repeat);
        }
        run += 1;
    }
    let interrupted = control.is_stopped();
    if interrupted {
        warnings.push(interrupted_warning(&repeats, exp.run.repeats));
    }

    let figures = figures(&repeats);
    warnings.extend(noise_warning(figures.as_ref()));
    warnings.extend(floor_warning(
        exp,
        &floor,
        lengthened.as_ref(),
        figures.as_ref(),
    ));
    let threads = thread_figures(&plan, &checks, &repeats);
    let engine = engine_cost(exp, &clock, loop_ns, &threads);
    if let Some(share) = engine.share {
        if share > 0.05 {
            warnings.push(Warning::new(
                WarningKind::Overhead,
                format!(
                    "the access loop itself costs {:.0}% of the time per operation (ops of {} in cache take {:.1} ns): the figures partly measure the loop",
                    100.0 * share,
                    exp.access.op_size,
                    engine.loop_ns_per_op.unwrap_or(0.0)
                ),
            ));
        }
    }
    drop(regions);
    Ok(RunReport {
        schema: RUN_SCHEMA.to_owned(),
        schema_version: SCHEMA_VERSION,
        numalab_version: numalab::VERSION.to_owned(),
        created: String::new(),
        experiment: exp.clone(),
        environment,
        plan,
        regions: checks,
        warmups,
        repeats,
        figures,
        threads,
        counters: CounterInfo {
            events: available.names(),
            note: available.note.clone(),
        },
        engine,
        warnings,
        interrupted,
        noise_floor: Some(floor),
        lengthened,
    })
}

/// How `plan`'s operations must grow so that a run that took
/// `measured_s` clears `floor` (with its margin), within the limits of
/// operations and bytes a run may count (apply it with
/// [`Plan::scale_ops`]); `None` when it already clears it or cannot grow.
pub(crate) fn lengthening(
    exp: &Experiment,
    plan: &Plan,
    floor: &NoiseFloor,
    measured_s: f64,
) -> Option<Lengthened> {
    let from = plan.total_ops();
    if from == 0 {
        return None;
    }
    let op = exp.access.op_size.0.max(1);
    let most = (MAX_OPS / from).min(MAX_BYTES_PER_RUN / from.saturating_mul(op));
    let factor = floor.lengthening(measured_s)?.min(most);
    (factor > 1).then(|| Lengthened::new(*floor, measured_s, from, factor))
}

/// The key that sets how long `exp`'s runs are, and whether the user
/// gave it (numalab sizes runs only when neither ops nor duration is).
pub(crate) fn length_key(exp: &Experiment) -> (&'static str, bool) {
    match (exp.access.ops, exp.access.duration) {
        (_, Some(_)) => ("access.duration", true),
        (ops, None) => ("access.ops", ops.is_some()),
    }
}

/// A region that asked for huge pages and got fewer than nine tenths of
/// the 2 MiB pages it spans: its figures are partly those of 4 KiB pages,
/// so a comparison with and without huge pages understates the gap.
pub(crate) fn few_huge_pages(exp: &Experiment, check: &RegionCheck) -> Option<Warning> {
    const HUGE: u64 = 2 << 20;
    let got = check.huge_page_bytes?;
    let whole = check.bytes / HUGE * HUGE;
    (whole > 0 && got * 10 < whole * 9).then(|| {
        Warning::new(
            WarningKind::FewHugePages,
            format!(
                "region {}: {} MiB of {} MiB in huge pages (memory.huge_pages = \"{}\"): the kernel had too few free 2 MiB blocks, so its figures are partly those of 4 KiB pages",
                check.region,
                got >> 20,
                check.bytes >> 20,
                exp.memory.huge_pages
            ),
        )
        .because(Cause::Mismatch {
            region: check.region,
        })
    })
}

/// What the noise floor makes a run say: that its runs were lengthened,
/// or that they stayed under the floor because their count or duration
/// was given.
pub(crate) fn floor_warning(
    exp: &Experiment,
    floor: &NoiseFloor,
    lengthened: Option<&Lengthened>,
    figures: Option<&super::result::Figures>,
) -> Option<Warning> {
    if let Some(l) = lengthened {
        return Some(Warning::new(WarningKind::Lengthened, l.message()));
    }
    let median = figures?.time_to_last_s.median;
    let (key, given) = length_key(exp);
    short_runs(floor, median, key, given).map(|m| Warning::new(WarningKind::ShortRuns, m))
}

/// What an interrupted run says: how many of `requested` repeats completed.
pub(crate) fn interrupted_warning(repeats: &[Repeat], requested: u32) -> Warning {
    Warning::new(
        WarningKind::Interrupted,
        format!(
            "interrupted: {} of {} completed; the figures are of those only",
            repeats.iter().filter(|r| !r.interrupted).count(),
            count(requested, "repeat"),
        ),
    )
}

/// The warning for a time to the last thread that varied more than
/// [`NOISY_CV`] over its repeats, if it did.
pub(crate) fn noise_warning(figures: Option<&super::result::Figures>) -> Option<Warning> {
    let f = figures?;
    (f.time_to_last_s.n > 1 && f.time_to_last_s.is_noisy()).then(|| {
        Warning::new(
            WarningKind::Noisy,
            format!(
                "noisy: time to last thread varied by {:.1}% (CV) over {} repeats, above {:.0}%; the machine was busy or the runs too short",
                100.0 * f.time_to_last_s.cv,
                f.time_to_last_s.n,
                100.0 * NOISY_CV
            ),
        )
    })
}

fn install_weights(plan: &Plan) -> Result<Option<InterleaveWeights>, ExecuteError> {
    let Some(region) = plan
        .regions
        .iter()
        .find(|r| matches!(r.policy, MemPolicy::WeightedInterleave(_)))
    else {
        return Ok(None);
    };
    let MemPolicy::WeightedInterleave(weights) = &region.policy else {
        return Ok(None);
    };
    if region.policy.check().is_ok() {
        return Ok(None); // the kernel already has these weights
    }
    InterleaveWeights::set(weights)
        .map(Some)
        .map_err(|source| ExecuteError::Weights {
            policy: region.requested.to_string(),
            source,
        })
}

fn allocate(exp: &Experiment, plan: &Plan) -> Result<Vec<Region>, ExecuteError> {
    let stripes = exp.access.lock_stripes.max(1) as usize;
    plan.regions
        .iter()
        .map(|r| {
            if !r.replicas.is_empty() {
                return allocate_replicated(exp, r, stripes);
            }
            let error = |source| ExecuteError::Buffer {
                region: r.region,
                bytes: r.bytes,
                policy: r.policy.to_string(),
                source,
            };
            let options = BufferOptions::new(r.policy.clone())
                .huge_pages(r.huge_pages)
                .prefault(!r.first_touch);
            let buffer = NodeBuffer::with_options(r.bytes as usize, options).map_err(error)?;
            let locks = match exp.access.sync {
                Sync::None => None,
                // The locks live with the data they guard: same policy.
                Sync::Rwlock => Some(
                    NodeBuffer::with_options(
                        stripes * std::mem::size_of::<StripeLock>(),
                        BufferOptions::new(if r.first_touch {
                            MemPolicy::Bind(NodeSet::single(r.home))
                        } else {
                            r.policy.clone()
                        }),
                    )
                    .map_err(error)?,
                ),
            };
            // Zeroed memory is a valid array of unlocked StripeLocks
            // (an AtomicU32 of 0 each, 64-byte aligned in a page-aligned
            // mapping).
            Ok(Region {
                memory: Memory::Plain(buffer),
                locks: locks.into_iter().collect(),
                stripes: if exp.access.sync == Sync::Rwlock {
                    stripes
                } else {
                    1
                },
            })
        })
        .collect()
}

/// A replicated region: one prefaulted copy bound to each of its nodes,
/// held by the library's [`Replicated`] (through which reads and writes go
/// with `replication = "broadcast" | "log"`), and with `replication =
/// "copies"` and `sync = "rwlock"` one array of stripe locks per copy, on
/// the copy's node.
fn allocate_replicated(
    exp: &Experiment,
    r: &super::plan::RegionPlan,
    stripes: usize,
) -> Result<Region, ExecuteError> {
    let buffer_error = |node: u32, source| ExecuteError::Buffer {
        region: r.region,
        bytes: r.bytes,
        policy: format!("{} (its copy on node {node})", r.requested),
        source,
    };
    let bind = |node: u32| MemPolicy::Bind(NodeSet::single(node));
    let mut buffers = Vec::with_capacity(r.replicas.len());
    for &node in &r.replicas {
        let options = BufferOptions::new(bind(node))
            .huge_pages(r.huge_pages)
            .prefault(true);
        let buffer = NodeBuffer::with_options(r.bytes as usize, options)
            .map_err(|e| buffer_error(node, e))?;
        buffers.push(Some(buffer));
    }
    let nodes: NodeSet = r.replicas.iter().copied().collect();
    let replicated_error = |source| ExecuteError::Replicated {
        region: r.region,
        nodes: nodes.clone(),
        source,
    };
    let set = ReplicaSet::on_nodes(&nodes).map_err(|e| replicated_error(e.into()))?;
    // The mode only matters when the library applies the writes; with
    // `copies` the engine does, through the copies' addresses.
    let mode = exp
        .memory
        .replication
        .library_mode()
        .unwrap_or(Mode::Broadcast);
    let value = Replicated::from_fn(set, mode, |replica, _| {
        buffers[replica].take().expect("one buffer per copy")
    })
    .map_err(replicated_error)?;
    let locked = exp.access.sync == Sync::Rwlock && exp.memory.replication.library_mode().is_none();
    let mut locks = Vec::new();
    if locked {
        for &node in &r.replicas {
            // Zeroed: unlocked StripeLocks, as above.
            let lock = NodeBuffer::with_options(
                stripes * std::mem::size_of::<StripeLock>(),
                BufferOptions::new(bind(node)),
            )
            .map_err(|e| buffer_error(node, e))?;
            locks.push(lock);
        }
    }
    Ok(Region {
        memory: Memory::Replicated(Box::new(value)),
        locks,
        stripes: if locked { stripes } else { 1 },
    })
}

/// With `first-touch`, each thread faults in its own share, on its CPU.
fn first_touch(plan: &Plan, regions: &[Region]) -> Result<(), ExecuteError> {
    if !plan.regions.iter().any(|r| r.first_touch) {
        return Ok(());
    }
    let page = 4096;
    let ptrs: Vec<RegionPtr> = regions.iter().map(Region::ptr).collect();
    run_pinned(
        &plan.cpus(),
        |_| (),
        |i, _| {
            let t = &plan.threads[i];
            if !plan.regions[t.region].first_touch {
                return;
            }
            let region = ptrs[t.region];
            let mut offset = t.share_offset as usize;
            while offset < (t.share_offset + t.share_len) as usize {
                // SAFETY: offset is inside this thread's share of the
                // region, which no other thread touches now; writing zero
                // over a fresh zero page only faults it in.
                unsafe { region.base.add(offset).write_volatile(0) };
                offset += page;
            }
        },
    )?;
    Ok(())
}

/// Where each region's pages are, against the policy and the request.
fn check_regions(plan: &Plan, regions: &[Region]) -> Vec<RegionCheck> {
    plan.regions
        .iter()
        .zip(regions)
        .map(|(r, region)| {
            let thread_nodes: NodeSet = r.threads.iter().map(|&t| plan.threads[t].node).collect();
            if !r.replicas.is_empty() {
                return check_replicated(plan, r, region, thread_nodes);
            }
            // Where the threads' own pages go: their node, or for a
            // memory-less node the nearest node with memory.
            let home_nodes = local_memory_nodes(&thread_nodes);
            let (found, unit_pages) = match &region.memory {
                Memory::Plain(buffer) => (
                    buffer.locate(Sample::All).unwrap_or_default(),
                    buffer.unit_pages(),
                ),
                Memory::Replicated(_) => (PageHistogram::default(), 1),
            };
            // Huge pages are interleaved whole: even to within one.
            let check = audit_in_units(&r.policy, &home_nodes, &found, unit_pages);
            let (as_requested, note) = if r.first_touch {
                // Each share on its own thread's node.
                let strays: Vec<String> = r
                    .threads
                    .iter()
                    .filter_map(|&t| {
                        let thread = &plan.threads[t];
                        let pages = numalab::locate::locate(
                            region.ptr().base.wrapping_add(thread.share_offset as usize),
                            thread.share_len as usize,
                            Sample::All,
                        )
                        .unwrap_or_default();
                        let home = local_memory_node(thread.node);
                        let off = pages.present() - pages.on_node(home);
                        (off > 0).then(|| {
                            format!(
                                "thread {t}'s share has {off} of {} off node {home}",
                                count(pages.present(), "page")
                            )
                        })
                    })
                    .collect();
                if strays.is_empty() && check.verdict != numalab::audit::Verdict::Empty {
                    (true, format!("first-touch: every thread's share on its own node ({found})"))
                } else {
                    (false, format!("first-touch: {}; found {found}", strays.join("; ")))
                }
            } else {
                match &r.requested {
                    PolicySpec::Local => {
                        let off = found.present() - found.on_nodes(&home_nodes);
                        if check.is_match() && off == 0 {
                            (true, format!("local: {}", check.note))
                        } else {
                            (false, format!(
                                "local asked, but {off} of {} {} off the threads' {} {home_nodes}; found {found}",
                                count(found.present(), "page"),
                                if off == 1 { "is" } else { "are" },
                                if home_nodes.len() == 1 { "node" } else { "nodes" },
                            ))
                        }
                    }
                    PolicySpec::Remote => {
                        let on_own = found.on_nodes(&home_nodes);
                        if check.is_match() && on_own == 0 {
                            (true, format!("remote: {}", check.note))
                        } else {
                            (false, format!(
                                "remote asked, but {on_own} of {} {} on the threads' own {} {home_nodes}; found {found}",
                                count(found.present(), "page"),
                                if on_own == 1 { "is" } else { "are" },
                                if home_nodes.len() == 1 { "node" } else { "nodes" },
                            ))
                        }
                    }
                    _ => (check.is_match(), check.note.clone()),
                }
            };
            let huge_page_bytes = match &region.memory {
                Memory::Plain(buffer) if buffer.options().huge_pages != HugePages::None => {
                    buffer.huge_page_bytes()
                }
                _ => None,
            };
            RegionCheck {
                huge_page_bytes,
                ..region_check(r, thread_nodes, check, as_requested, note)
            }
        })
        .collect()
}

/// A region's check as found: what was asked for and what the audit
/// says; no copies, no huge pages (the callers add theirs).
fn region_check(
    r: &RegionPlan,
    thread_nodes: NodeSet,
    audit: PlacementAudit,
    as_requested: bool,
    note: String,
) -> RegionCheck {
    RegionCheck {
        region: r.region,
        bytes: r.bytes,
        requested: r.requested.clone(),
        policy: r.policy.clone(),
        thread_nodes,
        audit,
        as_requested,
        note,
        replicas: Vec::new(),
        huge_page_bytes: None,
    }
}

/// Where each copy of a replicated region is: every page of copy `i` on
/// its own node, none missing.
fn check_replicated(
    plan: &Plan,
    r: &super::plan::RegionPlan,
    region: &Region,
    thread_nodes: NodeSet,
) -> RegionCheck {
    let mut all = PageHistogram::default();
    let mut replicas = Vec::with_capacity(r.replicas.len());
    for (i, (copy, &node)) in region.copies().iter().zip(&r.replicas).enumerate() {
        let found = numalab::locate::locate(copy.base, copy.len, Sample::All).unwrap_or_default();
        let readers: NodeSet = r
            .threads
            .iter()
            .map(|&t| &plan.threads[t])
            .filter(|t| t.replica == Some(i))
            .map(|t| t.node)
            .collect();
        let check = audit(&MemPolicy::Bind(NodeSet::single(node)), &readers, &found);
        let off = found.present() - found.on_node(node);
        let missing = found.not_present + found.unknown;
        let as_requested = check.is_match() && off == 0 && missing == 0 && found.present() > 0;
        let note = if as_requested {
            format!("copy {i} on its node: {}", check.note)
        } else {
            format!(
                "copy {i} asked on node {node}, but {off} of {} {} elsewhere and {missing} missing; found {found}",
                count(found.present(), "present page"),
                if off == 1 { "is" } else { "are" }
            )
        };
        all.merge(&found);
        replicas.push(ReplicaCheck {
            replica: i,
            node,
            thread_nodes: readers,
            audit: check,
            as_requested,
            note,
        });
    }
    let check = audit(&r.policy, &thread_nodes, &all);
    let strays: Vec<&str> = replicas
        .iter()
        .filter(|c| !c.as_requested)
        .map(|c| c.note.as_str())
        .collect();
    let (as_requested, note) = if strays.is_empty() {
        (
            true,
            format!(
                "replicate: {}, each on its own node ({all})",
                count_as(replicas.len(), "copy", "copies")
            ),
        )
    } else {
        (false, format!("replicate: {}", strays.join("; ")))
    };
    RegionCheck {
        replicas,
        ..region_check(r, thread_nodes, check, as_requested, note)
    }
}

/// One thread's state, made on its CPU before the start.
struct ThreadState {
    rng: Rng,
    counters: ThreadCounters,
    samples: Samples,
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    exp: &Experiment,
    plan: &Plan,
    regions: &[Region],
    available: &Available,
    clock: &Clock,
    control: &Control,
    run: u64,
    index: usize,
) -> Result<Repeat, ExecuteError> {
    let access = &exp.access;
    let copies: Vec<Vec<RegionPtr>> = regions.iter().map(Region::copies).collect();
    let libraries: Vec<Option<&Replicated<NodeBuffer>>> =
        regions.iter().map(|r| r.library(exp)).collect();
    let isa = access.isa.resolve();
    let mix = access.mix();
    // Bounded reservoirs, sized for the timings expected when the run
    // is counted (none without sampling).
    let stride = access::sampling_stride(u64::from(access.latency_sample), mix);
    let per_thread = access::samples_per_thread(plan.threads.len());
    let sampling = |ops: Option<u64>| match (ops, stride) {
        (_, 0) => (0, Some(0)),
        (ops, every) => (per_thread, ops.map(|ops| ops / every)),
    };
    let outcome = run_pinned(
        &plan.cpus(),
        |i| {
            let t = &plan.threads[i];
            // Distinct streams for every thread and run.
            let seed = access.seed
                ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ (run + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let (keep, expected) = sampling(t.ops);
            ThreadState {
                rng: Rng::new(seed),
                counters: ThreadCounters::open(available),
                samples: Samples::new(keep, expected, seed.rotate_left(17)),
            }
        },
        |i, state: &mut ThreadState| {
            let t = &plan.threads[i];
            let replica = t.replica.unwrap_or(0);
            let library = libraries[t.region].map(|value| Library { value, replica });
            let job = Job {
                region: copies[t.region][replica],
                copies: if library.is_none() {
                    &copies[t.region]
                } else {
                    &[]
                },
                library,
                share: t.share_offset as usize..(t.share_offset + t.share_len) as usize,
                pattern: access.pattern,
                op_size: access.op_size.0 as usize,
                mix,
                isa,
                store: access.stores,
                sample_every: u64::from(access.latency_sample),
                ops: t.ops,
                duration: access.duration.map(|d| d.0),
                locked: access.sync == Sync::Rwlock && library.is_none(),
                clock,
                stop: control.stop_flag(),
                progress: &control.progress.ops_done,
            };
            state.counters.start();
            let done = access::perform(&job, &mut state.rng, &mut state.samples);
            let counts = state.counters.stop();
            let samples = std::mem::take(&mut state.samples);
            (DoneWithSamples { done, samples }, counts)
        },
    )?;

    let nanos = |kept: &access::Reservoir| {
        let ns: Vec<f64> = kept.kept.iter().map(|&t| clock.nanos(t)).collect();
        (ns, kept.seen)
    };
    let mut all_reads = Vec::new();
    let mut all_writes = Vec::new();
    let mut threads = Vec::with_capacity(outcome.workers.len());
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut stopped = false;
    for (i, worker) in outcome.workers.iter().enumerate() {
        let (done, counts): &(DoneWithSamples, BTreeMap<String, u64>) = &worker.output;
        stopped |= done.done.stopped;
        let reads = nanos(&done.samples.reads);
        let writes = nanos(&done.samples.writes);
        for (name, count) in counts {
            *counters.entry(name.clone()).or_default() += count;
        }
        threads.push(ThreadRun {
            thread: i,
            cpu: worker.cpu,
            node: worker.node,
            ops: done.done.reads + done.done.writes,
            reads: done.done.reads,
            writes: done.done.writes,
            bytes: done.done.bytes,
            busy_s: worker.busy.as_secs_f64(),
            read_latency_ns: Percentiles::sampled(&reads.0, reads.1),
            write_latency_ns: Percentiles::sampled(&writes.0, writes.1),
            counters: counts.clone(),
        });
        all_reads.push(reads);
        all_writes.push(writes);
    }
    let wall = outcome.wall.as_secs_f64();
    let ops: u64 = threads.iter().map(|t| t.ops).sum();
    let bytes: u64 = threads.iter().map(|t| t.bytes).sum();
    Ok(Repeat {
        index,
        interrupted: stopped,
        time_to_last_s: wall,
        ops,
        reads: threads.iter().map(|t| t.reads).sum(),
        writes: threads.iter().map(|t| t.writes).sum(),
        bytes,
        gb_per_s: if wall > 0.0 {
            bytes as f64 / wall / 1e9
        } else {
            0.0
        },
        mops_per_s: if wall > 0.0 {
            ops as f64 / wall / 1e6
        } else {
            0.0
        },
        read_latency_ns: Percentiles::merged(&all_reads),
        write_latency_ns: Percentiles::merged(&all_writes),
        counters,
        threads,
    })
}

/// What a worker hands back: its counts and its latency samples.
struct DoneWithSamples {
    done: Done,
    samples: Samples,
}

/// The access loop's cost per operation on a buffer that fits in the L1
/// cache: what it costs without waiting for memory. `None` when the
/// operations are too large for that (over 4 KiB). A replicated region's
/// loop runs over as many copies as the plan has (with `replication =
/// "copies"`); with `broadcast` or `log` it is the engine's loop around
/// the library's calls, measured on one copy without them: the library's
/// own cost is what those runs measure.
fn loop_cost(exp: &Experiment, plan: &Plan, clock: &Clock) -> Option<f64> {
    let op = exp.access.op_size.0 as usize;
    if op > 4096 {
        return None;
    }
    let library = exp.memory.replication.library_mode().is_some();
    let copies = match plan.regions.first() {
        Some(r) if !library => r.replicas.len().max(1),
        _ => 1,
    };
    let locked = exp.access.sync == Sync::Rwlock && !library;
    let bytes = (16 << 10).max(4 * op);
    let mut words: Vec<Vec<u64>> = (0..copies).map(|_| vec![0u64; bytes / 8]).collect();
    let locks: Vec<Vec<StripeLock>> = (0..copies)
        .map(|_| {
            (0..exp.access.lock_stripes.clamp(1, 1024))
                .map(|_| StripeLock::default())
                .collect()
        })
        .collect();
    let ptrs: Vec<RegionPtr> = words
        .iter_mut()
        .zip(&locks)
        .map(|(words, locks)| RegionPtr {
            base: words.as_mut_ptr().cast(),
            len: bytes,
            locks: locks.as_ptr(),
            stripes: locks.len(),
        })
        .collect();
    let (stop, progress) = (AtomicBool::new(false), AtomicU64::new(0));
    let ops = 200_000u64;
    let job = Job {
        region: ptrs[0],
        copies: &ptrs,
        library: None,
        share: 0..bytes,
        pattern: exp.access.pattern,
        op_size: op,
        mix: exp.access.mix(),
        isa: exp.access.isa.resolve(),
        store: crate::kernels::Store::Cached,
        sample_every: u64::from(exp.access.latency_sample),
        ops: Some(ops),
        duration: None,
        locked,
        clock,
        stop: &stop,
        progress: &progress,
    };
    let mut samples = Samples::new(
        super::config::SAMPLES_PER_THREAD,
        Some(ops / u64::from(exp.access.latency_sample.max(1))),
        7,
    );
    // Best of three: the loop's cost, not the machine's noise.
    (0..3)
        .map(|_| {
            samples.reads.clear();
            samples.writes.clear();
            let start = Instant::now();
            let done = access::perform(&job, &mut Rng::new(7), &mut samples);
            let elapsed = start.elapsed();
            elapsed.as_nanos() as f64 / (done.reads + done.writes).max(1) as f64
        })
        .min_by(f64::total_cmp)
}

fn engine_cost(
    exp: &Experiment,
    clock: &Clock,
    loop_ns: Option<f64>,
    threads: &[super::result::ThreadFigures],
) -> EngineCost {
    // Measured time per operation of a thread: its busy time over its
    // operations (median thread).
    let mut per_op: Vec<f64> = threads
        .iter()
        .filter(|t| t.ops > 0.0)
        .map(|t| t.busy_s.median * 1e9 / t.ops)
        .collect();
    per_op.sort_by(f64::total_cmp);
    let measured = per_op.get(per_op.len() / 2).copied();
    EngineCost {
        clock: clock.name().to_owned(),
        clock_overhead_ns: clock.overhead_ns(),
        sample_every: exp.access.latency_sample,
        loop_ns_per_op: loop_ns,
        share: match (loop_ns, measured) {
            (Some(l), Some(m)) if m > 0.0 => Some((l / m).min(1.0)),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests;
