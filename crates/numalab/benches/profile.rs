//! How many processes `numalab profile` can sample a second: the issue's
//! target is 1,000 processes' `numa_maps` per second on the development
//! machine.
//!
//! Starts N processes (`sleep`, a dynamically linked program with the
//! usual few dozen mappings), then times, in alternating rounds:
//!
//! - `profile::sample` over all of them: what one profile sample reads per
//!   process (`numa_maps` parsed into memory per node and kind,
//!   `smaps_rollup` for transparent huge pages, `stat`, and each thread's
//!   `stat` and `sched`);
//! - the reference: reading the same files' bytes with `std::fs::read`
//!   and nothing else — the kernel's cost of producing them, which no
//!   reader can avoid.
//!
//! Prints the processes per second of each (median of the rounds) and
//! their ratio. A process that exits meanwhile would be left out of both.
//!
//! ```sh
//! cargo bench -p numalab --bench profile              # 1,000 processes, 7 rounds
//! cargo bench -p numalab --bench profile -- 200 5     # 200 processes, 5 rounds
//! ```

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use numalab::profile::{sample, CpuNodes};

/// The processes sampled, killed when dropped.
struct Sleepers(Vec<Child>);

impl Sleepers {
    fn start(count: usize) -> Sleepers {
        let children = (0..count)
            .map(|_| {
                Command::new("sleep")
                    .arg("600")
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("sleep starts")
            })
            .collect();
        Sleepers(children)
    }

    fn pids(&self) -> Vec<i32> {
        self.0.iter().map(|c| c.id() as i32).collect()
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

/// The files `sample` reads for `pid`, read raw; returns the bytes read.
fn read_raw(pid: i32) -> usize {
    let mut bytes = 0;
    for file in ["numa_maps", "smaps_rollup", "stat"] {
        bytes += std::fs::read(format!("/proc/{pid}/{file}")).map_or(0, |b| b.len());
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let dir = task.path();
            for file in ["stat", "sched"] {
                bytes += std::fs::read(dir.join(file)).map_or(0, |b| b.len());
            }
        }
    }
    bytes
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let count: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    let sleepers = Sleepers::start(count);
    // Let every child reach sleep's own code (its mappings as they stay).
    std::thread::sleep(Duration::from_millis(500));
    let pids = sleepers.pids();
    let nodes = CpuNodes::live();
    let start = Instant::now();
    let (mut sampled, mut raw, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let time_sample = || {
            let began = Instant::now();
            let now = sample(&pids, &nodes, start);
            assert_eq!(now.processes as usize, count, "a sleeper exited");
            count as f64 / began.elapsed().as_secs_f64()
        };
        let time_raw = || {
            let began = Instant::now();
            let bytes: usize = pids.iter().map(|&pid| read_raw(pid)).sum();
            assert!(bytes > 0);
            count as f64 / began.elapsed().as_secs_f64()
        };
        let (s, r) = if round % 2 == 0 {
            let s = time_sample();
            (s, time_raw())
        } else {
            let r = time_raw();
            (time_sample(), r)
        };
        println!(
            "round {}: sample {s:.0} processes/s, raw read {r:.0} processes/s",
            round + 1
        );
        sampled.push(s);
        raw.push(r);
        ratios.push(s / r);
    }
    let rate = median(sampled.clone());
    println!(
        "median: {rate:.0} processes/s sampled, raw read of the same files {:.0}/s, ratio {:.3}",
        median(raw),
        median(ratios)
    );
    // For bench/all.sh: the goal and every round's rate.
    let target = format!("processes profile::sample reads a second, {count} processes");
    println!("GOAL\t{target}\t\t>= 1000");
    for s in sampled {
        println!("ROUND\t{target}\t\t{s:.0}");
    }
}
