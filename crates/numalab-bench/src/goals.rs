//! Verdicts on benchmark goals that hold at 95%: what `bash bench/all.sh`
//! judges its table with.
//!
//! A benchmark states each target's goal once and prints one figure per
//! round — a ratio of numalab to its reference taken within that round,
//! or an absolute figure such as a rate — as tab-separated lines:
//!
//! ```text
//! GOAL<TAB>ring copy / C fork-and-spin ring<TAB><TAB>>= 1.0
//! GOAL<TAB>ring in place / ring copy<TAB>64 KiB<TAB>>= 1.0
//! ROUND<TAB>ring copy / C fork-and-spin ring<TAB>64 KiB<TAB>1.013
//! ```
//!
//! The third field is the cell (a block size, a thread count; empty for a
//! target of one cell). A goal with an empty cell holds for every cell
//! that has no goal of its own.
//!
//! The benchmark runs again while a cell's interval still straddles its
//! goal, up to a number of *looks* fixed beforehand; each look adds the
//! benchmark's rounds to the ones before. Every look's interval is made
//! at the level [`repeated_confidence`] gives for that many looks, as
//! `numalab sweep` does (Pocock's boundary), so whichever look a cell
//! stops at, its interval holds at 95%. A cell is **met** when its
//! interval lies inside the goal, **missed** when it lies wholly outside,
//! and **level** when it still straddles the goal after the last look:
//! within noise of the goal, and said as such.
//!
//! ```
//! use numalab_bench::goals::{Board, Standing};
//! let mut board = Board::default();
//! let look_1 = "GOAL\tcopy / C ring\t\t>= 1.0\n\
//!               ROUND\tcopy / C ring\t64 KiB\t1.21\nROUND\tcopy / C ring\t64 KiB\t1.19\n\
//!               ROUND\tcopy / C ring\t64 KiB\t1.22\nROUND\tcopy / C ring\t1 MiB\t0.97\n\
//!               ROUND\tcopy / C ring\t1 MiB\t1.04\nROUND\tcopy / C ring\t1 MiB\t1.01\n";
//! board.read("ring", 1, look_1)?;
//! let rows = board.judge(4, 0.95);
//! let cells = &rows[0].cells;
//! assert_eq!(cells[0].standing, Standing::Met); // 64 KiB: far above 1.0
//! assert_eq!(cells[1].standing, Standing::Open); // 1 MiB: another look
//! assert_eq!(board.open(4, 0.95), ["ring"]);
//! # Ok::<(), String>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::stats::{repeated_confidence, student_t_quantile};

/// The most rounds one cell may gather over all looks: a bound on what a
/// log can make the judge hold, far above any benchmark's rounds.
pub const MAX_ROUNDS: usize = 100_000;

/// The most targets and cells a board holds.
pub const MAX_CELLS: usize = 10_000;

/// What a target's figure must be.
///
/// ```
/// use numalab_bench::goals::Goal;
/// let goal: Goal = ">= 0.95".parse()?;
/// assert_eq!(goal, Goal::AtLeast(0.95));
/// assert_eq!("0.95 to 1.05".parse::<Goal>()?, Goal::Between(0.95, 1.05));
/// assert_eq!(goal.to_string(), ">= 0.95");
/// assert!("> 1".parse::<Goal>().unwrap_err().contains("\"> 1\""));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// `>= x`: a speed, a ratio that must not fall below `x`.
    AtLeast(f64),
    /// `<= x`: a time that must not exceed `x`.
    AtMost(f64),
    /// `a to b`: a figure that must agree with its reference within bounds.
    Between(f64, f64),
}

impl FromStr for Goal {
    type Err = String;

