//! Figures, as SVG and PNG, drawn from saved results (never from live
//! state): line charts of a figure of merit against a swept parameter, and
//! heat maps of node-by-node matrices. The DejaVu font is built in, so
//! plots render the same on a server without fonts.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{anyhow, bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters_backend::{BackendColor, BackendStyle, BackendTextStyle, DrawingErrorKind};

use crate::output::{check_target, write_atomically};

const SIZE: (u32, u32) = (1000, 650);

fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is a valid TrueType file shipped in the crate; a failure
        // would only make text disappear.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
    });
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// `(x, low, high)`: a vertical bar from low to high at x, in the
    /// line's colour (the spread of the repeats behind a point).
    pub ranges: Vec<(f64, f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// A matrix drawn as coloured cells with their values written in.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    /// Title above the plot.
    pub title: String,
    /// What the rows are (e.g. "CPU node").
    pub row_label: String,
    /// What the columns are (e.g. "memory node").
    pub col_label: String,
    /// Row names.
    pub rows: Vec<String>,
    /// Column names.
    pub cols: Vec<String>,
    /// `values[row][col]`; `None` for a cell that was not measured.
    pub values: Vec<Vec<Option<f64>>>,
    /// Unit written after each value.
    pub unit: String,
}

/// Draws `chart` into `<stem>.svg` and `<stem>.png` (each replaced whole,
/// see [`write_atomically`]) and returns both paths.
pub fn line_chart(chart: &LineChart, stem: &Path) -> Result<Vec<PathBuf>> {
    render(stem, |root| draw_lines(root, chart))
}

/// Draws `map` into `<stem>.svg` and `<stem>.png`.
pub fn heatmap(map: &Heatmap, stem: &Path) -> Result<Vec<PathBuf>> {
    render(stem, |root| draw_heatmap(root, map))
}

/// A figure of either kind, to be drawn to files or to SVG text.
#[derive(Debug, Clone, PartialEq)]
pub enum Drawing {
    /// A line chart.
    Lines(LineChart),
    /// A heat map.
    Heat(Heatmap),
}

impl Drawing {
    /// Draws it into `<stem>.svg` and `<stem>.png`.
    pub fn write(&self, stem: &Path) -> Result<Vec<PathBuf>> {
        match self {
            Drawing::Lines(chart) => line_chart(chart, stem),
            Drawing::Heat(map) => heatmap(map, stem),
        }
    }

    /// Draws it as SVG text, writing no file.
    pub fn svg(&self) -> Result<String> {
        register_fonts();
        match self {
            Drawing::Lines(chart) => draw_svg(|root| draw_lines(root, chart)),
            Drawing::Heat(map) => draw_svg(|root| draw_heatmap(root, map)),
        }
    }
}

