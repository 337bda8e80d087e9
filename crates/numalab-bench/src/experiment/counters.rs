//! Performance counters per worker thread, through `perf_event_open(2)`
//! (the `perf-event2` crate): cycles, instructions, last-level cache
//! misses and node-local/remote loads where the PMU exposes them; the
//! kernel's software events (task clock, page faults, context switches,
//! CPU migrations) everywhere. A machine without a hardware PMU — most
//! VMs — gets the software events and a one-line note, never a failure.

use std::collections::BTreeMap;

use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Event, Hardware, Software};
use perf_event::{Builder, Counter};

/// One counter numalab reads.
///
/// ```
/// use numalab_bench::experiment::counters::ALL;
/// let names: Vec<&str> = ALL.iter().map(|k| k.name).collect();
/// assert_eq!(names[0], "cycles", "hardware first");
/// assert!(names.contains(&"page-faults"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterKind {
    /// Name in results (`cycles`, `page-faults`, ...).
    pub name: &'static str,
    hardware: bool,
    event: EventId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventId {
    Hw(u64),
    Sw(u64),
    NodeLoads,
    NodeLoadMisses,
    L1dLoads,
    L1dStores,
    NodeStores,
    NodeStoreMisses,
}

/// Every counter numalab tries, hardware first.
pub const ALL: [CounterKind; 9] = [
    CounterKind {
        name: "cycles",
        hardware: true,
        event: EventId::Hw(0),
    },
    CounterKind {
        name: "instructions",
        hardware: true,
        event: EventId::Hw(1),
    },
    CounterKind {
        name: "llc-misses",
        hardware: true,
        event: EventId::Hw(3),
    },
    CounterKind {
        name: "node-loads",
        hardware: true,
        event: EventId::NodeLoads,
    },
    CounterKind {
        name: "node-load-misses",
        hardware: true,
        event: EventId::NodeLoadMisses,
    },
    CounterKind {
        name: "task-clock-ns",
        hardware: false,
        event: EventId::Sw(1),
    },
    CounterKind {
        name: "page-faults",
        hardware: false,
        event: EventId::Sw(2),
    },
    CounterKind {
        name: "context-switches",
        hardware: false,
        event: EventId::Sw(3),
    },
    CounterKind {
        name: "cpu-migrations",
        hardware: false,
        event: EventId::Sw(4),
    },
];

/// The memory events `numalab profile` counts for a program, where the
/// PMU offers them: perf's generic events, as the kernel maps them onto
/// this CPU (`L1-dcache-loads`, `L1-dcache-stores`, `node-loads`,
/// `node-load-misses`, `node-stores`, `node-store-misses`). A node
/// "miss" is an access served by another node's memory.
///
/// ```
/// use numalab_bench::experiment::counters::MEMORY;
/// assert!(MEMORY.iter().all(|k| k.hardware()));
/// assert_eq!(MEMORY[2].name, "node-loads");
/// ```
pub const MEMORY: [CounterKind; 6] = [
    CounterKind {
        name: "loads",
        hardware: true,
        event: EventId::L1dLoads,
    },
    CounterKind {
        name: "stores",
        hardware: true,
        event: EventId::L1dStores,
    },
    CounterKind {
        name: "node-loads",
        hardware: true,
        event: EventId::NodeLoads,
    },
    CounterKind {
        name: "node-load-misses",
        hardware: true,
        event: EventId::NodeLoadMisses,
    },
    CounterKind {
        name: "node-stores",
        hardware: true,
        event: EventId::NodeStores,
    },
    CounterKind {
        name: "node-store-misses",
        hardware: true,
        event: EventId::NodeStoreMisses,
    },
];

impl CounterKind {
    /// Whether it needs a hardware PMU (the kernel's software events do not).
    pub fn hardware(&self) -> bool {
        self.hardware
    }

    /// The counter named `name` among [`ALL`] and [`MEMORY`].
    ///
    /// ```
    /// use numalab_bench::experiment::counters::CounterKind;
    /// assert!(CounterKind::named("page-faults").is_some_and(|k| !k.hardware()));
    /// assert!(CounterKind::named("stores").is_some());
    /// assert!(CounterKind::named("bogus").is_none());
    /// ```
    pub fn named(name: &str) -> Option<CounterKind> {
        ALL.iter()
            .chain(MEMORY.iter())
            .copied()
            .find(|k| k.name == name)
    }
}

fn cache(which: CacheId, operation: CacheOp, result: CacheResult) -> Builder<'static> {
    Builder::new(Cache {
        which,
        operation,
        result,
    })
}

