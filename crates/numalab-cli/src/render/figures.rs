//! Figures drawn from results, live or saved: a sweep's figure of merit
//! against its swept parameter, one line per policy (and per value of the
//! other axes); a run's busy time per thread, one line per repeat; a
//! matrix's heat maps and loaded-latency curves; a profile's memory per
//! node over time. [`crate::plot`] draws them.

use std::path::{Path, PathBuf};

use anyhow::Result;
use numalab_bench::experiment::result::{Compared, RunReport, SweepReport};
use numalab_bench::matrix::{self, Figure, MatrixReport};
use numalab_bench::profile::ProfileReport;

use crate::plot::{line_chart, Drawing, Heatmap, LineChart, Series};
use numalab::units::format_size;

/// The axis to put on x: `threads.count` when swept, else the first axis
/// whose values are all numbers; `None` when no axis is numeric.
pub fn x_axis(s: &SweepReport) -> Option<String> {
    let numeric = |values: &[String]| values.iter().all(|v| v.parse::<f64>().is_ok());
    s.axes
        .iter()
        .find(|(k, v)| k == "threads.count" && numeric(v))
        .or_else(|| s.axes.iter().find(|(_, v)| numeric(v)))
        .map(|(k, _)| k.clone())
}

/// The sweep's chart: the median of what its tables compare (time to
/// the last thread, or per million operations for runs of a fixed
/// duration) against the swept parameter (or against the thread count
/// when nothing numeric is swept).
pub fn sweep_chart(s: &SweepReport) -> LineChart {
    let x_key = x_axis(s);
    let compared = Compared::of_cells(&s.cells);
    let mut series: Vec<Series> = Vec::new();
    // A/A controls are local again: the table shows them, a second
    // local line would only hide the first.
    for cell in s.cells.iter().filter(|c| !c.control) {
        let Some(result) = &cell.result else { continue };
        let Some(time) = compared.median_of(cell) else {
            continue;
        };
        let x = match &x_key {
            Some(key) => cell
                .setting(key)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0),
            None => f64::from(result.experiment.threads.count),
        };
        // One line per combination of the other axes, policy first.
        let mut others: Vec<&(String, String)> = cell
            .settings
            .iter()
            .filter(|(k, _)| Some(k) != x_key.as_ref())
            .collect();
        others.sort_by_key(|(k, _)| k != "memory.policy");
        let name = others
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let name = if name.is_empty() {
            result.experiment.memory.policy.to_string()
        } else {
            name
        };
        let placed = if result.placement_as_requested() {
            ""
        } else {
            " (placement not as asked)"
        };
        let name = format!("{name}{placed}");
        // The spread of the repeats behind the median.
        let range = numalab_bench::stats::Summary::of(&compared.of_run(result))
            .map(|f| (x, f.min * 1e3, f.max * 1e3));
        let line = match series.iter().position(|s| s.name == name) {
            Some(i) => &mut series[i],
            None => {
                series.push(Series {
                    name,
                    points: Vec::new(),
                    ranges: Vec::new(),
                });
                series.last_mut().expect("just pushed")
            }
        };
        line.points.push((x, time * 1e3));
        line.ranges.extend(range);
    }
    for line in &mut series {
        line.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    LineChart {
        title: format!("{}: {}", s.experiment.name, compared.what()),
        x_label: x_key.unwrap_or_else(|| "threads.count".to_owned()),
        y_label: "ms (median; bars: fastest to slowest repeat)".to_owned(),
        series,
    }
}

/// A run's chart: each thread's busy time, one line per repeat (an
/// uneven split or a remote node shows as a step).
pub fn run_chart(r: &RunReport) -> LineChart {
    let series = r
        .repeats
        .iter()
        .map(|repeat| Series {
            ranges: Vec::new(),
            name: format!("repeat {}", repeat.index),
            points: repeat
                .threads
                .iter()
                .map(|t| (t.thread as f64, t.busy_s * 1e3))
                .collect(),
        })
        .collect();
    LineChart {
        title: format!("{}: busy time per thread", r.experiment.name),
        x_label: "thread".to_owned(),
        y_label: "busy time (ms)".to_owned(),
        series,
    }
}

/// The most points drawn of one line of a profile's chart: more are not
/// seen at the figure's width, and a saved profile may hold a hundred
/// thousand samples.
pub const MAX_PROFILE_POINTS: usize = 2_000;