/// `<stem>.<ext>`, appended rather than `with_extension`: a stem such as
/// `run.1` keeps its dot.
fn with_ext(stem: &Path, ext: &str) -> PathBuf {
    let mut name = stem.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// Refuses a figure stem whose `<stem>.svg` or `<stem>.png` could not be
/// written (a missing directory, a link or a device there), before
/// anything is measured or drawn; and a stem that names no file — one
/// ending in `/`, `.` or `..` would give hidden files `.svg` and `.png`
/// in a directory — or whose files would land among the devices in
/// `/dev` (`-o /dev/null` gives `/dev/null.svg`). `/dev/shm`, a file
/// system for files, is a directory like any other.
pub fn check_stem(stem: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let name = stem.as_os_str().as_bytes().rsplit(|&b| b == b'/').next();
    if matches!(name, None | Some(b"" | b"." | b"..")) {
        bail!(
            "{} names no file: a figure stem is the start of the files' names, such as figures/run for figures/run.svg and figures/run.png",
            stem.display()
        );
    }
    let dir = match stem.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if let Ok(dir) = std::fs::canonicalize(dir) {
        if dir.starts_with("/dev") && !dir.starts_with("/dev/shm") {
            bail!(
                "{}: numalab writes no figures into {}, a directory of devices; give a stem in another directory",
                stem.display(),
                dir.display()
            );
        }
    }
    check_target(&with_ext(stem, "svg"))?;
    check_target(&with_ext(stem, "png"))
}

/// Renders with both backends, into memory, and writes both files once
/// both are drawn. The closure is called once per backend, through a trait
/// object so one drawing function serves both.
fn render(
    stem: &Path,
    draw: impl Fn(&DrawingArea<DynBackend<'_>, Shift>) -> Result<()>,
) -> Result<Vec<PathBuf>> {
    register_fonts();
    let svg_path = with_ext(stem, "svg");
    let png_path = with_ext(stem, "png");
    check_stem(stem)?;

    let svg = draw_svg(&draw).map_err(|e| anyhow!("drawing {}: {e}", svg_path.display()))?;

    let (width, height) = SIZE;
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let backend = DynBackend::Bitmap(BitMapBackend::with_buffer(&mut pixels, SIZE));
        let root = backend.into_drawing_area();
        draw(&root)?;
        root.present()
            .map_err(|e| anyhow!("drawing {}: {e}", png_path.display()))?;
    }
    let png =
        encode_png(&pixels, SIZE).map_err(|e| anyhow!("drawing {}: {e}", png_path.display()))?;

    write_atomically(&svg_path, svg.as_bytes())?;
    write_atomically(&png_path, &png)?;
    Ok(vec![svg_path, png_path])
}

/// The drawing as SVG text.
fn draw_svg(draw: impl Fn(&DrawingArea<DynBackend<'_>, Shift>) -> Result<()>) -> Result<String> {
    let mut svg = String::new();
    {
        let backend = DynBackend::Svg(SVGBackend::with_string(&mut svg, SIZE));
        let root = backend.into_drawing_area();
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// RGB pixels, 8 bits each, as a PNG file.
fn encode_png(pixels: &[u8], (width, height): (u32, u32)) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(out)
}

/// The two backends behind one type, so drawing code is written once.
enum DynBackend<'a> {
    Svg(SVGBackend<'a>),
    Bitmap(BitMapBackend<'a>),
}

impl DrawingBackend for DynBackend<'_> {
    type ErrorType = std::io::Error;

    fn get_size(&self) -> (u32, u32) {
        match self {
            DynBackend::Svg(b) => b.get_size(),
            DynBackend::Bitmap(b) => b.get_size(),
        }
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.ensure_prepared().map_err(convert),
            DynBackend::Bitmap(b) => b.ensure_prepared().map_err(convert),
        }
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.present().map_err(convert),
            DynBackend::Bitmap(b) => b.present().map_err(convert),
        }
    }

    fn draw_pixel(
        &mut self,
        point: (i32, i32),
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.draw_pixel(point, color).map_err(convert),
            DynBackend::Bitmap(b) => b.draw_pixel(point, color).map_err(convert),
        }
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: (i32, i32),
        to: (i32, i32),
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.draw_line(from, to, style).map_err(convert),
            DynBackend::Bitmap(b) => b.draw_line(from, to, style).map_err(convert),
        }
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: (i32, i32),
        bottom_right: (i32, i32),
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b
                .draw_rect(upper_left, bottom_right, style, fill)
                .map_err(convert),
            DynBackend::Bitmap(b) => b
                .draw_rect(upper_left, bottom_right, style, fill)
                .map_err(convert),
        }
    }

    // Paths, circles and polygons go to the backends' own primitives: the
    // trait's defaults rasterise them pixel by pixel, which in SVG means
    // one <rect> per pixel of every thick line.
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = (i32, i32)>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.draw_path(path, style).map_err(convert),
            DynBackend::Bitmap(b) => b.draw_path(path, style).map_err(convert),
        }
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: (i32, i32),
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.draw_circle(center, radius, style, fill).map_err(convert),
            DynBackend::Bitmap(b) => b.draw_circle(center, radius, style, fill).map_err(convert),
        }
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = (i32, i32)>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.fill_polygon(vert, style).map_err(convert),
            DynBackend::Bitmap(b) => b.fill_polygon(vert, style).map_err(convert),
        }
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: (i32, i32),
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.draw_text(text, style, pos).map_err(convert),
            DynBackend::Bitmap(b) => b.draw_text(text, style, pos).map_err(convert),
        }
    }

    fn blit_bitmap(
        &mut self,
        pos: (i32, i32),
        (w, h): (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        match self {
            DynBackend::Svg(b) => b.blit_bitmap(pos, (w, h), src).map_err(convert),
            DynBackend::Bitmap(b) => b.blit_bitmap(pos, (w, h), src).map_err(convert),
        }
    }
}

fn convert<E: std::error::Error + Send + Sync>(
    err: DrawingErrorKind<E>,
) -> DrawingErrorKind<std::io::Error> {
    match err {
        DrawingErrorKind::DrawingError(e) => {
            DrawingErrorKind::DrawingError(std::io::Error::other(e.to_string()))
        }
        DrawingErrorKind::FontError(e) => DrawingErrorKind::FontError(e),
    }
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the figure: {e}")
}