    fn from_str(text: &str) -> Result<Goal, String> {
        let bad = |why: &str| {
            format!("goal \"{text}\": {why} (expected \">= X\", \"<= X\" or \"A to B\")")
        };
        let number = |word: &str| -> Result<f64, String> {
            match word.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                _ => Err(bad(&format!(
                    "\"{}\" is not a positive number",
                    word.trim()
                ))),
            }
        };
        let text_trimmed = text.trim();
        if let Some(rest) = text_trimmed.strip_prefix(">=") {
            return Ok(Goal::AtLeast(number(rest)?));
        }
        if let Some(rest) = text_trimmed.strip_prefix("<=") {
            return Ok(Goal::AtMost(number(rest)?));
        }
        if let Some((low, high)) = text_trimmed.split_once(" to ") {
            let (low, high) = (number(low)?, number(high)?);
            if low >= high {
                return Err(bad("the range runs backwards"));
            }
            return Ok(Goal::Between(low, high));
        }
        Err(bad("no comparison"))
    }
}

impl fmt::Display for Goal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Goal::AtLeast(x) => write!(f, ">= {x}"),
            Goal::AtMost(x) => write!(f, "<= {x}"),
            Goal::Between(a, b) => write!(f, "{a} to {b}"),
        }
    }
}

impl Goal {
    /// Where an interval `[low, high]` stands against the goal: inside it
    /// ([`Standing::Met`]), wholly outside ([`Standing::Missed`]), or
    /// across its edge ([`Standing::Open`]).
    pub fn standing(&self, low: f64, high: f64) -> Standing {
        let (inside, outside) = match *self {
            Goal::AtLeast(x) => (low >= x, high < x),
            Goal::AtMost(x) => (high <= x, low > x),
            Goal::Between(a, b) => (low >= a && high <= b, high < a || low > b),
        };
        if inside {
            Standing::Met
        } else if outside {
            Standing::Missed
        } else {
            Standing::Open
        }
    }
}

/// A figure's geometric mean over its rounds with an interval: Student's
/// t on the logarithms (the rounds' figures are ratios or rates, which
/// spread by factors).
///
/// ```
/// use numalab_bench::goals::Estimate;
/// let e = Estimate::of(&[0.98, 1.01, 1.00, 0.99, 1.02], 0.95).unwrap();
/// assert!((e.value - 1.0).abs() < 0.001);
/// assert!(e.low > 0.975 && e.high < 1.025, "{e:?}");
/// assert!(Estimate::of(&[1.0], 0.95).is_none()); // no spread to judge by
/// assert!(Estimate::of(&[1.0, -1.0], 0.95).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The rounds' geometric mean.
    pub value: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// The rounds it was made from.
    pub rounds: usize,
}

impl Estimate {
    /// `None` for fewer than two rounds or a figure that is not a positive
    /// finite number.
    pub fn of(rounds: &[f64], confidence: f64) -> Option<Estimate> {
        if rounds.len() < 2 || rounds.iter().any(|x| !x.is_finite() || *x <= 0.0) {
            return None;
        }
        let n = rounds.len() as f64;
        let mean = rounds.iter().map(|x| x.ln()).sum::<f64>() / n;
        let var = rounds.iter().map(|x| (x.ln() - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let half = student_t_quantile(0.5 + confidence / 2.0, n - 1.0) * (var / n).sqrt();
        Some(Estimate {
            value: mean.exp(),
            low: (mean - half).exp(),
            high: (mean + half).exp(),
            rounds: rounds.len(),
        })
    }
}

/// Where a cell stands after the looks taken so far.
///
/// ```
/// use numalab_bench::goals::{Goal, Standing};
/// let goal = Goal::AtLeast(1.0);
/// assert_eq!(goal.standing(1.01, 1.04), Standing::Met);
/// assert_eq!(goal.standing(0.97, 1.03), Standing::Open); // another look, or level
/// assert_eq!(Standing::Level.word(), "level");
/// // A row takes its least settled cell's standing: a miss above all.
/// assert!(Standing::Missed > Standing::NotMeasured && Standing::Level > Standing::Met);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// The interval lies inside the goal.
    Met,
    /// The interval straddles the goal after the last look: within noise
    /// of it.
    Level,
    /// The interval straddles the goal and looks remain: run again.
    Open,
    /// No rounds, or too few to make an interval.
    NotMeasured,
    /// The interval lies wholly outside the goal.
    Missed,
}

impl Standing {
    /// The word in the table.
    pub fn word(self) -> &'static str {
        match self {
            Standing::Met => "met",
            Standing::Level => "level",
            Standing::Open => "open",
            Standing::Missed => "missed",
            Standing::NotMeasured => "not measured",
        }
    }
}

