//! The run: the file's cache made or placed, each cell's repeats read by
//! pinned readers, the figures summarised.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use numalab::pagecache::{self as cache, BusErrorExit, MappedFile, PageCacheError};
use numalab::replicated::{FileCopyError, FileCopyOptions, FileReader, ReplicatedFile};
use numalab::system::Environment;
use numalab::units::count;
use numalab::{HugePages, Topology};

use super::config::{BenchError, FileSource, Method};
use super::plan::{buffer_bytes, open_given, Plan};
use super::result::{
    BenchCell, BenchRepeat, BenchSettings, CopiesGain, CopyAudit, CopySettings, PagecacheReport,
    ReaderRun, RemoteRatio,
};
use crate::control::Control;
use crate::matrix::bandwidth::{self, Kernel, StreamTiming};
use crate::matrix::shape::spread_cpus;
use crate::ring::CellStatus;
use crate::stats::Summary;
use crate::workers::run_pinned;

/// Runs the plan: makes (or places) the file's cache, then each cell's
/// repeats, saying what it does through `control`; a stop asked through
/// `control` (Ctrl-C) ends the run at the next block, the unfinished
/// cells marked interrupted.
pub fn run(
    plan: &Plan,
    topology: &Topology,
    control: &Control,
) -> Result<PagecacheReport, BenchError> {
    let stop = control.stop_flag();
    let config = &plan.config;
    let (label, file, created) = match (&plan.given, &config.file) {
        (Some((path, file)), _) => {
            let file = file.try_clone().map_err(|e| BenchError::File {
                path: path.display().to_string(),
                source: PageCacheError::Os(e),
            })?;
            (path.display().to_string(), file, false)
        }
        (None, FileSource::Create { dir, size }) => {
            control.say(&format!(
                "writing {} to an unnamed file in {} on node {}",
                numalab::units::format_size(*size),
                dir.display(),
                plan.cache_node
            ));
            // Ctrl-C while writing it: every cell is marked interrupted.
            let file = make_file(dir, *size, plan.cache_node, stop)?;
            (format!("{} (unnamed)", dir.display()), file, true)
        }
        (None, FileSource::Given(path)) => (path.display().to_string(), open_given(path)?.0, false),
    };
    let wrap = |source| BenchError::File {
        path: label.clone(),
        source,
    };
    // Mapped readers of a file truncated meanwhile get SIGBUS: said in a
    // sentence, for the whole run.
    let _bus = match config.method {
        Method::Mmap => Some(
            BusErrorExit::install(&format!(
                "numalab: {label} was truncated while readers had it mapped (SIGBUS); stopped\n"
            ))
            .map_err(|e| wrap(PageCacheError::Os(e)))?,
        ),
        Method::Read => None,
    };
    let copies = make_copies(plan, &file).map_err(|e| match e {
        FileCopyError::File(source) => wrap(source),
        other => wrap(PageCacheError::Os(std::io::Error::other(other.to_string()))),
    })?;
    let mut cells = Vec::new();
    let mut interrupted = false;
    for planned in &plan.cells {
        let mut cell = BenchCell {
            readers: planned.readers,
            place: planned.place,
            reader_node: planned.reader_node,
            cpus: planned.cpus.clone(),
            copies: planned.copies,
            copy_audit: None,
            status: CellStatus::Skipped,
            reason: planned.skip.clone(),
            placed: false,
            cache_before: None,
            cache_after: None,
            repeats: Vec::new(),
            time_to_last_s: None,
            reader_gbps: None,
            aggregate_gbps: None,
        };
        if planned.skip.is_some() {
            cells.push(cell);
            continue;
        }
        if interrupted || stop.load(Ordering::SeqCst) {
            interrupted = true;
            cell.status = CellStatus::Interrupted;
            cells.push(cell);
            continue;
        }
        control.say(&format!(
            "{} on {} (node {}){}",
            count(planned.readers, "reader"),
            planned.place,
            planned.reader_node.unwrap_or(0),
            if planned.copies {
                ", through copies"
            } else {
                ""
            }
        ));
        let mut before = cache::file_cache(&file).map_err(wrap)?;
        if before.on_node(plan.cache_node) < before.pages {
            cache::drop_cache(&file).map_err(wrap)?;
            cache::load_on_until(&file, plan.cache_node, stop).map_err(wrap)?;
            if stop.load(Ordering::SeqCst) {
                // Ctrl-C while reading it in: this cell and the rest are
                // interrupted, not measured on a cache half placed.
                interrupted = true;
                cell.status = CellStatus::Interrupted;
                cells.push(cell);
                continue;
            }
            before = cache::file_cache(&file).map_err(wrap)?;
            cell.placed = true;
        }
        cell.cache_before = Some(before);
        // Copies made by an earlier cell would hide the first repeat's
        // cost of making them.
        let through = copies.as_ref().filter(|_| planned.copies);
        if let Some(copies) = through {
            copies.drop_copies();
        }
        let readers = Readers {
            cpus: &planned.cpus,
            copy_node: numalab::system::local_memory_node(planned.reader_node.unwrap_or_default()),
            copies: through,
        };
        for _ in 0..config.repeats {
            match one_repeat(plan, &file, &label, &readers, stop)? {
                Some(repeat) => cell.repeats.push(repeat),
                None => {
                    interrupted = true;
                    break;
                }
            }
        }
        cell.cache_after = Some(cache::file_cache(&file).map_err(wrap)?);
        if let Some(copies) = through {
            cell.copy_audit = copy_audit(copies, readers.copy_node).map_err(wrap)?;
        }
        cell.status = if interrupted {
            CellStatus::Interrupted
        } else {
            CellStatus::Ran
        };
        summarise(&mut cell, plan.size);
        cells.push(cell);
    }
    let ratios = ratios(plan, topology, &cells);
    let gains = gains(&cells, plan.cache_node);
    Ok(PagecacheReport {
        environment: Environment::current(topology),
        settings: BenchSettings {
            file: label,
            created,
            size: plan.size,
            block_size: config.block_size,
            method: config.method,
            stagger_s: config.stagger.as_secs_f64(),
            group: config.group,
            repeats: config.repeats,
            cache_node: plan.cache_node,
            copies: config.copies.as_ref().map(|c| CopySettings {
                chunk_size: c.chunk_size,
                budget_per_node: c.budget_per_node,
                write_every_s: c.write_every.map(|d| d.as_secs_f64()),
            }),
        },
        cells,
        ratios,
        gains,
        interrupted,
    })
}