/// `points` thinned to at most `max`: consecutive points taken together
/// in equal runs, each run drawn as its largest point, so a peak is never
/// lost; the points themselves when there are no more than `max`.
fn thin_keeping_peaks(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max || max == 0 {
        return points;
    }
    points
        .chunks(points.len().div_ceil(max))
        .filter_map(|run| run.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)))
        .collect()
}

/// A profile's chart: the program's memory on each node over time, MiB
/// (every kind), one line per node, and its private memory (heap, stack,
/// anonymous, huge pages) over all nodes. Each line has at most
/// [`MAX_PROFILE_POINTS`] points, the largest of each run of samples
/// when there are more; the title then says so.
pub fn profile_chart(report: &ProfileReport) -> LineChart {
    let samples = &report.timeline.samples;
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let per_node: Vec<_> = samples.iter().map(|s| s.memory.per_node()).collect();
    let nodes: std::collections::BTreeSet<u32> =
        per_node.iter().flat_map(|p| p.keys().copied()).collect();
    let mut series: Vec<Series> = nodes
        .iter()
        .map(|&node| Series {
            name: format!("node {node}"),
            points: samples
                .iter()
                .zip(&per_node)
                .map(|(s, p)| (s.at_s, mib(p.get(&node).copied().unwrap_or(0))))
                .collect(),
            ranges: Vec::new(),
        })
        .collect();
    drop(per_node);
    series.push(Series {
        name: "private, all nodes".to_owned(),
        points: samples
            .iter()
            .map(|s| (s.at_s, mib(s.memory.private_total())))
            .collect(),
        ranges: Vec::new(),
    });
    for line in &mut series {
        line.points = thin_keeping_peaks(std::mem::take(&mut line.points), MAX_PROFILE_POINTS);
    }
    let program = report
        .command
        .first()
        .map_or("?", |c| c.rsplit('/').next().unwrap_or(c));
    let thinned = if samples.len() > MAX_PROFILE_POINTS {
        format!(
            " ({} samples, drawn as the largest of each {})",
            samples.len(),
            samples.len().div_ceil(MAX_PROFILE_POINTS)
        )
    } else {
        String::new()
    };
    LineChart {
        title: format!("{program}: memory per node over time{thinned}"),
        x_label: "time (s)".to_owned(),
        y_label: "memory (MiB)".to_owned(),
        series,
    }
}

/// Writes the profile's timeline to `<stem>.svg` and `<stem>.png`.
pub fn draw_profile(report: &ProfileReport, stem: &Path) -> Result<Vec<PathBuf>> {
    line_chart(&profile_chart(report), stem)
}

/// Writes the sweep's figure to `<stem>.svg` and `<stem>.png`.
pub fn draw_sweep(s: &SweepReport, stem: &Path) -> Result<Vec<PathBuf>> {
    line_chart(&sweep_chart(s), stem)
}

/// Writes the run's figure to `<stem>.svg` and `<stem>.png`.
pub fn draw_run(r: &RunReport, stem: &Path) -> Result<Vec<PathBuf>> {
    line_chart(&run_chart(r), stem)
}

/// `stem` with `-suffix` appended to its file name.
fn suffixed(stem: &Path, suffix: &str) -> PathBuf {
    let name = stem
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "matrix".into());
    stem.with_file_name(format!("{name}-{suffix}"))
}

/// Draws every figure a matrix result has data for under `stem` (each as
/// `<stem>-<suffix>.svg` and `.png`, in `stem`'s directory, which must
/// exist); returns the files written.
pub fn draw_matrix(result: &MatrixReport, stem: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (suffix, drawing) in matrix_drawings(result) {
        written.extend(drawing.write(&suffixed(stem, &suffix))?);
    }
    Ok(written)
}

