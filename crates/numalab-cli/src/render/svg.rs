//! Figures for the report page drawn as plain SVG, coloured through the
//! page's CSS (`currentColor` and the `--series-N` variables), so they
//! follow its light and dark themes and print in black on white: a line
//! chart (optionally on a log-2 x axis, with labelled vertical marks such
//! as cache sizes), a bar chart, and the machine's topology
//! ([`topology`]): packages, nodes with their memory, CPUs, last-level
//! caches and nearby devices, and the firmware's distances on the links.

use std::fmt::Write as _;

use numalab::units::count;
pub use numalab::units::plain;
use numalab::Topology;

pub use super::escape_html as escape;
use numalab::units::format_size;

/// One line of a [`line_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points in order.
    pub points: Vec<(f64, f64)>,
    /// Vertical bars `(x, low, high)`: the spread behind a point (the
    /// fastest to the slowest repeat).
    pub ranges: Vec<(f64, f64, f64)>,
}

/// What a [`line_chart`] draws.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub lines: Vec<Line>,
    /// A log-2 x axis (working sets from KiB to GiB).
    pub log_x: bool,
    /// Vertical marks: `(x, label)` (cache sizes).
    pub marks: Vec<(f64, String)>,
    /// How x values are written at the ticks.
    pub x_format: fn(f64) -> String,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;

/// A round number of about `span / 5` (1, 2 or 5 times a power of ten).
fn tick_step(span: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let rough = span / 5.0;
    let power = 10f64.powf(rough.log10().floor());
    let unit = rough / power;
    power
        * if unit < 1.5 {
            1.0
        } else if unit < 3.5 {
            2.0
        } else if unit < 7.5 {
            5.0
        } else {
            10.0
        }
}

/// A tick of an axis whose ticks are `step` apart, with as many decimals
/// as the step needs and every tick the same (`0.0 0.2 … 1.0 1.2`, not
/// `0 0.20 … 1 1.2`).
///
pub fn tick(value: f64, step: f64) -> String {
    let decimals = if step > 0.0 && step.is_finite() {
        (-step.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        0
    };
    format!("{value:.decimals$}")
}

/// Bytes as a tick label (`256 KiB`, `32 MiB`).
pub fn bytes(value: f64) -> String {
    format_size(value.max(0.0) as u64)
}

fn open_svg(out: &mut String, width: f64, height: f64, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"{}\">",
        escape(title)
    );
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"22\" class=\"title\" text-anchor=\"middle\">{}</text>",
        width / 2.0,
        escape(title)
    );
}