/// An unnamed file of `size` bytes in `dir`, written on `node`.
fn make_file(
    dir: &std::path::Path,
    size: u64,
    node: u32,
    stop: &AtomicBool,
) -> Result<File, BenchError> {
    let wrap = |source| BenchError::File {
        path: dir.display().to_string(),
        source,
    };
    let file = numalab::files::scratch_file(dir).map_err(|e| wrap(PageCacheError::Os(e)))?;
    cache::fill_on_until(&file, size, node, stop).map_err(wrap)?;
    Ok(file)
}

/// Per-node copies of the file, for the cells that read through them:
/// on every node such a cell reads from (for a memory-less node, the
/// nearest node with memory).
fn make_copies(plan: &Plan, file: &File) -> Result<Option<ReplicatedFile>, FileCopyError> {
    let Some(config) = &plan.config.copies else {
        return Ok(None);
    };
    let readers: numalab::NodeSet = plan
        .cells
        .iter()
        .filter(|c| c.copies && c.skip.is_none())
        .filter_map(|c| c.reader_node)
        .collect();
    let nodes = numalab::system::local_memory_nodes(&readers);
    if nodes.is_empty() {
        return Ok(None);
    }
    let options = FileCopyOptions::default()
        .chunk_size(config.chunk_size)
        .budget_per_node(config.budget_per_node)
        .nodes(Some(nodes));
    ReplicatedFile::new(file.try_clone()?, options).map(Some)
}

