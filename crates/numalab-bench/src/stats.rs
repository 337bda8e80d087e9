//! Statistics of repeated measurements.
//!
//! A figure numalab reports is the **median** of its repeats (robust to the
//! odd slow run a busy machine produces), with min, max and the coefficient
//! of variation beside it; every raw sample is kept in the result so the
//! figure can be checked. A spread above [`NOISY_CV`] marks the figure as
//! noisy. Outliers are flagged, never dropped, with the modified z-score
//! of Iglewicz and Hoaglin (1993): `0.6745 (x - median) / MAD` beyond 3.5,
//! the rule hyperfine uses too.

use serde::{Deserialize, Serialize};

/// Coefficient of variation above which a figure is reported as noisy.
pub const NOISY_CV: f64 = 0.05;

/// Modified z-score beyond which a sample is an outlier.
pub const OUTLIER_Z: f64 = 3.5;

/// Summary of the samples of one figure.
///
/// ```
/// use numalab_bench::stats::Summary;
/// // Five repeats of a bandwidth in GB/s; something disturbed the last.
/// let summary = Summary::of(&[10.1, 10.0, 9.9, 10.2, 4.0]).unwrap();
/// assert_eq!(summary.median, 10.0); // the figure reported
/// assert_eq!((summary.min, summary.max), (4.0, 10.2));
/// assert_eq!(summary.outliers, [4]); // flagged, and still counted
/// assert!(summary.is_noisy());
/// assert!(Summary::of(&[]).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (0 for one sample).
    pub stddev: f64,
    /// Coefficient of variation: stddev / mean (0 when the mean is 0).
    pub cv: f64,
    /// Indices of samples whose modified z-score exceeds [`OUTLIER_Z`].
    pub outliers: Vec<usize>,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none (or any is NaN).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
            return None;
        }
        let n = samples.len();
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = median_of_sorted(&sorted);
        let mean = samples.iter().sum::<f64>() / n as f64;
        let stddev = if n > 1 {
            (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let mut deviations: Vec<f64> = samples.iter().map(|x| (x - median).abs()).collect();
        deviations.sort_by(f64::total_cmp);
        let mad = median_of_sorted(&deviations);
        let outliers = if mad > 0.0 {
            samples
                .iter()
                .enumerate()
                .filter(|(_, x)| (0.6745 * (*x - median) / mad).abs() > OUTLIER_Z)
                .map(|(i, _)| i)
                .collect()
        } else {
            Vec::new()
        };
        Some(Summary {
            n,
            median,
            min: sorted[0],
            max: sorted[n - 1],
            mean,
            stddev,
            cv: if mean != 0.0 {
                stddev / mean.abs()
            } else {
                0.0
            },
            outliers,
        })
    }

    /// Whether the spread says the machine was noisy.
    pub fn is_noisy(&self) -> bool {
        self.cv > NOISY_CV
    }

    /// Whether the spread is more than its number of samples can show by
    /// chance on a machine whose figures vary by [`NOISY_CV`]: its CV
    /// above [`noisy_cv_for`]`(n)`. Three samples of a quiet machine show
    /// a CV past 5% often, by chance alone; past 8.6% one time in twenty.
    ///
    /// ```
    /// use numalab_bench::stats::Summary;
    /// // A CV of about 6.5% over three samples: within chance.
    /// let three = Summary::of(&[100.0, 106.0, 93.0]).unwrap();
    /// assert!(three.is_noisy() && !three.is_noisy_for_its_samples());
    /// // A CV of about 20%: beyond it.
    /// assert!(Summary::of(&[100.0, 125.0, 85.0]).unwrap().is_noisy_for_its_samples());
    /// ```
    pub fn is_noisy_for_its_samples(&self) -> bool {
        self.cv > noisy_cv_for(self.n)
    }
}

/// The CV that `n` samples exceed one time in twenty when the spread
/// behind them is [`NOISY_CV`]: the chi-square test of a variance,
/// `(n − 1) s² / σ² ≤ χ²₀.₉₅(n − 1)`, its quantile by Wilson and Hilferty's
/// approximation (within 2.5% of the exact one from one degree of
/// freedom up). Infinite for fewer than two samples, which have no
/// spread to judge.
///
/// ```
/// use numalab_bench::stats::noisy_cv_for;
/// assert!((noisy_cv_for(3) - 0.0862).abs() < 0.001, "{}", noisy_cv_for(3));
/// assert!((noisy_cv_for(5) - 0.0770).abs() < 0.001, "{}", noisy_cv_for(5));
/// assert!(noisy_cv_for(1000) < 0.0520);
/// assert_eq!(noisy_cv_for(1), f64::INFINITY);
/// ```
pub fn noisy_cv_for(n: usize) -> f64 {
    if n < 2 {
        return f64::INFINITY;
    }
    /// The standard normal's 95th percentile.
    const Z95: f64 = 1.644_853_6;
    let k = (n - 1) as f64;
    let a = 2.0 / (9.0 * k);
    let chi2 = k * (1.0 - a + Z95 * a.sqrt()).powi(3);
    NOISY_CV * (chi2 / k).sqrt()
}

fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The `q`-quantile (0 to 1) of `samples` by linear interpolation between
/// order statistics; `None` when empty.
pub fn quantile(samples: &[f64], q: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// How a figure's samples differ from a baseline's: the relative
/// difference of their geometric means with a confidence interval, and
/// whether the interval says which is larger.
///
/// The method is Welch's t-interval (Welch 1947, "The generalization of
/// 'Student's' problem when several different population variances are
/// involved") on the logarithms of the samples, so the interval is one of
/// ratios — `b` is 0.92× to 0.97× of `a` — and asymmetric as ratios of
/// timings are; it does not assume the two spreads are equal, and its
/// degrees of freedom come from the Welch–Satterthwaite equation. With
/// few repeats the t quantile is large and the interval wide: three
/// repeats against three cannot tell 2% apart, and should not claim to.
/// hyperfine's `scripts/welch_ttest.py` applies the same test to two
/// commands' timings.
///
/// ```
/// use numalab_bench::stats::{difference, Verdict};
/// // Two placements' run times, 5 repeats each: clearly apart.
/// let local = [80.1, 81.0, 79.5, 80.7, 80.2];
/// let remote = [97.9, 99.2, 98.4, 97.5, 98.8];
/// let d = difference(&local, &remote, 0.95).unwrap();
/// assert_eq!(d.verdict, Verdict::Higher);
/// assert!(d.low > 0.2 && d.high < 0.26, "{d:?}"); // +22% to +24%
/// // The same memory measured twice: within noise.
/// let again = [80.9, 79.8, 80.4, 81.2, 79.6];
/// assert_eq!(difference(&local, &again, 0.95).unwrap().verdict, Verdict::Indistinguishable);
/// // One repeat has no spread to judge by.
/// assert!(difference(&local, &[98.0], 0.95).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// `b`'s geometric mean relative to `a`'s, minus one (+0.17: 17%
    /// higher).
    pub relative: f64,
    /// Lower end of the interval, as `relative`.
    pub low: f64,
    /// Upper end of the interval, as `relative`.
    pub high: f64,
    /// The interval's confidence level (0.95).
    pub confidence: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub degrees_of_freedom: f64,
    /// What the interval says.
    pub verdict: Verdict,
}

/// Which way a [`Difference`] goes, if it can be told.
///
/// ```
/// use numalab_bench::stats::{difference, Verdict};
/// let d = difference(&[10.0, 10.2, 9.9], &[12.1, 12.0, 12.3], 0.95).unwrap();
/// assert_eq!(d.verdict, Verdict::Higher);
/// assert_eq!(Verdict::Indistinguishable.symbol(), "≈");
/// assert_eq!(serde_json::to_string(&Verdict::Indistinguishable)?, "\"indistinguishable\"");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The interval lies above zero.
    Higher,
    /// The interval lies below zero.
    Lower,
    /// The interval holds zero: "≈", within noise.
    Indistinguishable,
}

impl Verdict {
    /// `higher`, `lower` or `≈`.
    pub fn symbol(self) -> &'static str {
        match self {
            Verdict::Higher => "higher",
            Verdict::Lower => "lower",
            Verdict::Indistinguishable => "≈",
        }
    }
}

