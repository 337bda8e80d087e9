//! Tests of planning an experiment against a machine.

use super::*;

fn exp(text: &str) -> Experiment {
    Experiment::from_toml_str(text, "test.toml").unwrap()
}

fn two() -> Topology {
    // 2 nodes × 4 cores × 2 threads: node 0 CPUs 0-7, node 1 CPUs 8-15.
    Topology::from_synthetic("pack:2 numa:1 core:4 pu:2").unwrap()
}

fn four() -> Topology {
    Topology::from_synthetic("pack:2 numa:2 core:2 pu:1").unwrap()
}

fn eight() -> Topology {
    Topology::from_synthetic("pack:4 numa:2 core:2 pu:2").unwrap()
}

fn plan(topo: &Topology, text: &str) -> Plan {
    Plan::resolve(&exp(text), topo).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn nodes_of_threads(plan: &Plan) -> Vec<u32> {
    plan.threads.iter().map(|t| t.node).collect()
}

#[test]
fn balanced_fills_cores_before_siblings() {
    let p = plan(&two(), "[threads]\ncount = 6");
    assert_eq!(nodes_of_threads(&p), [0, 0, 0, 1, 1, 1]);
    // One PU per core first: CPUs 0, 2, 4 on node 0 (1, 3, 5 are siblings).
    assert_eq!(p.cpus(), [0, 2, 4, 8, 10, 12]);
    let p = plan(&two(), "[threads]\ncount = 12");
    assert_eq!(p.cpus()[..6], [0, 2, 4, 6, 1, 3]);
    assert!(!p.oversubscribed && p.warnings.is_empty());
    let p = plan(&two(), "[threads]\ncount = 3");
    assert_eq!(
        nodes_of_threads(&p),
        [0, 0, 1],
        "the remainder goes to the first nodes"
    );
}

#[test]
fn ratio_and_explicit_nodes_and_cpus() {
    let p = plan(&two(), "[threads]\ncount = 8\nplacement = \"ratio:3:1\"");
    assert_eq!(nodes_of_threads(&p), [0, 0, 0, 0, 0, 0, 1, 1]);
    let p = plan(&two(), "[threads]\ncount = 4\nplacement = \"ratio:0:1\"");
    assert_eq!(nodes_of_threads(&p), [1, 1, 1, 1]);
    let p = plan(&four(), "[threads]\ncount = 4\nplacement = \"nodes:1,3\"");
    assert_eq!(nodes_of_threads(&p), [1, 1, 3, 3]);
    assert_eq!(p.cpus(), [2, 3, 6, 7]);
    let p = plan(&two(), "[threads]\ncount = 3\nplacement = \"cpus:9,1,15\"");
    assert_eq!(
        p.cpus(),
        [1, 9, 15],
        "a CPU list is used in ascending order"
    );
    assert_eq!(nodes_of_threads(&p), [0, 1, 1]);
    let p = plan(
        &eight(),
        "[threads]\ncount = 8\nplacement = \"ratio:1:1:1:1:1:1:1:1\"",
    );
    assert_eq!(nodes_of_threads(&p), [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn impossible_thread_plans_are_refused() {
    let err = Plan::resolve(&exp("[threads]\ncount = 20"), &two()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "threads.count = 20 with placement balanced puts 10 threads on node 0, which has 8 CPUs this process may use (0-7); lower threads.count, choose other CPUs, or set threads.oversubscribe = true"
    );
    let p = plan(&two(), "[threads]\ncount = 20\noversubscribe = true");
    assert!(p.oversubscribed);
    assert_eq!(p.warnings[0].kind, WarningKind::Oversubscribed);
    assert_eq!(p.threads.len(), 20);
    let err = Plan::resolve(&exp("[threads]\nplacement = \"nodes:0,7\""), &two()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "threads.placement = \"nodes:0,7\": node 7 does not exist; this machine has nodes 0-1"
    );
    let err = Plan::resolve(&exp("[threads]\nplacement = \"cpus:99\""), &two()).unwrap_err();
    assert!(err.to_string().contains("CPU 99 does not exist"), "{err}");
    let err = Plan::resolve(
        &exp("[threads]\ncount = 3\nplacement = \"cpus:0-1\""),
        &two(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("puts 3 threads on CPUs 0-1"),
        "{err}"
    );
}

#[test]
fn node_lists_mean_the_nodes_that_can_play_the_role() {
    // CPUs on nodes 0 and 2, memory on nodes 0 and 1 (a CXL node).
    let topo = xml("cpuless.xml");
    // `all` places threads on the nodes with CPUs only.
    let p = plan(&topo, "[threads]\ncount = 2\nplacement = \"nodes:all\"");
    assert_eq!(nodes_of_threads(&p), [0, 2]);
    let p = plan(&topo, "[threads]\ncount = 1\nplacement = \"nodes:!0\"");
    assert_eq!(nodes_of_threads(&p), [2]);
    // An explicit memory-only node is refused, as before.
    let err = Plan::resolve(&exp("[threads]\nplacement = \"nodes:0,1\""), &topo).unwrap_err();
    assert_eq!(
        err.to_string(),
        "threads.placement = \"nodes:0,1\": node 1 has no CPUs (a memory-only node) and cannot run threads; nodes with CPUs: 0,2"
    );
    // Copies go on nodes with memory: `replicate:all` skips node 2.
    let p = plan(
        &topo,
        "[threads]\ncount = 2\n[memory]\npolicy = \"replicate:all\"\nsharing = \"shared\"\nsize = \"1MiB\"",
    );
    assert_eq!(p.regions[0].replicas, [0, 1]);
    let err = Plan::resolve(
        &exp("[memory]\npolicy = \"replicate:1,2\"\nsharing = \"shared\""),
        &topo,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("node 2 has no memory; nodes with memory: 0-1"),
        "{err}"
    );
}

#[test]
fn ratio_beyond_the_nodes_warns() {
    let one = Topology::from_synthetic("numa:1 core:4 pu:1").unwrap();
    let p = plan(&one, "[threads]\ncount = 4\nplacement = \"ratio:3:1\"");
    assert_eq!(nodes_of_threads(&p), [0, 0, 0, 0]);
    assert_eq!(p.warnings[0].kind, WarningKind::Placement);
    assert_eq!(
        p.warnings[0].cause,
        Some(Cause::Key {
            key: "threads.placement".into()
        }),
        "{}",
        p.warnings[0].message
    );
}

#[test]
fn sharing_makes_the_regions() {
    let p = plan(
        &four(),
        "[threads]\ncount = 8\n[memory]\nsharing = \"per-node\"",
    );
    assert_eq!(p.regions.len(), 4);
    assert_eq!(p.regions[2].threads, [4, 5]);
    assert_eq!(p.regions[2].home, 2);
    assert_eq!(p.threads[5].region, 2);
    let p = plan(
        &four(),
        "[threads]\ncount = 8\n[memory]\nsharing = \"per-thread\"",
    );
    assert_eq!(p.regions.len(), 8);
    assert!(p
        .threads
        .iter()
        .all(|t| t.region == t.thread && t.share_offset == 0));
    let p = plan(
        &four(),
        "[threads]\ncount = 8\n[memory]\nsharing = \"shared\"\nsize = \"8MiB\"",
    );
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].threads.len(), 8);
    // Shares cover the region without overlap, page-aligned.
    let mut end = 0;
    for t in &p.threads {
        assert_eq!(t.share_offset, end);
        assert_eq!(t.share_offset % 4096, 0);
        end += t.share_len;
    }
    assert_eq!(end, 8 << 20);
}

#[test]
fn local_and_remote_follow_the_threads() {
    for topo in [two(), four(), eight()] {
        let n = topo.nodes.len() as u32;
        let text = format!("[threads]\ncount = {}\n[memory]\npolicy = \"local\"", 2 * n);
        let p = plan(&topo, &text);
        for r in &p.regions {
            assert_eq!(r.policy, MemPolicy::Bind(NodeSet::single(r.home)));
            assert_eq!(r.expected_nodes, NodeSet::single(r.home));
            for &t in &r.threads {
                assert_eq!(p.threads[t].node, r.home);
            }
        }
        let p = plan(&topo, &text.replace("local", "remote"));
        for r in &p.regions {
            let node = r.policy.nodes().first().unwrap();
            assert_ne!(node, r.home, "remote is another node");
            let nearest = topo.nodes_by_distance(r.home)[0];
            assert_eq!(node, nearest, "the nearest other node");
        }
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }
    // On the 8-node machine (2 nodes per package) the nearest is the
    // package sibling when the distances say so; without distances,
    // the next id.
    let p = plan(
        &eight(),
        "[threads]\ncount = 8\n[memory]\npolicy = \"remote\"",
    );
    assert_eq!(p.regions.len(), 8);
}

#[test]
fn remote_on_one_node_resolves_with_a_warning() {
    let one = Topology::from_synthetic("numa:1 core:2 pu:1").unwrap();
    let p = plan(&one, "[threads]\ncount = 2\n[memory]\npolicy = \"remote\"");
    assert_eq!(p.regions[0].policy, MemPolicy::Bind(NodeSet::single(0)));
    assert_eq!(p.warnings.len(), 1);
    assert_eq!(
        p.warnings[0].cause,
        Some(Cause::NoRemoteNode { region: 0 }),
        "{}",
        p.warnings[0].message
    );
}

#[test]
fn shared_local_and_remote_warn() {
    let p = plan(
        &two(),
        "[threads]\ncount = 4\nplacement = \"ratio:3:1\"\n[memory]\nsharing = \"shared\"",
    );
    assert_eq!(
        p.regions[0].policy,
        MemPolicy::Bind(NodeSet::single(0)),
        "home = most threads"
    );
    assert_eq!(
        p.warnings[0].cause,
        Some(Cause::SharedRegion { region: 0 }),
        "{:?}",
        p.warnings
    );
    let p = plan(
        &two(),
        "[threads]\ncount = 4\n[memory]\nsharing = \"shared\"\npolicy = \"remote\"",
    );
    assert_eq!(p.regions[0].policy, MemPolicy::Bind(NodeSet::single(1)));
    assert_eq!(
        p.warnings[0].cause,
        Some(Cause::SharedRegion { region: 0 }),
        "{:?}",
        p.warnings
    );
    let p = plan(&four(), "[threads]\ncount = 4\nplacement = \"nodes:0,1\"\n[memory]\nsharing = \"shared\"\npolicy = \"remote\"");
    let node = p.regions[0].policy.nodes().first().unwrap();
    assert!(node >= 2, "a node without threads is remote to all: {node}");
    assert!(p.warnings.is_empty());
}

#[test]
fn kernel_policies_and_first_touch() {
    let topo = four();
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\npolicy = \"interleave\"",
    );
    assert_eq!(p.regions[0].policy.to_string(), "interleave:0-3");
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\npolicy = \"interleave:1,2\"",
    );
    assert_eq!(p.regions[3].expected_nodes.to_string(), "1-2");
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\npolicy = \"weighted-interleave:0=3,1=1\"",
    );
    assert_eq!(
        p.regions[0].policy.to_string(),
        "weighted-interleave:0=3,1=1"
    );
    let p = plan(&topo, "[threads]\ncount = 4\n[memory]\npolicy = \"bind:2\"");
    assert!(p
        .regions
        .iter()
        .all(|r| r.policy == MemPolicy::Bind(NodeSet::single(2))));
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\npolicy = \"preferred:3\"",
    );
    assert_eq!(p.regions[0].policy, MemPolicy::Preferred(3));
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\npolicy = \"first-touch\"\nsharing = \"shared\"",
    );
    assert!(p.regions[0].first_touch);
    assert_eq!(p.regions[0].policy, MemPolicy::Default);
    assert_eq!(p.regions[0].expected_nodes.to_string(), "0-3");
    let err = Plan::resolve(&exp("[memory]\npolicy = \"bind:9\""), &topo).unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory.policy = \"bind:9\": node 9 does not exist; this machine has nodes 0-3"
    );
}