/// The chart as SVG text; `None` when no line has a point.
pub fn line_chart(chart: &Chart) -> Option<String> {
    let points: Vec<(f64, f64)> = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!chart.log_x || *x > 0.0))
        .collect();
    if points.is_empty() {
        return None;
    }
    let fx = |x: f64| if chart.log_x { x.log2() } else { x };
    let mut x_min = points.iter().map(|p| fx(p.0)).fold(f64::INFINITY, f64::min);
    let mut x_max = points
        .iter()
        .map(|p| fx(p.0))
        .fold(f64::NEG_INFINITY, f64::max);
    for (x, _) in &chart.marks {
        if *x > 0.0 || !chart.log_x {
            x_min = x_min.min(fx(*x));
            x_max = x_max.max(fx(*x));
        }
    }
    if x_max - x_min < 1e-9 {
        x_min -= 1.0;
        x_max += 1.0;
    }
    let y_top = points
        .iter()
        .map(|p| p.1)
        .chain(
            chart
                .lines
                .iter()
                .flat_map(|l| l.ranges.iter().map(|r| r.2))
                .filter(|y| y.is_finite()),
        )
        .fold(0.0, f64::max);
    let y_step = tick_step(y_top.max(1e-9));
    let y_max = ((y_top / y_step).ceil() * y_step).max(y_step);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (fx(x) - x_min) / (x_max - x_min) * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_max * plot_h;
    // The legend goes under the chart, never over the data: as many
    // entries a row as fit, a row 18 units high.
    let legend = legend_layout(chart);
    let height = HEIGHT
        + legend
            .last()
            .map_or(0.0, |&(_, row, _)| 18.0 * (row + 1) as f64 + 6.0);

    let mut out = String::new();
    open_svg(&mut out, WIDTH, height, &chart.title);
    // Grid and y ticks.
    let mut y = 0.0;
    while y <= y_max + y_step / 2.0 {
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\" class=\"grid\"/><text x=\"{}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            sy(y) + 4.0,
            tick(y, y_step),
            py = sy(y)
        );
        y += y_step;
    }
    // X ticks: powers of two on a log axis (every other one when crowded),
    // round numbers otherwise.
    let mut ticks = Vec::new();
    if chart.log_x {
        let (lo, hi) = (x_min.ceil() as i32, x_max.floor() as i32);
        let every = ((hi - lo) / 10 + 1).max(1);
        ticks.extend(
            (lo..=hi)
                .filter(|e| (e - lo) % every == 0)
                .map(|e| 2f64.powi(e)),
        );
    } else {
        // Whole numbers (thread counts) get whole-number ticks.
        let whole = points.iter().all(|p| p.0.fract() == 0.0);
        let step = if whole {
            tick_step(x_max - x_min).max(1.0)
        } else {
            tick_step(x_max - x_min)
        };
        let mut x = (x_min / step).ceil() * step;
        while x <= x_max + step / 1e6 {
            ticks.push(x);
            x += step;
        }
    }
    for x in ticks {
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{}\" y2=\"{}\" class=\"axis\"/><text x=\"{px:.1}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
            TOP + plot_h,
            TOP + plot_h + 5.0,
            TOP + plot_h + 18.0,
            escape(&(chart.x_format)(x)),
            px = sx(x)
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{b}\" y2=\"{b}\" class=\"axis\"/><line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{TOP}\" y2=\"{b}\" class=\"axis\"/>",
        WIDTH - RIGHT,
        b = TOP + plot_h
    );
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"middle\">{}</text><text transform=\"translate(16 {}) rotate(-90)\" class=\"label\" text-anchor=\"middle\">{}</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0,
        escape(&chart.x_label),
        TOP + plot_h / 2.0,
        escape(&chart.y_label)
    );
    for (i, (x, label)) in chart.marks.iter().enumerate() {
        if chart.log_x && *x <= 0.0 {
            continue;
        }
        let px = sx(*x);
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{TOP}\" y2=\"{}\" class=\"mark\"/><text x=\"{:.1}\" y=\"{}\" class=\"mark-label\">{}</text>",
            TOP + plot_h,
            px + 3.0,
            TOP + 12.0 + 13.0 * (i % 3) as f64,
            escape(label)
        );
    }
    for (i, line) in chart.lines.iter().enumerate() {
        let path: Vec<String> = line
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!chart.log_x || *x > 0.0))
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let class = format!("series s{}", i % 6);
        let _ = write!(
            out,
            "<polyline class=\"{class}\" fill=\"none\" points=\"{}\"/>",
            path.join(" ")
        );
        for point in &path {
            let (x, y) = point.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                out,
                "<circle class=\"{class}\" cx=\"{x}\" cy=\"{y}\" r=\"3\"/>"
            );
        }
        for &(x, low, high) in &line.ranges {
            if !(x.is_finite() && low.is_finite() && high.is_finite()) || (chart.log_x && x <= 0.0)
            {
                continue;
            }
            let _ = write!(
                out,
                "<line class=\"{class} range\" x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
                sy(low),
                sy(high),
                px = sx(x)
            );
        }
    }
    for &(i, row, lx) in &legend {
        let class = format!("series s{}", i % 6);
        let ly = HEIGHT + 4.0 + 18.0 * row as f64;
        let _ = write!(
            out,
            "<line class=\"{class}\" x1=\"{lx:.1}\" x2=\"{:.1}\" y1=\"{ly}\" y2=\"{ly}\"/><text x=\"{:.1}\" y=\"{}\" class=\"tick\">{}</text>",
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            escape(&chart.lines[i].name)
        );
    }
    out.push_str("</svg>");
    Some(out)
}

/// Where each line's legend entry goes under the chart, `(line, row, x)`:
/// entries left to right, a new row when the next would pass the right
/// edge (its width estimated at 7 units a character of the tick font).
/// None for a single line: its name is the chart's title.
fn legend_layout(chart: &Chart) -> Vec<(usize, usize, f64)> {
    if chart.lines.len() < 2 {
        return Vec::new();
    }
    let (mut row, mut x) = (0, LEFT);
    let mut out = Vec::new();
    for (i, line) in chart.lines.iter().enumerate() {
        let width = 24.0 + 7.0 * line.name.chars().count() as f64 + 18.0;
        if x > LEFT && x + width > WIDTH - RIGHT {
            row += 1;
            x = LEFT;
        }
        out.push((i, row, x));
        x += width;
    }
    out
}

