//! Reading an experiment: the file, `--set` overrides, checks of every
//! range, and the cells of its sweep.

use std::path::Path;

use serde::Deserialize;

use crate::experiment::values::Pattern;
use crate::kernels::Mix;

use super::error::{from_toml_error, locate};
use super::sweep::{sets_no_key, sweep_axes};
use super::*;

impl Experiment {
    /// Reads an experiment file: a regular file (or a pipe) of at most
    /// 1 MiB, so `/dev/zero` or a huge file is refused, not read.
    pub fn from_file(path: &Path) -> Result<Experiment, ConfigError> {
        /// An experiment file is a few dozen lines; anything near this is
        /// not one.
        const MAX_EXPERIMENT_BYTES: u64 = 1 << 20;
        let text =
            numalab::files::read_text_limited(path, MAX_EXPERIMENT_BYTES, "experiment files")
                .map_err(|e| ConfigError::plain(format!("experiment file: {e}")))?;
        let mut exp = Self::from_toml_str(&text, &path.display().to_string())?;
        if exp.name == DEFAULT_NAME && !text.lines().any(|l| l.trim_start().starts_with("name")) {
            if let Some(stem) = path.file_stem() {
                exp.name = stem.to_string_lossy().into_owned();
            }
        }
        if sets_no_key(&text) {
            return Err(ConfigError::plain(format!(
                "{} sets no key (it is empty, or only comments and empty tables): an experiment file needs at least one, e.g. name = \"{}\" to run every default (docs/experiment-file.md lists the keys)",
                path.display(),
                exp.name
            )));
        }
        Ok(exp)
    }

