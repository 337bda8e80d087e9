//! How short a measured run may be on this machine before the machine,
//! not the workload, decides its time: the **noise floor**, measured, and
//! the rule that lengthens runs shorter than it.
//!
//! Three things every timed run pays whatever it does, each measured on
//! the run's own CPUs just before it:
//!
//! - the **clock's step**: the smallest non-zero difference between two
//!   readings of the clock runs are timed with ([`Instant`]);
//! - an **empty run**: the run's threads released from their start gate
//!   and joined again with nothing to do (the median of
//!   [`EMPTY_RUNS`]), the engine's fixed cost per run;
//! - an **interruption**: the longest the calling thread is kept from
//!   running while it spins (timer ticks, interrupts, on a VM the host):
//!   the median, over [`WINDOWS`] windows of [`WINDOW`], of each window's
//!   longest gap between two clock readings. A window is longer than one
//!   tick at the common `HZ=250` (4 ms), so it sees one; the median keeps
//!   one rare hiccup of the host from setting the floor.
//!
//! A run must be long enough that none of them can move its time by more
//! than the spread numalab calls noisy ([`NOISY_CV`], 5%): at least 1000
//! clock steps (0.1%), 100 empty runs (1%) and 20 interruptions (one costs
//! at most 5%). The floor is the largest of the three. hyperfine applies
//! the same idea with a fixed threshold (a command under 5 ms is warned
//! about, as its timing cannot be calibrated more finely); numalab
//! measures the machine instead, since a VM's interruptions are ten times
//! a bare server's.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::stats::{self, NOISY_CV};
use crate::workers::{run_pinned, WorkerError};

/// Empty runs timed for the floor.
pub const EMPTY_RUNS: usize = 7;

/// Windows spun through to find the typical interruption.
pub const WINDOWS: usize = 4;

/// Length of one window.
pub const WINDOW: Duration = Duration::from_millis(5);

/// A lengthened run aims this far above the floor, so that a run a little
/// faster than the one that set its length still clears it.
pub const MARGIN: f64 = 1.5;

/// The shortest run this machine can time well, and what sets it.
///
/// ```
/// use numalab_bench::experiment::floor::NoiseFloor;
/// // A clock step of 20 ns, an empty run of 80 µs, interruptions of 400 µs.
/// let floor = NoiseFloor::from_parts(20e-9, 80e-6, 400e-6);
/// assert_eq!(floor.min_repeat_s, 20.0 * 400e-6); // the interruptions decide
/// assert_eq!(floor.set_by(), "interruptions");
/// // A run of 2 ms is 4× too short: lengthened ×6 (4 × 1.5, the margin).
/// assert_eq!(floor.lengthening(2e-3), Some(6));
/// assert_eq!(floor.lengthening(0.1), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    /// The clock's smallest step, seconds.
    pub timer_resolution_s: f64,
    /// Median time of an empty run on the run's CPUs (threads released
    /// and joined, no operation), seconds.
    pub empty_run_s: f64,
    /// Typical longest interruption of a spinning thread, seconds.
    pub interruption_s: f64,
    /// The shortest run none of these moves by more than 5%:
    /// max(1000 × step, 100 × empty run, 20 × interruption), seconds; or
    /// `run.min_time` where the experiment gives it.
    pub min_repeat_s: f64,
    /// Whether `min_repeat_s` is the experiment's `run.min_time` rather
    /// than the measured rule.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub given: bool,
}

impl NoiseFloor {
    /// The floor from its three parts.
    pub fn from_parts(timer_resolution_s: f64, empty_run_s: f64, interruption_s: f64) -> Self {
        let min_repeat_s = (1000.0 * timer_resolution_s)
            .max(100.0 * empty_run_s)
            .max(interruption_s / NOISY_CV);
        NoiseFloor {
            timer_resolution_s,
            empty_run_s,
            interruption_s,
            min_repeat_s,
            given: false,
        }
    }

    /// The floor with `run.min_time` in place of the measured rule, where
    /// the experiment gives one.
    pub fn or_given(self, min_time: Option<Duration>) -> Self {
        match min_time {
            Some(d) => NoiseFloor {
                min_repeat_s: d.as_secs_f64(),
                given: true,
                ..self
            },
            None => self,
        }
    }

    /// Measures the floor on `cpus` (one thread on each, as a run starts
    /// them): about 25 ms. Measured once per set of CPUs in a process and
    /// then reused, so a sweep of many cells pays it once per thread
    /// layout.
    pub fn on_cpus(cpus: &[u32]) -> Result<NoiseFloor, WorkerError> {
        static MEASURED: OnceLock<Mutex<HashMap<Vec<u32>, NoiseFloor>>> = OnceLock::new();
        let cache = MEASURED.get_or_init(Mutex::default);
        if let Some(floor) = cache.lock().ok().and_then(|c| c.get(cpus).copied()) {
            return Ok(floor);
        }
        let floor = Self::measure(cpus)?;
        if let Ok(mut c) = cache.lock() {
            c.insert(cpus.to_vec(), floor);
        }
        Ok(floor)
    }

