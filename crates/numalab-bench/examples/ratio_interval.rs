//! The ratio of two sets of timings' geometric means, `A / B`, with its
//! 95% interval: [`numalab_bench::stats::difference`] (Welch's t on the
//! logarithms) for shell benchmarks, so they judge noise as `numalab
//! sweep` does instead of each carrying its own statistics.
//!
//! ```sh
//! cargo run -q -p numalab-bench --example ratio_interval -- "2.51 2.44 2.56" "2.53 2.49 2.60"
//! # 0.987 to 1.020
//! ```
//!
//! A ratio above 1 means the B timings were the shorter. Prints `n/a`
//! when either side has fewer than two timings.

use numalab_bench::stats::difference;

fn numbers(text: &str) -> Vec<f64> {
    text.split_whitespace()
        .map(|word| {
            word.parse()
                .unwrap_or_else(|_| panic!("ratio_interval: {word:?} is not a number"))
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [a, b] = args.as_slice() else {
        eprintln!("usage: ratio_interval \"A TIMINGS…\" \"B TIMINGS…\"");
        std::process::exit(2);
    };
    // `difference` says how B's geometric mean differs from A's: B/A - 1.
    match difference(&numbers(a), &numbers(b), 0.95) {
        Some(d) => println!("{:.3} to {:.3}", 1.0 / (1.0 + d.high), 1.0 / (1.0 + d.low)),
        None => println!("n/a"),
    }
}