fn builder(kind: CounterKind) -> Builder<'static> {
    fn make(event: impl Event + 'static) -> Builder<'static> {
        Builder::new(event)
    }
    match kind.event {
        EventId::Hw(0) => make(Hardware::CPU_CYCLES),
        EventId::Hw(1) => make(Hardware::INSTRUCTIONS),
        EventId::Hw(_) => make(Hardware::CACHE_MISSES),
        EventId::Sw(1) => make(Software::TASK_CLOCK),
        EventId::Sw(2) => make(Software::PAGE_FAULTS),
        EventId::Sw(3) => make(Software::CONTEXT_SWITCHES),
        EventId::Sw(_) => make(Software::CPU_MIGRATIONS),
        EventId::NodeLoads => cache(CacheId::NODE, CacheOp::READ, CacheResult::ACCESS),
        EventId::NodeLoadMisses => cache(CacheId::NODE, CacheOp::READ, CacheResult::MISS),
        EventId::L1dLoads => cache(CacheId::L1D, CacheOp::READ, CacheResult::ACCESS),
        EventId::L1dStores => cache(CacheId::L1D, CacheOp::WRITE, CacheResult::ACCESS),
        EventId::NodeStores => cache(CacheId::NODE, CacheOp::WRITE, CacheResult::ACCESS),
        EventId::NodeStoreMisses => cache(CacheId::NODE, CacheOp::WRITE, CacheResult::MISS),
    }
}

/// Opens `kind` for the calling thread (`None`), or for thread `tid`
/// and what it starts from then on, counting at once: kernel work
/// included where allowed (page faults are kernel work), user space only
/// otherwise.
fn open_for(kind: CounterKind, tid: Option<i32>) -> std::io::Result<Counter> {
    let attempt = |exclude_kernel: bool| {
        let mut b = builder(kind);
        match tid {
            None => b.observe_self(),
            Some(tid) => b.observe_pid(tid).inherit(true).enabled(true),
        };
        b.any_cpu().exclude_kernel(exclude_kernel);
        b.build()
    };
    attempt(false).or_else(|_| attempt(true))
}

/// Opens `kind` for the calling thread, stopped until started.
fn open(kind: CounterKind) -> std::io::Result<Counter> {
    open_for(kind, None)
}

/// Reads a counter, scaled up when the kernel had to multiplex it
/// (count × time enabled / time running).
fn scaled(counter: &mut Counter) -> Option<u64> {
    let read = counter.read_count_and_time().ok()?;
    Some(
        if read.time_running > 0 && read.time_running < read.time_enabled {
            (read.count as f64 * read.time_enabled as f64 / read.time_running as f64) as u64
        } else {
            read.count
        },
    )
}

/// Which counters this machine can read, found by opening each once.
///
/// ```
/// use numalab_bench::experiment::counters::{Available, ALL};
/// let here = Available::probe();
/// assert_eq!(here.names().len(), here.kinds.len());
/// // Whatever could not be opened is explained in one line.
/// if here.kinds.len() < ALL.len() {
///     assert!(here.note.as_deref().is_some_and(|n| !n.contains('\n')));
/// }
/// assert!(Available::none().names().is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Available {
    /// The counters that opened.
    pub kinds: Vec<CounterKind>,
    /// One line on what is missing and why.
    pub note: Option<String>,
}

