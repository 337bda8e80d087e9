//! The `[sweep]` table: its axes in the order written, and the grid of
//! experiments they make.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::*;

/// The `[sweep]` table: keys in the order written, each with its values.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str(r#"
///     [sweep]
///     "threads.count" = [1, 2]
///     "memory.policy" = ["local", "remote", "interleave"]
/// "#, "x.toml")?;
/// let keys: Vec<&str> = exp.sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
/// assert_eq!(keys, ["threads.count", "memory.policy"], "file order");
/// assert_eq!(exp.sweep.cells(), 6);
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sweep {
    /// Each swept key (`threads.count`) and its values, in file order.
    pub axes: Vec<(String, Vec<toml::Value>)>,
}

impl Sweep {
    /// Whether there is nothing to sweep.
    pub fn is_empty(&self) -> bool {
        self.axes.is_empty()
    }

    /// Number of cells in the grid (saturating at `usize::MAX`).
    pub fn cells(&self) -> usize {
        self.axes
            .iter()
            .map(|(_, v)| v.len())
            .try_fold(1usize, |n, k| n.checked_mul(k))
            .unwrap_or(usize::MAX)
    }

    /// Refuses a grid of more than [`MAX_SWEEP_CELLS`] cells, counted from
    /// the lists' lengths before any cell is made.
    ///
    /// ```
    /// use numalab_bench::experiment::config::{Sweep, MAX_SWEEP_CELLS};
    /// let list = |n: i64| (0..n).map(toml::Value::Integer).collect::<Vec<_>>();
    /// let grid = Sweep { axes: vec![("access.seed".into(), list(4000)), ("access.ops".into(), list(2000))] };
    /// let err = grid.check_size().unwrap_err();
    /// assert_eq!(err.message, format!(
    ///     "[sweep] has 4000 x 2000 = 8000000 cells, more than {MAX_SWEEP_CELLS}, the most a sweep runs"));
    /// ```
    pub fn check_size(&self) -> Result<(), ConfigError> {
        let cells = self.cells();
        if u64::try_from(cells).unwrap_or(u64::MAX) <= MAX_SWEEP_CELLS {
            return Ok(());
        }
        let lengths: Vec<String> = self.axes.iter().map(|(_, v)| v.len().to_string()).collect();
        let total = if cells == usize::MAX {
            "more than 2^64".to_owned()
        } else {
            cells.to_string()
        };
        Err(ConfigError {
            location: None,
            set_option: None,
            message: format!(
                "[sweep] has {} = {total} cells, more than {MAX_SWEEP_CELLS}, the most a sweep runs",
                lengths.join(" x ")
            ),
            hint: Some("sweep fewer values, or split the grid over several files".into()),
        })
    }
}

/// Whether a TOML text sets no key: empty, comments, or tables without
/// keys. (An empty experiment file is almost surely a mistake: the wrong
/// file, or one truncated.)
pub(super) fn sets_no_key(text: &str) -> bool {
    fn empty(table: &toml::Table) -> bool {
        table.values().all(|v| match v {
            toml::Value::Table(inner) => empty(inner),
            _ => false,
        })
    }
    text.parse::<toml::Table>().is_ok_and(|t| empty(&t))
}

/// One axis of the `[sweep]` table as the file writes it.
#[derive(Debug)]
pub(super) struct AxisSpan {
    /// The key (`threads.count`).
    pub(super) key: String,
    /// Where the key is written.
    pub(super) span: std::ops::Range<usize>,
    /// Why the value is not a list of values, when it is not.
    pub(super) not_a_list: Option<String>,
}

/// The keys of the file's `[sweep]` table, with where they are written;
/// empty when there is none or the file is not TOML (serde then says
/// where).
pub(super) fn sweep_axes(text: &str) -> Vec<AxisSpan> {
    use toml::de::{DeTable, DeValue};
    let Ok(document) = DeTable::parse(text) else {
        return Vec::new();
    };
    let Some(DeValue::Table(sweep)) = document
        .get_ref()
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == "sweep")
        .map(|(_, v)| v.get_ref())
    else {
        return Vec::new();
    };
    sweep
        .iter()
        .map(|(key, value)| {
            let name = key.get_ref().to_string();
            let not_a_list = match value.get_ref() {
                DeValue::Array(_) => None,
                // `memory.policy = [...]` without quotes: TOML reads a
                // table `memory` holding `policy`.
                DeValue::Table(inner) => {
                    let dotted: Vec<String> = inner
                        .iter()
                        .map(|(k, _)| format!("\"{name}.{}\"", k.get_ref()))
                        .collect();
                    Some(format!(
                        "sweep key {name}.{} is not quoted, so TOML reads it as a table `{name}`; quote each key: {} = [...]",
                        inner.iter().next().map(|(k, _)| k.get_ref().to_string()).unwrap_or_default(),
                        dotted.join(", ")
                    ))
                }
                _ => Some(format!(
                    "sweep \"{name}\" must be a list of values, as in \"{name}\" = [{}]",
                    text.get(value.span()).unwrap_or("...").trim()
                )),
            };
            AxisSpan {
                key: name,
                span: key.span(),
                not_a_list,
            }
        })
        .collect()
}

impl Serialize for Sweep {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.axes.len()))?;
        for (key, values) in &self.axes {
            map.serialize_entry(key, values)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Sweep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SweepVisitor;
        impl<'de> Visitor<'de> for SweepVisitor {
            type Value = Sweep;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of lists, e.g. \"threads.count\" = [1, 2, 4]")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sweep, A::Error> {
                let mut axes = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let values = match map.next_value::<toml::Value>()? {
                        toml::Value::Array(values) => values,
                        other => {
                            return Err(serde::de::Error::custom(format!(
                            "sweep \"{key}\" must be a list of values, as in \"{key}\" = [{other}]"
                        )))
                        }
                    };
                    axes.push((key, values));
                }
                Ok(Sweep { axes })
            }
        }
        deserializer.deserialize_map(SweepVisitor)
    }
}

/// One cell of a sweep grid: the settings that make it (key and value,
/// in axis order) and the experiment it is.
///
/// ```
/// use numalab_bench::experiment::config::Cell;
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str("[sweep]\n\"threads.count\" = [1, 2]\n", "x.toml")?;
/// let cells: Vec<Cell> = exp.cells()?;
/// let (settings, last) = &cells[1];
/// assert_eq!(settings[0].0, "threads.count");
/// assert_eq!(settings[0].1.as_integer(), Some(2));
/// assert_eq!(last.threads.count, 2);
/// assert!(last.sweep.is_empty(), "a cell is one experiment");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
pub type Cell = (Vec<(String, toml::Value)>, Experiment);