/// Every figure a matrix result has data for, each with the suffix its
/// files get: a heat map per matrix (`latency`, `bandwidth-read`, ...), the
/// loaded-latency curves (`loaded`) and the cache-to-cache map (`c2c`).
pub fn matrix_drawings(result: &MatrixReport) -> Vec<(String, Drawing)> {
    let shape = &result.shape;
    let names = |nodes: &[u32]| nodes.iter().map(|n| format!("node {n}")).collect();
    let matrix_of = |value: &dyn Fn(u32, u32) -> Option<f64>| -> Vec<Vec<Option<f64>>> {
        shape
            .initiators
            .iter()
            .map(|&i| shape.targets.iter().map(|&t| value(i, t)).collect())
            .collect()
    };
    let heat = |title: String, unit: &str, values| Heatmap {
        title,
        row_label: "CPU node".into(),
        col_label: "memory node".into(),
        rows: names(&shape.initiators),
        cols: names(&shape.targets),
        values,
        unit: unit.into(),
    };
    let mut drawings = Vec::new();
    if let Some(latency) = &result.latency {
        let values = matrix_of(&|i, t| {
            latency
                .cells
                .iter()
                .find(|c| c.initiator == i && c.target == t)
                .map(|c| c.latency_ns.median())
        });
        let map = heat(
            format!(
                "idle latency, ns ({} working set)",
                format_size(result.settings.latency_bytes as u64)
            ),
            "ns",
            values,
        );
        drawings.push(("latency".to_owned(), Drawing::Heat(map)));
    }
    if let Some(bandwidth) = &result.bandwidth {
        type Pick = fn(&matrix::BandwidthCell) -> Option<&Figure>;
        let kernels: [(&str, &str, Pick); 3] = [
            ("read", "read", |c| c.read_gbps.as_ref()),
            ("write", "write (non-temporal)", |c| c.write_gbps.as_ref()),
            ("copy", "copy (non-temporal)", |c| c.copy_gbps.as_ref()),
        ];
        for (suffix, title, pick) in kernels {
            let values = matrix_of(&|i, t| {
                bandwidth
                    .cells
                    .iter()
                    .find(|c| c.initiator == i && c.target == t)
                    .and_then(pick)
                    .map(Figure::median)
            });
            let map = heat(format!("{title} bandwidth, GB/s"), "GB/s", values);
            drawings.push((format!("bandwidth-{suffix}"), Drawing::Heat(map)));
        }
    }
    if let Some(curves) = result.loaded.as_ref().filter(|c| !c.is_empty()) {
        let chart = LineChart {
            title: "loaded latency".into(),
            x_label: "load bandwidth, GB/s".into(),
            y_label: "latency, ns".into(),
            series: curves
                .iter()
                .map(|c| Series {
                    ranges: Vec::new(),
                    name: format!("CPU node {} -> memory node {}", c.initiator, c.target),
                    points: c
                        .points
                        .iter()
                        .map(|p| (p.load_gbps, p.latency_ns.median()))
                        .collect(),
                })
                .collect(),
        };
        drawings.push(("loaded".to_owned(), Drawing::Lines(chart)));
    }
    if let Some(c2c) = result.c2c.as_ref().filter(|c| !c.cells.is_empty()) {
        let values = c2c
            .nodes
            .iter()
            .map(|&a| {
                c2c.nodes
                    .iter()
                    .map(|&b| {
                        c2c.cells
                            .iter()
                            .find(|c| c.node_a == a && c.node_b == b)
                            .map(|c| c.latency_ns.median())
                    })
                    .collect()
            })
            .collect();
        let map = Heatmap {
            title: "cache-to-cache latency, ns per hand-over".into(),
            row_label: "node of the first core".into(),
            col_label: "node of the second core".into(),
            rows: names(&c2c.nodes),
            cols: names(&c2c.nodes),
            values,
            unit: "ns".into(),
        };
        drawings.push(("c2c".to_owned(), Drawing::Heat(map)));
    }
    drawings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Render;
    use numalab_bench::document::Document;

    #[test]
    fn figures_are_redrawn_from_the_saved_document() {
        let result = crate::render::matrix::tests::small_run();
        let text = result.json().unwrap();
        let saved: MatrixReport = Document::parse(&text).unwrap();
        let dir = std::env::temp_dir().join(format!("numalab-figures-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let written = draw_matrix(&saved, &dir.join("sub/run.1")).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for expected in [
            "run.1-latency.svg",
            "run.1-bandwidth-read.png",
            "run.1-bandwidth-copy.svg",
        ] {
            assert!(names.contains(&expected.to_string()), "{names:?}");
        }
        let two_cpus = result.loaded.as_ref().is_some_and(|c| !c.is_empty());
        assert_eq!(names.contains(&"run.1-loaded.svg".to_string()), two_cpus);
        assert_eq!(
            names.contains(&"run.1-c2c.svg".to_string()),
            result.c2c.as_ref().is_some_and(|c| !c.cells.is_empty())
        );
        for path in &written {
            assert!(
                std::fs::metadata(path).unwrap().len() > 0,
                "{}",
                path.display()
            );
        }
        let svg = std::fs::read_to_string(dir.join("sub/run.1-latency.svg")).unwrap();
        assert!(svg.contains("idle latency"), "titled");
        std::fs::remove_dir_all(&dir).unwrap();

        let other = text.replace("\"numalab.matrix\"", "\"numalab.topo\"");
        let err = Document::<MatrixReport>::parse(&other).unwrap_err();
        assert!(err.to_string().contains("not numalab.matrix"), "{err}");
        let newer = text.replace("\"schema_version\": 1", "\"schema_version\": 99");
        let err = Document::<MatrixReport>::parse(&newer).unwrap_err();
        assert!(err.to_string().contains("version 99"), "{err}");
    }

    #[test]
    fn a_profile_is_drawn_a_line_per_node() {
        use numalab::locate::MemoryKind;
        use numalab::profile::ProfileSample;
        let mut report = ProfileReport::empty(vec!["/usr/bin/sort".into()], 1);
        for (i, (on0, on1)) in [(1u64, 0u64), (64, 0), (64, 32), (0, 32)]
            .into_iter()
            .enumerate()
        {
            let mut sample = ProfileSample {
                at_s: i as f64 * 0.5,
                ..ProfileSample::default()
            };
            sample
                .memory
                .bytes
                .insert(MemoryKind::Heap, [(0, on0 << 20), (1, on1 << 20)].into());
            report.timeline.samples.push(sample);
        }
        let chart = profile_chart(&report);
        assert_eq!(chart.title, "sort: memory per node over time");
        let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["node 0", "node 1", "private, all nodes"]);
        assert_eq!(chart.series[1].points[2], (1.0, 32.0));
        assert_eq!(chart.series[2].points[2], (1.0, 96.0));
        let saved: ProfileReport = Document::parse(&report.json().unwrap()).unwrap();
        let dir =
            std::env::temp_dir().join(format!("numalab-profile-figure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = draw_profile(&saved, &dir.join("sort")).unwrap();
        assert_eq!(written.len(), 2);
        let svg = std::fs::read_to_string(dir.join("sort.svg")).unwrap();
        assert!(svg.contains("memory per node over time") && svg.contains("node 1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_long_profile_is_thinned_keeping_its_peak() {
        use numalab::locate::MemoryKind;
        use numalab::profile::ProfileSample;
        let mut report = ProfileReport::empty(vec!["app".into()], 1);
        let count = 40_000;
        let peak_at = 12_345;
        let mut sample = ProfileSample::default();
        sample
            .memory
            .bytes
            .insert(MemoryKind::Heap, [(0, 1 << 20), (1, 2 << 20)].into());
        report.timeline.samples = vec![sample; count];
        for (i, s) in report.timeline.samples.iter_mut().enumerate() {
            s.at_s = i as f64;
        }
        let peak = &mut report.timeline.samples[peak_at];
        peak.memory
            .bytes
            .get_mut(&MemoryKind::Heap)
            .unwrap()
            .insert(1, 900 << 20);
        let chart = profile_chart(&report);
        assert_eq!(chart.series.len(), 3);
        for line in &chart.series {
            assert!(
                line.points.len() <= MAX_PROFILE_POINTS,
                "{}: {} points",
                line.name,
                line.points.len()
            );
            assert!(
                line.points.windows(2).all(|w| w[0].0 < w[1].0),
                "in time order"
            );
        }
        assert!(chart.series[1].points.contains(&(peak_at as f64, 900.0)));
        assert!(chart.series[2].points.contains(&(peak_at as f64, 901.0)));
        assert!(chart.series[0].points.iter().all(|p| p.1 == 1.0));
        assert!(chart
            .title
            .contains("40000 samples, drawn as the largest of each 20"));

        // Few samples are drawn as they are, and the title says nothing.
        report.timeline.samples.truncate(MAX_PROFILE_POINTS);
        let chart = profile_chart(&report);
        assert_eq!(chart.series[1].points.len(), MAX_PROFILE_POINTS);
        assert_eq!(chart.title, "app: memory per node over time");
    }

    #[test]
    fn stems_keep_their_dots() {
        assert_eq!(
            suffixed(Path::new("out/run.1"), "latency"),
            PathBuf::from("out/run.1-latency")
        );
    }
}
