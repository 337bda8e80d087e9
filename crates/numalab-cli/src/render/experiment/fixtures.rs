//! A deterministic stand-in for the executor: results made from a real
//! plan on a synthetic two-node topology with invented, fixed figures, so
//! the exporters can be snapshot-tested without hardware.

use std::collections::BTreeMap;

use numalab::audit::audit;
use numalab::locate::PageHistogram;
use numalab::system::{Environment, Host, KernelSettings};
use numalab::{NodeSet, Support, Topology};
use numalab_bench::experiment::result::{
    compare, figures, thread_figures, CounterInfo, EngineCost, Percentiles, RegionCheck, Repeat,
    RunReport, SweepCell, SweepReport, ThreadRun, Warning, WarningKind, RUN_SCHEMA, SCHEMA_VERSION,
    SWEEP_SCHEMA,
};
use numalab_bench::experiment::sweep::{axes_of, value_text};
use numalab_bench::experiment::{Experiment, Plan, PolicySpec};

fn topology() -> Topology {
    Topology::from_synthetic("pack:2 numa:1 core:4 pu:1").unwrap()
}

fn environment(topology: &Topology) -> Environment {
    Environment {
        host: Host {
            hostname: "node17".into(),
            kernel: "6.8.0".into(),
            cpu_model: Some("Example CPU @ 2.60GHz".into()),
            cpu_mhz: Some(2600.0),
        },
        kernel: KernelSettings {
            numa_balancing: Some(0),
            thp_enabled: Some("madvise".into()),
            thp_defrag: Some("madvise".into()),
            interleave_weights: None,
            memory_tiers: None,
            demotion_enabled: None,
        },
        support: Support {
            kernel: "6.8.0".into(),
            numa: true,
            preferred_many: true,
            weighted_interleave: false,
            move_pages: true,
        },
        topology: topology.summary(),
        numalab_version: "0.1.0".into(),
    }
}

/// A run of `text` with invented figures: remote costs 1.5× local, each
/// repeat 1% more than the one before, each thread 2% more than the one
/// before.
pub fn run(text: &str) -> RunReport {
    run_of(Experiment::from_toml_str(text, "fixture.toml").unwrap())
}

/// As [`run`], of an experiment.
pub fn run_of(exp: Experiment) -> RunReport {
    let topology = topology();
    let plan = Plan::resolve(&exp, &topology).unwrap();
    let op = exp.access.op_size.0;
    let mix = exp.access.mix();
    let remote = exp.memory.policy == PolicySpec::Remote;
    let base = if remote { 1.5 } else { 1.0 } * 0.1 / f64::from(exp.threads.count);
    let regions: Vec<RegionCheck> = plan
        .regions
        .iter()
        .map(|r| {
            let pages = r.bytes / 4096;
            let node = r.policy.nodes().first().unwrap_or(r.home);
            let found = PageHistogram {
                page_size: 4096,
                queried: pages,
                per_node: BTreeMap::from([(node, pages)]),
                ..Default::default()
            };
            let thread_nodes: NodeSet = r.threads.iter().map(|&t| plan.threads[t].node).collect();
            let check = audit(&r.policy, &thread_nodes, &found);
            RegionCheck {
                region: r.region,
                bytes: r.bytes,
                requested: r.requested.clone(),
                policy: r.policy.clone(),
                thread_nodes,
                as_requested: check.is_match(),
                note: check.note.clone(),
                audit: check,
                replicas: Vec::new(),
                huge_page_bytes: None,
            }
        })
        .collect();
    let repeats: Vec<Repeat> = (0..exp.run.repeats as usize)
        .map(|index| {
            let threads: Vec<ThreadRun> = plan
                .threads
                .iter()
                .map(|t| {
                    let ops = t.ops.unwrap();
                    let busy = base * (1.0 + 0.01 * index as f64 + 0.02 * t.thread as f64);
                    ThreadRun {
                        thread: t.thread,
                        cpu: t.cpu,
                        node: t.node,
                        ops,
                        reads: ops - mix.writes_in(ops),
                        writes: mix.writes_in(ops),
                        bytes: ops * op,
                        busy_s: busy,
                        read_latency_ns: Some(Percentiles {
                            samples: ops / 1024,
                            timed: ops / 1024,
                            p50: 100.0 + 10.0 * t.thread as f64,
                            p90: 150.0,
                            p99: 300.0,
                            p999: 900.0,
                            max: 2000.0,
                        }),
                        write_latency_ns: None,
                        counters: BTreeMap::from([("page-faults".to_string(), 0)]),
                    }
                })
                .collect();
            let wall = threads.iter().map(|t| t.busy_s).fold(0.0, f64::max);
            let ops: u64 = threads.iter().map(|t| t.ops).sum();
            let bytes = ops * op;
            Repeat {
                index,
                interrupted: false,
                time_to_last_s: wall,
                ops,
                reads: threads.iter().map(|t| t.reads).sum(),
                writes: threads.iter().map(|t| t.writes).sum(),
                bytes,
                gb_per_s: bytes as f64 / wall / 1e9,
                mops_per_s: ops as f64 / wall / 1e6,
                read_latency_ns: threads[0].read_latency_ns,
                write_latency_ns: None,
                counters: BTreeMap::from([("page-faults".to_string(), 0)]),
                threads,
            }
        })
        .collect();
    let mut warnings = plan.warnings.clone();
    warnings.push(Warning::new(
        WarningKind::NoPmu,
        "no hardware PMU here (perf_event_open cycles: No such file or directory (os error 2)): software events only",
    ));
    RunReport {
        schema: RUN_SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        numalab_version: "0.1.0".into(),
        created: "2026-01-01T00:00:00Z".into(),
        figures: figures(&repeats),
        threads: thread_figures(&plan, &regions, &repeats),
        experiment: exp,
        environment: environment(&topology),
        plan,
        regions,
        warmups: Vec::new(),
        repeats,
        counters: CounterInfo {
            events: vec!["page-faults".into()],
            note: None,
        },
        engine: EngineCost {
            clock: "tsc".into(),
            clock_overhead_ns: 18.0,
            sample_every: 1024,
            loop_ns_per_op: Some(2.5),
            share: Some(0.025),
        },
        warnings,
        interrupted: false,
        noise_floor: None,
        lengthened: None,
    }
}