/// Horizontal bars, one per `(label, value)`, the value written at the
/// end of each; `None` when there is none.
pub fn bar_chart(title: &str, unit: &str, bars: &[(String, f64)]) -> Option<String> {
    if bars.is_empty() {
        return None;
    }
    let top = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9);
    let row = 30.0;
    let height = 44.0 + row * bars.len() as f64 + 10.0;
    let label_w = 200.0;
    let bar_w = WIDTH - label_w - 110.0;
    let mut out = String::new();
    open_svg(&mut out, WIDTH, height, title);
    for (i, (label, value)) in bars.iter().enumerate() {
        let y = 40.0 + row * i as f64;
        let w = (value / top * bar_w).max(1.0);
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text><rect class=\"bar s{}\" x=\"{label_w}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">{} {}</text>",
            label_w - 8.0,
            y + row * 0.55,
            escape(label),
            i % 6,
            row * 0.7,
            label_w + w + 6.0,
            y + row * 0.55,
            plain(*value),
            escape(unit)
        );
    }
    out.push_str("</svg>");
    Some(out)
}

/// The most nodes drawn in one row with the distances as arcs between
/// them; larger machines get a grid, and the distances as a table.
pub const ARC_NODES: usize = 8;

/// The machine: packages, nodes (memory, CPUs, last-level caches, nearby
/// devices) and, up to [`ARC_NODES`] nodes, the firmware's distances as
/// labelled arcs between them.
pub fn topology(topology: &Topology) -> String {
    let package_of = |node: u32| {
        topology
            .cpus
            .iter()
            .find(|c| c.node == Some(node))
            .map(|c| c.package)
    };
    let mut nodes: Vec<&numalab::topology::Node> = topology.nodes.iter().collect();
    // Packages in order, memory-only nodes after them.
    nodes.sort_by_key(|n| (package_of(n.id).unwrap_or(u32::MAX), n.id));
    let n = nodes.len().max(1);
    let arcs = n <= ARC_NODES && topology.distances.is_some() && n > 1;
    let columns = n.min(ARC_NODES);
    let rows = n.div_ceil(columns);
    let box_w: f64 = if columns <= 2 { 240.0 } else { 150.0 };
    let box_h = 118.0;
    let gap = 22.0;
    let pkg_pad = 12.0;
    let width = (columns as f64 * (box_w + gap) + gap + 2.0 * pkg_pad).max(480.0);
    // Room above the row for nested arcs: the widest spans the row.
    let arc_room = if arcs {
        26.0 + 16.0 * (n - 1) as f64
    } else {
        0.0
    };
    let top = 40.0 + arc_room;
    let height = top + rows as f64 * (box_h + gap + 2.0 * pkg_pad) + 10.0;
    let x_of = |i: usize| gap + pkg_pad + (i % columns) as f64 * (box_w + gap);
    let y_of = |i: usize| top + pkg_pad + (i / columns) as f64 * (box_h + gap + 2.0 * pkg_pad);

    let mut out = String::new();
    let title = format!(
        "{}, {}, {}{}",
        count(topology.packages, "package"),
        count(topology.nodes.len(), "node"),
        count(topology.cpus.len(), "CPU"),
        if arcs {
            ": firmware distances (SLIT) on the arcs"
        } else {
            ""
        }
    );
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"topology\" viewBox=\"0 0 {width:.0} {height:.0}\" width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\" aria-label=\"{}\">",
        escape(&title)
    );
    let _ = write!(
        out,
        "<text x=\"{:.0}\" y=\"22\" class=\"title\" text-anchor=\"middle\">{}</text>",
        width / 2.0,
        escape(&title)
    );
    // Package outlines around runs of nodes of one package in one row.
    let mut i = 0;
    while i < nodes.len() {
        let package = package_of(nodes[i].id);
        let mut j = i + 1;
        while j < nodes.len() && package_of(nodes[j].id) == package && j / columns == i / columns {
            j += 1;
        }
        let x = x_of(i) - pkg_pad;
        let y = y_of(i) - pkg_pad;
        let w = x_of(j - 1) + box_w + pkg_pad - x;
        let label = package.map_or("no CPUs".to_owned(), |p| format!("package {p}"));
        let _ = write!(
            out,
            "<rect class=\"package\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" rx=\"8\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">{}</text>",
            box_h + 2.0 * pkg_pad,
            x + 6.0,
            y + box_h + 2.0 * pkg_pad - 3.0,
            escape(&label)
        );
        i = j;
    }
    if arcs {
        if let Some(distances) = &topology.distances {
            for a in 0..nodes.len() {
                for b in a + 1..nodes.len() {
                    let Some(d) = distances.get(nodes[a].id, nodes[b].id) else {
                        continue;
                    };
                    let back = distances.get(nodes[b].id, nodes[a].id);
                    let label = match back {
                        Some(back) if back != d => format!("{d}/{back}"),
                        _ => d.to_string(),
                    };
                    let (xa, xb) = (x_of(a) + box_w / 2.0, x_of(b) + box_w / 2.0);
                    let base = y_of(a) - pkg_pad;
                    let lift = 22.0 + 16.0 * (b - a - 1) as f64 + 4.0 * a as f64;
                    let _ = write!(
                        out,
                        "<path class=\"link\" d=\"M{xa:.1},{base:.1} C{xa:.1},{:.1} {xb:.1},{:.1} {xb:.1},{base:.1}\" fill=\"none\"><title>node {} to node {}: {label}</title></path><text x=\"{:.1}\" y=\"{:.1}\" class=\"link-label\" text-anchor=\"middle\">{}</text>",
                        base - lift * 1.3,
                        base - lift * 1.3,
                        nodes[a].id,
                        nodes[b].id,
                        (xa + xb) / 2.0,
                        base - lift + 2.0,
                        escape(&label)
                    );
                }
            }
        }
    }
    // Devices near every node (one host bridge for all) are shown once,
    // on the first node.
    let shared: Vec<String> = topology
        .devices
        .iter()
        .filter(|d| d.nodes.len() >= topology.nodes.len().max(2))
        .filter_map(|d| d.os_devices.first().cloned())
        .filter(|name| !name.is_empty())
        .collect();
    for (i, node) in nodes.iter().enumerate() {
        let (x, y) = (x_of(i), y_of(i));
        let caches: Vec<String> = topology
            .last_level_caches
            .iter()
            .filter(|c| c.nodes.contains(node.id))
            .map(|c| format!("L{} {}", c.level, format_size(c.size_bytes)))
            .collect();
        let caches = summarize(&caches);
        let devices: Vec<String> = topology
            .devices
            .iter()
            .filter(|d| d.nodes.contains(node.id) && d.nodes.len() < topology.nodes.len().max(2))
            .map(|d| {
                d.os_devices
                    .first()
                    .cloned()
                    .unwrap_or_else(|| format!("{:?}", d.kind).to_lowercase())
            })
            .collect();
        let kind = if node.cpus.is_empty() {
            node.subtype
                .clone()
                .unwrap_or_else(|| "memory only".to_owned())
        } else {
            format!("CPUs {}", node.cpus)
        };
        let mut lines = vec![
            format_size(node.memory_bytes),
            kind,
            caches.unwrap_or_default(),
        ];
        let mut near = devices;
        if i == 0 {
            near.extend(shared.iter().cloned());
        }
        if !near.is_empty() {
            let shown: Vec<String> = near.iter().take(3).cloned().collect();
            let more = near.len().saturating_sub(3);
            lines.push(format!(
                "{}{}",
                shown.join(", "),
                if more > 0 {
                    format!(" +{more}")
                } else {
                    String::new()
                }
            ));
        }
        let class = if node.cpus.is_empty() {
            "node memory-only"
        } else {
            "node"
        };
        let _ = write!(
            out,
            "<g><title>node {}: {}</title><rect class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{box_w}\" height=\"{box_h}\" rx=\"6\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"node-name\">node {}</text>",
            node.id,
            escape(&lines.join("; ")),
            x + 10.0,
            y + 22.0,
            node.id
        );
        for (k, line) in lines.iter().filter(|l| !l.is_empty()).enumerate() {
            let max_chars = (box_w / 7.2) as usize;
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">{}</text>",
                x + 10.0,
                y + 44.0 + 18.0 * k as f64,
                escape(&clip(line, max_chars))
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

/// `L3 32 MiB ×2` for repeated entries.
fn summarize(items: &[String]) -> Option<String> {
    let first = items.first()?;
    if items.iter().all(|i| i == first) && items.len() > 1 {
        Some(format!("{first} ×{}", items.len()))
    } else {
        Some(items.join(", "))
    }
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(svg: &str, what: &str) -> usize {
        svg.matches(what).count()
    }

    #[test]
    fn two_nodes_get_one_arc_with_their_distance() {
        let mut machine = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        assert_eq!(
            count(&topology(&machine), "class=\"link\""),
            0,
            "no SLIT, no arc"
        );
        machine.distances = Some(numalab::topology::Distances {
            nodes: vec![0, 1],
            values: vec![vec![10, 21], vec![21, 10]],
        });
        let svg = topology(&machine);
        assert_eq!(count(&svg, "class=\"node\""), 2);
        assert_eq!(count(&svg, "class=\"link\""), 1);
        assert!(svg.contains(">21</text>"), "{svg}");
        assert_eq!(count(&svg, "class=\"package\""), 2);
    }

    #[test]
    fn sixty_four_nodes_get_a_grid_and_no_arcs() {
        let machine = Topology::from_synthetic("pack:4 numa:16 core:2 pu:1").unwrap();
        let svg = topology(&machine);
        assert_eq!(count(&svg, "class=\"node\""), 64);
        assert_eq!(count(&svg, "class=\"link\""), 0);
        // Eight to a row: the picture stays as wide as eight boxes.
        let width: f64 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        assert!(width < 1500.0, "{width}");
    }

    #[test]
    fn ticks_of_one_axis_share_their_decimals() {
        assert_eq!(tick(1.0, 0.2), "1.0");
        assert_eq!(tick(0.8, 0.2), "0.8");
        assert_eq!(tick(0.05, 0.05), "0.05");
        assert_eq!(tick(2500.0, 500.0), "2500");
        assert_eq!(tick(3.0, f64::NAN), "3");
    }

    #[test]
    fn a_page_chart_draws_its_bars_and_keeps_its_legend_off_the_data() {
        let line = |name: &str, y: f64| Line {
            name: name.into(),
            points: vec![(1.0, y), (2.0, y + 10.0)],
            ranges: vec![(1.0, y - 1.0, y + 30.0), (2.0, y + 9.0, y + 11.0)],
        };
        let chart = Chart {
            title: "sweep".into(),
            x_label: "threads".into(),
            y_label: "ms".into(),
            lines: vec![line("local", 10.0), line("remote", 20.0)],
            log_x: false,
            marks: Vec::new(),
            x_format: plain,
        };
        let svg = line_chart(&chart).unwrap();
        assert_eq!(count(&svg, "range\""), 4, "a bar per range: {svg}");
        // The tallest bar (20 + 30 = 50) is inside the y axis.
        assert!(svg.contains(">50<"), "{svg}");
        // The chart grew to hold the legend under the plot.
        assert!(
            svg.contains(&format!("height=\"{}\"", HEIGHT + 24.0)),
            "{svg}"
        );
        let legend_y: f64 = svg
            .split("class=\"tick\">local<")
            .next()
            .and_then(|before| before.rsplit("y=\"").next())
            .and_then(|y| y.split('"').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            legend_y > HEIGHT,
            "legend at {legend_y}, the chart ends at {HEIGHT}"
        );
    }

    #[test]
    fn a_log_chart_places_marks_and_ticks_in_order() {
        let chart = Chart {
            title: "latency by working set".into(),
            x_label: "working set".into(),
            y_label: "ns".into(),
            lines: vec![Line {
                name: "node 0".into(),
                points: vec![(262144.0, 4.0), (1048576.0, 10.0), (67108864.0, 90.0)],
                ranges: Vec::new(),
            }],
            log_x: true,
            marks: vec![(33554432.0, "L3 32 MiB".into())],
            x_format: bytes,
        };
        let svg = line_chart(&chart).unwrap();
        assert_eq!(count(&svg, "<circle"), 3);
        assert!(svg.contains("L3 32 MiB"));
        assert!(
            svg.contains(">256 KiB<") && svg.contains(">64 MiB<"),
            "{svg}"
        );
        assert!(line_chart(&Chart {
            lines: vec![],
            ..chart
        })
        .is_none());
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(100.0), 20.0);
        assert_eq!(tick_step(7.0), 1.0);
        assert_eq!(plain(12.0), "12");
        assert_eq!(plain(0.25), "0.25");
    }
}