    /// Measures the floor on `cpus`, without the cache.
    pub fn measure(cpus: &[u32]) -> Result<NoiseFloor, WorkerError> {
        let mut empty = Vec::with_capacity(EMPTY_RUNS);
        for _ in 0..EMPTY_RUNS {
            let run = run_pinned(cpus, |_| (), |_, _: &mut ()| ())?;
            empty.push(run.wall.as_secs_f64());
        }
        let empty_run_s = stats::quantile(&empty, 0.5).unwrap_or(0.0);
        let (step, interruption) = spin_windows();
        Ok(Self::from_parts(step, empty_run_s, interruption))
    }

    /// Which of the three sets the floor: "the clock's step", "empty
    /// runs" or "interruptions".
    pub fn set_by(&self) -> &'static str {
        if self.given {
            "run.min_time"
        } else if self.min_repeat_s == self.interruption_s / NOISY_CV {
            "interruptions"
        } else if self.min_repeat_s == 100.0 * self.empty_run_s {
            "empty runs"
        } else {
            "the clock's step"
        }
    }

    /// By how many times a run that took `measured_s` must be lengthened
    /// to clear the floor with [`MARGIN`]; `None` when it already clears
    /// it (or took no time at all, which says nothing).
    pub fn lengthening(&self, measured_s: f64) -> Option<u64> {
        if measured_s.is_nan() || measured_s <= 0.0 || measured_s >= self.min_repeat_s {
            return None;
        }
        Some((MARGIN * self.min_repeat_s / measured_s).ceil() as u64)
    }

    /// The floor's parts, for a warning: "12.0 ms (set by
    /// interruptions: clock step 20 ns, empty run 95 µs, interruptions
    /// of 600 µs)".
    pub fn describe(&self) -> String {
        if self.given {
            return format!("{} (run.min_time)", seconds(self.min_repeat_s));
        }
        format!(
            "{} (set by {}: clock step {}, empty run {}, interruptions of {})",
            seconds(self.min_repeat_s),
            self.set_by(),
            seconds(self.timer_resolution_s),
            seconds(self.empty_run_s),
            seconds(self.interruption_s)
        )
    }
}

/// Spins through [`WINDOWS`] windows reading the clock: the smallest
/// non-zero step seen, and the median of the windows' longest gaps.
fn spin_windows() -> (f64, f64) {
    let mut step = f64::INFINITY;
    let mut longest = Vec::with_capacity(WINDOWS);
    for _ in 0..WINDOWS {
        let start = Instant::now();
        let mut last = start;
        let mut gap = Duration::ZERO;
        while last - start < WINDOW {
            let now = Instant::now();
            let d = now - last;
            if !d.is_zero() {
                step = step.min(d.as_secs_f64());
                gap = gap.max(d);
            }
            last = now;
        }
        longest.push(gap.as_secs_f64());
    }
    let step = if step.is_finite() { step } else { 1e-9 };
    (step, stats::quantile(&longest, 0.5).unwrap_or(0.0))
}

/// A duration in seconds as people read it: 12.0 ms, 95 µs, 20 ns.
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.0} µs", s * 1e6)
    } else {
        format!("{:.0} ns", s * 1e9)
    }
}

/// How a run's operations were lengthened to clear the noise floor.
///
/// ```
/// use numalab_bench::experiment::floor::{Lengthened, NoiseFloor};
/// let floor = NoiseFloor::from_parts(20e-9, 80e-6, 400e-6);
/// let l = Lengthened::new(floor, 2e-3, 10_000_000, 6);
/// assert_eq!(l.to_ops, 60_000_000);
/// assert!(l.message().contains("×6"), "{}", l.message());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lengthened {
    /// The floor that had to be cleared.
    pub floor: NoiseFloor,
    /// How long the run that decided it took, seconds.
    pub measured_s: f64,
    /// Operations of a run before (all threads).
    pub from_ops: u64,
    /// Operations of a run after.
    pub to_ops: u64,
    /// The factor.
    pub factor: u64,
}

impl Lengthened {
    /// `from_ops` made `factor` times longer.
    pub fn new(floor: NoiseFloor, measured_s: f64, from_ops: u64, factor: u64) -> Self {
        Lengthened {
            floor,
            measured_s,
            from_ops,
            to_ops: from_ops.saturating_mul(factor),
            factor,
        }
    }

    /// What a user reads.
    pub fn message(&self) -> String {
        format!(
            "runs lengthened ×{} ({} → {} operations): a run took {}, under this machine's noise floor of {}; set access.ops to keep the count you want",
            self.factor,
            self.from_ops,
            self.to_ops,
            seconds(self.measured_s),
            self.floor.describe()
        )
    }
}