/// A sweep of `text`'s grid, each cell a fixture run.
pub fn sweep(text: &str) -> SweepReport {
    let exp = Experiment::from_toml_str(text, "fixture.toml").unwrap();
    let cells: Vec<SweepCell> = exp
        .cells()
        .unwrap()
        .into_iter()
        .map(|(settings, cell)| SweepCell {
            settings: settings
                .iter()
                .map(|(k, v)| (k.clone(), value_text(v)))
                .collect(),
            result: Some(run_of(cell)),
            error: None,
            control: false,
        })
        .collect();
    let axes = axes_of(&exp);
    let (comparison, differences) = compare(&axes, &cells, 1);
    SweepReport {
        schema: SWEEP_SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        numalab_version: "0.1.0".into(),
        created: "2026-01-01T00:00:00Z".into(),
        environment: environment(&topology()),
        axes,
        comparison,
        differences,
        looks: None,
        experiment: exp,
        cells,
        warnings: Vec::new(),
        interrupted: false,
    }
}

pub const RUN: &str = "name = \"fixture\"\n[threads]\ncount = 4\n[memory]\nsize = \"16MiB\"\npolicy = \"remote\"\n[access]\nop_size = 128\nread_write = \"2:1\"\nops = 1_000_000\n[run]\nrepeats = 3\n";

pub const SWEEP: &str = "name = \"fixture-sweep\"\n[memory]\nsize = \"16MiB\"\n[access]\nop_size = 128\nread_write = \"2:1\"\nops = 1_000_000\n[run]\nrepeats = 3\n[sweep]\n\"threads.count\" = [2, 4]\n\"memory.policy\" = [\"local\", \"remote\"]\n";