/// `node`'s copies: the segment's counts and the kernel's pages.
fn copy_audit(copies: &ReplicatedFile, node: u32) -> Result<Option<CopyAudit>, PageCacheError> {
    let Some(stats) = copies.stats().into_iter().find(|s| s.node == node) else {
        return Ok(None);
    };
    let pages = copies
        .copy_pages()?
        .into_iter()
        .find(|(n, _)| *n == node)
        .map(|(_, cache)| cache.per_node)
        .unwrap_or_default();
    Ok(Some(CopyAudit { stats, pages }))
}

/// A cell's readers: their CPUs, the node of the copies they read (their
/// own, or the nearest with memory for a memory-less node), and the
/// copies they read through (`None`: the file).
struct Readers<'a> {
    cpus: &'a [u32],
    copy_node: u32,
    copies: Option<&'a ReplicatedFile>,
}

/// A reader's state, made on its CPU: its buffer (first touched there)
/// and, for `mmap`, its own mapping of the file, or its reader of the
/// copies.
struct Reader<'a> {
    buffer: Vec<u8>,
    mapping: Option<MappedFile>,
    copies: Option<FileReader<'a>>,
}

/// What a reader's work returns.
struct Outcome {
    read: Duration,
    bytes: u64,
    stopped: bool,
    from_copies: u64,
    copies_made: u64,
}

/// One timed run of the cell's readers; `None` when `stop` ended it.
fn one_repeat(
    plan: &Plan,
    file: &File,
    label: &str,
    readers: &Readers<'_>,
    stop: &AtomicBool,
) -> Result<Option<BenchRepeat>, BenchError> {
    let config = &plan.config;
    let block = config.block_size as usize;
    let size = plan.size;
    let mapping_failed = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    let write_every = config.copies.as_ref().and_then(|c| c.write_every);
    let (run, writes) = std::thread::scope(|scope| {
        let writer = match (readers.copies, write_every) {
            (Some(copies), Some(every)) => {
                let finished = &finished;
                let (began, first) = std::sync::mpsc::sync_channel(1);
                let writer =
                    scope.spawn(move || write_while(copies, block, every, began, finished, stop));
                // The readers start once the writer has written (or
                // failed): every repeat has a write to read through,
                // however late a busy machine starts the writer.
                let _ = first.recv();
                Some(writer)
            }
            _ => None,
        };
        let run = run_pinned(
            readers.cpus,
            |_| {
                let mut buffer = vec![0u8; buffer_bytes(config, size) as usize];
                // First touch on the reader's CPU puts the buffer on its node.
                buffer.iter_mut().step_by(4096).for_each(|b| *b = 1);
                let mapping = match config.method {
                    Method::Mmap => MappedFile::map(file)
                        .map_err(|_| mapping_failed.store(true, Ordering::SeqCst))
                        .ok(),
                    Method::Read => None,
                };
                Reader {
                    buffer,
                    mapping,
                    copies: readers.copies.map(|c| c.reader(readers.copy_node)),
                }
            },
            |i, reader| {
                let group = (i / config.group) as u32;
                let offset = config.stagger * group;
                if !offset.is_zero() {
                    wait(offset, stop);
                }
                let start = Instant::now();
                let mut done = 0u64;
                let mut stopped = false;
                while done < size {
                    if stop.load(Ordering::Relaxed) {
                        stopped = true;
                        break;
                    }
                    let want = (size - done).min(block as u64) as usize;
                    let buffer = &mut reader.buffer[..want];
                    let n = match (&reader.mapping, &mut reader.copies) {
                        (Some(mapping), _) => {
                            let n = mapping.copy_to(done as usize, buffer);
                            std::hint::black_box(&buffer);
                            n
                        }
                        (None, _) if config.method == Method::Mmap => 0,
                        (None, Some(copies)) => copies.read_at(buffer, done).unwrap_or(0),
                        (None, None) => file.read_at(buffer, done).unwrap_or(0),
                    };
                    if n == 0 {
                        break;
                    }
                    done += n as u64;
                }
                let (from_copies, copies_made) = reader
                    .copies
                    .as_ref()
                    .map_or((0, 0), |c| (c.from_copies, c.copied));
                Outcome {
                    read: start.elapsed(),
                    bytes: done,
                    stopped,
                    from_copies,
                    copies_made,
                }
            },
        );
        finished.store(true, Ordering::SeqCst);
        let writes = writer.map_or(Ok(0), |w| w.join().unwrap_or(Ok(0)));
        (run, writes)
    });
    let run = run?;
    let writes = writes.map_err(|e| BenchError::File {
        path: label.to_string(),
        source: PageCacheError::Os(std::io::Error::other(format!(
            "the writer could not write: {e}"
        ))),
    })?;
    if mapping_failed.load(Ordering::SeqCst) {
        return Err(BenchError::File {
            path: label.to_string(),
            source: PageCacheError::Os(std::io::Error::other("a reader could not map the file")),
        });
    }
    if run.workers.iter().any(|w| w.output.stopped) {
        return Ok(None);
    }
    if let Some(short) = run.workers.iter().find(|w| w.output.bytes < size) {
        return Err(BenchError::Truncated {
            path: label.to_string(),
            cpu: short.cpu,
            got: short.output.bytes,
            size,
        });
    }
    Ok(Some(BenchRepeat {
        time_to_last_s: run.wall.as_secs_f64(),
        readers: run
            .workers
            .iter()
            .map(|w| ReaderRun {
                cpu: w.cpu,
                node: w.node,
                started_s: w.busy.saturating_sub(w.output.read).as_secs_f64(),
                read_s: w.output.read.as_secs_f64(),
                bytes: w.output.bytes,
                from_copies: w.output.from_copies,
                copies_made: w.output.copies_made,
            })
            .collect(),
        writes,
    }))
}