#[test]
fn memory_beyond_the_nodes_is_refused() {
    let topo = two();
    let gib = 1u64 << 30;
    let free = |node: u32| {
        Some(NodeFree {
            free: if node == 0 { gib } else { 4 * gib },
            reclaimable: 0,
            huge_2m: 10,
        })
    };
    let fits = exp("[threads]\ncount = 2\n[memory]\nsize = \"1GiB\"\npolicy = \"remote\"");
    assert!(Plan::resolve_with(&fits, &topo, &free).is_ok());
    let too_big = exp("[threads]\ncount = 2\n[memory]\nsize = \"2GiB\"\npolicy = \"bind:0\"");
    let err = Plan::resolve_with(&too_big, &topo, &free).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the plan needs 4096.0 MiB on node 0, which has 1024.0 MiB free; lower memory.size or threads.count, or choose other nodes"
    );
    let total = exp("[threads]\ncount = 2\n[memory]\nsize = \"3GiB\"\npolicy = \"preferred:0\"");
    let err = Plan::resolve_with(&total, &topo, &free).unwrap_err();
    assert!(err.to_string().contains("on nodes 0-1"), "{err}");
    let huge = exp("[threads]\ncount = 2\n[memory]\nsize = \"30MiB\"\nhuge_pages = \"2M\"\npolicy = \"bind:1\"");
    let err = Plan::resolve_with(&huge, &topo, &free).unwrap_err();
    assert!(
        err.to_string()
            .contains("needs 30 free 2 MiB huge pages on node 1, which has 10"),
        "{err}"
    );
}