/// The largest magnitude drawn on a chart's axis. Beyond it (and for
/// infinities and NaN, which a hand-edited or corrupt result can hold) a
/// point is left out: the axis's tick computation never ends for a range
/// as wide as `f64` itself.
const MAX_DRAWN: f64 = 1e300;

/// Whether a point can be placed on a chart.
fn drawable(&(x, y): &(f64, f64)) -> bool {
    x.is_finite() && y.is_finite() && x.abs() <= MAX_DRAWN && y.abs() <= MAX_DRAWN
}

/// The axis ranges for `points`: x over the points (widened when they
/// share one x), y from 0 (or the lowest point, when below) to 10% above
/// the highest. Every bound is finite and within `1.1 * MAX_DRAWN`.
fn axis_ranges(points: &[(f64, f64)]) -> ((f64, f64), (f64, f64)) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, 0.0f64);
    for &(x, y) in points.iter().filter(|p| drawable(p)) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x0 == x1 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
    let y0 = if y0 < 0.0 { y0 * 1.1 } else { 0.0 };
    ((x0, x1), (y0, y1))
}

fn draw_lines(root: &DrawingArea<DynBackend<'_>, Shift>, chart: &LineChart) -> Result<()> {
    root.fill(&WHITE).map_err(plot_err)?;
    let all: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    // The axes hold the bars' ends too.
    let extent: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.ranges.iter().flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]))
        .chain(all.iter().copied())
        .collect();
    let ((x0, x1), (y0, y1)) = axis_ranges(&extent);
    let left_out = all.iter().filter(|p| !drawable(p)).count();
    let caption = if left_out == 0 {
        chart.title.clone()
    } else {
        format!(
            "{} ({left_out} of {} left out: infinite, NaN or beyond 1e300)",
            chart.title,
            numalab::units::count(all.len(), "point")
        )
    };
    // The legend gets a strip of its own under the chart, never over the
    // data: a row of entries per 30 pixels.
    let legend = legend_rows(chart);
    let strip = if legend.is_empty() {
        0
    } else {
        20 + 30 * (legend.len() as u32 + 1)
    };
    let (chart_area, legend_area) = root.split_vertically(SIZE.1 - strip);
    // Points at the ends of a whole-number axis are drawn clear of the
    // frame (their bars too).
    let whole = all
        .iter()
        .filter(|p| drawable(p))
        .all(|p| p.0.fract() == 0.0);
    let (x0, x1) = if whole {
        let pad = (x1 - x0) * 0.04;
        (x0 - pad, x1 + pad)
    } else {
        (x0, x1)
    };
    let mut ctx = ChartBuilder::on(&chart_area)
        .caption(&caption, ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(96)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(plot_err)?;
    // A count (threads) is drawn with a tick at each whole number, at
    // most 12 of them, and written without a fraction.
    let x_labels = if whole {
        ((x1 - x0).round() + 1.0).clamp(2.0, 12.0) as usize
    } else {
        10
    };
    // Only whole ticks are written: a fraction plotters may still pick
    // gets no label rather than a rounded one.
    let whole_number = |x: &f64| {
        if x.fract() == 0.0 {
            format!("{x:.0}")
        } else {
            String::new()
        }
    };
    let y_number = |y: &f64| numalab::units::plain(*y);
    let mut mesh = ctx.configure_mesh();
    mesh.x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .label_style(("sans-serif", 18))
        .axis_desc_style(("sans-serif", 20))
        .x_labels(x_labels)
        .x_max_light_lines(1)
        .y_max_light_lines(1)
        .y_label_formatter(&y_number);
    if whole {
        mesh.x_label_formatter(&whole_number);
    }
    mesh.draw().map_err(plot_err)?;
    for (i, series) in chart.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        ctx.draw_series(LineSeries::new(
            series.points.iter().copied().filter(drawable),
            Color::stroke_width(&color, 3),
        ))
        .map_err(plot_err)?
        .label(&series.name)
        .legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 24, y)], Color::stroke_width(&color, 3))
        });
        ctx.draw_series(
            series
                .points
                .iter()
                .filter(|p| drawable(p))
                .map(|&p| Circle::new(p, 4, color.filled())),
        )
        .map_err(plot_err)?;
        ctx.draw_series(
            series
                .ranges
                .iter()
                .filter(|&&(x, lo, hi)| drawable(&(x, lo)) && drawable(&(x, hi)))
                .map(|&(x, lo, hi)| {
                    PathElement::new(vec![(x, lo), (x, hi)], Color::stroke_width(&color, 2))
                }),
        )
        .map_err(plot_err)?;
    }
    let named: usize = legend.iter().map(Vec::len).sum();
    if named < chart.series.len() {
        legend_area
            .draw(&Text::new(
                format!(
                    "… {} more lines, named in the table",
                    chart.series.len() - named
                ),
                (116, 20 + 30 * legend.len() as i32 - 10),
                ("sans-serif", 16),
            ))
            .map_err(plot_err)?;
    }
    for (row, entries) in legend.iter().enumerate() {
        let y = 20 + 30 * row as i32;
        for &(i, x) in entries {
            let color = Palette99::pick(i).to_rgba();
            legend_area
                .draw(&PathElement::new(
                    vec![(x, y), (x + 28, y)],
                    Color::stroke_width(&color, 3),
                ))
                .map_err(plot_err)?;
            legend_area
                .draw(&Text::new(
                    chart.series[i].name.clone(),
                    (x + 36, y - 10),
                    ("sans-serif", 18),
                ))
                .map_err(plot_err)?;
        }
    }
    Ok(())
}

