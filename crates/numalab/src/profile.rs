//! A running program's memory, node by node, over time: what `numastat -p`
//! says at one moment, sampled like `mpstat`, with the counters that say
//! how the program and the kernel moved it (faults, CPU migrations, NUMA
//! balancing's page migrations) and the nodes its threads ran on.
//!
//! Everything comes from `/proc` and needs no hardware counters: memory
//! per node and kind from `/proc/PID/numa_maps` (exact at each sample;
//! memory allocated and freed between two samples is not seen), faults
//! and CPU time from `/proc/PID/stat` (the whole process, exited threads
//! included), CPU migrations and NUMA balancing's migrations from each
//! live thread's `/proc/PID/task/TID/sched` (a thread that has exited takes
//! its counts with it), and the node of the CPU each thread last ran on.
//!
//! ```
//! use numalab::profile::{sample, CpuNodes};
//! let nodes = CpuNodes::live();
//! let now = sample(&[std::process::id() as i32], &nodes, std::time::Instant::now());
//! assert_eq!(now.processes, 1);
//! assert!(now.threads >= 1);
//! assert!(now.memory.per_node().values().sum::<u64>() > 0);
//! ```

use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::locate::ProcessMemory;
use crate::sys::procfs;

/// Which node each CPU belongs to, read once.
///
/// ```
/// use numalab::profile::CpuNodes;
/// let nodes = CpuNodes::live();
/// assert!(nodes.node_of(0).is_some(), "CPU 0 is on some node");
/// ```
#[derive(Debug, Clone, Default)]
pub struct CpuNodes(BTreeMap<u32, u32>);

impl CpuNodes {
    /// This machine's, from sysfs.
    pub fn live() -> CpuNodes {
        let mut map = BTreeMap::new();
        for node in procfs::online_nodes().unwrap_or_default().iter() {
            for cpu in procfs::node_cpus(node).unwrap_or_default().iter() {
                map.insert(cpu, node);
            }
        }
        CpuNodes(map)
    }

    /// The node of `cpu`.
    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.0.get(&cpu).copied()
    }
}

/// The processes watched, at one moment ([`sample`]).
///
/// ```
/// use numalab::profile::ProfileSample;
/// let empty = ProfileSample::default();
/// assert_eq!((empty.processes, empty.minor_faults), (0, 0));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSample {
    /// Seconds since the profile began.
    pub at_s: f64,
    /// Processes read (those still running).
    pub processes: u32,
    /// Their threads.
    pub threads: u32,
    /// Their memory per kind and node (`numa_maps`), summed.
    pub memory: ProcessMemory,
    /// Threads per node of the CPU each last ran on.
    pub threads_by_node: BTreeMap<u32, u32>,
    /// Minor page faults so far (no I/O: first touch, copy on write).
    pub minor_faults: u64,
    /// Major page faults so far (read from disk or swap).
    pub major_faults: u64,
    /// CPU time so far, user and system, seconds.
    pub cpu_s: f64,
    /// Moves of the live threads from one CPU to another so far.
    pub cpu_migrations: u64,
    /// Pages NUMA balancing moved for the live threads so far (0 where
    /// `kernel.numa_balancing` is off).
    pub numa_pages_migrated: u64,
    /// Private writable pages present, and how many were written since
    /// the sample before (soft-dirty bits; [`WriteTracker`]); `None`
    /// unless asked for, and at a process's first sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<WrittenPages>,
}

/// Of the private writable pages present at a sample (heap, stack,
/// anonymous memory), how many were written since the sample before: an
/// estimate of how much of its memory a program writes, where no hardware
/// counter says how many of its accesses are stores. A page written once
/// and a page written a million times count alike; a page mapped since the
/// sample before counts as written.
///
/// ```
/// use numalab::profile::WrittenPages;
/// let pages = WrittenPages { present: 1000, written: 250 };
/// assert_eq!(pages.share(), 0.25);
/// assert_eq!(WrittenPages::default().share(), 0.0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenPages {
    /// Pages present.
    pub present: u64,
    /// Of those, written since the sample before.
    pub written: u64,
}

impl WrittenPages {
    /// `written / present` (0 when nothing is present).
    pub fn share(&self) -> f64 {
        if self.present == 0 {
            0.0
        } else {
            self.written as f64 / self.present as f64
        }
    }

    fn add(&mut self, other: WrittenPages) {
        self.present += other.present;
        self.written += other.written;
    }
}