#[test]
fn locks_and_latency_samples_count_against_free_memory() {
    let topo = two();
    let mib = 1u64 << 20;
    let free = |_node: u32| {
        Some(NodeFree {
            free: 3 * mib,
            reclaimable: 0,
            huge_2m: 0,
        })
    };
    // 1 MiB of data fits; with 65536 stripe locks (4 MiB) beside it,
    // on the same node, it does not.
    let base = "[threads]\ncount = 1\n[memory]\nsize = \"1MiB\"\npolicy = \"bind:0\"\n[access]\nlatency_sample = 0\n";
    assert!(Plan::resolve_with(&exp(base), &topo, &free).is_ok());
    let locked = exp(&format!("{base}sync = \"rwlock\"\nlock_stripes = 65536\n"));
    let err = Plan::resolve_with(&locked, &topo, &free).unwrap_err();
    assert!(
        matches!(err, PlanError::Memory { needed, .. } if needed == 5 * mib),
        "{err}"
    );
    // The threads' latency reservoirs: 2 kinds x 65536 timings x 16
    // bytes each for one thread, on top of the data, in total.
    let sampled = exp("[threads]\ncount = 1\n[memory]\nsize = \"5MiB\"\npolicy = \"interleave\"\n");
    let err = Plan::resolve_with(&sampled, &topo, &free).unwrap_err();
    assert!(
        matches!(err, PlanError::Memory { needed, .. } if needed == 7 * mib),
        "{err}"
    );
    // Sizes past any machine are summed without wrapping (they
    // overflowed u64 into a small number, or panicked).
    let vast = exp("[threads]\ncount = 8\n[memory]\nsize = \"16000000T\"\nsharing = \"per-thread\"\npolicy = \"bind:0\"\n");
    let err = Plan::resolve_with(&vast, &topo, &free).unwrap_err();
    assert!(
        matches!(
            err,
            PlanError::Memory {
                needed: u64::MAX,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn ops_split_across_threads() {
    let p = plan(&two(), "[threads]\ncount = 3\n[access]\nops = 10");
    let ops: Vec<u64> = p.threads.iter().map(|t| t.ops.unwrap()).collect();
    assert_eq!(ops, [4, 3, 3]);
    let p = plan(&two(), "[access]\nduration = \"1s\"");
    assert_eq!(p.threads[0].ops, None);
}

#[test]
fn tiny_shares_are_refused() {
    let err = Plan::resolve(
        &exp("[threads]\ncount = 8\n[memory]\nsharing = \"shared\"\nsize = \"1KiB\"\n[access]\npattern = \"copy\"\nop_size = 128"),
        &two(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("less than one copy operation"),
        "{err}"
    );
}

fn xml(name: &str) -> Topology {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/topologies")
        .join(name);
    Topology::from_xml_file(path).unwrap()
}

fn inconclusive(plan: &Plan) -> Vec<&Cause> {
    plan.warnings
        .iter()
        .filter(|w| w.kind == WarningKind::Inconclusive)
        .filter_map(|w| w.cause.as_ref())
        .collect()
}

#[test]
fn replicate_puts_a_copy_on_every_node_and_threads_read_their_own() {
    for topo in [two(), four(), eight()] {
        let n = topo.nodes.len();
        let text = format!(
            "[threads]\ncount = {}\n[memory]\nsize = \"4MiB\"\npolicy = \"replicate\"\nsharing = \"shared\"",
            2 * n
        );
        let p = plan(&topo, &text);
        let all: Vec<u32> = (0..n as u32).collect();
        assert_eq!(p.regions.len(), 1);
        let r = &p.regions[0];
        assert_eq!(r.replicas, all, "{n} nodes: a copy on each");
        assert_eq!(r.policy, MemPolicy::Bind(all.iter().copied().collect()));
        assert_eq!(r.expected_nodes.len(), n);
        assert_eq!(r.requested, PolicySpec::Replicate(None));
        for t in &p.threads {
            let copy = t.replica.expect("every thread reads a copy");
            assert_eq!(
                r.replicas[copy], t.node,
                "thread {} reads its node's copy",
                t.thread
            );
        }
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        // The copies are the same with fewer threads: the machine's
        // mirror, whoever reads it.
        let p = plan(
            &topo,
            &text.replace(&format!("count = {}", 2 * n), "count = 1"),
        );
        assert_eq!(p.regions[0].replicas, all);
        assert_eq!(p.threads[0].replica, Some(0));
        let notes = inconclusive(&p);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes, [&Cause::OneCopyRead { region: 0 }]);
        assert_eq!(p.threads[0].replica, Some(0), "copy 0");
    }
}

#[test]
fn replicate_on_named_nodes_reads_the_nearest_copy() {
    // 8 nodes with a SLIT (every remote node at 20): threads on nodes
    // without a copy read the nearest, the lowest id on a tie.
    let topo = xml("16amd64-4distances.xml");
    let p = plan(
        &topo,
        "[threads]\ncount = 8\n[memory]\nsize = \"1MiB\"\npolicy = \"replicate:2,5\"\nsharing = \"shared\"",
    );
    assert_eq!(p.regions[0].replicas, [2, 5]);
    for t in &p.threads {
        let expected = match t.node {
            5 => 1,
            _ => 0,
        };
        assert_eq!(t.replica, Some(expected), "thread on node {}", t.node);
    }
    // On the 4-node synthetic machine without distances: nearest by id.
    let p = plan(
        &four(),
        "[threads]\ncount = 4\n[memory]\npolicy = \"replicate:1,3\"\nsize = \"1MiB\"\nsharing = \"shared\"",
    );
    let copies: Vec<Option<usize>> = p.threads.iter().map(|t| t.replica).collect();
    assert_eq!(copies, [Some(0), Some(0), Some(0), Some(1)]);
    let err = Plan::resolve(&exp("[memory]\npolicy = \"replicate:0,7\""), &four()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "memory.policy = \"replicate:0,7\": node 7 does not exist; this machine has nodes 0-3"
    );
}

#[test]
fn replicate_leaves_memory_only_nodes_out_and_serves_memory_less_ones() {
    // Node 0: CPUs and memory; node 1: memory only (CXL); node 2: CPUs
    // without memory, nearest memory on node 1 (25 against 30).
    let topo = xml("cpuless.xml");
    let p = plan(
        &topo,
        "[threads]\ncount = 2\n[memory]\nsize = \"1MiB\"\npolicy = \"replicate\"\nsharing = \"shared\"",
    );
    assert_eq!(p.regions[0].replicas, [0, 1]);
    let by_node: Vec<(u32, Option<usize>)> =
        p.threads.iter().map(|t| (t.node, t.replica)).collect();
    assert_eq!(by_node, [(0, Some(0)), (2, Some(1))]);
    // Knights Landing SNC4: four DRAM nodes with CPUs, four MCDRAM
    // nodes without; a copy on each DRAM node only.
    let topo = xml("64intel64-fakeKNL-SNC4-hybrid.xml");
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\nsize = \"1MiB\"\npolicy = \"replicate\"\nsharing = \"shared\"",
    );
    assert_eq!(p.regions[0].replicas, [0, 1, 2, 3]);
    // Named explicitly, a memory-only node may hold a copy.
    let p = plan(
        &topo,
        "[threads]\ncount = 4\n[memory]\nsize = \"1MiB\"\npolicy = \"replicate:0-7\"\nsharing = \"shared\"",
    );
    assert_eq!(p.regions[0].replicas.len(), 8);
}

#[test]
fn replicate_on_one_node_says_it_cannot_help() {
    let one = Topology::from_synthetic("numa:1 core:2 pu:1").unwrap();
    let p = plan(
        &one,
        "[threads]\ncount = 2\n[memory]\npolicy = \"replicate\"\nsharing = \"shared\"\nsize = \"1MiB\"",
    );
    assert_eq!(p.regions[0].replicas, [0]);
    assert!(p.threads.iter().all(|t| t.replica == Some(0)));
    let notes = inconclusive(&p);
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0], &Cause::OneCopy);
    assert!(
        !p.warnings.iter().any(|w| w.kind == WarningKind::Placement),
        "the pages are as asked: no placement warning"
    );
}

#[test]
fn replicate_per_node_regions_are_mirrored_and_say_so() {
    let p = plan(
        &two(),
        "[threads]\ncount = 4\n[memory]\npolicy = \"replicate\"\nsize = \"1MiB\"",
    );
    assert_eq!(p.regions.len(), 2);
    assert!(p.regions.iter().all(|r| r.replicas == [0, 1]));
    let notes = inconclusive(&p);
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0], &Cause::CopiesNeverRead);
}

