//! What `numalab run` and `numalab sweep` share besides their rendering:
//! loading an experiment with its `--set` overrides, the progress
//! bar, and where figures are written. Their tables, CSV and figures are
//! in [`crate::render::experiment`] and [`crate::render::figures`].

// The rendering's former paths, still used by `numalab report`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use numalab_bench::control::Progress;
use numalab_bench::experiment::Experiment;

/// Reads the experiment file and applies `--set` overrides.
pub fn load(path: &Path, sets: &[String]) -> Result<Experiment> {
    let exp = Experiment::from_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    exp.with_overrides(sets).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A progress bar on standard error, shown only when it is a terminal and
/// the run has lasted a second.
#[derive(Debug)]
pub struct ProgressDisplay {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressDisplay {
    /// Starts watching `progress`; its label (a sweep's cell) is shown
    /// beside the bar.
    pub fn start(progress: Arc<Progress>) -> ProgressDisplay {
        let done = Arc::new(AtomicBool::new(false));
        if !std::io::stderr().is_terminal() {
            return ProgressDisplay { done, thread: None };
        }
        let finished = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut bar: Option<ProgressBar> = None;
            while !finished.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                // A bar from the first second of runs on: nothing for a
                // quick run, nor while a report measures its matrix.
                if started.elapsed() < Duration::from_secs(1)
                    || progress.runs_total.load(Ordering::Relaxed) == 0
                {
                    continue;
                }
                let total = progress.ops_total.load(Ordering::Relaxed);
                let bar = bar.get_or_insert_with(|| {
                    let bar = ProgressBar::with_draw_target(
                        (total > 0).then_some(total),
                        ProgressDrawTarget::stderr(),
                    );
                    let template = if total > 0 {
                        "{msg} [{bar:30}] {percent}% (eta {eta})"
                    } else {
                        "{spinner} {msg} {elapsed}"
                    };
                    if let Ok(style) = ProgressStyle::with_template(template) {
                        bar.set_style(style.progress_chars("=> "));
                    }
                    bar
                });
                if total > 0 {
                    bar.set_length(total);
                    bar.set_position(progress.ops_done.load(Ordering::Relaxed).min(total));
                } else {
                    bar.tick();
                }
                let run = progress.runs_done.load(Ordering::Relaxed) + 1;
                let runs = progress.runs_total.load(Ordering::Relaxed).max(1);
                let label = match progress.label() {
                    label if label.is_empty() => label,
                    label => format!("{label}: "),
                };
                bar.set_message(format!("{label}run {}/{runs}", run.min(runs)));
            }
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
        });
        ProgressDisplay {
            done,
            thread: Some(thread),
        }
    }

    /// Removes the bar.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ProgressDisplay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The file stem figures are written to: `--plot STEM`, else the `-o`
/// file without its extension; `None` when neither names a file (a
/// figure is never written where no file was asked for).
pub fn figure_stem(plot: Option<&Path>, output: Option<&Path>) -> Option<PathBuf> {
    match (plot, output) {
        (Some(stem), _) => Some(stem.to_path_buf()),
        (None, Some(out)) => Some(out.with_extension("")),
        (None, None) => None,
    }
}