impl Available {
    /// Tries every counter on the calling thread.
    pub fn probe() -> Available {
        let mut kinds = Vec::new();
        let mut failed: Vec<(&str, std::io::Error)> = Vec::new();
        for kind in ALL {
            match open(kind) {
                Ok(_) => kinds.push(kind),
                Err(err) => failed.push((kind.name, err)),
            }
        }
        let hardware = kinds.iter().any(|k| k.hardware);
        let note = match failed.first() {
            None => None,
            Some((name, err)) if !hardware => Some(format!(
                "no hardware PMU here (perf_event_open {name}: {err}): software events only{}",
                if kinds.is_empty() {
                    " — and those are not allowed either (kernel.perf_event_paranoid?)".to_owned()
                } else {
                    String::new()
                }
            )),
            Some(_) => Some(format!(
                "not exposed by this CPU or kernel: {}",
                failed
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        Available { kinds, note }
    }

    /// Nothing (counters switched off).
    pub fn none() -> Available {
        Available::default()
    }

    /// Whether some hardware counter opened (a PMU is there).
    pub fn hardware(&self) -> bool {
        self.kinds.iter().any(|k| k.hardware)
    }

    /// Names of the counters.
    pub fn names(&self) -> Vec<String> {
        self.kinds.iter().map(|k| k.name.to_owned()).collect()
    }
}

/// A worker thread's open counters.
///
/// ```
/// use numalab_bench::experiment::counters::{Available, ThreadCounters};
/// let available = Available::probe();
/// let mut counters = ThreadCounters::open(&available);
/// counters.start();
/// std::hint::black_box(vec![1u8; 1 << 20]);
/// let counts = counters.stop();
/// // Only counters this machine can read, by name.
/// assert!(counts.keys().all(|name| available.names().contains(name)));
/// // With counters switched off there is nothing to read.
/// assert!(ThreadCounters::open(&Available::none()).stop().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct ThreadCounters {
    counters: Vec<(&'static str, Counter)>,
}

impl ThreadCounters {
    /// Opens `available`'s counters for the calling thread (one that
    /// fails now is left out).
    pub fn open(available: &Available) -> ThreadCounters {
        ThreadCounters {
            counters: available
                .kinds
                .iter()
                .filter_map(|&k| open(k).ok().map(|c| (k.name, c)))
                .collect(),
        }
    }

    /// Zeroes and starts every counter.
    pub fn start(&mut self) {
        for (_, counter) in &mut self.counters {
            let _ = counter.reset();
            let _ = counter.enable();
        }
    }

    /// Stops every counter and reads it, scaled up when the kernel had to
    /// multiplex it (count × time enabled / time running).
    pub fn stop(&mut self) -> BTreeMap<String, u64> {
        for (_, counter) in &mut self.counters {
            let _ = counter.disable();
        }
        self.counters
            .iter_mut()
            .filter_map(|(name, counter)| Some(((*name).to_owned(), scaled(counter)?)))
            .collect()
    }
}

/// Counters on another program: its threads as they are now and every
/// thread and process they start from then on (the kernel's `inherit`:
/// a task's counts are added to its parent's as it exits, so the totals
/// hold exited ones too), counting from the moment they are opened.
///
/// ```
/// use numalab_bench::experiment::counters::{CounterKind, ProcessCounters};
/// let faults = CounterKind::named("page-faults").unwrap();
/// let mut child = std::process::Command::new("sleep").arg("0.1").spawn()?;
/// let mut counters = ProcessCounters::open(&[child.id() as i32], &[faults]);
/// child.wait()?;
/// // Where perf events are allowed, the count is there by name.
/// if counters.failed().is_empty() {
///     assert!(counters.read().contains_key("page-faults"));
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct ProcessCounters {
    counters: Vec<(&'static str, Counter)>,
    failed: Vec<(&'static str, std::io::Error)>,
}

impl ProcessCounters {
    /// Opens each of `kinds` on each thread in `tids` (one program's),
    /// counting at once. A kind that cannot be opened on some thread is
    /// left out whole and kept in [`failed`](Self::failed).
    pub fn open(tids: &[i32], kinds: &[CounterKind]) -> ProcessCounters {
        let mut result = ProcessCounters::default();
        for &kind in kinds {
            let mut opened = Vec::with_capacity(tids.len());
            let mut error = None;
            for &tid in tids {
                match open_for(kind, Some(tid)) {
                    Ok(counter) => opened.push(counter),
                    Err(err) => {
                        error = Some(err);
                        break;
                    }
                }
            }
            match error {
                Some(err) => result.failed.push((kind.name, err)),
                None => result
                    .counters
                    .extend(opened.into_iter().map(|c| (kind.name, c))),
            }
        }
        result
    }

    /// The kinds that could not be opened, with the kernel's answer.
    pub fn failed(&self) -> &[(&'static str, std::io::Error)] {
        &self.failed
    }

    /// The counts so far by name, every thread's summed (scaled up where
    /// the kernel multiplexed them).
    pub fn read(&mut self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for (name, counter) in &mut self.counters {
            if let Some(count) = scaled(counter) {
                *counts.entry((*name).to_owned()).or_insert(0) += count;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_counters_count_page_faults() {
        let available = Available::probe();
        if !available.kinds.iter().any(|k| k.name == "page-faults") {
            let why = available.note.clone().unwrap_or_default();
            numalab::testing::cannot_check(format!("perf events not usable here ({why}); allow them with sysctl kernel.perf_event_paranoid=1"));
            return;
        }
        let mut counters = ThreadCounters::open(&available);
        counters.start();
        // Touch 64 fresh pages: at least one fault (64 on 4 KiB pages).
        // Above 32 MiB glibc always maps the allocation fresh, never from
        // heap pages an earlier test already faulted in.
        let mut memory = vec![0u8; (33 << 20) + 1];
        for i in (0..64 * 4096).step_by(4096) {
            memory[i] = 1;
        }
        std::hint::black_box(&memory);
        let counts = counters.stop();
        assert!(counts["page-faults"] >= 1, "{counts:?}");
        assert!(counts["task-clock-ns"] > 0, "{counts:?}");
        if let Some(note) = &available.note {
            assert!(note.len() < 200 && !note.contains('\n'), "one line: {note}");
        }
    }
}
