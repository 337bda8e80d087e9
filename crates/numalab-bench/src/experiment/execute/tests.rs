//! Tests of running a planned experiment.

use super::*;

fn run_text(text: &str) -> RunReport {
    let exp = Experiment::from_toml_str(text, "test.toml").unwrap();
    let topology = Topology::system().unwrap();
    run(&exp, &topology, &Control::default()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn cpus() -> u32 {
    numalab::affinity::thread_cpus().unwrap().len().min(2) as u32
}

/// `exp` run on its plan with every thread's operations cut to
/// `ops` (the plan a caller hands in need not count what the file
/// says; it lets a test start a sized run from a short one).
fn run_from(text: &str, ops: u64) -> RunReport {
    let exp = Experiment::from_toml_str(text, "test.toml").unwrap();
    let topology = Topology::system().unwrap();
    let mut plan = Plan::resolve(&exp, &topology).unwrap();
    for t in &mut plan.threads {
        t.ops = Some(ops);
    }
    run_plan(&exp, &topology, plan, &Control::default()).unwrap()
}

/// Runs numalab sizes itself (no `access.ops`) that fall under the
/// floor are lengthened: the first run, measured at the old count,
/// becomes a warm-up, and every repeat runs at the new one, which
/// puts the deciding run 1.5 times over the floor.
#[test]
fn short_runs_numalab_sizes_are_lengthened_past_the_floor() {
    let result = run_from(
        "[memory]\nsize = \"64KiB\"\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false\nmin_time = \"30ms\"\n",
        1000,
    );
    let l = result
        .lengthened
        .as_ref()
        .expect("a run of 1000 operations is under 30 ms");
    assert_eq!(
        result.warmups.len(),
        1,
        "the deciding repeat became a warm-up"
    );
    let first = &result.warmups[0];
    assert_eq!((first.ops, l.from_ops), (1000, 1000));
    assert!((l.measured_s - first.time_to_last_s).abs() < 1e-12);
    assert_eq!(l.factor, (1.5 * 0.030 / first.time_to_last_s).ceil() as u64);
    assert_eq!(result.repeats.len(), 2);
    for r in &result.repeats {
        assert_eq!(r.ops, l.to_ops);
    }
    assert_eq!(result.plan.threads[0].ops, Some(l.to_ops));
    let floor = result.noise_floor.unwrap();
    assert_eq!((floor.min_repeat_s, floor.given), (0.030, true));
    let notes: Vec<_> = result
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::Lengthened)
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", result.warnings);
    assert!(
        notes[0].message.contains(&format!("×{}", l.factor)),
        "{}",
        notes[0].message
    );
    assert!(!result
        .warnings
        .iter()
        .any(|w| w.kind == WarningKind::ShortRuns));
}

/// A count the user gave is kept, and the runs it makes are called
/// short, with what to raise; `run.min_time = "off"` turns that off.
#[test]
fn short_runs_of_a_given_count_are_kept_and_warned_about() {
    let text = "[memory]\nsize = \"64KiB\"\n[access]\nops = 1000\n[run]\nrepeats = 2\nwarmup = 1\ncounters = false\nmin_time = \"30ms\"\n";
    let result = run_text(text);
    assert_eq!(result.lengthened, None);
    assert_eq!(result.warmups.len(), 1);
    assert!(result.repeats.iter().all(|r| r.ops == 1000));
    let short: Vec<_> = result
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::ShortRuns)
        .collect();
    assert_eq!(short.len(), 1, "{:?}", result.warnings);
    assert!(
        short[0]
            .message
            .contains("under this machine's noise floor of 30.0 ms (run.min_time)"),
        "{}",
        short[0].message
    );
    assert!(
        short[0]
            .message
            .contains("raise access.ops (or leave it out"),
        "{}",
        short[0].message
    );
    let off = run_text(&text.replace("\"30ms\"", "\"off\""));
    assert!(
        !off.warnings
            .iter()
            .any(|w| matches!(w.kind, WarningKind::ShortRuns | WarningKind::Lengthened)),
        "{:?}",
        off.warnings
    );
    assert_eq!(off.noise_floor.map(|f| f.min_repeat_s), Some(0.0));
}