/// What a user reads when runs stay shorter than the floor: `None` when
/// they are long enough. `key` is what to raise (`access.ops` or
/// `access.duration`); `given` whether the user set it (numalab sizes
/// runs itself only when neither is given).
pub fn short_runs(floor: &NoiseFloor, median_s: f64, key: &str, given: bool) -> Option<String> {
    (median_s > 0.0 && median_s < floor.min_repeat_s).then(|| {
        format!(
            "runs took {} (median), under this machine's noise floor of {}: the machine, not the workload, moves such times; raise {key}{}",
            seconds(median_s),
            floor.describe(),
            if given {
                " (or leave it out and numalab sizes runs itself)"
            } else {
                ""
            }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_part_sets_the_floor() {
        let clock = NoiseFloor::from_parts(1e-5, 1e-6, 1e-5);
        assert_eq!(
            (clock.min_repeat_s, clock.set_by()),
            (1e-2, "the clock's step")
        );
        let empty = NoiseFloor::from_parts(1e-9, 3e-4, 1e-4);
        assert!((empty.min_repeat_s - 0.03).abs() < 1e-12);
        assert_eq!(empty.set_by(), "empty runs");
        let ticks = NoiseFloor::from_parts(1e-9, 1e-5, 4e-3);
        assert!((ticks.min_repeat_s - 0.08).abs() < 1e-12);
        assert_eq!(ticks.set_by(), "interruptions");
    }

    #[test]
    fn a_given_min_time_replaces_the_rule() {
        let measured = NoiseFloor::from_parts(1e-9, 1e-5, 5e-4);
        assert_eq!(measured.or_given(None), measured);
        let given = measured.or_given(Some(Duration::from_millis(250)));
        assert_eq!((given.min_repeat_s, given.set_by()), (0.25, "run.min_time"));
        assert_eq!(given.describe(), "250.0 ms (run.min_time)");
        assert_eq!(given.lengthening(0.1), Some(4));
        let off = measured.or_given(Some(Duration::ZERO));
        assert_eq!(off.lengthening(1e-9), None);
        assert_eq!(short_runs(&off, 1e-9, "access.ops", true), None);
    }

    #[test]
    fn only_runs_under_the_floor_are_lengthened_and_past_it_with_margin() {
        let floor = NoiseFloor::from_parts(1e-9, 1e-5, 5e-4); // 10 ms
        assert_eq!(floor.lengthening(0.010), None);
        assert_eq!(floor.lengthening(0.5), None);
        assert_eq!(floor.lengthening(0.0), None);
        assert_eq!(floor.lengthening(f64::NAN), None);
        for measured in [1e-6, 1e-4, 1e-3, 0.004, 0.0099] {
            let factor = floor.lengthening(measured).unwrap();
            let after = measured * factor as f64;
            assert!(
                after >= MARGIN * floor.min_repeat_s - 1e-12,
                "{measured}: ×{factor}"
            );
            assert!(
                after < MARGIN * floor.min_repeat_s + measured,
                "{measured}: ×{factor}"
            );
        }
    }

    #[test]
    fn short_runs_are_named_with_what_to_change() {
        let floor = NoiseFloor::from_parts(2e-8, 1e-4, 6e-4);
        let text = short_runs(&floor, 0.002, "access.ops", true).unwrap();
        assert!(text.contains("2.0 ms"), "{text}");
        assert!(text.contains("12.0 ms (set by interruptions"), "{text}");
        assert!(text.contains("raise access.ops (or leave it out"), "{text}");
        let sized = short_runs(&floor, 0.002, "access.ops", false).unwrap();
        assert!(sized.ends_with("raise access.ops"), "{sized}");
        assert_eq!(short_runs(&floor, 0.5, "access.ops", true), None);
    }

    /// Measured here: every part positive, the floor the largest rule's,
    /// and a millisecond-scale figure (a VM's ticks and interruptions are
    /// micro- to milliseconds; a floor of seconds would make every
    /// experiment crawl).
    #[test]
    fn the_floor_of_this_machine_is_measured() {
        let cpus: Vec<u32> = numalab::affinity::thread_cpus()
            .map(|c| c.iter().take(2).collect())
            .unwrap_or_else(|_| vec![0]);
        let floor = NoiseFloor::measure(&cpus).unwrap();
        assert!(floor.timer_resolution_s > 0.0, "{floor:?}");
        assert!(floor.empty_run_s > 0.0, "{floor:?}");
        assert!(
            floor.interruption_s >= floor.timer_resolution_s,
            "{floor:?}"
        );
        let rules = [
            1000.0 * floor.timer_resolution_s,
            100.0 * floor.empty_run_s,
            20.0 * floor.interruption_s,
        ];
        // 20 × and ÷ 0.05 may differ in the last bit.
        let largest = rules.into_iter().fold(0.0, f64::max);
        assert!(
            (floor.min_repeat_s - largest).abs() <= 1e-12 * largest,
            "{floor:?}"
        );
        eprintln!("noise floor here: {}", floor.describe());
    }
}
