//! Every figure a saved report draws or turns into a finding, checked
//! as a measurement gives it before `report --from` shows any: the
//! matrix's medians, their spreads and 4 KiB-page latencies, read
//! bandwidth by thread count, and the policy sweep's times, rates and
//! latencies. A file with a figure no machine gives (1e308 GB/s, a
//! negative time, a count of samples that its samples contradict) is not
//! a measurement and is not read.

use std::ops::RangeInclusive;

use super::{Cell, Metric, Report};
use crate::matrix::Figure;
use crate::stats::Summary;

/// The longest a sweep cell's run can be: a run is at most a day of
/// `access.duration`, times its repeats (1000 at most), with room.
const LONGEST_RUN_S: f64 = 1e8;

/// The most operations a second: a hundred times a machine's worth.
const MOST_MOPS: f64 = 1e8;

/// Why `report`'s figures are not a measurement, in one sentence, or
/// `Ok` when each is one.
pub(super) fn check(report: &Report) -> Result<(), String> {
    let matrix = &report.matrix;
    let cell = |metric, initiator, target| Cell {
        metric,
        initiator,
        target,
    };
    for c in matrix.latency.iter().flat_map(|m| &m.cells) {
        let at = cell(Metric::Latency, c.initiator, c.target);
        sampled(&at.to_string(), &c.latency_ns.summary)?;
        figure(&at.to_string(), &c.latency_ns, Metric::Latency)?;
        if let Some(cycles) = c.cycles {
            // A load of at most 10 ms at up to 100 GHz.
            within(&format!("{at} in cycles"), cycles, 0.0..=1e9, "cycles")?;
        }
        share(&format!("{at}'s huge-page share"), c.pages.huge_share)?;
        ratios(at, c.ratio_to_local, 0.1..=100.0, c.firmware.slit_ratio)?;
        if let Some(base) = &c.base_pages {
            figure(
                &format!("{at} on 4 KiB pages"),
                &base.latency_ns,
                Metric::Latency,
            )?;
            // How much slower 4 KiB pages are than huge ones, as a share:
            // more than -1 (faster by all its time) and at most 100 times.
            within(
                &format!("{at}'s 4 KiB-page inflation"),
                base.inflation,
                -0.999..=1e2,
                "(a share of the huge-page time)",
            )?;
        }
    }
    for c in matrix.bandwidth.iter().flat_map(|m| &m.cells) {
        let at = cell(Metric::Read, c.initiator, c.target);
        ratios(
            at,
            c.read_ratio_to_local,
            1e-3..=100.0,
            c.firmware.slit_ratio,
        )?;
        for (metric, value) in [
            (Metric::Read, &c.read_gbps),
            (Metric::Write, &c.write_gbps),
            (Metric::Copy, &c.copy_gbps),
        ] {
            if let Some(value) = value {
                figure(
                    &cell(metric, c.initiator, c.target).to_string(),
                    value,
                    metric,
                )?;
            }
        }
    }
    for curve in matrix.loaded.iter().flatten() {
        for point in &curve.points {
            let curve_name = format!("loaded latency {}->{}", curve.initiator, curve.target);
            within(
                &format!("{curve_name}'s load"),
                point.load_gbps,
                0.0..=*Metric::Read.plausible().end(),
                "GB/s",
            )?;
            let what = format!("{curve_name} at {:.1} GB/s", point.load_gbps);
            figure(&what, &point.latency_ns, Metric::Latency)?;
        }
    }
    for c in matrix.c2c.iter().flat_map(|m| &m.cells) {
        let what = format!("cache-to-cache latency {}->{}", c.cpu_a, c.cpu_b);
        figure(&what, &c.latency_ns, Metric::Latency)?;
    }
    if let Some(scaling) = &report.scaling {
        for point in &scaling.points {
            if point.threads == 0 || point.threads > super::MAX_SAVED_CPUS {
                return Err(format!(
                    "its thread scaling has a point of {} threads: not a measurement",
                    point.threads
                ));
            }
            let what = format!(
                "read {}->{} with {} threads",
                scaling.initiator, scaling.target, point.threads
            );
            sampled(&what, &point.read_gbps.summary)?;
            figure(&what, &point.read_gbps, Metric::Read)?;
        }
    }
    // A percentile of single operations: up to seconds on a host that
    // descheduled the thread.
    let latency = 0.1..=1e10;
    for (i, run) in report.sweep.cells.iter().enumerate() {
        let Some(figures) = run.result.as_ref().and_then(|r| r.figures.as_ref()) else {
            continue;
        };
        let what = |name: &str| format!("sweep cell {}'s {name}", i + 1);
        // A cell with figures ran: each of them is of its repeats.
        for (name, value) in [
            ("time to last", &figures.time_to_last_s),
            ("bandwidth", &figures.gb_per_s),
            ("operation rate", &figures.mops_per_s),
        ] {
            sampled(&what(name), value)?;
        }
        summary(
            &what("time to last"),
            &figures.time_to_last_s,
            1e-9..=LONGEST_RUN_S,
            "s",
        )?;
        summary(
            &what("bandwidth"),
            &figures.gb_per_s,
            0.0..=*Metric::Read.plausible().end(),
            "GB/s",
        )?;
        summary(
            &what("operation rate"),
            &figures.mops_per_s,
            0.0..=MOST_MOPS,
            "Mops/s",
        )?;
        for (name, value) in [
            ("read p50", &figures.read_p50_ns),
            ("read p99", &figures.read_p99_ns),
            ("write p50", &figures.write_p50_ns),
            ("write p99", &figures.write_p99_ns),
        ] {
            if let Some(value) = value {
                summary(&what(name), value, latency.clone(), "ns")?;
            }
        }
    }
    Ok(())
}