/// Follows which pages of some processes are written between samples,
/// with the kernel's soft-dirty bits (Documentation/admin-guide/mm/soft-dirty.rst):
/// at each sample it counts the pages whose bit is set, then clears every
/// bit again. Clearing write-protects the pages, so the first write to
/// each page after a sample costs the program one extra (minor) page
/// fault: a program that writes all of a large memory between every two
/// samples pays that many faults per sample. It also resets the bits for
/// any other user of them (CRIU's incremental dumps).
///
/// ```
/// use numalab::profile::WriteTracker;
/// let Some(mut tracker) = WriteTracker::new() else {
///     eprintln!("not run: this kernel keeps no soft-dirty bits (CONFIG_MEM_SOFT_DIRTY)");
///     return;
/// };
/// let pid = std::process::id() as i32;
/// assert!(tracker.sample(&[pid]).is_none()); // the first sample starts the window
/// let mut buffer = vec![0u8; 64 << 20];
/// for page in buffer.chunks_mut(4096) {
///     page[0] = 1;
/// }
/// let pages = tracker.sample(&[pid]).unwrap();
/// assert!(pages.written >= (64 << 20) / 4096, "{pages:?}");
/// std::hint::black_box(&buffer);
/// ```
#[derive(Debug, Default)]
pub struct WriteTracker {
    started: std::collections::BTreeSet<i32>,
}

impl WriteTracker {
    /// A tracker, when this kernel keeps soft-dirty bits (tried on a
    /// page of this process); `None` when it does not
    /// (`CONFIG_MEM_SOFT_DIRTY` off, or no `/proc/PID/clear_refs`).
    pub fn new() -> Option<WriteTracker> {
        soft_dirty_works().then(WriteTracker::default)
    }

    /// The pages of `pids` written since this tracker's last sample of
    /// each, summed; then every bit is cleared for the next. `None` when
    /// none of them had been sampled before (or none could be read).
    pub fn sample(&mut self, pids: &[i32]) -> Option<WrittenPages> {
        let mut total: Option<WrittenPages> = None;
        for &pid in pids {
            if self.started.contains(&pid) {
                if let Ok((present, written)) = procfs::soft_dirty_pages(pid) {
                    total
                        .get_or_insert_with(WrittenPages::default)
                        .add(WrittenPages { present, written });
                }
            }
            if procfs::clear_soft_dirty(pid).is_ok() {
                self.started.insert(pid);
            }
        }
        total
    }
}

/// Whether soft-dirty bits work here: a page of this process written,
/// the bits cleared, the page's bit off, written again, on.
fn soft_dirty_works() -> bool {
    let page = crate::sys::linux::page_size();
    let mut probe = vec![0u8; 2 * page];
    let address = (probe.as_ptr() as usize).next_multiple_of(page);
    let offset = address - probe.as_ptr() as usize;
    let bit = |probe: &[u8]| {
        std::hint::black_box(probe);
        procfs::pagemap_of_self(&[address], page)
            .ok()
            .and_then(|e| e.first().map(|e| e.soft_dirty))
    };
    probe[offset] = 1;
    let pid = crate::sys::linux::process_id() as i32;
    if procfs::clear_soft_dirty(pid).is_err() {
        return false;
    }
    let cleared = bit(&probe);
    probe[offset] = 2;
    let written = bit(&probe);
    cleared == Some(false) && written == Some(true)
}

/// Reads `pids` (processes; their threads are found) now; a process that
/// has gone is left out. `start` is the profile's beginning.
pub fn sample(pids: &[i32], nodes: &CpuNodes, start: Instant) -> ProfileSample {
    sample_with(pids, nodes, start, |_, _| {})
}

