//! Does a sweep still find differences that are really there? The other
//! half of `bench/sweep-noise.sh` (which checks that identical memories
//! are called "≈"): two sweeps whose cells truly differ on any machine,
//! one node or many, each run N times, counting how often the interval
//! the sweep itself reports (its `differences`: the second value of the
//! swept axis against the first, at 95%) clears zero in the expected
//! direction.
//!
//! - **huge pages**: random 64-byte reads over 1 GiB, one thread, 4 KiB
//!   pages against transparent huge pages (`memory.huge_pages` none vs
//!   thp): every read past the TLB's reach walks the page table, less so
//!   with 2 MiB pages. Expected: thp faster.
//! - **threads**: sequential reads of a shared 256 MiB, 1 against 2
//!   threads on two CPUs with the same total work (4 GiB read). Expected:
//!   2 threads take less time.
//!
//! Each sweep has numalab's default five repeats per cell, interleaved,
//! looking again after every five up to `run.max_repeats` (20 here, four
//! looks; `max-repeats=5` for one look, as a sweep does by default), and
//! runs of about a second: on the VMs numalab is developed on the
//! host now and then takes a vCPU away for tens of milliseconds, which
//! shorter runs cannot average out (with runs of 0.15 s, one repeat in
//! ten ran 20–80% slow, and even ten repeats found the huge-page
//! difference in only 15 of 20 sweeps; AMD EPYC VM, Zen 4, 2026-11-24).
//! Target: each found significant, in the right direction, in at least 19
//! of 20 sweeps. A benchmark, not a test (it takes a minute or two and
//! needs a quiet machine):
//!
//! ```text
//! cargo bench -p numalab-bench --bench differences [-- SWEEPS] [huge-pages | threads] [max-repeats=N]
//! ```

use numalab::Topology;
use numalab_bench::control::Control;
use numalab_bench::experiment::{run_sweep, Experiment, SweepReport};
use numalab_bench::stats::{Difference, Verdict};

/// 4 KiB pages against huge pages for random reads over 1 GiB.
const HUGE_PAGES: &str = r#"
name = "differences-huge-pages"
[threads]
count = 1
[memory]
size = "1GiB"
policy = "local"
[access]
pattern = "random"
op_size = 64
read_write = "1:0"
ops = 40_000_000
[run]
warmup = 1
counters = false
[sweep]
"memory.huge_pages" = ["none", "thp"]
"#;

/// One thread against two, the same sequential reads split between them.
const THREADS: &str = r#"
name = "differences-threads"
[threads]
placement = "balanced"
[memory]
size = "256MiB"
policy = "local"
sharing = "shared"
[access]
pattern = "sequential"
op_size = 64
read_write = "1:0"
ops = 64_000_000
[run]
warmup = 1
counters = false
[sweep]
"threads.count" = [1, 2]
"#;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let sweeps: u32 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20);
    let most: u32 = args
        .iter()
        .find_map(|a| a.strip_prefix("max-repeats=")?.parse().ok())
        .unwrap_or(20);
    // Either check alone: `huge-pages` or `threads`.
    let wanted = |name: &str| {
        !args
            .iter()
            .any(|a| a.parse::<u32>().is_err() && !a.starts_with("max-repeats=") && a != name)
    };
    let topology = Topology::system().expect("this machine's topology");
    let cpus = numalab::affinity::thread_cpus().map_or(1, |c| c.len());
    println!("# Real differences found by a sweep's 95% interval, {sweeps} sweeps each, up to {most} repeats per cell");
    println!();
    if wanted("huge-pages") {
        check(
            &topology,
            sweeps,
            "4 KiB pages vs transparent huge pages, random 64-byte reads over 1 GiB",
            HUGE_PAGES,
            most,
            Verdict::Lower,
        );
    }
    if !wanted("threads") {
        return;
    }
    if cpus < 2 {
        println!(
            "threads: skipped, this process may use {cpus} CPU; 1 against 2 threads needs two"
        );
        return;
    }
    check(
        &topology,
        sweeps,
        "1 vs 2 threads, sequential reads of 256 MiB",
        THREADS,
        most,
        Verdict::Lower,
    );
}

/// Runs `text`'s two-cell sweep `sweeps` times; prints each sweep's
/// difference of the second cell from the first, and the rate at which
/// it came out `expected`.
fn check(topology: &Topology, sweeps: u32, what: &str, text: &str, most: u32, expected: Verdict) {
    let mut exp =
        Experiment::from_toml_str(text, "differences.rs").expect("the benchmark's experiment");
    exp.run.max_repeats = Some(most);
    println!("## {what}");
    let mut found = 0;
    let mut relative = Vec::new();
    for i in 1..=sweeps {
        let mut one = exp.clone();
        one.access.seed = u64::from(i);
        let result = run_sweep(&one, topology, &Control::default()).expect("the sweep runs");
        let Some(d) = second_against_first(&result) else {
            println!("sweep {i:2}: a cell has fewer than two repeats");
            continue;
        };
        if d.verdict == expected {
            found += 1;
        }
        relative.push(d.relative);
        let repeats = result.looks.map_or(5, |l| l.taken * l.every);
        println!(
            "sweep {i:2}: {:+.1}% [{:+.1}, {:+.1}] {:?} after {repeats} repeats",
            100.0 * d.relative,
            100.0 * d.low,
            100.0 * d.high,
            d.verdict
        );
    }
    relative.sort_by(f64::total_cmp);
    let median = relative
        .get(relative.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    let verdict = if found * 20 >= sweeps * 19 {
        "met"
    } else {
        "missed"
    };
    println!(
        "{what}: found in {found} of {sweeps} sweeps (median difference {:+.1}%)",
        100.0 * median
    );
    println!("TARGET\t{what}: found significant, up to {most} repeats per cell\t{found} of {sweeps} sweeps (median {:+.1}%)\t>= 19 of 20\t{verdict}", 100.0 * median);
    println!();
}

/// The second cell's time against the first's, as the sweep reported it.
fn second_against_first(result: &SweepReport) -> Option<Difference> {
    result.differences.first()?.difference.clone()
}