/// A matrix figure: its summary as [`summary`] checks it, and a count of
/// samples its samples agree with.
fn figure(what: &str, figure: &Figure, metric: Metric) -> Result<(), String> {
    let (n, listed) = (figure.summary.n, figure.samples.len());
    if n > listed {
        return Err(format!(
            "its {what} counts {n} samples but lists {listed}: not a measurement"
        ));
    }
    summary(what, &figure.summary, metric.plausible(), metric.unit())
}

/// A figure that is only there when it was measured (an idle latency, a
/// point of thread scaling, a sweep cell's time) has samples.
fn sampled(what: &str, s: &Summary) -> Result<(), String> {
    if s.n == 0 {
        return Err(format!(
            "its {what} has no samples, which a figure measured always has: not a measurement"
        ));
    }
    Ok(())
}

/// One number within `range`.
fn within(what: &str, value: f64, range: RangeInclusive<f64>, unit: &str) -> Result<(), String> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(format!(
        "its {what} is {value:e} {unit}: not a measurement (from {:e} to {:e})",
        range.start(),
        range.end()
    ))
}

/// [`within`] of a number that may be absent.
fn within_if(
    what: &str,
    value: Option<f64>,
    range: RangeInclusive<f64>,
    unit: &str,
) -> Result<(), String> {
    value.map_or(Ok(()), |v| within(what, v, range, unit))
}

/// A share, when there is one: from 0 to 1.
fn share(what: &str, value: Option<f64>) -> Result<(), String> {
    within_if(what, value, 0.0..=1.0, "of the pages")
}

/// A cell's ratio to its local cell (within `to_local`) and the
/// firmware's SLIT ratio beside it: SLIT 10 to 255 over the local 10, up
/// to 25.5, from a tenth for firmware that rates remote below local.
fn ratios(
    at: Cell,
    to_local: Option<f64>,
    range: RangeInclusive<f64>,
    slit: Option<f64>,
) -> Result<(), String> {
    within_if(&format!("{at}'s ratio to local"), to_local, range, "times")?;
    within_if(&format!("{at}'s SLIT ratio"), slit, 0.1..=25.5, "times")
}