/// Writes one block of the file through `copies` every `every` until the
/// readers are `finished`: each write makes the copies of its chunk
/// stale, as a writer process changing a read-mostly file would. Says on
/// `began` when the first write is made (dropping it on an error says so
/// too). Returns how many it made.
fn write_while(
    copies: &ReplicatedFile,
    block: usize,
    every: Duration,
    began: std::sync::mpsc::SyncSender<()>,
    finished: &AtomicBool,
    stop: &AtomicBool,
) -> Result<u64, FileCopyError> {
    let len = copies.len();
    let block = (block as u64).min(len) as usize;
    let mut data = vec![0u8; block];
    let mut writes = 0u64;
    // A fixed-seed walk over the file: different chunks, no clustering.
    let mut at = 0x9E37_79B9_7F4A_7C15u64;
    let mut began = Some(began);
    while !finished.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
        at = at
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (at >> 16) % (len - block as u64 + 1);
        data.fill(writes as u8);
        copies.write_at(&data, offset)?;
        writes += 1;
        if let Some(began) = began.take() {
            let _ = began.send(());
        }
        wait(every, finished);
    }
    Ok(writes)
}

/// Sleeps `span`, waking early when `stop` is set.
fn wait(span: Duration, stop: &AtomicBool) {
    let end = Instant::now() + span;
    while !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let values: Vec<f64> = values.into_iter().collect();
    Summary::of(&values).map(|s| s.median)
}

/// The cell's medians from its repeats.
/// A cell through copies leaves out its first repeat, which made them,
/// when it has others.
fn summarise(cell: &mut BenchCell, size: u64) {
    let skip = usize::from(cell.copies && cell.repeats.len() > 1);
    let repeats = &cell.repeats[skip..];
    cell.time_to_last_s = median(repeats.iter().map(|r| r.time_to_last_s));
    cell.reader_gbps = median(
        repeats
            .iter()
            .flat_map(|r| r.readers.iter().map(ReaderRun::gbps)),
    );
    cell.aggregate_gbps = median(
        repeats
            .iter()
            .map(|r| (size * r.readers.len() as u64) as f64 / r.time_to_last_s.max(1e-9) / 1e9),
    );
}