/// [`sample`], handing each process's memory to `seen` as it is read.
pub fn sample_with(
    pids: &[i32],
    nodes: &CpuNodes,
    start: Instant,
    mut seen: impl FnMut(i32, &ProcessMemory),
) -> ProfileSample {
    let mut sample = ProfileSample {
        at_s: start.elapsed().as_secs_f64(),
        ..ProfileSample::default()
    };
    let ticks = procfs::clock_ticks() as f64;
    for &pid in pids {
        let Ok(memory) = ProcessMemory::of_process(pid) else {
            continue;
        };
        let Ok(stat) = procfs::task_stat(pid, pid) else {
            continue;
        };
        seen(pid, &memory);
        sample.processes += 1;
        sample.memory.merge(&memory);
        sample.minor_faults += stat.minor_faults;
        sample.major_faults += stat.major_faults;
        sample.cpu_s += stat.cpu_ticks as f64 / ticks;
        for tid in procfs::task_ids(pid).unwrap_or_default() {
            let Ok(thread) = procfs::task_stat(pid, tid) else {
                continue;
            };
            sample.threads += 1;
            if let Some(node) = nodes.node_of(thread.processor) {
                *sample.threads_by_node.entry(node).or_default() += 1;
            }
            if let Ok(sched) = procfs::task_sched(pid, tid) {
                sample.cpu_migrations += sched.cpu_migrations;
                sample.numa_pages_migrated += sched.numa_pages_migrated;
            }
        }
    }
    sample
}

/// How often to sample and for how long.
///
/// ```
/// use numalab::profile::ProfileOptions;
/// let options = ProfileOptions::default();
/// assert_eq!(options.interval, std::time::Duration::from_millis(100));
/// assert_eq!(options.grow_to, std::time::Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfileOptions {
    /// Time between the first samples; stretched when reading takes long,
    /// so the sampling after the first sample takes about [`MAX_SHARE`] of a CPU.
    pub interval: Duration,
    /// The interval grows by half after each sample up to this (dense
    /// samples for a short program, few for a long one; equal to
    /// `interval` for a fixed rate).
    pub grow_to: Duration,
    /// Stop after this long (the program goes on); `None`: until it ends.
    pub duration: Option<Duration>,
    /// Count the pages written between samples ([`WriteTracker`]; costs
    /// the program a page fault per page it writes per sample).
    pub writes: bool,
    /// The most of one CPU the sampling may take, 0 to 1 ([`MAX_SHARE`]
    /// unless the user allows more for denser samples of a large
    /// program).
    pub max_share: f64,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            interval: Duration::from_millis(100),
            grow_to: Duration::from_secs(1),
            duration: None,
            writes: false,
            max_share: MAX_SHARE,
        }
    }
}

/// The most of one CPU the sampling may take: reading `numa_maps` walks
/// the program's page tables, under a lock its own `mmap` calls wait for.
pub const MAX_SHARE: f64 = 0.01;

/// The most samples one profile keeps: a day at the default interval is
/// under a hundred thousand; past this every other sample is dropped
/// ([`Timeline::push`]), and the timeline says how many.
pub const MAX_SAMPLES: usize = 100_000;

/// Samples taken of a process ([`watch`]), or of a launched command
/// ([`Launch::timeline`](crate::launch::Launch::timeline)).
///
/// ```
/// use numalab::profile::Timeline;
/// let timeline = Timeline::default();
/// assert!(timeline.samples.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The samples, oldest first.
    pub samples: Vec<ProfileSample>,
    /// The interval asked for, seconds.
    pub interval_s: f64,
    /// CPU time the sampling took, seconds (the sampling thread's own).
    pub sampling_cpu_s: f64,
    /// Samples dropped to stay within [`MAX_SAMPLES`] (every other one,
    /// each time the limit was reached).
    pub thinned: u64,
}

impl Timeline {
    /// Adds a sample, thinning the older ones past [`MAX_SAMPLES`].
    pub fn push(&mut self, sample: ProfileSample) {
        if self.samples.len() >= MAX_SAMPLES {
            let before = self.samples.len();
            let mut keep = false;
            self.samples.retain(|_| {
                keep = !keep;
                keep
            });
            self.thinned += (before - self.samples.len()) as u64;
        }
        self.samples.push(sample);
    }

    /// The interval after `interval`: half as long again, at most
    /// `grow_to`.
    pub fn next_interval(interval: Duration, grow_to: Duration) -> Duration {
        interval
            .mul_f64(1.5)
            .min(grow_to)
            .max(interval.min(grow_to))
    }

    /// How long to wait after a sample that took `took` (wall time) and
    /// `cpu` (the sampling thread's CPU time: reading `numa_maps` may also
    /// wait for the program's own memory-map lock, which costs it
    /// nothing), to keep the sampling under `share` of a CPU
    /// ([`MAX_SHARE`] by default).
    pub fn pause(interval: Duration, took: Duration, cpu: Duration, share: f64) -> Duration {
        let share = share.clamp(1e-4, 1.0);
        let least = cpu.mul_f64(1.0 / share - 1.0);
        interval.saturating_sub(took).max(least)
    }
}