/// A sweep without `local`: its table compares with the first axis's
/// first value.
pub const SWEEP_THREADS: &str = "name = \"fixture-threads\"\n[memory]\nsize = \"16MiB\"\n[access]\nop_size = 128\nops = 1_000_000\n[run]\nrepeats = 3\n[sweep]\n\"threads.count\" = [2, 4]\n\"access.op_size\" = [64, 128]\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::experiment::{csv, text};
    use numalab_bench::stats::Verdict;

    #[test]
    fn run_table() {
        insta::assert_snapshot!(text::run_report(&run(RUN), text::Style::Plain));
    }

    #[test]
    fn run_markdown() {
        insta::assert_snapshot!(text::run_report(&run(RUN), text::Style::Markdown));
    }

    #[test]
    fn run_csv() {
        insta::assert_snapshot!(csv::run(&run(RUN)));
    }

    #[test]
    fn sweep_table() {
        insta::assert_snapshot!(text::sweep_report(&sweep(SWEEP), text::Style::Plain));
    }

    #[test]
    fn sweep_markdown() {
        insta::assert_snapshot!(text::sweep_report(&sweep(SWEEP), text::Style::Markdown));
    }

    #[test]
    fn sweep_csv() {
        insta::assert_snapshot!(csv::sweep(&sweep(SWEEP)));
    }

    #[test]
    fn a_failed_cell_says_so_in_every_format() {
        let mut s = sweep(SWEEP);
        s.cells[1].result = None;
        s.cells[1].error = Some("region 0 (16777216 bytes, bind:0): out of memory".into());
        let table = text::sweep_report(&s, text::Style::Plain);
        let row = table.lines().find(|l| l.contains("remote")).unwrap();
        assert!(row.contains("failed (see below)"), "{table}");
        let csv = csv::sweep(&s);
        let row = csv.lines().nth(2).unwrap();
        assert!(row.starts_with("2,remote,0,"), "{csv}");
        assert!(
            row.ends_with(",false,\"region 0 (16777216 bytes, bind:0): out of memory\""),
            "{row}"
        );
    }

    #[test]
    fn sweep_against_the_first_value_table() {
        let s = sweep(SWEEP_THREADS);
        assert!(s.comparison.is_empty());
        assert_eq!(s.differences.len(), 2, "4 threads against 2, per op size");
        let median = |threads: &str, op_size: &str| {
            let cell = s.cells.iter().find(|c| {
                c.setting("threads.count") == Some(threads)
                    && c.setting("access.op_size") == Some(op_size)
            });
            cell.and_then(|c| c.result.as_ref()?.time_to_last())
                .unwrap()
        };
        for (d, op_size) in s.differences.iter().zip(["64", "128"]) {
            assert_eq!((d.value.as_str(), d.baseline.as_str()), ("4", "2"));
            let expected = (median("4", op_size) / median("2", op_size) - 1.0) * 100.0;
            assert!((d.percent - expected).abs() < 1e-9, "{d:?}");
            // Twice the threads, about half the fixture's time.
            assert_eq!(d.difference.as_ref().unwrap().verdict, Verdict::Lower);
        }
        insta::assert_snapshot!(text::sweep_report(&s, text::Style::Plain));
    }

    #[test]
    fn a_sweep_that_looked_again_says_how_far_it_went() {
        use numalab_bench::experiment::result::{Looks, Stopped};
        let mut s = sweep(SWEEP_THREADS);
        let plain = text::sweep_report(&s, text::Style::Plain);
        assert!(!plain.contains("looked at the differences"), "{plain}");
        s.looks = Some(Looks {
            planned: 4,
            taken: 2,
            every: 5,
            stopped: Stopped::Decided,
        });
        let told = text::sweep_report(&s, text::Style::Plain);
        assert!(
            told.contains("looked at the differences every 5 repeats, up to 4 times (20 repeats): every difference was told apart after 10 repeats per cell"),
            "{told}"
        );
        s.looks = Some(Looks {
            taken: 4,
            stopped: Stopped::MostRepeats,
            ..s.looks.unwrap()
        });
        let left = text::sweep_report(&s, text::Style::Plain);
        assert!(
            left.contains("20 repeats per cell (run.max_repeats) left some difference ≈"),
            "{left}"
        );
    }

    #[test]
    fn sweep_against_the_first_value_csv() {
        insta::assert_snapshot!(csv::sweep(&sweep(SWEEP_THREADS)));
    }

    #[test]
    fn remote_is_half_again_slower_than_local() {
        let s = sweep(SWEEP);
        assert_eq!(s.comparison.len(), 2);
        for c in &s.comparison {
            assert_eq!(c.policy, PolicySpec::Remote);
            assert!((c.vs_local_percent - 50.0).abs() < 1e-6, "{c:?}");
        }
        assert_eq!(text::signed_percent(50.0), "+50%");
        assert_eq!(text::signed_percent(-37.2), "-37%");
    }

    #[test]
    fn results_survive_a_json_round_trip() {
        // `numalab plot` reads what `--json` wrote. (Floats may move in
        // their last digit through JSON; everything else is exact.)
        let r = run(RUN);
        let back: RunReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.experiment, r.experiment);
        assert_eq!(back.plan, r.plan);
        assert_eq!(back.regions, r.regions);
        assert_eq!(back.warnings, r.warnings);
        assert_eq!(back.repeats.len(), r.repeats.len());
        assert_eq!(back.repeats[1].threads[2].ops, r.repeats[1].threads[2].ops);
        let s = sweep(SWEEP);
        let back: SweepReport = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.experiment, s.experiment, "the grid keeps its order");
        assert_eq!(back.axes, s.axes);
        assert_eq!(back.cells.len(), s.cells.len());
        assert_eq!(back.comparison.len(), s.comparison.len());
    }

    #[test]
    fn sweep_chart_has_a_line_per_policy() {
        let chart = crate::render::figures::sweep_chart(&sweep(SWEEP));
        assert_eq!(chart.x_label, "threads.count");
        let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["local", "remote"]);
        assert_eq!(chart.series[0].points.len(), 2);
        assert_eq!(chart.series[0].points[0].0, 2.0);
    }
}