/// Copies against the shared cache, for each cell that ran both ways.
fn gains(cells: &[BenchCell], cache_node: u32) -> Vec<CopiesGain> {
    let ran = |c: &&BenchCell| c.status == CellStatus::Ran;
    let mut out = Vec::new();
    for through in cells.iter().filter(ran).filter(|c| c.copies) {
        let Some(shared) = cells.iter().filter(ran).find(|c| {
            !c.copies && c.readers == through.readers && c.reader_node == through.reader_node
        }) else {
            continue;
        };
        let (Some(shared_s), Some(copies_s), Some(first)) = (
            shared.time_to_last_s,
            through.time_to_last_s,
            through.repeats.first(),
        ) else {
            continue;
        };
        let node = through.reader_node.unwrap_or_default();
        let page = numalab::system::page_size() as u64;
        out.push(CopiesGain {
            readers: through.readers,
            reader_node: node,
            shared_s,
            copies_s,
            first_s: first.time_to_last_s,
            local_shared_s: cells
                .iter()
                .filter(ran)
                .find(|c| {
                    !c.copies && c.readers == through.readers && c.reader_node == Some(cache_node)
                })
                .and_then(|c| c.time_to_last_s),
            memory_bytes: through
                .copy_audit
                .as_ref()
                .map_or(0, |a| a.pages.values().sum::<u64>() * page),
            copies_made: through
                .repeats
                .iter()
                .flat_map(|r| r.readers.iter().map(|x| x.copies_made))
                .sum(),
        });
    }
    out
}

/// Remote against local for each reader count that ran on both the
/// cache's node and another.
fn ratios(plan: &Plan, topology: &Topology, cells: &[BenchCell]) -> Vec<RemoteRatio> {
    let ran = |c: &&BenchCell| c.status == CellStatus::Ran;
    // One CPU's read bandwidth of the cache node's memory, from each node
    // asked (the cache node's own once, however many remote nodes).
    let mut measured: Vec<(u32, Option<f64>)> = Vec::new();
    let mut read_gbps = |from: u32| match measured.iter().find(|(n, _)| *n == from) {
        Some(&(_, gbps)) => gbps,
        None => {
            let gbps = read_from(topology, plan.cache_node, from);
            measured.push((from, gbps));
            gbps
        }
    };
    let mut out = Vec::new();
    for local in cells
        .iter()
        .filter(ran)
        .filter(|c| c.reader_node == Some(plan.cache_node))
    {
        for remote in cells.iter().filter(ran).filter(|c| {
            c.readers == local.readers && c.reader_node.is_some_and(|n| n != plan.cache_node)
        }) {
            let node = remote.reader_node.unwrap_or_default();
            let reader_time = |c: &BenchCell| {
                median(
                    c.repeats
                        .iter()
                        .flat_map(|r| r.readers.iter().map(|x| x.read_s)),
                )
            };
            let (Some(lt), Some(rt), Some(lr), Some(rr)) = (
                local.time_to_last_s,
                remote.time_to_last_s,
                reader_time(local),
                reader_time(remote),
            ) else {
                continue;
            };
            let matrix_ratio = if plan.config.compare_matrix {
                read_gbps(plan.cache_node)
                    .zip(read_gbps(node))
                    .map(|(local, remote)| local / remote)
            } else {
                None
            };
            let slit = |from| topology.distance(from, plan.cache_node);
            out.push(RemoteRatio {
                readers: local.readers,
                reader_node: node,
                time_ratio: rt / lt,
                reader_ratio: rr / lr,
                slit_ratio: match (slit(node), slit(plan.cache_node)) {
                    (Some(far), Some(near)) if near > 0 => Some(far as f64 / near as f64),
                    _ => None,
                },
                matrix_ratio,
            });
        }
    }
    out
}

/// Single-thread read bandwidth (GB/s, median of three samples) of
/// `memory`'s memory from a CPU of `from`.
fn read_from(topology: &Topology, memory: u32, from: u32) -> Option<f64> {
    let timing = StreamTiming {
        repeats: 3,
        sample: Duration::from_millis(100),
    };
    let cpu = *spread_cpus(topology, from, 1).first()?;
    let run = bandwidth::measure(
        &[cpu],
        memory,
        256 << 20,
        HugePages::None,
        &[Kernel::Read],
        timing,
    )
    .ok()?;
    median(run.samples.first()?.1.iter().copied())
}