/// How `b` differs from the baseline `a` at `confidence` (from 0.5, below
/// 1); see [`Difference`]. `None` when either has fewer than two
/// samples, any sample is not a positive finite number, or the confidence
/// is out of range.
pub fn difference(a: &[f64], b: &[f64], confidence: f64) -> Option<Difference> {
    if a.len() < 2 || b.len() < 2 || !(0.5..1.0).contains(&confidence) {
        return None;
    }
    let logs = |v: &[f64]| -> Option<(f64, f64, f64)> {
        if v.iter().any(|x| !x.is_finite() || *x <= 0.0) {
            return None;
        }
        let n = v.len() as f64;
        let mean = v.iter().map(|x| x.ln()).sum::<f64>() / n;
        let var = v.iter().map(|x| (x.ln() - mean).powi(2)).sum::<f64>() / (n - 1.0);
        Some((mean, var / n, n))
    };
    let ((ma, sa, na), (mb, sb, nb)) = (logs(a)?, logs(b)?);
    let delta = mb - ma;
    let se2 = sa + sb;
    let (low, high, df) = if se2 > 0.0 {
        let df = se2 * se2 / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
        let t = student_t_quantile(0.5 + confidence / 2.0, df);
        let half = t * se2.sqrt();
        (delta - half, delta + half, df)
    } else {
        // No spread at all on either side: the difference is exact.
        (delta, delta, na + nb - 2.0)
    };
    let verdict = if low > 0.0 {
        Verdict::Higher
    } else if high < 0.0 {
        Verdict::Lower
    } else {
        Verdict::Indistinguishable
    };
    Some(Difference {
        relative: delta.exp_m1(),
        low: low.exp_m1(),
        high: high.exp_m1(),
        confidence,
        degrees_of_freedom: df,
        verdict,
    })
}

/// The `p`-quantile of Student's t distribution with `df` degrees of
/// freedom (any positive real), by bisection on its distribution function;
/// accurate to about 1e-9.
///
/// ```
/// use numalab_bench::stats::student_t_quantile;
/// assert!((student_t_quantile(0.975, 4.0) - 2.776445).abs() < 1e-5);
/// assert!((student_t_quantile(0.975, 1e7) - 1.959964).abs() < 1e-5);
/// ```
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    if p == 0.5 {
        return 0.0;
    }
    if p < 0.5 {
        return -student_t_quantile(1.0 - p, df);
    }
    // The quantile lies above 0; grow the bracket until it holds it.
    let (mut lo, mut hi) = (0.0f64, 2.0f64);
    while student_t_cdf(hi, df) < p && hi < 1e12 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if student_t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// The most looks [`pocock_boundary`] takes: a sweep that looks more
/// often than this gains little (the boundary keeps rising) and the
/// computation grows with the looks.
pub const MAX_LOOKS: u32 = 20;