    /// Parses an experiment from TOML text; `file` names it in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Experiment, ConfigError> {
        // The grid's keys where the file writes them: for its order (TOML
        // tables have none), its errors' locations, and its shape before
        // serde sees it.
        let axes = sweep_axes(text);
        for axis in &axes {
            if let Some(error) = &axis.not_a_list {
                return Err(ConfigError {
                    location: Some(Box::new(locate(file, text, axis.span.clone()))),
                    set_option: None,
                    message: error.clone(),
                    hint: None,
                });
            }
        }
        let at = |key: &str| {
            axes.iter()
                .find(|a| a.key == key)
                .map(|a| Box::new(locate(file, text, a.span.clone())))
        };
        let mut exp: Experiment =
            toml::from_str(text).map_err(|e| from_toml_error(&e, file, text))?;
        exp.sweep.axes.sort_by_key(|(key, _)| {
            axes.iter()
                .find(|a| &a.key == key)
                .map_or(usize::MAX, |a| a.span.start)
        });
        if exp.name.is_empty() {
            exp.name = DEFAULT_NAME.to_owned();
        }
        // The grid's size, counted before anything is made of it.
        exp.sweep.check_size().map_err(|mut e| {
            e.location = exp.sweep.axes.first().and_then(|(key, _)| at(key));
            e
        })?;
        exp.validate().map_err(|mut e| {
            e.location = key_location(file, text, &e.message).map(Box::new);
            e
        })?;
        for (key, values) in &exp.sweep.axes {
            if !settable_keys().any(|k| k == key) {
                return Err(ConfigError {
                    location: at(key),
                    set_option: None,
                    message: format!("sweep over unknown key \"{key}\""),
                    hint: nearest(key, settable_keys()).map(|k| format!("did you mean \"{k}\"?")),
                });
            }
            if values.is_empty() {
                return Err(ConfigError {
                    location: at(key),
                    set_option: None,
                    message: format!("sweep \"{key}\" lists no value"),
                    hint: None,
                });
            }
            // Each value must be valid for its key: its type, and its
            // range when the range is the key's own (combinations with
            // other axes are checked cell by cell).
            for value in values {
                let mut cell = exp.clone();
                cell.sweep = Sweep::default();
                let located = |mut e: ConfigError| {
                    e.set_option = None;
                    e.location = at(key);
                    e.message = format!("sweep \"{key}\" value {value}: {}", e.message);
                    e
                };
                cell.set_value(key, value.clone()).map_err(located)?;
                if let Err(e) = cell.validate() {
                    if e.message.split([':', ' ']).next() == Some(key.as_str()) {
                        return Err(located(e));
                    }
                }
            }
        }
        Ok(exp)
    }

    /// Checks what the types cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| ConfigError {
            location: None,
            set_option: None,
            message: format!("{key}: {message}"),
            hint: None,
        };
        // Counts first: everything after may multiply them.
        if self.threads.count == 0 {
            return Err(bad("threads.count", "must be at least 1".into()));
        }
        // Each count against its limit, in this order.
        let counts: [(&str, u64, u64, &str); 6] = [
            (
                "threads.count",
                self.threads.count.into(),
                MAX_THREADS.into(),
                "the most threads numalab starts",
            ),
            (
                "run.repeats",
                self.run.repeats.into(),
                MAX_REPEATS.into(),
                "the most repeats numalab runs",
            ),
            (
                "run.max_repeats",
                self.run.max_repeats.unwrap_or(0).into(),
                MAX_REPEATS.into(),
                "the most repeats numalab runs",
            ),
            (
                "run.warmup",
                self.run.warmup.into(),
                MAX_WARMUP.into(),
                "the most warm-up runs numalab runs",
            ),
            (
                "access.ops",
                self.access.ops.unwrap_or(0),
                MAX_OPS,
                "the most operations numalab counts in one run",
            ),
            (
                "access.lock_stripes",
                self.access.lock_stripes.into(),
                MAX_LOCK_STRIPES.into(),
                "the most locks numalab puts over a region",
            ),
        ];
        for (key, value, limit, what) in counts {
            if value > limit {
                return Err(ConfigError {
                    location: None,
                    set_option: None,
                    message: format!("{key} = {value} is more than {limit}, {what}"),
                    hint: None,
                });
            }
        }
        let rows = self.result_rows();
        if rows > MAX_RESULT_ROWS {
            return Err(bad(
                "threads.count",
                format!(
                    "{} x ({} + {}) make {rows} per-thread rows, more than {MAX_RESULT_ROWS}, the most one result holds; lower threads.count, run.repeats or run.warmup",
                    numalab::units::count(self.threads.count, "thread"),
                    numalab::units::count(self.run.warmup, "warm-up"),
                    numalab::units::count(self.run.most_repeats(), "repeat")
                ),
            ));
        }
        if self.memory.size.0 == 0 {
            return Err(bad("memory.size", "must be at least one byte".into()));
        }
        let op = self.access.op_size.0;
        if op < 8 || !op.is_multiple_of(8) {
            return Err(bad(
                "access.op_size",
                format!(
                    "{op} bytes: an operation is a whole number of 8-byte words (8, 64, 128, ...)"
                ),
            ));
        }
        if op > self.memory.size.0 {
            return Err(bad(
                "access.op_size",
                format!(
                    "{} is larger than a region ({})",
                    self.access.op_size, self.memory.size
                ),
            ));
        }
        if self.access.ops.is_some() && self.access.duration.is_some() {
            return Err(bad("access.ops", "give ops or duration, not both".into()));
        }
        if self.access.ops == Some(0) {
            return Err(bad("access.ops", "must be at least 1".into()));
        }
        if let Some(ops) = self.access.total_ops() {
            let bytes = u128::from(ops) * u128::from(op);
            if bytes > u128::from(MAX_BYTES_PER_RUN) {
                return Err(bad(
                    "access.ops",
                    format!(
                        "{ops} operations of {} move {bytes} bytes a run, more than {MAX_BYTES_PER_RUN} (1 EiB), the most numalab counts; lower access.ops or access.op_size",
                        self.access.op_size
                    ),
                ));
            }
        }
        if let Pattern::Strided(stride) = self.access.pattern {
            if stride > self.memory.size.0 {
                return Err(bad(
                    "access.pattern",
                    format!(
                        "strided:{stride} steps further than a region ({}), so every operation would land at the start of the share; use a stride of at most memory.size",
                        self.memory.size
                    ),
                ));
            }
        }
        if self.access.pattern == Pattern::Copy {
            if let Some(rw) = self.access.read_write {
                if rw.0
                    != (Mix {
                        reads: 1,
                        writes: 1,
                    })
                {
                    return Err(bad(
                        "access.read_write",
                        format!("{rw} with pattern copy: a copy reads and writes every byte once, so the ratio is 1:1"),
                    ));
                }
            }
        }
        if self.access.lock_stripes == 0 {
            return Err(bad("access.lock_stripes", "must be at least 1".into()));
        }
        if self.run.repeats == 0 {
            return Err(bad("run.repeats", "must be at least 1".into()));
        }
        if let Some(most) = self.run.max_repeats {
            let each = self.run.repeats;
            if most < each {
                return Err(bad(
                    "run.max_repeats",
                    format!("{most} is fewer than run.repeats ({each}), the repeats every cell runs before the sweep first looks at its differences"),
                ));
            }
            if most % each != 0 {
                return Err(bad(
                    "run.max_repeats",
                    format!("{most} is not a multiple of run.repeats ({each}): the sweep looks at its differences after every {each} rounds, so it may stop at {each}, {}, {} …", 2 * each, 3 * each),
                ));
            }
            if most / each > crate::stats::MAX_LOOKS {
                return Err(bad(
                    "run.max_repeats",
                    format!("{most} is {} times run.repeats ({each}), more than {} looks at the differences; raise run.repeats", most / each, crate::stats::MAX_LOOKS),
                ));
            }
            if most > each && self.run.order == RunOrder::Grouped {
                return Err(bad(
                    "run.max_repeats",
                    "more repeats when the differences are not yet told apart needs run.order = \"interleaved\" (grouped runs each cell's repeats to the end before the next cell starts)".into(),
                ));
            }
        }
        Ok(())
    }

    /// Per-thread rows this experiment's result holds: threads × (warm-ups
    /// + repeats), bounded by [`MAX_RESULT_ROWS`].
    ///
    /// ```
    /// use numalab_bench::experiment::Experiment;
    /// let exp = Experiment::from_toml_str("[threads]\ncount = 4\n[run]\nrepeats = 5\nwarmup = 1\n", "x")?;
    /// assert_eq!(exp.result_rows(), 24);
    /// # Ok::<(), numalab_bench::experiment::ConfigError>(())
    /// ```
    pub fn result_rows(&self) -> u64 {
        u64::from(self.threads.count)
            * (u64::from(self.run.warmup) + u64::from(self.run.most_repeats()))
    }

    /// Applies `--set key=value` overrides: the value is read as TOML
    /// (`8`, `true`, `"text"`), or taken as text when it is not TOML
    /// (`interleave`, `150MiB`). A swept key that is set is no longer swept.
    pub fn with_overrides(&self, sets: &[String]) -> Result<Experiment, ConfigError> {
        let mut exp = self.clone();
        for set in sets {
            let (key, value) = set.split_once('=').ok_or_else(|| ConfigError {
                location: None,
                set_option: Some(set.clone()),
                message: "expected KEY=VALUE, e.g. threads.count=8".into(),
                hint: None,
            })?;
            let key = key.trim();
            exp.set_value(key, parse_value(value.trim()))
                .map_err(|mut e| {
                    e.set_option = Some(set.clone());
                    e
                })?;
            exp.sweep.axes.retain(|(k, _)| k != key);
        }
        exp.validate().map_err(|mut e| {
            e.set_option = Some(sets.join(" --set "));
            e
        })?;
        Ok(exp)
    }

    /// Sets one key (dotted path) to a TOML value, type-checked.
    pub fn set_value(&mut self, key: &str, value: toml::Value) -> Result<(), ConfigError> {
        if !settable_keys().any(|k| k == key) {
            return Err(ConfigError {
                location: None,
                set_option: None,
                message: if key.starts_with("sweep") {
                    "the sweep grid is set in the experiment file".into()
                } else {
                    format!("unknown key `{key}`")
                },
                hint: nearest(key, settable_keys()).map(|k| format!("did you mean `{k}`?")),
            });
        }
        let sweep = std::mem::take(&mut self.sweep);
        let mut table =
            toml::Table::try_from(&*self).map_err(|e| ConfigError::plain(e.to_string()))?;
        let (section, field) = match key.split_once('.') {
            Some((section, field)) => (Some(section), field),
            None => (None, key),
        };
        let target = match section {
            Some(section) => table
                .entry(section)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .ok_or_else(|| ConfigError::plain(format!("[{section}] is not a table")))?,
            None => &mut table,
        };
        target.insert(field.to_owned(), value.clone());
        let updated: Experiment =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError {
                    location: None,
                    set_option: None,
                    message: format!("{key} = {value}: {}", e.message().trim()),
                    hint: None,
                })?;
        *self = Experiment { sweep, ..updated };
        Ok(())
    }

    /// Every cell of the sweep grid: the settings that make it (key and
    /// value, in axis order) and the experiment it is. The first axis
    /// varies slowest. Without a `[sweep]`, the experiment itself.
    pub fn cells(&self) -> Result<Vec<Cell>, ConfigError> {
        // Counted before a single cell is made.
        self.sweep.check_size()?;
        let mut cells = vec![(
            Vec::new(),
            Experiment {
                sweep: Sweep::default(),
                ..self.clone()
            },
        )];
        for (key, values) in &self.sweep.axes {
            let mut next = Vec::with_capacity(cells.len() * values.len());
            for (settings, exp) in &cells {
                for value in values {
                    let mut exp = exp.clone();
                    exp.set_value(key, value.clone()).map_err(|mut e| {
                        e.message = format!("sweep \"{key}\": {}", e.message);
                        e
                    })?;
                    let mut settings = settings.clone();
                    settings.push((key.clone(), value.clone()));
                    next.push((settings, exp));
                }
            }
            cells = next;
        }
        for (settings, exp) in &cells {
            exp.validate().map_err(|mut e| {
                let cell: Vec<String> =
                    settings.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                e.message = format!("sweep cell {}: {}", cell.join(", "), e.message);
                e
            })?;
        }
        let swept = |key: &str| self.sweep.axes.iter().any(|(k, _)| k == key);
        if self.run.looks() > 1 && (swept("run.repeats") || swept("run.max_repeats")) {
            return Err(ConfigError::plain(
                "run.max_repeats: the sweep looks at all its cells' differences together, after the same rounds, so run.repeats and run.max_repeats cannot be swept with it",
            ));
        }
        let rows: u64 = cells.iter().map(|(_, exp)| exp.result_rows()).sum();
        if cells.len() > 1 && rows > MAX_RESULT_ROWS {
            return Err(ConfigError::plain(format!(
                "the sweep's {} cells make {rows} per-thread rows (threads x runs, summed), more than {MAX_RESULT_ROWS}, the most one result holds; sweep fewer cells or lower run.repeats",
                cells.len()
            )));
        }
        Ok(cells)
    }
}

/// Reads an override's value: TOML when it parses as a TOML value, else
/// the text itself.
pub fn parse_value(text: &str) -> toml::Value {
    #[derive(Deserialize)]
    struct Probe {
        v: toml::Value,
    }
    toml::from_str::<Probe>(&format!("v = {text}"))
        .map(|p| p.v)
        .unwrap_or_else(|_| toml::Value::String(text.to_owned()))
}

/// The location of the key a validation message starts with
/// (`access.op_size: ...` or `threads.count = 9000 is ...`), found in the
/// file.
pub(super) fn key_location(file: &str, text: &str, message: &str) -> Option<Location> {
    let key = message.split([':', ' ']).next()?;
    let (section, field) = key.split_once('.')?;
    let header = format!("[{section}]");
    let mut in_section = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_section = trimmed.starts_with(&header);
        } else if in_section
            && trimmed
                .strip_prefix(field)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        {
            let start = offset + (line.len() - trimmed.len());
            return Some(locate(file, text, start..start + field.len()));
        }
        offset += line.len();
    }
    None
}