/// One cell of a target, as judged.
///
/// ```
/// use numalab_bench::goals::{Board, Goal, Standing};
/// let mut board = Board::default();
/// board.read("b", 1, "GOAL\tt\t\t>= 1\nROUND\tt\t64 KiB\t1.5\nROUND\tt\t64 KiB\t1.6\nROUND\tt\t64 KiB\t1.55\n")?;
/// let cell = &board.judge(4, 0.95)[0].cells[0];
/// assert_eq!((cell.cell.as_str(), cell.goal, cell.standing, cell.look), ("64 KiB", Goal::AtLeast(1.0), Standing::Met, 1));
/// assert_eq!(cell.estimate.unwrap().rounds, 3);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The cell's name (a block size, a thread count), or empty.
    pub cell: String,
    /// Its goal.
    pub goal: Goal,
    /// Where it stands.
    pub standing: Standing,
    /// Its interval at the look it stopped at (or the last one).
    pub estimate: Option<Estimate>,
    /// The look it stopped at (1 for the first).
    pub look: u32,
}

/// One target, as judged: a row of the table.
///
/// ```
/// use numalab_bench::goals::Board;
/// let mut board = Board::default();
/// let log = "GOAL\tcopy / C ring\t\t>= 1.0\n\
///            ROUND\tcopy / C ring\t64 KiB\t0.80\nROUND\tcopy / C ring\t64 KiB\t0.81\n\
///            ROUND\tcopy / C ring\t64 KiB\t0.79\n";
/// board.read("ring", 1, log)?;
/// let row = &board.judge(1, 0.95)[0];
/// assert_eq!(row.verdict(), "missed at 64 KiB");
/// assert_eq!((row.goals().as_str(), row.rounds().as_str()), (">= 1", "3"));
/// assert!(row.figures().starts_with("64 KiB 0.80 ("));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The target's name.
    pub target: String,
    /// The benchmark whose logs it came from.
    pub bench: String,
    /// Its goal for cells without one of their own.
    pub goal: Option<Goal>,
    /// Its cells, in the order the logs first named them.
    pub cells: Vec<Judged>,
}

impl Row {
    /// The row's verdict: missed if any cell missed, else not measured,
    /// open, level or met as its least settled cell; not measured with
    /// no cells.
    pub fn standing(&self) -> Standing {
        self.cells
            .iter()
            .map(|c| c.standing)
            .max()
            .unwrap_or(Standing::NotMeasured)
    }

    /// The verdict cell of the table: `met`, or which cells missed, were
    /// not measured or are level (`missed at 64 KiB; not measured at
    /// 256 KiB; level at 1 MiB`), the row's own standing first.
    pub fn verdict(&self) -> String {
        let row = self.standing();
        let single = self.cells.len() == 1 && self.cells[0].cell.is_empty();
        let all_alike = self.cells.iter().all(|c| c.standing == row);
        if single || row == Standing::Met || (row == Standing::NotMeasured && all_alike) {
            return row.word().to_owned();
        }
        let mut parts = vec![];
        for standing in [
            Standing::Missed,
            Standing::NotMeasured,
            Standing::Open,
            Standing::Level,
        ] {
            let cells = self.cell_names(|c| c.standing == standing);
            if !cells.is_empty() {
                parts.push(format!("{} at {cells}", standing.word()));
            }
        }
        parts.join("; ")
    }