/// A process held by what identifies it, its pid and its start time,
/// not by its number alone: once it has ended, a later process given the
/// same number is not it ([`running`](Self::running) says no).
///
/// ```
/// use numalab::profile::Process;
/// let mut child = std::process::Command::new("sleep").arg("5").spawn()?;
/// let process = Process::of(child.id() as i32)?;
/// assert!(process.running());
/// child.kill()?;
/// child.wait()?;
/// assert!(!process.running());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pid: i32,
    start_ticks: u64,
}

impl Process {
    /// Process `pid` as it is now; an error when there is none, and
    /// (`InvalidInput`) when it has no memory to watch: a kernel thread,
    /// or a process that has ended and waits for its parent (a zombie).
    ///
    /// ```
    /// use numalab::profile::Process;
    /// let mut child = std::process::Command::new("true").spawn()?;
    /// let pid = child.id() as i32;
    /// // Once it has ended, and until it is waited for, it is a zombie.
    /// let err = loop {
    ///     match Process::of(pid) {
    ///         Err(err) => break err,
    ///         Ok(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
    ///     }
    /// };
    /// assert!(err.to_string().ends_with("has ended (a zombie its parent has not waited for): it holds no memory to watch"));
    /// child.wait()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn of(pid: i32) -> io::Result<Process> {
        let stat = procfs::task_stat(pid, pid)?;
        let refuse = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        if stat.kernel_thread {
            return refuse(format!(
                "process {pid} is a kernel thread: it has no memory of its own to watch"
            ));
        }
        if matches!(stat.state, 'Z' | 'X') {
            return refuse(format!(
                "process {pid} has ended (a zombie its parent has not waited for): it holds no memory to watch"
            ));
        }
        Ok(Process {
            pid,
            start_ticks: stat.start_ticks,
        })
    }

    /// Its number.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether it still runs: its number names a process started when it
    /// was, which has not exited (a zombie waiting for its parent does
    /// not run).
    pub fn running(&self) -> bool {
        procfs::task_stat(self.pid, self.pid).is_ok_and(|stat| {
            stat.start_ticks == self.start_ticks && stat.state != 'Z' && stat.state != 'X'
        })
    }
}

/// Process `pid`'s command name, as `ps -o comm` shows it; empty when it
/// cannot be read.
///
/// ```
/// let name = numalab::profile::process_name(std::process::id() as i32);
/// assert!(!name.is_empty() && name.len() <= 15);
/// ```
pub fn process_name(pid: i32) -> String {
    procfs::process_name(pid).unwrap_or_default()
}

/// NUMA balancing's system-wide counters now (`/proc/vmstat`):
/// `numa_hint_faults`, `numa_hint_faults_local`, `numa_pages_migrated`;
/// `None` on a kernel that does not count them.
///
/// ```
/// if let Some([faults, local, _moved]) = numalab::profile::balancing_counters() {
///     assert!(local <= faults);
/// }
/// ```
pub fn balancing_counters() -> Option<[u64; 3]> {
    let values = procfs::vmstat(&[
        "numa_hint_faults",
        "numa_hint_faults_local",
        "numa_pages_migrated",
    ])?;
    Some([values[0], values[1], values[2]])
}