/// Runs long enough are left as they are, and the measured floor is
/// in the result.
#[test]
fn runs_over_the_floor_are_not_lengthened() {
    let result = run_text(
        "[memory]\nsize = \"64KiB\"\n[run]\nrepeats = 1\nwarmup = 1\ncounters = false\nmin_time = \"1ms\"\n[access]\nduration = \"20ms\"\n",
    );
    assert_eq!(result.lengthened, None);
    assert!(result.repeats[0].time_to_last_s >= 0.020);
    assert!(
        !result
            .warnings
            .iter()
            .any(|w| matches!(w.kind, WarningKind::ShortRuns | WarningKind::Lengthened)),
        "{:?}",
        result.warnings
    );
    let measured = run_text("[memory]\nsize = \"64KiB\"\n[access]\nops = 1000\n[run]\nrepeats = 1\nwarmup = 0\ncounters = false\n");
    let floor = measured.noise_floor.unwrap();
    assert!(!floor.given && floor.min_repeat_s > 0.0, "{floor:?}");
}

/// A region that asked for huge pages and got fewer than nine tenths
/// of the 2 MiB pages it spans is named; one that got them, one that
/// asked for none, and one too small for a single huge page are not.
#[test]
fn regions_short_of_huge_pages_are_named() {
    let exp = Experiment::from_toml_str("[memory]\nhuge_pages = \"thp\"\n", "x").unwrap();
    let base = run_text("[memory]\nsize = \"64KiB\"\n[access]\nops = 1000\n[run]\nrepeats = 1\nwarmup = 0\ncounters = false\n");
    let region = |bytes: u64, got: Option<u64>| RegionCheck {
        bytes,
        huge_page_bytes: got,
        ..base.regions[0].clone()
    };
    let gib = 1 << 30;
    let short = few_huge_pages(&exp, &region(gib, Some(412 << 20))).expect("412 of 1024 MiB");
    assert_eq!(short.kind, WarningKind::FewHugePages);
    assert!(
        short.message.starts_with(
            "region 0: 412 MiB of 1024 MiB in huge pages (memory.huge_pages = \"thp\")"
        ),
        "{}",
        short.message
    );
    assert!(few_huge_pages(&exp, &region(gib, Some(gib))).is_none());
    assert!(few_huge_pages(&exp, &region(gib, Some(gib / 10 * 9 + (4 << 20)))).is_none());
    assert!(few_huge_pages(&exp, &region(gib, None)).is_none());
    assert!(
        few_huge_pages(&exp, &region(1 << 20, Some(0))).is_none(),
        "under 2 MiB"
    );
}

/// A run with transparent huge pages reports how much of its region
/// the kernel backed with them (whole 2 MiB pages, at most the
/// region), and warns exactly when that is under nine tenths; a run
/// without huge pages reports nothing. A machine whose THP is off
/// says so: its region reports none and is warned about.
#[test]
fn a_thp_region_reports_its_huge_pages() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let result = run_text("[memory]\nsize = \"64MiB\"\nhuge_pages = \"thp\"\n[access]\nops = 1000\n[run]\nrepeats = 1\nwarmup = 0\ncounters = false\n");
    let got = result.regions[0]
        .huge_page_bytes
        .expect("smaps reports AnonHugePages");
    let short = result
        .warnings
        .iter()
        .any(|w| w.kind == WarningKind::FewHugePages);
    if thp.contains("[never]") {
        eprintln!("transparent huge pages are off here ({})", thp.trim());
        assert_eq!((got, short), (0, true), "{:?}", result.warnings);
        return;
    }
    assert!(got <= 64 << 20 && got.is_multiple_of(2 << 20), "{got}");
    assert_eq!(
        short,
        got * 10 < (64 << 20) * 9,
        "{got} bytes, warnings {:?}",
        result.warnings
    );
    let none = run_text("[memory]\nsize = \"8MiB\"\n[access]\nops = 1000\n[run]\nrepeats = 1\nwarmup = 0\ncounters = false\n");
    assert_eq!(
        none.regions[0].huge_page_bytes, None,
        "no huge pages asked for"
    );
}