/// Pocock's boundary: the constant `c` such that `looks` equally spaced
/// looks at a normal test statistic, each stopping when |Z| ≥ c, reject a
/// true null hypothesis with probability `alpha` over all the looks
/// together (Pocock 1977, "Group sequential methods in the design and
/// analysis of clinical trials", Biometrika 64:191–199). One look gives
/// the plain two-sided normal quantile. Computed, not tabulated: the
/// density of the running sum is carried from look to look on a grid
/// (the Armitage–McPherson–Rowe recursion) and `c` found by bisection, so
/// any `alpha` works, the Bonferroni share of one difference in a table
/// as well as 0.05. Jennison and Turnbull's table 2.1 gives 2.178, 2.289,
/// 2.361 and 2.413 for 2 to 5 looks at 0.05; this agrees to 0.001.
///
/// ```
/// use numalab_bench::stats::pocock_boundary;
/// assert!((pocock_boundary(1, 0.05) - 1.960).abs() < 1e-3);
/// assert!((pocock_boundary(4, 0.05) - 2.361).abs() < 1e-3);
/// ```
///
/// Panics unless `looks` is 1 to [`MAX_LOOKS`] and `alpha` in (0, 0.5).
pub fn pocock_boundary(looks: u32, alpha: f64) -> f64 {
    assert!((1..=MAX_LOOKS).contains(&looks), "looks {looks}");
    assert!(alpha > 0.0 && alpha < 0.5, "alpha {alpha}");
    let (mut lo, mut hi) = (0.5f64, 8.0f64);
    while hi - lo > 1e-6 {
        let mid = 0.5 * (lo + hi);
        if crossing_probability(mid, looks) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The confidence each of `looks` looks' intervals is made at so that
/// the intervals of all looks hold together at `confidence`: 2Φ(c) − 1
/// for Pocock's boundary `c` ([`pocock_boundary`]). Repeated confidence
/// intervals (Jennison and Turnbull 1989): whenever the looking stops, the
/// last look's interval holds at `confidence`. One look (or none):
/// `confidence` itself; more than [`MAX_LOOKS`] (which no sweep takes)
/// count as [`MAX_LOOKS`].
///
/// ```
/// use numalab_bench::stats::repeated_confidence;
/// assert_eq!(repeated_confidence(1, 0.95), 0.95);
/// // Pocock's nominal level for 4 looks, 0.0182.
/// assert!((1.0 - repeated_confidence(4, 0.95) - 0.0182).abs() < 2e-4);
/// ```
pub fn repeated_confidence(looks: u32, confidence: f64) -> f64 {
    if looks <= 1 || !(0.5..1.0).contains(&confidence) {
        return confidence;
    }
    let c = pocock_boundary(looks.min(MAX_LOOKS), 1.0 - confidence);
    1.0 - 2.0 * (1.0 - normal_cdf(c))
}

/// P(|S_k| ≥ c √k for some k ≤ looks), S_k a sum of k independent
/// standard normal steps: a grid of cells of width `H` carries the mass
/// of the sums that have not crossed yet from one look to the next
/// (convolved with the step's density, cells cut by the boundary counted
/// by the part inside).
fn crossing_probability(c: f64, looks: u32) -> f64 {
    const H: f64 = 0.025;
    // The step's density is below 1e-16 past 8.5.
    const REACH: f64 = 8.5;
    let limit = c * f64::from(looks).sqrt();
    let n = (2.0 * limit / H).ceil() as usize;
    let x = |i: usize| -limit + (i as f64 + 0.5) * H;
    let inside = |i: usize, bound: f64| {
        let (lo, hi) = (x(i) - H / 2.0, x(i) + H / 2.0);
        ((hi.min(bound) - lo.max(-bound)) / H).clamp(0.0, 1.0)
    };
    let reach = (REACH / H).ceil() as usize;
    let kernel: Vec<f64> = (0..=reach)
        .map(|d| {
            let t = d as f64 * H;
            (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt() * H
        })
        .collect();
    // Look 1: each cell's exact mass inside |s| < c.
    let mut mass: Vec<f64> = (0..n)
        .map(|i| {
            let (lo, hi) = ((x(i) - H / 2.0).max(-c), (x(i) + H / 2.0).min(c));
            if hi > lo {
                normal_cdf(hi) - normal_cdf(lo)
            } else {
                0.0
            }
        })
        .collect();
    for k in 2..=looks {
        let bound = c * f64::from(k).sqrt();
        let mut next = vec![0.0; n];
        for (j, out) in next.iter_mut().enumerate() {
            let share = inside(j, bound);
            if share == 0.0 {
                continue;
            }
            let from = j.saturating_sub(reach);
            let to = (j + reach).min(n - 1);
            let sum: f64 = (from..=to).map(|i| mass[i] * kernel[i.abs_diff(j)]).sum();
            *out = sum * share;
        }
        mass = next;
    }
    1.0 - mass.iter().sum::<f64>()
}

/// Φ(x), the standard normal distribution function, from erfc's
/// Chebyshev fit (Numerical Recipes, §6.2: relative error under 1.2e-7).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

/// P(T ≤ t) for Student's t with `df` degrees of freedom.
fn student_t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    let tail = 0.5 * incomplete_beta(x, df / 2.0, 0.5);
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The regularised incomplete beta function I_x(a, b), from its continued
/// fraction evaluated by the modified Lentz method (on the side of x where
/// it converges fast, the other by symmetry).
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(1.0 - x, b, a) / b
    }
}

/// The continued fraction of I_x(a, b): 1 / (1 + d1 / (1 + d2 / …)),
/// with d(2m+1) = -(a+m)(a+b+m)x / ((a+2m)(a+2m+1)) and
/// d(2m) = m(b-m)x / ((a+2m-1)(a+2m)).
fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut f = d;
    for m in 1..=1000 {
        let m = f64::from(m);
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        f *= c * d;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = c * d;
        f *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    f
}

/// ln Γ(x) for x > 0: Stirling's series with Γ's recurrence to move x
/// above 10 first (error below 1e-13 there).
fn ln_gamma(mut x: f64) -> f64 {
    let mut shift = 0.0;
    while x < 10.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series = inv
        * (1.0 / 12.0
            - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 * (1.0 / 1680.0 - inv2 / 1188.0))));
    shift + (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pocock_boundaries_match_the_published_table() {
        // Jennison and Turnbull (2000), table 2.1, two-sided 0.05.
        for (looks, c) in [
            (1, 1.960),
            (2, 2.178),
            (3, 2.289),
            (4, 2.361),
            (5, 2.413),
            (10, 2.555),
        ] {
            let got = pocock_boundary(looks, 0.05);
            assert!((got - c).abs() < 1e-3, "{looks} looks: {got} against {c}");
        }
        // 0.01: 2.772 for 2 looks, 2.986 for 5 (the same table).
        assert!((pocock_boundary(2, 0.01) - 2.772).abs() < 1e-3);
        assert!((pocock_boundary(5, 0.01) - 2.986).abs() < 1e-3);
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-7);
        assert!((normal_cdf(-3.0) - 0.001_349_9).abs() < 1e-7);
    }

    /// Standard normal draws (xorshift64* and Box–Muller).
    fn normals(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut uniform = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            ((state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        move || (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos()
    }

    #[test]
    fn random_walks_cross_pococks_boundary_at_its_rate() {
        // Simulated, not computed: of 200 000 walks of four standard
        // normal steps, those with |S_k| ≥ c √k at some look.
        let c = pocock_boundary(4, 0.05);
        let mut draw = normals(7);
        let walks = 200_000;
        let crossed = (0..walks)
            .filter(|_| {
                let mut sum = 0.0;
                (1..=4).any(|k| {
                    sum += draw();
                    sum.abs() >= c * f64::from(k).sqrt()
                })
            })
            .count();
        let rate = crossed as f64 / walks as f64;
        // Binomial standard error at 0.05: 0.0005.
        assert!((rate - 0.05).abs() < 0.002, "{rate}");
    }

    /// The sequential procedure a sweep with `run.max_repeats` follows,
    /// on samples drawn here: `every` repeats a side per look, up to
    /// `looks` looks, stopping at the first interval that clears zero.
    /// Returns the verdict and the repeats a side it took.
    fn sequential(
        draw: &mut impl FnMut() -> f64,
        shift: f64,
        every: usize,
        (looks, level): (u32, f64),
    ) -> (Verdict, usize) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..looks {
            for _ in 0..every {
                // Times: lognormal, 3% spread, b `shift` slower in log.
                a.push((0.03 * draw()).exp());
                b.push((shift + 0.03 * draw()).exp());
            }
            let d = difference(&a, &b, level).unwrap();
            if d.verdict != Verdict::Indistinguishable {
                return (d.verdict, a.len());
            }
        }
        (Verdict::Indistinguishable, a.len())
    }

    #[test]
    fn looking_again_keeps_false_differences_rare_and_finds_more_real_ones() {
        let mut draw = normals(11);
        let sweeps = 4000;
        let four = (4, repeated_confidence(4, 0.95));
        // Identical cells, up to four looks of five repeats a side: told
        // apart (wrongly) in at most about 5% of sweeps, not the 15–20%
        // that looking four times at a plain 95% interval would give.
        let wrong = (0..sweeps)
            .filter(|_| sequential(&mut draw, 0.0, 5, four).0 != Verdict::Indistinguishable)
            .count();
        let rate = wrong as f64 / f64::from(sweeps);
        assert!(rate <= 0.06, "false differences in {rate:.3} of sweeps");
        // Plain 95% intervals looked at four times: the error Pocock's
        // boundary prevents, measured the same way.
        let naive = (0..sweeps)
            .filter(|_| {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                (0..4).any(|_| {
                    for _ in 0..5 {
                        a.push((0.03 * draw()).exp());
                        b.push((0.03 * draw()).exp());
                    }
                    difference(&a, &b, 0.95).unwrap().verdict != Verdict::Indistinguishable
                })
            })
            .count();
        assert!(naive as f64 / f64::from(sweeps) > 0.1, "{naive}");
        // A real 4% difference: one look of five finds it about half the
        // time; up to four looks find it far more often.
        let shift = 0.04f64.ln_1p();
        let once = (0..sweeps)
            .filter(|_| sequential(&mut draw, shift, 5, (1, 0.95)).0 == Verdict::Higher)
            .count();
        let up_to_four = (0..sweeps)
            .filter(|_| sequential(&mut draw, shift, 5, four).0 == Verdict::Higher)
            .count();
        assert!(
            up_to_four > once + sweeps as usize / 5,
            "{once} -> {up_to_four}"
        );
    }

    #[test]
    fn summary_of_known_samples() {
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0, 100.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.median, 3.0);
        assert_eq!((s.min, s.max), (1.0, 100.0));
        assert_eq!(s.mean, 22.0);
        assert_eq!(s.outliers, vec![4], "100 is far from the others");
        assert!(s.is_noisy());
        let even = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.5);
        let flat = Summary::of(&[5.0, 5.0, 5.0]).unwrap();
        assert_eq!((flat.stddev, flat.cv), (0.0, 0.0));
        assert!(flat.outliers.is_empty() && !flat.is_noisy());
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [10.0, 20.0, 30.0, 40.0, 50.0];
        assert_eq!(quantile(&v, 0.5), Some(30.0));
        assert_eq!(quantile(&v, 0.0), Some(10.0));
        assert_eq!(quantile(&v, 1.0), Some(50.0));
        assert_eq!(quantile(&v, 0.25), Some(20.0));
        assert_eq!(quantile(&v, 0.9), Some(46.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn t_quantiles_match_published_tables() {
        // Two-sided 95% critical values (p = 0.975) and a 99% one.
        for (df, want) in [
            (1.0, 12.706205),
            (2.0, 4.302653),
            (3.0, 3.182446),
            (5.0, 2.570582),
            (10.0, 2.228139),
            (30.0, 2.042272),
            (1000.0, 1.962339),
        ] {
            let got = student_t_quantile(0.975, df);
            assert!((got - want).abs() < 1e-5, "df {df}: {got} vs {want}");
        }
        assert!((student_t_quantile(0.995, 4.0) - 4.604095).abs() < 1e-5);
        assert!((student_t_quantile(0.025, 10.0) + 2.228139).abs() < 1e-5);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
    }

    /// Normal samples from a fixed seed (xorshift, Box–Muller).
    struct Normal(u64);
    impl Normal {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        fn sample(&mut self, mean: f64, sd: f64) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            mean + sd * (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
        fn samples(&mut self, n: usize, mean: f64, sd: f64) -> Vec<f64> {
            (0..n).map(|_| self.sample(mean, sd)).collect()
        }
    }

    #[test]
    fn equal_distributions_are_told_apart_about_five_times_in_a_hundred() {
        // A/A: both sides from the same distribution (3% spread), 5
        // repeats each, and with unequal spreads and counts (Welch's
        // case): a 95% interval misses zero about 5% of the time.
        let mut rng = Normal(0x9e37_79b9_7f4a_7c15);
        for (na, sa, nb, sb) in [(5, 3.0, 5, 3.0), (3, 1.0, 8, 6.0), (10, 2.0, 10, 2.0)] {
            let trials = 4000;
            let told = (0..trials)
                .filter(|_| {
                    let a = rng.samples(na, 100.0, sa);
                    let b = rng.samples(nb, 100.0, sb);
                    difference(&a, &b, 0.95).unwrap().verdict != Verdict::Indistinguishable
                })
                .count();
            let rate = told as f64 / trials as f64;
            assert!(
                (0.035..=0.065).contains(&rate),
                "{na}/{sa} vs {nb}/{sb}: {rate}"
            );
        }
    }

    #[test]
    fn real_differences_are_found_and_intervals_hold_them() {
        // 20% apart with 3% spreads, 5 repeats each: found every time,
        // and the interval holds the true ratio 1.2 about 95% of the time.
        let mut rng = Normal(42);
        let trials = 2000;
        let (mut found, mut covered) = (0, 0);
        for _ in 0..trials {
            let a = rng.samples(5, 100.0, 3.0);
            let b = rng.samples(5, 120.0, 3.6);
            let d = difference(&a, &b, 0.95).unwrap();
            found += usize::from(d.verdict == Verdict::Higher);
            covered += usize::from(d.low <= 0.2 && 0.2 <= d.high);
            assert!(d.low <= d.relative && d.relative <= d.high, "{d:?}");
        }
        assert_eq!(found, trials);
        let rate = covered as f64 / trials as f64;
        assert!((0.93..=0.97).contains(&rate), "coverage {rate}");
        // Slower is Lower; nothing to judge without two repeats a side
        // or with a sample that is not a positive number.
        let d = difference(&[10.0, 10.1, 9.9], &[8.0, 8.1, 7.9], 0.95).unwrap();
        assert_eq!(d.verdict, Verdict::Lower);
        assert!(difference(&[1.0], &[1.0, 2.0], 0.95).is_none());
        assert!(difference(&[1.0, 0.0], &[1.0, 2.0], 0.95).is_none());
        assert!(difference(&[1.0, 2.0], &[1.0, f64::NAN], 0.95).is_none());
        assert!(difference(&[1.0, 2.0], &[1.0, 2.0], 1.0).is_none());
        // No spread on either side: exact.
        let exact = difference(&[2.0, 2.0], &[3.0, 3.0], 0.95).unwrap();
        assert_eq!(exact.verdict, Verdict::Higher);
        assert!((exact.low - 0.5).abs() < 1e-12 && (exact.high - 0.5).abs() < 1e-12);
    }
}