/// A summary of `n` samples: none (all zeros: not measured), or median,
/// least, most and mean each within `range`, and a spread (CV) that is a
/// number. (A median need not lie between the least and largest samples:
/// findings and fleet read the median alone, and a file edited to move
/// it is judged by it.)
fn summary(what: &str, s: &Summary, range: RangeInclusive<f64>, unit: &str) -> Result<(), String> {
    let values = [
        ("median", s.median),
        ("least sample", s.min),
        ("largest sample", s.max),
        ("mean", s.mean),
    ];
    if s.n == 0 {
        return match values.iter().find(|(_, v)| *v != 0.0) {
            Some((name, value)) => Err(format!(
                "its {what} has no samples but a {name} of {value} {unit}: not a measurement"
            )),
            None => Ok(()),
        };
    }
    // Out of range first (the sentence names the figure), then in order.
    if let Some((name, value)) = values.iter().find(|(_, v)| !range.contains(v)) {
        let is = match *name {
            "median" => "is".to_owned(),
            name => format!("has a {name} of"),
        };
        return Err(format!(
            "its {what} {is} {value:e} {unit}: not a measurement (a figure is from {:e} to {:e} {unit})",
            range.start(),
            range.end()
        ));
    }
    if !(s.cv.is_finite() && s.cv >= 0.0 && s.stddev.is_finite() && s.stddev >= 0.0) {
        return Err(format!(
            "its {what} has a spread of {} (CV {}): not a measurement",
            s.stddev, s.cv
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::saved_from;
    use crate::report::Report;

    /// The lopsided machine's saved report (it has thread scaling),
    /// changed by `change`.
    fn saved(change: &dyn Fn(&mut serde_json::Value)) -> Report {
        saved_from("lopsided", change)
    }

    /// What `report --from` says of it.
    fn refused(change: &dyn Fn(&mut serde_json::Value)) -> String {
        saved(change).from_saved().unwrap_err()
    }

    #[test]
    fn every_figure_drawn_is_checked_not_only_the_matrix_medians() {
        assert!(saved(&|_| {}).from_saved().is_ok());
        assert!(refused(&|doc| {
            doc["scaling"]["points"][1]["read_gbps"]["median"] = 1e308.into();
        })
        .starts_with("its read 0->0 with 2 threads is 1e308 GB/s: not a measurement"));
        assert!(refused(&|doc| {
            doc["scaling"]["points"][1]["read_gbps"]["median"] = (-5.0).into();
        })
        .contains("is -5e0 GB/s: not a measurement"));
        assert!(refused(&|doc| {
            for cell in doc["sweep"]["cells"].as_array_mut().unwrap() {
                cell["result"]["figures"]["time_to_last_s"]["median"] = (-1e308).into();
            }
        })
        .starts_with("its sweep cell 1's time to last is -1e308 s"));
        // A count of no samples beside figures is no measurement either.
        assert_eq!(
            refused(&|doc| {
                let figure = &mut doc["matrix"]["bandwidth"]["cells"][0]["read_gbps"];
                figure["n"] = 0.into();
                figure["median"] = 0.0.into();
            }),
            format!(
                "its read 0->0 has no samples but a least sample of {} GB/s: not a measurement; not read",
                saved(&|_| {}).matrix.bandwidth.unwrap().cells[0]
                    .read_gbps
                    .as_ref()
                    .unwrap()
                    .summary
                    .min
            )
        );
        assert!(refused(&|doc| {
            doc["matrix"]["latency"]["cells"][0]["latency_ns"]["n"] = 1000.into();
        })
        .contains("counts 1000 samples but lists"));
        // Hostile pass 3's re-check: an idle latency of no samples,
        // cycles, a thread count, an endless spread.
        assert!(refused(&|doc| {
            let figure = &mut doc["matrix"]["latency"]["cells"][0]["latency_ns"];
            for field in ["n", "median", "min", "max", "mean", "stddev", "cv"] {
                figure[field] = 0.into();
            }
            figure["samples"] = serde_json::json!([]);
        })
        .contains("has no samples, which a figure measured always has"));
        assert!(refused(&|doc| {
            doc["matrix"]["latency"]["cells"][0]["cycles"] = 1e308.into();
        })
        .contains("in cycles is 1e308"));
        // The final check: cache-to-cache and loaded latencies, ratios.
        assert!(refused(&|doc| {
            doc["matrix"]["latency"]["cells"][0]["ratio_to_local"] = 1e308.into();
        })
        .contains("ratio to local is 1e308"));
        assert!(refused(&|doc| {
            doc["scaling"]["points"][0]["threads"] = 0.into();
        })
        .contains("a point of 0 threads"));
        assert!(refused(&|doc| {
            doc["matrix"]["latency"]["cells"][0]["latency_ns"]["cv"] = (-1.0).into();
        })
        .contains("has a spread of"));
    }
}