#[test]
fn result_invariants_hold() {
    let n = cpus();
    let result = run_text(&format!(
        "[threads]\ncount = {n}\n[memory]\nsize = \"4MiB\"\n[access]\nop_size = 128\nread_write = \"2:1\"\nops = 30_001\n[run]\nrepeats = 2\nwarmup = 1"
    ));
    assert_eq!(result.schema, "numalab.run");
    assert_eq!((result.warmups.len(), result.repeats.len()), (1, 2));
    assert!(!result.interrupted);
    let mix = result.experiment.access.mix();
    for repeat in result.warmups.iter().chain(&result.repeats) {
        assert_eq!(repeat.ops, 30_001, "every planned operation done");
        assert_eq!(repeat.bytes, repeat.ops * 128, "bytes = ops x op size");
        assert_eq!(repeat.reads + repeat.writes, repeat.ops);
        for (t, plan) in repeat.threads.iter().zip(&result.plan.threads) {
            assert_eq!(Some(t.ops), plan.ops);
            assert_eq!(t.bytes, t.ops * 128);
            assert_eq!(
                t.writes,
                mix.writes_in(t.ops),
                "read:write counts follow 2:1"
            );
            assert!(
                repeat.time_to_last_s >= t.busy_s,
                "time to last thread {} < thread {} busy {}",
                repeat.time_to_last_s,
                t.thread,
                t.busy_s
            );
            assert_eq!(t.cpu, plan.cpu);
        }
        let gbs = repeat.bytes as f64 / repeat.time_to_last_s / 1e9;
        assert!((repeat.gb_per_s - gbs).abs() < 1e-9 * gbs.max(1.0));
        let lat = repeat.read_latency_ns.expect("sampled reads");
        assert!(lat.samples > 0 && lat.p50 <= lat.p99 && lat.p99 <= lat.max);
    }
    let figures = result.figures.as_ref().unwrap();
    assert_eq!(figures.time_to_last_s.n, 2);
    for check in &result.regions {
        assert_eq!(
            check.audit.found.present(),
            (4 << 20) / 4096,
            "every page prefaulted"
        );
        assert!(check.as_requested, "{}", check.note);
    }
    assert_eq!(result.threads.len(), n as usize);
    assert!(result.engine.loop_ns_per_op.is_some());
}

#[test]
fn sequential_and_copy_count_bytes() {
    for pattern in ["sequential", "copy", "strided:4096"] {
        let result = run_text(&format!(
            "[threads]\ncount = 1\n[memory]\nsize = \"2MiB\"\n[access]\npattern = \"{pattern}\"\nop_size = 1024\nops = 4000\n[run]\nrepeats = 1\nwarmup = 0"
        ));
        let r = &result.repeats[0];
        assert_eq!(r.ops, 4000, "{pattern}");
        assert_eq!(r.bytes, 4000 * 1024, "{pattern}");
        if pattern == "copy" {
            assert_eq!(r.reads, r.writes);
        } else {
            assert_eq!(r.writes, 0, "reads only by default");
        }
    }
}

#[test]
fn remote_is_checked_against_the_threads_node() {
    let result = run_text("[memory]\nsize = \"1MiB\"\npolicy = \"remote\"\n[access]\nops = 1000\n[run]\nrepeats = 1\nwarmup = 0");
    let thread_node = result.plan.threads[0].node;
    let region = &result.regions[0];
    if numalab::NodeInventory::live().with_memory.len() == 1 {
        // One node: the pages cannot be remote, and every output says so.
        assert!(!result.placement_as_requested());
        assert!(result
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::Placement
                && w.cause == Some(Cause::NoRemoteNode { region: 0 })));
        assert!(
            region.note.starts_with("remote asked, but"),
            "{}",
            region.note
        );
    } else {
        assert!(region.as_requested, "{}", region.note);
        assert_eq!(region.audit.found.on_node(thread_node), 0);
    }
}

