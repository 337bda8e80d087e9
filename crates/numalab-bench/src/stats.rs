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

#[cfg(test)]
mod tests {
    use super::*;

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
}