    /// The figures cell: each cell's geometric mean and interval
    /// (`64 KiB 1.02 (0.99–1.05)`).
    pub fn figures(&self) -> String {
        self.cells
            .iter()
            .map(|c| {
                let figure = match c.estimate {
                    Some(e) => {
                        format!("{} ({}–{})", figure(e.value), figure(e.low), figure(e.high))
                    }
                    None => "n/a".to_owned(),
                };
                if c.cell.is_empty() {
                    figure
                } else {
                    format!("{} {figure}", c.cell)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The goals cell: the target's goal, then the cells whose goal
    /// differs (`>= 1.2; 64 KiB >= 1`).
    pub fn goals(&self) -> String {
        let first = match (self.goal, self.cells.first()) {
            (Some(goal), _) => goal,
            (None, Some(c)) => c.goal,
            (None, None) => return String::new(),
        };
        let mut parts = vec![first.to_string()];
        let mut others: Vec<Goal> = vec![];
        for c in &self.cells {
            if c.goal != first && !others.contains(&c.goal) {
                others.push(c.goal);
            }
        }
        for goal in others {
            parts.push(format!("{} {goal}", self.cell_names(|c| c.goal == goal)));
        }
        parts.join("; ")
    }

    /// The names of the cells `keep` keeps, in order, comma-separated
    /// (empty for none).
    fn cell_names(&self, keep: impl Fn(&Judged) -> bool) -> String {
        self.cells
            .iter()
            .filter(|c| keep(c))
            .map(|c| c.cell.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The rounds cell: `9`, or the fewest to the most over the cells.
    pub fn rounds(&self) -> String {
        let counts: Vec<usize> = self
            .cells
            .iter()
            .filter_map(|c| c.estimate.map(|e| e.rounds))
            .collect();
        match (counts.iter().min(), counts.iter().max()) {
            (Some(a), Some(b)) if a == b => a.to_string(),
            (Some(a), Some(b)) => format!("{a}–{b}"),
            _ => "0".to_owned(),
        }
    }
}

/// Three significant figures, as the table shows them (1.02, 12 021).
fn figure(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 0.01 {
        format!("{x:.2}")
    } else {
        format!("{x:.2e}")
    }
}

#[derive(Debug, Default)]
struct Target {
    name: String,
    bench: String,
    /// Goals by cell; the empty cell's holds for every cell without one
    /// of its own.
    goals: Vec<(String, Goal)>,
    /// Each cell's rounds, by look (index 0 is look 1).
    cells: Vec<(String, Vec<Vec<f64>>)>,
}

impl Target {
    fn own_goal(&self, cell: &str) -> Option<Goal> {
        self.goals.iter().find(|(c, _)| c == cell).map(|(_, g)| *g)
    }

    fn goal_of(&self, cell: &str) -> Option<Goal> {
        self.own_goal(cell).or_else(|| self.own_goal(""))
    }
}

/// The goals and rounds read from the benchmarks' logs, look by look.
///
/// ```
/// use numalab_bench::goals::{Board, Standing};
/// let mut board = Board::default();
/// // Look 1: a time far inside its goal, a ratio within noise of its own.
/// board.read("fleet", 1, "GOAL\tmerge, s\t\t<= 10\nROUND\tmerge, s\t\t1.0\nROUND\tmerge, s\t\t0.9\n")?;
/// board.read("engine", 1, "GOAL\tread\t\t>= 0.95\nROUND\tread\t\t0.94\nROUND\tread\t\t0.97\n")?;
/// assert_eq!(board.open(2, 0.95), ["engine"]); // only it runs again
/// board.read("engine", 2, "ROUND\tread\t\t0.96\nROUND\tread\t\t0.93\n")?;
/// let rows = board.judge(2, 0.95);
/// assert_eq!(rows[1].cells[0].standing, Standing::Level); // after the last look
/// assert!(board.open(2, 0.95).is_empty());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Default)]
pub struct Board {
    targets: Vec<Target>,
    cells: usize,
}

impl Board {
    /// Reads one look's log of benchmark `bench` (look 1 is the first):
    /// its `GOAL` and `ROUND` lines; other lines are the benchmark's own
    /// output and are left alone. A target's goal must be the same in
    /// every look.
    pub fn read(&mut self, bench: &str, look: u32, log: &str) -> Result<(), String> {
        if look == 0 {
            return Err("looks count from 1".to_owned());
        }
        for (n, line) in log.lines().enumerate() {
            let at = || format!("{bench} look {look}, line {}", n + 1);
            let fields: Vec<&str> = line.split('\t').collect();
            match fields[0] {
                "GOAL" => {
                    let [_, name, cell, goal] = fields[..] else {
                        return Err(format!("{}: GOAL needs a target, a cell and a goal", at()));
                    };
                    let goal: Goal = goal.parse().map_err(|e| format!("{}: {e}", at()))?;
                    let target = self
                        .target(bench, name)
                        .map_err(|e| format!("{}: {e}", at()))?;
                    match target.own_goal(cell) {
                        Some(g) if g != goal => {
                            let cell = if cell.is_empty() {
                                String::new()
                            } else {
                                format!(" {cell}")
                            };
                            return Err(format!(
                                "{}: \"{name}\"{cell} changed its goal from {g} to {goal}",
                                at()
                            ));
                        }
                        Some(_) => {}
                        None => target.goals.push((cell.to_owned(), goal)),
                    }
                }
                "ROUND" => {
                    let [_, name, cell, value] = fields[..] else {
                        return Err(format!(
                            "{}: ROUND needs a target, a cell and a figure",
                            at()
                        ));
                    };
                    let value: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| format!("{}: \"{value}\" is not a number", at()))?;
                    let full = self.cells >= MAX_CELLS;
                    let mut new_cell = false;
                    let target = self
                        .target(bench, name)
                        .map_err(|e| format!("{}: {e}", at()))?;
                    let index = match target.cells.iter().position(|(c, _)| c == cell) {
                        Some(i) => i,
                        None if full => {
                            return Err(format!("{}: more than {MAX_CELLS} cells", at()))
                        }
                        None => {
                            target.cells.push((cell.to_owned(), vec![]));
                            new_cell = true;
                            target.cells.len() - 1
                        }
                    };
                    let looks = &mut target.cells[index].1;
                    if looks.iter().map(Vec::len).sum::<usize>() >= MAX_ROUNDS {
                        return Err(format!(
                            "{}: more than {MAX_ROUNDS} rounds for \"{name}\" {cell}",
                            at()
                        ));
                    }
                    if looks.len() < look as usize {
                        looks.resize(look as usize, vec![]);
                    }
                    looks[look as usize - 1].push(value);
                    if new_cell {
                        self.cells += 1;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The target named `name`, made on first sight.
    fn target(&mut self, bench: &str, name: &str) -> Result<&mut Target, String> {
        match self.targets.iter().position(|t| t.name == name) {
            Some(i) => {
                let target = &mut self.targets[i];
                if target.bench != bench {
                    return Err(format!(
                        "\"{name}\" comes from both {} and {bench}",
                        target.bench
                    ));
                }
                Ok(&mut self.targets[i])
            }
            None => {
                if self.targets.len() >= MAX_CELLS {
                    return Err(format!("more than {MAX_CELLS} targets"));
                }
                self.targets.push(Target {
                    name: name.to_owned(),
                    bench: bench.to_owned(),
                    ..Target::default()
                });
                Ok(self.targets.last_mut().expect("just pushed"))
            }
        }
    }

    /// Every target judged after `looks` looks at most, each interval
    /// made so that all looks' intervals together hold at `confidence`.
    /// A cell stops at the first look whose interval clears its goal
    /// either way; one still straddling after look `looks` is level; one
    /// straddling before it is open.
    pub fn judge(&self, looks: u32, confidence: f64) -> Vec<Row> {
        let level = repeated_confidence(looks, confidence);
        self.targets
            .iter()
            .filter(|t| !t.goals.is_empty())
            .map(|t| Row {
                target: t.name.clone(),
                bench: t.bench.clone(),
                goal: t.own_goal(""),
                cells: t
                    .cells
                    .iter()
                    .filter_map(|(cell, by_look)| {
                        let goal = t.goal_of(cell)?;
                        Some(decide(cell, goal, by_look, looks, level))
                    })
                    .collect(),
            })
            .collect()
    }

    /// The benchmarks with a cell still open after their looks so far:
    /// the ones to run again.
    pub fn open(&self, looks: u32, confidence: f64) -> Vec<String> {
        let mut benches: Vec<String> = vec![];
        for row in self.judge(looks, confidence) {
            let open = row.cells.iter().any(|c| c.standing == Standing::Open);
            if open && !benches.contains(&row.bench) {
                benches.push(row.bench);
            }
        }
        benches
    }

    /// Cells that have rounds and no goal: a benchmark that forgot to
    /// state one.
    pub fn without_goals(&self) -> Vec<String> {
        self.targets
            .iter()
            .flat_map(|t| {
                t.cells
                    .iter()
                    .filter(|(cell, _)| t.goal_of(cell).is_none())
                    .map(|(cell, _)| format!("\"{}\" {cell}", t.name))
            })
            .collect()
    }
}

/// One cell's verdict: looks taken in order, stopping at the first whose
/// interval (at `level`) clears the goal.
fn decide(cell: &str, goal: Goal, by_look: &[Vec<f64>], looks: u32, level: f64) -> Judged {
    let mut rounds: Vec<f64> = vec![];
    let mut last = Judged {
        cell: cell.to_owned(),
        goal,
        standing: Standing::NotMeasured,
        estimate: None,
        look: 0,
    };
    for (i, this_look) in by_look.iter().enumerate() {
        let look = i as u32 + 1;
        if look > looks {
            break;
        }
        rounds.extend(this_look);
        let estimate = Estimate::of(&rounds, level);
        let standing = match estimate {
            Some(e) => match goal.standing(e.low, e.high) {
                Standing::Open if look == looks => Standing::Level,
                s => s,
            },
            None if look == looks => Standing::NotMeasured,
            None => Standing::Open,
        };
        last = Judged {
            cell: cell.to_owned(),
            goal,
            standing,
            estimate,
            look,
        };
        if matches!(standing, Standing::Met | Standing::Missed) {
            break;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(target: &str, cell: &str, values: &[f64]) -> String {
        values
            .iter()
            .map(|v| format!("ROUND\t{target}\t{cell}\t{v}\n"))
            .collect()
    }

    #[test]
    fn a_cell_straddling_its_goal_is_open_until_the_last_look_then_level() {
        let mut board = Board::default();
        let noisy = [0.97, 1.03, 0.99, 1.02];
        board
            .read(
                "b",
                1,
                &format!("GOAL\tt\t\t>= 1.0\n{}", rounds("t", "", &noisy)),
            )
            .unwrap();
        assert_eq!(board.judge(3, 0.95)[0].cells[0].standing, Standing::Open);
        assert_eq!(board.open(3, 0.95), ["b"]);
        board.read("b", 2, &rounds("t", "", &noisy)).unwrap();
        board.read("b", 3, &rounds("t", "", &noisy)).unwrap();
        let row = &board.judge(3, 0.95)[0];
        assert_eq!(row.cells[0].standing, Standing::Level);
        assert_eq!(row.cells[0].estimate.unwrap().rounds, 12);
        assert_eq!(row.verdict(), "level");
        assert!(board.open(3, 0.95).is_empty());
    }

    #[test]
    fn a_cell_stops_at_the_look_that_decides_it() {
        let mut board = Board::default();
        board
            .read(
                "b",
                1,
                &format!("GOAL\tt\t\t<= 10\n{}", rounds("t", "", &[1.0, 1.1, 0.9])),
            )
            .unwrap();
        // A later look that would say otherwise is not taken into account:
        // the cell was decided.
        board
            .read("b", 2, &rounds("t", "", &[30.0, 31.0, 29.0]))
            .unwrap();
        let cell = &board.judge(4, 0.95)[0].cells[0];
        assert_eq!((cell.standing, cell.look), (Standing::Met, 1));
        assert_eq!(cell.estimate.unwrap().rounds, 3);
    }

    #[test]
    fn rows_name_the_cells_that_missed_or_are_level_and_cells_may_have_goals_of_their_own() {
        let mut board = Board::default();
        let log = format!(
            "GOAL\tin place / copy\t\t>= 1.2\nGOAL\tin place / copy\t64 KiB\t>= 1.0\n{}{}{}",
            rounds("in place / copy", "64 KiB", &[1.0, 1.02, 0.98, 1.01]),
            rounds("in place / copy", "1 MiB", &[1.5, 1.52, 1.49]),
            rounds("in place / copy", "256 MiB", &[1.0, 1.01, 1.02]),
        );
        board.read("ring", 1, &log).unwrap();
        let row = &board.judge(1, 0.95)[0];
        assert_eq!(row.verdict(), "missed at 256 MiB; level at 64 KiB");
        assert_eq!(row.standing(), Standing::Missed);
        assert_eq!(row.goals(), ">= 1.2; 64 KiB >= 1");
        assert!(
            row.figures().starts_with("64 KiB 1.00 (0.9"),
            "{}",
            row.figures()
        );
        assert_eq!(row.rounds(), "3–4");
    }

    #[test]
    fn a_target_with_a_goal_and_no_rounds_is_not_measured() {
        let mut board = Board::default();
        board
            .read("ring", 1, "GOAL\tcopy / PSRDada\t\t>= 1.0\n")
            .unwrap();
        let row = &board.judge(4, 0.95)[0];
        assert_eq!(row.verdict(), "not measured");
        assert_eq!((row.goals().as_str(), row.figures().as_str()), (">= 1", ""));
        assert!(board.open(4, 0.95).is_empty());
    }

    #[test]
    fn a_cell_with_too_few_rounds_does_not_hide_a_miss() {
        let mut board = Board::default();
        let log = format!(
            "GOAL\tcopy / C ring\t\t>= 1.0\n{}{}{}",
            rounds("copy / C ring", "64 KiB", &[0.80, 0.81, 0.79]),
            rounds("copy / C ring", "256 KiB", &[1.3]),
            rounds("copy / C ring", "1 MiB", &[1.0, 1.03, 0.97]),
        );
        board.read("ring", 1, &log).unwrap();
        let row = &board.judge(1, 0.95)[0];
        assert_eq!(row.standing(), Standing::Missed);
        assert_eq!(
            row.verdict(),
            "missed at 64 KiB; not measured at 256 KiB; level at 1 MiB"
        );
    }

    #[test]
    fn two_sided_goals_miss_on_either_side() {
        let goal = Goal::Between(0.95, 1.05);
        assert_eq!(goal.standing(0.96, 1.04), Standing::Met);
        assert_eq!(goal.standing(1.06, 1.10), Standing::Missed);
        assert_eq!(goal.standing(0.90, 0.94), Standing::Missed);
        assert_eq!(goal.standing(0.94, 1.00), Standing::Open);
    }

    #[test]
    fn bad_lines_are_refused_with_where_they_are() {
        let mut board = Board::default();
        let e = board.read("ring", 2, "x\nROUND\tt\t\tfast\n").unwrap_err();
        assert_eq!(e, "ring look 2, line 2: \"fast\" is not a number");
        let e = board.read("ring", 1, "GOAL\tt\t>= 1\n").unwrap_err();
        assert!(e.contains("GOAL needs a target, a cell and a goal"), "{e}");
        board.read("ring", 1, "GOAL\tt\t\t>= 1\n").unwrap();
        let e = board.read("ring", 2, "GOAL\tt\t\t>= 2\n").unwrap_err();
        assert!(e.contains("changed its goal from >= 1 to >= 2"), "{e}");
        let e = board.read("engine", 1, "GOAL\tt\t\t>= 1\n").unwrap_err();
        assert!(e.contains("comes from both ring and engine"), "{e}");
        assert!(board.read("ring", 0, "").is_err());
        board.read("ring", 1, "ROUND\tu\t\t1.0\n").unwrap();
        assert_eq!(board.without_goals(), ["\"u\" "]);
    }

    #[test]
    fn the_interval_widens_with_the_looks_planned() {
        // Four looks make each interval at Pocock's nominal level (98.2%),
        // wider than one look's 95%.
        let values = [0.98, 1.01, 1.00, 0.99, 1.02, 1.00];
        let one = Estimate::of(&values, repeated_confidence(1, 0.95)).unwrap();
        let four = Estimate::of(&values, repeated_confidence(4, 0.95)).unwrap();
        assert!(four.low < one.low && four.high > one.high);
    }
}
