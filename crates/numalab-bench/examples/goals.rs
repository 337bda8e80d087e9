//! The verdicts of `bash bench/all.sh`: reads every look's log in a
//! directory (`NAME.look1.log`, `NAME.look2.log`, … — NAME the benchmark)
//! and judges each target's goal at 95% over the looks taken
//! ([`numalab_bench::goals`]).
//!
//! ```sh
//! cargo run -q -p numalab-bench --example goals -- --looks 4 target/bench-all
//! # | ring copy / C fork-and-spin ring | 64 KiB 1.02 (0.99–1.05), … | >= 1 | 9 | level |
//! cargo run -q -p numalab-bench --example goals -- --looks 4 --open target/bench-all
//! # ring          (the benchmarks with a cell still straddling its goal)
//! ```
//!
//! Exits 2 on a log it cannot read or a round without a goal.

use std::io::Read;
use std::path::Path;

use numalab_bench::goals::Board;

/// The largest log read: a benchmark's output is kilobytes.
const MAX_LOG: u64 = 64 << 20;

fn fail(message: &str) -> ! {
    eprintln!("goals: {message}");
    std::process::exit(2);
}

/// `ring.look2.log` → `("ring", 2)`.
fn bench_and_look(name: &str) -> Option<(&str, u32)> {
    let stem = name.strip_suffix(".log")?;
    let (bench, look) = stem.rsplit_once(".look")?;
    let look: u32 = look.parse().ok()?;
    (!bench.is_empty() && look >= 1).then_some((bench, look))
}

fn read_log(path: &Path) -> String {
    let file =
        std::fs::File::open(path).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    let mut text = String::new();
    file.take(MAX_LOG + 1)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    if text.len() as u64 > MAX_LOG {
        fail(&format!(
            "{}: larger than {} MiB",
            path.display(),
            MAX_LOG >> 20
        ));
    }
    text
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: goals --looks N [--open] DIR";
    let (mut looks, mut open, mut dir) = (None, false, None);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--looks" => {
                let n = rest.next().unwrap_or_else(|| fail(usage));
                looks = Some(
                    n.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=numalab_bench::stats::MAX_LOOKS).contains(n))
                        .unwrap_or_else(|| {
                            fail(&format!(
                                "--looks {n}: expected 1 to {}",
                                numalab_bench::stats::MAX_LOOKS
                            ))
                        }),
                );
            }
            "--open" => open = true,
            _ if dir.is_none() && !arg.starts_with('-') => dir = Some(arg.clone()),
            _ => fail(usage),
        }
    }
    let (Some(looks), Some(dir)) = (looks, dir) else {
        fail(usage)
    };
    let mut logs: Vec<(String, u32, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| fail(&format!("{dir}: {e}")))
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().into_string().ok()?;
            let (bench, look) = bench_and_look(&name)?;
            Some((bench.to_owned(), look, entry.path()))
        })
        .collect();
    // Look 1 of every benchmark before any look 2: the table's rows keep
    // the order the benchmarks first printed them in.
    logs.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let mut board = Board::default();
    for (bench, look, path) in &logs {
        board
            .read(bench, *look, &read_log(path))
            .unwrap_or_else(|e| fail(&e));
    }
    let orphans = board.without_goals();
    if !orphans.is_empty() {
        fail(&format!("rounds without a goal: {}", orphans.join(", ")));
    }
    if open {
        for bench in board.open(looks, 0.95) {
            println!("{bench}");
        }
        return;
    }
    for row in board.judge(looks, 0.95) {
        println!(
            "| {} | {} | {} | {} | {} |",
            row.target,
            row.figures(),
            row.goals(),
            row.rounds(),
            row.verdict()
        );
    }
}