/// Samples process `pid` (all its threads, and the processes it has
/// started and that still run, found again at each sample) every
/// `options.interval` until it ends, `options.duration` passes or
/// `stop()` says so; the samples so far are kept whichever comes first. Fails only when the process cannot
/// be read at all (gone, or another user's without permission).
///
/// ```
/// use numalab::profile::{watch, ProfileOptions};
/// use std::time::Duration;
/// let options = ProfileOptions {
///     interval: Duration::from_millis(10),
///     grow_to: Duration::from_millis(10),
///     duration: Some(Duration::from_millis(200)),
///     writes: false,
///     max_share: numalab::profile::MAX_SHARE,
/// };
/// let timeline = watch(std::process::id() as i32, options, || false)?;
/// // At most every 10 ms; fewer when reading costs more than 1% of a CPU.
/// assert!(!timeline.samples.is_empty() && timeline.samples.len() <= 21);
/// assert!(timeline.samples.iter().all(|s| s.processes == 1));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn watch(pid: i32, options: ProfileOptions, stop: impl Fn() -> bool) -> io::Result<Timeline> {
    // The process as it is now: once it ends, its number may be given to
    // another, which is not watched.
    let process = Process::of(pid)?;
    // The first read says whether the process can be read at all.
    ProcessMemory::of_process(pid)?;
    let mut recorder = Recorder::new(
        options.interval,
        options.grow_to,
        options.writes,
        options.max_share,
    );
    let ends = options.duration.map(|d| Instant::now() + d);
    'sampling: loop {
        let began = Instant::now();
        // The process and what it has started since the last sample.
        let now = recorder.sample(&descendants(pid), |_, _| {});
        // Checked after the reading: a sample that may have read a later
        // process of the same number is not kept.
        if now.processes == 0 || !process.running() {
            break;
        }
        let pause = recorder.keep(now, began);
        // Sleep in short steps, to notice the end and `stop` soon.
        let wake = Instant::now() + pause;
        while Instant::now() < wake {
            if stop() || ends.is_some_and(|end| Instant::now() >= end) {
                break 'sampling;
            }
            if !process.running() {
                break;
            }
            std::thread::sleep((wake - Instant::now()).min(Duration::from_millis(10)));
        }
    }
    Ok(recorder.finish())
}

/// A timeline being recorded by the thread that samples: the samples,
/// the write tracker, the interval's growth and the pause that keeps the
/// sampling within [`MAX_SHARE`] of a CPU. [`watch`] and a launched
/// command's sampler ([`Launch::timeline`](crate::launch::Launch::timeline))
/// both record through it.
pub(crate) struct Recorder {
    nodes: CpuNodes,
    start: Instant,
    cpu_before: Duration,
    interval: Duration,
    grow_to: Duration,
    max_share: f64,
    writes: Option<WriteTracker>,
    timeline: Timeline,
    /// This thread's CPU time when the last sample was kept: what it uses
    /// from there to the next kept sample (the waits between samples, their
    /// checks for the program's end, the reading) is what the next pause
    /// pays for. `None` before the first.
    charged_from: Option<Duration>,
}

impl Recorder {
    /// Begins now, on the calling thread: first every `interval`, growing
    /// to `grow_to`, the sampling within `max_share` of a CPU; pages
    /// written counted when `writes` (and the kernel can).
    pub(crate) fn new(
        interval: Duration,
        grow_to: Duration,
        writes: bool,
        max_share: f64,
    ) -> Recorder {
        Recorder {
            nodes: CpuNodes::live(),
            start: Instant::now(),
            cpu_before: crate::system::thread_cpu_time(),
            interval,
            grow_to,
            max_share,
            writes: writes.then(WriteTracker::new).flatten(),
            timeline: Timeline {
                interval_s: interval.as_secs_f64(),
                ..Timeline::default()
            },
            charged_from: None,
        }
    }

    /// Samples `pids` ([`sample_with`], each process's memory handed to
    /// `seen`), with their pages written when counted; not kept yet.
    pub(crate) fn sample(
        &mut self,
        pids: &[i32],
        seen: impl FnMut(i32, &ProcessMemory),
    ) -> ProfileSample {
        let mut now = sample_with(pids, &self.nodes, self.start, seen);
        if let Some(tracker) = self.writes.as_mut() {
            now.written = tracker.sample(pids);
        }
        now
    }

    /// Keeps `sample`, begun at `began`; returns how long to wait before
    /// the next: long enough that all this thread used since the last
    /// sample was kept (the wait and its checks, then this reading) stays
    /// within `max_share` of a CPU. The first sample's CPU time does not
    /// stretch the pause: most of it is paid once (the sampler's code and
    /// the parser's tables paged in; under emulation 50-90 ms where later
    /// samples take a few), and charging it at 1% would leave the program
    /// unwatched for seconds at its start. It is in the printed sampling
    /// cost all the same.
    pub(crate) fn keep(&mut self, sample: ProfileSample, began: Instant) -> Duration {
        self.timeline.push(sample);
        let now = crate::system::thread_cpu_time();
        let used = self
            .charged_from
            .map_or(Duration::ZERO, |from| now.saturating_sub(from));
        self.charged_from = Some(now);
        let pause = Timeline::pause(self.interval, began.elapsed(), used, self.max_share);
        self.interval = Timeline::next_interval(self.interval, self.grow_to);
        pause
    }