#[test]
fn replicate_needs_a_full_copy_on_every_node() {
    let topo = two();
    let gib = 1u64 << 30;
    let free = |node: u32| {
        Some(NodeFree {
            free: if node == 0 { 2 * gib } else { gib / 2 },
            reclaimable: 0,
            huge_2m: 0,
        })
    };
    let fits = exp("[threads]\ncount = 2\n[memory]\nsize = \"256MiB\"\npolicy = \"replicate\"\nsharing = \"shared\"");
    assert!(Plan::resolve_with(&fits, &topo, &free).is_ok());
    // 1 GiB interleaved fits (512 MiB per node); mirrored it does not.
    let big = "[threads]\ncount = 2\n[memory]\nsize = \"1GiB\"\nsharing = \"shared\"\npolicy = ";
    assert!(Plan::resolve_with(&exp(&format!("{big}\"interleave\"")), &topo, &free).is_ok());
    let err = Plan::resolve_with(&exp(&format!("{big}\"replicate\"")), &topo, &free).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the plan needs 1024.0 MiB on node 1, which has 512.0 MiB free; lower memory.size or threads.count, or choose other nodes"
    );
}

#[test]
fn deck_experiment_2_plans_at_its_sizes_on_a_24_cpu_two_node_machine() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/deck-exp2-rwlock.toml");
    let exp = Experiment::from_file(&path).unwrap();
    let topo = Topology::from_synthetic("pack:2 numa:1 core:12 pu:1").unwrap();
    let cells = exp.cells().unwrap();
    assert_eq!(
        cells.len(),
        15,
        "threads 2-24 x replicate, interleave, local"
    );
    for (settings, cell) in &cells {
        let p = Plan::resolve(cell, &topo).unwrap_or_else(|e| panic!("{settings:?}: {e}"));
        assert_eq!(p.regions.len(), 1, "one shared table");
        let r = &p.regions[0];
        assert_eq!(r.bytes, 300 << 20);
        match &r.requested {
            PolicySpec::Replicate(None) => {
                assert_eq!(r.replicas, [0, 1], "a mirror on both nodes");
                for t in &p.threads {
                    assert_eq!(r.replicas[t.replica.unwrap()], t.node);
                }
            }
            PolicySpec::Kernel(text) if text == "interleave" => {
                assert_eq!(r.policy.to_string(), "interleave:0-1")
            }
            _ => assert_eq!(r.policy, MemPolicy::Bind(NodeSet::single(0))),
        }
        assert!(
            inconclusive(&p).is_empty(),
            "{settings:?}: {:?}",
            p.warnings
        );
    }
}