/// The legend's rows under a line chart: each entry `(series, x)`, left to
/// right, a new row when the next would pass the right edge (its width
/// estimated at 10 pixels a character). None for one unnamed line.
fn legend_rows(chart: &LineChart) -> Vec<Vec<(usize, i32)>> {
    if chart.series.len() < 2 && chart.series.first().is_none_or(|s| s.name.is_empty()) {
        return Vec::new();
    }
    let (left, right) = (116, SIZE.0 as i32 - 20);
    let mut rows: Vec<Vec<(usize, i32)>> = vec![Vec::new()];
    let mut x = left;
    for (i, series) in chart.series.iter().enumerate() {
        let width = 36 + 10 * series.name.chars().count().min(80) as i32 + 24;
        if x > left && x + width > right {
            rows.push(Vec::new());
            x = left;
        }
        rows.last_mut().expect("one row at least").push((i, x));
        x += width;
    }
    // At most 8 rows (a third of the figure); the lines past them are
    // drawn, their names not.
    rows.truncate(8);
    rows
}

fn draw_heatmap(root: &DrawingArea<DynBackend<'_>, Shift>, map: &Heatmap) -> Result<()> {
    root.fill(&WHITE).map_err(plot_err)?;
    let (rows, cols) = (map.rows.len().max(1), map.cols.len().max(1));
    let values: Vec<f64> = map.values.iter().flatten().flatten().copied().collect();
    let lo = values.iter().copied().fold(f64::MAX, f64::min);
    let hi = values.iter().copied().fold(f64::MIN, f64::max);
    // Cell (r, c) spans [c, c + 1] x [rows - 1 - r, rows - r]: row 0 at the
    // top, as in a printed matrix. The axes carry no numbers; each row and
    // column is named at its middle.
    let mut ctx = ChartBuilder::on(root)
        .caption(&map.title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..cols as f64, 0.0..rows as f64)
        .map_err(plot_err)?;
    ctx.configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_desc(&map.col_label)
        .y_desc(&map.row_label)
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(plot_err)?;
    let centered = |size| {
        TextStyle::from(("sans-serif", size).into_font()).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Center,
            ),
        )
    };
    for (c, name) in map.cols.iter().enumerate() {
        let (x, y) = ctx.backend_coord(&(c as f64 + 0.5, 0.0));
        root.draw_text(name, &centered(16), (x, y + 14))
            .map_err(plot_err)?;
    }
    for (r, name) in map.rows.iter().enumerate() {
        let (x, y) = ctx.backend_coord(&(0.0, (rows - r) as f64 - 0.5));
        root.draw_text(name, &centered(16), (x - 30, y))
            .map_err(plot_err)?;
    }
    for (r, row) in map.values.iter().enumerate() {
        for (c, value) in row.iter().enumerate() {
            let y = (rows - 1 - r) as f64;
            let x = c as f64;
            let (fill, text) = match value {
                Some(v) => {
                    let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
                    (
                        RGBColor(255, (230.0 - 150.0 * t) as u8, (200.0 - 180.0 * t) as u8),
                        format!("{v:.1} {}", map.unit),
                    )
                }
                None => (RGBColor(235, 235, 235), "n/a".to_string()),
            };
            ctx.draw_series(std::iter::once(Rectangle::new(
                [(x, y), (x + 1.0, y + 1.0)],
                fill.filled(),
            )))
            .map_err(plot_err)?;
            let center = ctx.backend_coord(&(x + 0.5, y + 0.5));
            root.draw_text(&text, &centered(18), center)
                .map_err(plot_err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("numalab-plot-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn line_chart_writes_svg_and_png() {
        let chart = LineChart {
            title: "time to last thread".into(),
            x_label: "threads".into(),
            y_label: "seconds".into(),
            series: vec![
                Series {
                    ranges: Vec::new(),
                    name: "local".into(),
                    points: vec![(1.0, 2.0), (2.0, 1.1), (4.0, 0.6)],
                },
                Series {
                    ranges: Vec::new(),
                    name: "remote".into(),
                    points: vec![(1.0, 3.0), (2.0, 1.8), (4.0, 1.0)],
                },
            ],
        };
        let stem = scratch("lines");
        let paths = line_chart(&chart, &stem).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("remote") && svg.contains("threads"));
        let png = std::fs::read(&paths[1]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(stem.parent().unwrap()).unwrap();
    }

    #[test]
    fn svg_lines_are_paths_not_pixels() {
        let chart = LineChart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                ranges: Vec::new(),
                name: "local".into(),
                points: vec![(1.0, 2.0), (2.0, 1.0), (3.0, 3.0)],
            }],
        };
        let stem = scratch("paths");
        let paths = line_chart(&chart, &stem).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "thick lines are drawn as paths"
        );
        assert!(
            svg.len() < 200_000,
            "no pixel-by-pixel drawing: {} bytes",
            svg.len()
        );
        std::fs::remove_dir_all(stem.parent().unwrap()).unwrap();
    }

    /// Each range is a vertical line of its own, and the y axis reaches
    /// its top: without the bars the same chart has fewer lines and a
    /// lower axis.
    #[test]
    fn ranges_are_drawn_as_bars_within_the_axes() {
        let svg_of = |ranges: Vec<(f64, f64, f64)>| {
            let chart = LineChart {
                title: "t".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                series: vec![Series {
                    name: "local".into(),
                    points: vec![(1.0, 2.0), (2.0, 1.0)],
                    ranges,
                }],
            };
            let stem = scratch("bars");
            let paths = line_chart(&chart, &stem).unwrap();
            let svg = std::fs::read_to_string(&paths[0]).unwrap();
            std::fs::remove_dir_all(stem.parent().unwrap()).unwrap();
            svg
        };
        let plain = svg_of(Vec::new());
        let bars = svg_of(vec![(1.0, 1.5, 2.5), (2.0, 0.5, 9.0)]);
        // Bars are the only strokes 2 pixels wide (lines 3, the mesh 1).
        let bars_in = |svg: &str| svg.matches("stroke-width=\"2\"").count();
        assert_eq!(
            (bars_in(&plain), bars_in(&bars)),
            (0, 2),
            "one line per bar"
        );
        // The y axis's highest label: 2 without the bars, 9 with them
        // (the top bar ends at 9).
        let labels = |svg: &str| svg.replace('\n', "").contains(">9</text>");
        assert!(
            labels(&bars) && !labels(&plain),
            "the y axis reaches the bar's top"
        );
    }

    #[test]
    fn one_by_one_heatmap_has_its_cell() {
        let map = Heatmap {
            title: "one node".into(),
            row_label: "CPU node".into(),
            col_label: "memory node".into(),
            rows: vec!["node 0".into()],
            cols: vec!["node 0".into()],
            values: vec![vec![Some(161.0)]],
            unit: "ns".into(),
        };
        let stem = scratch("one");
        let paths = heatmap(&map, &stem).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(svg.contains("161.0 ns") && svg.contains("node 0"), "{svg}");
        std::fs::remove_dir_all(stem.parent().unwrap()).unwrap();
    }

    #[test]
    fn heatmap_writes_cells() {
        let map = Heatmap {
            title: "idle latency".into(),
            row_label: "CPU node".into(),
            col_label: "memory node".into(),
            rows: vec!["0".into(), "1".into()],
            cols: vec!["0".into(), "1".into(), "2".into()],
            values: vec![
                vec![Some(90.0), Some(140.0), None],
                vec![Some(141.0), Some(91.0), Some(250.0)],
            ],
            unit: "ns".into(),
        };
        let stem = scratch("heat");
        let paths = heatmap(&map, &stem).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(
            svg.contains("250.0 ns") && svg.contains("n/a"),
            "cells are labelled"
        );
        assert_eq!(&std::fs::read(&paths[1]).unwrap()[1..4], b"PNG");
        std::fs::remove_dir_all(stem.parent().unwrap()).unwrap();
    }

    fn chart_of(points: Vec<(f64, f64)>) -> LineChart {
        LineChart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                ranges: Vec::new(),
                name: "a".into(),
                points,
            }],
        }
    }

    /// The text of an SVG's `<text>` elements.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, rest)| rest.split_once("</text>"))
            })
            .map(|(text, _)| text.trim().to_owned())
            .collect()
    }

    #[test]
    fn a_count_axis_has_whole_ticks_and_the_legend_sits_under_the_data() {
        let mut chart = chart_of(vec![(1.0, 10.0), (2.0, 20.0), (4.0, 15.0)]);
        chart.series.push(Series {
            ranges: Vec::new(),
            name: "remote".into(),
            points: vec![(1.0, 12.0), (2.0, 22.0), (4.0, 17.0)],
        });
        let svg = Drawing::Lines(chart).svg().unwrap();
        let texts = texts(&svg);
        for tick in ["1", "2", "3", "4"] {
            assert!(texts.iter().any(|t| t == tick), "tick {tick}: {texts:?}");
        }
        assert!(
            !texts.iter().any(|t| t.contains('.')),
            "no fractional tick on a count: {texts:?}"
        );
        // The legend's names are below the x axis's label.
        let y_of = |name: &str| {
            svg.split("<text")
                .skip(1)
                .find_map(|t| {
                    let (tag, rest) = t.split_once('>')?;
                    let (text, _) = rest.split_once("</text>")?;
                    let y = tag.split(" y=\"").nth(1)?.split('"').next()?;
                    (text.trim() == name).then(|| y.parse::<f64>().unwrap())
                })
                .unwrap_or_else(|| panic!("no text {name}: {svg}"))
        };
        assert!(y_of("remote") > y_of("x"), "{svg}");
    }

    #[test]
    fn charts_of_extreme_values_finish() {
        // Each was an endless loop in the axis's tick computation (or an
        // overflow panic) before: a range as wide as f64 itself.
        let cases: Vec<Vec<(f64, f64)>> = vec![
            vec![(0.0, f64::MAX)],
            vec![(0.0, 1e308), (1.0, 1e308)],
            vec![(0.0, f64::INFINITY), (1.0, 2.0)],
            vec![(-1e308, 1.0), (1e308, 2.0)],
            vec![(0.0, 1.0), (1.0, -1e308)],
            vec![(0.0, f64::NAN), (f64::NAN, 2.0)],
            vec![(1e300, -1e300), (-1e300, 1e300)],
            vec![(0.0, 5e-324), (1.0, 5e-324)],
        ];
        let dir = scratch("extreme");
        let (tx, rx) = std::sync::mpsc::channel();
        let worker_dir = dir.clone();
        std::thread::spawn(move || {
            for (i, points) in cases.into_iter().enumerate() {
                let chart = chart_of(points.clone());
                let result = line_chart(&chart, &worker_dir.with_file_name(format!("extreme{i}")));
                tx.send((points, result.map(|_| ()).map_err(|e| e.to_string())))
                    .unwrap();
            }
        });
        for _ in 0..8 {
            // Generous: the test asserts that drawing ends, not how fast.
            let (points, result) = rx
                .recv_timeout(std::time::Duration::from_secs(300))
                .expect("a chart of extreme values is drawn in finite time");
            result.unwrap_or_else(|e| panic!("{points:?}: {e}"));
        }
        let svg = std::fs::read_to_string(dir.with_file_name("extreme1.svg")).unwrap();
        assert!(svg.contains("2 of 2 points left out"), "said in the title");
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_symlink_planted_at_the_old_png_temporary_is_not_followed() {
        // Before, the PNG was drawn by the bitmap backend into
        // `.NAME.png.tmp-PID.png` beside the target, following links.
        let stem = scratch("planted");
        let dir = stem.parent().unwrap().to_owned();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let planted = dir.join(format!(".planted.png.tmp-{}.png", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let paths = line_chart(&chart_of(vec![(1.0, 2.0), (2.0, 3.0)]), &stem).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        let png = std::fs::symlink_metadata(&paths[1]).unwrap();
        assert!(png.file_type().is_file());
        assert_eq!(&std::fs::read(&paths[1]).unwrap()[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