    /// The timeline, with the CPU time this thread spent since [`new`](Self::new).
    pub(crate) fn finish(mut self) -> Timeline {
        self.timeline.sampling_cpu_s =
            (crate::system::thread_cpu_time() - self.cpu_before).as_secs_f64();
        self.timeline
    }
}

/// The threads of process `pid` now (at most 100,000); none when it is
/// gone or cannot be read.
///
/// ```
/// let me = std::process::id() as i32;
/// assert!(numalab::profile::threads(me).contains(&me), "the main thread's id is the pid");
/// assert!(numalab::profile::threads(-1).is_empty());
/// ```
pub fn threads(pid: i32) -> Vec<i32> {
    procfs::task_ids(pid).unwrap_or_default()
}

/// Process `pid` and the processes descended from it that run now,
/// parents first (at most 100,000); `pid` alone where the
/// kernel does not list children (`CONFIG_PROC_CHILDREN`).
///
/// ```
/// let me = std::process::id() as i32;
/// let mut child = std::process::Command::new("sleep").arg("5").spawn()?;
/// let found = numalab::profile::descendants(me);
/// assert_eq!(found[0], me);
/// assert!(found.contains(&(child.id() as i32)));
/// child.kill()?;
/// child.wait()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn descendants(pid: i32) -> Vec<i32> {
    procfs::with_descendants(pid)
}

/// Whether process `pid` still runs (exists and has not exited: a
/// zombie waiting for its parent does not run).
///
/// ```
/// assert!(numalab::profile::running(std::process::id() as i32));
/// ```
pub fn running(pid: i32) -> bool {
    procfs::process_exists(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_keeps_the_sampling_within_its_share_of_a_cpu() {
        let ms = Duration::from_millis;
        // A cheap read: the interval.
        assert_eq!(Timeline::pause(ms(200), ms(1), ms(1), MAX_SHARE), ms(199));
        // A read costing 10 ms of CPU: at least 99 times that after it.
        assert_eq!(Timeline::pause(ms(200), ms(10), ms(10), MAX_SHARE), ms(990));
        // Allowed a tenth of a CPU: 10 ms of reading, 90 ms of rest.
        assert_eq!(Timeline::pause(ms(50), ms(10), ms(10), 0.1), ms(90));
        // Waiting for the program's lock costs no CPU: the interval.
        assert_eq!(Timeline::pause(ms(200), ms(50), ms(1), MAX_SHARE), ms(150));
        // The interval grows by half up to its bound, and stays fixed when
        // the bound is the interval.
        assert_eq!(Timeline::next_interval(ms(100), ms(1000)), ms(150));
        assert_eq!(Timeline::next_interval(ms(800), ms(1000)), ms(1000));
        assert_eq!(Timeline::next_interval(ms(50), ms(50)), ms(50));
    }

    /// What the sampling thread does while it waits between samples (its
    /// checks for the program's end) is charged to the next pause, not
    /// only the reading: a watch of a large program used to take 1.9% of
    /// a CPU over 20 s at a 1% budget.
    #[test]
    fn the_cpu_used_between_samples_is_charged_to_the_next_pause() {
        let ms = Duration::from_millis;
        let mut recorder = Recorder::new(ms(10), ms(10), false, MAX_SHARE);
        // The first sample is not charged: the interval.
        assert!(recorder.keep(ProfileSample::default(), Instant::now()) <= ms(10));
        // 20 ms of CPU spent waiting, then a free sample: the pause pays
        // for the wait, 99 times it.
        let spin = crate::system::thread_cpu_time();
        while crate::system::thread_cpu_time() - spin < ms(20) {
            std::hint::black_box(0u64);
        }
        let pause = recorder.keep(ProfileSample::default(), Instant::now());
        assert!(pause >= ms(20 * 99), "{pause:?}");
    }

    #[test]
    fn a_full_timeline_drops_every_other_sample() {
        let mut timeline = Timeline::default();
        for i in 0..MAX_SAMPLES + 1 {
            timeline.push(ProfileSample {
                at_s: i as f64,
                ..ProfileSample::default()
            });
        }
        assert_eq!(timeline.samples.len(), MAX_SAMPLES / 2 + 1);
        assert_eq!(timeline.thinned, (MAX_SAMPLES / 2) as u64);
        assert_eq!(timeline.samples[0].at_s, 0.0);
        assert_eq!(timeline.samples[1].at_s, 2.0);
        assert_eq!(timeline.samples.last().unwrap().at_s, MAX_SAMPLES as f64);
    }
}