#[test]
fn every_policy_and_split_resolves_on_2_4_and_8_nodes() {
    let wide = |d: &str| Topology::from_synthetic(d).unwrap();
    for topo in [
        two(),
        wide("pack:2 numa:2 core:4 pu:1"),
        wide("pack:4 numa:2 core:4 pu:1"),
    ] {
        for placement in [
            "balanced",
            "ratio:3:1",
            "ratio:1:1",
            "nodes:0,1",
            "cpus:0-3",
        ] {
            for policy in [
                "local",
                "remote",
                "first-touch",
                "interleave",
                "interleave:0,1",
                "bind:1",
                "preferred:1",
                "weighted-interleave:0=2,1=1",
                "replicate",
                "replicate:0,1",
            ] {
                for sharing in ["shared", "per-node", "per-thread"] {
                    let text = format!("[threads]\ncount = 4\nplacement = \"{placement}\"\n[memory]\nsize = \"1MiB\"\npolicy = \"{policy}\"\nsharing = \"{sharing}\"");
                    let p = plan(&topo, &text);
                    assert_eq!(p.threads.len(), 4);
                    for t in &p.threads {
                        assert_eq!(topo.cpu(t.cpu).unwrap().node, Some(t.node), "{text}");
                        assert!(p.regions[t.region].threads.contains(&t.thread));
                        let replicas = &p.regions[t.region].replicas;
                        match t.replica {
                            Some(copy) => assert!(copy < replicas.len(), "{text}"),
                            None => assert!(replicas.is_empty(), "{text}"),
                        }
                    }
                    for r in &p.regions {
                        assert!(!r.expected_nodes.is_empty(), "{text}");
                        assert!(topo.check_memory_nodes(&r.expected_nodes).is_ok());
                    }
                }
            }
        }
    }
}
