//! Benchmarks of the experiment engine against references measured in
//! the same run (never a timed test). Driven by `bench/engine.sh`, which
//! adds the likwid-bench comparisons; run alone with
//!
//! ```text
//! cargo bench -p numalab-bench --bench engine -- llc
//! cargo bench -p numalab-bench --bench engine -- random [THREADS] [BYTES_PER_THREAD] [OPS_PER_THREAD] [ROUNDS] [KEY=VALUE...]
//! ```
//!
//! `llc` measures the *effective* last-level cache: pointer-chase latency
//! (a random single cycle of cache lines) from 256 KiB to 1 GiB; the
//! effective size is the largest whose latency is below the geometric
//! mean of the cached and the DRAM latency. It prints the curve, then
//! `effective_llc_bytes N`.
//!
//! `random` compares the engine's random 64-byte reads (`numalab run`'s
//! code path: experiment → plan → pinned workers, sampling, chunking,
//! counters) with a minimal hand-written loop using the same generator,
//! on the same memory sizes, placement and thread count, alternating
//! which goes first; it prints Mops/s of each round and
//! `ratio_random_reads R` (engine over loop, the median of the rounds'
//! ratios).

use std::time::Instant;

use numalab::{BufferOptions, HugePages, MemPolicy, NodeBuffer, NodeSet, Topology};
use numalab_bench::control::Control;
use numalab_bench::experiment::{run, Experiment};
use numalab_bench::kernels::{build_chase, chase, Rng};
use numalab_bench::stats::quantile;
use numalab_bench::workers::run_pinned;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.first().map(String::as_str) {
        Some("llc") => llc(),
        Some("random") => random(&args[1..]),
        _ => {
            eprintln!("usage: engine llc | engine random [THREADS] [BYTES_PER_THREAD] [OPS_PER_THREAD] [ROUNDS]");
            llc();
            random(&[]);
        }
    }
}

/// Chase latency in ns over `bytes`.
fn chase_latency(bytes: usize) -> f64 {
    let options = BufferOptions::new(MemPolicy::Local).huge_pages(HugePages::Transparent);
    let mut buffer = NodeBuffer::with_options(bytes, options).expect("buffer for the chase");
    let start = build_chase(buffer.as_mut_slice(), 64, &mut Rng::new(11));
    let lines = (bytes / 64) as u64;
    let steps = 4_000_000u64;
    // SAFETY: the chain was just laid in `buffer`, which lives until the
    // end of this function and is not modified meanwhile.
    let warm = unsafe { chase(start, lines.min(1_000_000)) };
    let t = Instant::now();
    // SAFETY: as above.
    let end = unsafe { chase(warm, steps) };
    let ns = t.elapsed().as_nanos() as f64 / steps as f64;
    std::hint::black_box(end);
    ns
}

fn llc() {
    let sizes: Vec<usize> = (18..=30).map(|shift| 1usize << shift).collect();
    println!("pointer-chase latency (one thread, THP, random single cycle of 64-byte lines):");
    let mut curve = Vec::new();
    for &size in &sizes {
        let ns = chase_latency(size);
        println!("  {:>10} KiB  {ns:>7.1} ns", size >> 10);
        curve.push((size, ns));
    }
    let cached = curve.iter().map(|c| c.1).fold(f64::MAX, f64::min);
    let dram = curve.last().map_or(cached, |c| c.1);
    // Latencies span two orders of magnitude: the midpoint on a log
    // scale (geometric mean) marks where most accesses leave the caches.
    let midpoint = (cached * dram).sqrt();
    let effective = curve
        .iter()
        .filter(|(_, ns)| *ns < midpoint)
        .map(|(size, _)| *size)
        .max()
        .unwrap_or(0);
    println!("cached {cached:.1} ns, DRAM {dram:.1} ns, geometric midpoint {midpoint:.1} ns");
    println!("effective_llc_bytes {effective}");
}

fn random(args: &[String]) {
    let cpus = numalab::affinity::thread_cpus().map_or(1, |c| c.len());
    let threads: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(cpus.min(2));
    let bytes: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1 << 30);
    let ops: u64 = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    let topology = Topology::system().expect("topology");
    let exp = Experiment::from_toml_str(
        &format!(
            "name = \"bench-random-64\"\n\
             [threads]\ncount = {threads}\n\
             [memory]\nsize = {bytes}\nsharing = \"per-thread\"\npolicy = \"local\"\nhuge_pages = \"none\"\n\
             [access]\npattern = \"random\"\nop_size = 64\nops = {}\n\
             [run]\nrepeats = 1\nwarmup = 0\n",
            ops * threads as u64
        ),
        "bench",
    )
    .expect("experiment");
    // Further arguments override keys, to see what costs what
    // (e.g. access.latency_sample=0 run.counters=false).
    let sets: Vec<String> = args.iter().skip(4).cloned().collect();
    let exp = exp.with_overrides(&sets).expect("overrides");
    let plan = numalab_bench::experiment::Plan::resolve(&exp, &topology).expect("plan");
    let cpus: Vec<u32> = plan.cpus();
    let nodes: Vec<u32> = plan.threads.iter().map(|t| t.node).collect();
    println!(
        "random 64-byte reads: {} on CPUs {cpus:?}, {} MiB each, {ops} ops each, base pages",
        numalab::units::count(threads, "thread"),
        bytes >> 20
    );
    let (mut reference, mut engine, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so a machine that gets busier or
        // quieter during the run favours neither.
        let engine_run = || {
            run(&exp, &topology, &Control::default())
                .expect("engine run")
                .repeats[0]
                .mops_per_s
        };
        let (r, e) = if round % 2 == 0 {
            let r = reference_loop(&cpus, &nodes, bytes, ops);
            (r, engine_run())
        } else {
            let e = engine_run();
            (reference_loop(&cpus, &nodes, bytes, ops), e)
        };
        println!(
            "  round {round}: loop {r:>7.2} Mops/s   engine {e:>7.2} Mops/s   ({:.3})",
            e / r
        );
        reference.push(r);
        engine.push(e);
        ratios.push(e / r);
    }
    let (r, e) = (
        quantile(&reference, 0.5).unwrap_or(0.0),
        quantile(&engine, 0.5).unwrap_or(0.0),
    );
    println!("median: loop {r:.2} Mops/s, engine {e:.2} Mops/s");
    // Each round's two runs are neighbours in time: their ratio cancels
    // most of a busy machine's drift.
    println!(
        "ratio_random_reads {:.3}",
        quantile(&ratios, 0.5).unwrap_or(0.0)
    );
}

/// The minimal loop: same generator, same offsets, plain loads, each
/// thread pinned with its own prefaulted region on its node.
fn reference_loop(cpus: &[u32], nodes: &[u32], bytes: usize, ops: u64) -> f64 {
    let run = run_pinned(
        cpus,
        |i| {
            NodeBuffer::with_options(
                bytes,
                BufferOptions::new(MemPolicy::Bind(NodeSet::single(nodes[i]))),
            )
            .expect("reference buffer")
        },
        |i, buffer| {
            let buf = buffer.as_slice();
            let slots = (buf.len() / 64) as u64;
            let mut rng = Rng::new(1 + i as u64);
            let mut sum = 0u64;
            for _ in 0..ops {
                let offset = rng.below(slots) as usize * 64;
                for word in buf[offset..offset + 64].chunks_exact(8) {
                    sum ^= u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
                }
            }
            std::hint::black_box(sum)
        },
    )
    .expect("pinned reference");
    (ops as f64 * cpus.len() as f64) / run.wall.as_secs_f64() / 1e6
}