#[test]
fn first_touch_and_rwlock_run() {
    let n = cpus();
    let result = run_text(&format!(
        "[threads]\ncount = {n}\n[memory]\nsize = \"2MiB\"\npolicy = \"first-touch\"\nsharing = \"shared\"\n[access]\nread_write = \"1:1\"\nsync = \"rwlock\"\nlock_stripes = 16\nops = 20_000\n[run]\nrepeats = 1\nwarmup = 0"
    ));
    assert!(result.regions[0].as_requested, "{}", result.regions[0].note);
    assert_eq!(result.repeats[0].ops, 20_000);
    assert_eq!(result.repeats[0].writes, 10_000);
}

#[test]
fn replicate_runs_with_every_copy_checked_on_its_node() {
    let n = cpus();
    for (replication, sync) in [
        ("copies", "rwlock"),
        ("copies", "none"),
        ("broadcast", "rwlock"),
        ("log", "none"),
    ] {
        let result = run_text(&format!(
            "[threads]\ncount = {n}\n[memory]\nsize = \"2MiB\"\npolicy = \"replicate\"\nsharing = \"shared\"\nreplication = \"{replication}\"\n[access]\nread_write = \"3:1\"\nsync = \"{sync}\"\nlock_stripes = 16\nops = 20_000\n[run]\nrepeats = 1\nwarmup = 0"
        ));
        let what = format!("{replication} {sync}");
        let r = &result.repeats[0];
        assert_eq!((r.ops, r.writes), (20_000, 5_000), "{what}");
        let region = &result.regions[0];
        let planned = &result.plan.regions[0].replicas;
        assert_eq!(region.replicas.len(), planned.len(), "{what}");
        for (copy, &node) in region.replicas.iter().zip(planned) {
            assert_eq!(copy.node, node);
            assert_eq!(copy.audit.found.on_node(node), 512, "{what}: {}", copy.note);
            assert!(copy.as_requested, "{what}: {}", copy.note);
        }
        assert_eq!(region.audit.found.present(), 512 * planned.len() as u64);
        assert!(region.as_requested, "{what}: {}", region.note);
        assert!(
            result.placement_as_requested(),
            "{what}: {:?}",
            result.warnings
        );
        for t in &result.threads {
            let copy = result.plan.threads[t.thread].replica.unwrap();
            assert_eq!(
                t.memory_nodes,
                planned[copy].to_string(),
                "the copy it read"
            );
        }
        let one_copy = planned.len() == 1;
        let says_so = result
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::Inconclusive && w.cause == Some(Cause::OneCopy));
        assert_eq!(says_so, one_copy, "{what}: {:?}", result.warnings);
    }
}

#[test]
fn a_stop_before_the_start_runs_nothing() {
    let exp = Experiment::from_toml_str("[memory]\nsize = \"1MiB\"", "t").unwrap();
    let control = Control::default();
    control.stop();
    let result = run(&exp, &Topology::system().unwrap(), &control).unwrap();
    assert!(result.interrupted);
    assert!(result.repeats.is_empty() && result.figures.is_none());
    assert!(result
        .warnings
        .iter()
        .any(|w| w.kind == WarningKind::Interrupted));
}

#[test]
fn reads_and_writes_both_have_latencies_at_3_to_1() {
    // Every 1024th operation of a 3:1 cycle was its write: no read
    // latency at all.
    let result = run_text("[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"3:1\"\nops = 200_000\n[run]\nrepeats = 1\nwarmup = 0\ncounters = false");
    let r = &result.repeats[0];
    let reads = r.read_latency_ns.expect("reads timed");
    let writes = r.write_latency_ns.expect("writes timed");
    assert_eq!(reads.samples + writes.samples, 200_000 / 1025);
    assert!(reads.samples > 2 * writes.samples, "{reads:?} {writes:?}");
    assert_eq!((reads.timed, writes.timed), (reads.samples, writes.samples));
}

#[test]
fn a_timed_run_stops_on_time() {
    let result = run_text(
        "[memory]\nsize = \"1MiB\"\n[access]\nduration = \"50ms\"\n[run]\nrepeats = 1\nwarmup = 0",
    );
    let r = &result.repeats[0];
    assert!(r.ops > 0);
    assert!(r.time_to_last_s >= 0.05, "{}", r.time_to_last_s);
    assert_eq!(result.plan.threads[0].ops, None);
}
