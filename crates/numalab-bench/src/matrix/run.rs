//! The whole measurement: check the request against the machine before
//! anything is allocated, size the working set from the measured cache,
//! then measure each cell, audit its placement and summarise its repeats.

use std::collections::BTreeMap;
use std::time::Duration;

use numalab::system::{Environment, KernelSettings, NodeMemory};
use numalab::{HugePages, Topology};
use serde::{Deserialize, Serialize};

use super::bandwidth::{self, Kernel, StreamTiming, MIN_SLICE};
use super::latency::{self, ChaseTiming};
use super::result::*;
use super::shape::{firmware_cells, spread_cpus, usable_cpus, Firmware, Shape};
use super::{c2c, human, llc, loaded, MatrixError};
use crate::control::Control;
use crate::kernels::Isa;

/// Which measurements to make.
///
/// ```
/// use numalab_bench::matrix::Measurements;
/// let m = Measurements::default();
/// assert!(m.latency && m.bandwidth && !m.loaded && !m.c2c);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measurements {
    /// Idle latency matrix.
    pub latency: bool,
    /// Bandwidth matrix.
    pub bandwidth: bool,
    /// Loaded-latency curves.
    pub loaded: bool,
    /// Cache-to-cache latency.
    pub c2c: bool,
}

impl Default for Measurements {
    /// Latency and bandwidth, as `numalab matrix` does without options.
    fn default() -> Self {
        Measurements {
            latency: true,
            bandwidth: true,
            loaded: false,
            c2c: false,
        }
    }
}

/// What to measure and how hard.
///
/// ```
/// use numalab_bench::matrix::{validate, MatrixConfig, NodeSelection, Shape};
/// let topo = numalab::Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let shape = Shape::of(&topo, &NodeSelection::default())?;
/// let config = MatrixConfig { threads: Some(3), ..MatrixConfig::quick() };
/// let err = validate(&topo, &shape, &config).unwrap_err();
/// assert!(err.to_string().contains("node 0 has 2 CPUs"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixConfig {
    /// Which measurements.
    pub measurements: Measurements,
    /// Working set of the latency chase (and at least that of bandwidth);
    /// `None`: four times the measured cache knee (`--quick`:
    /// [`QUICK_SIZE`]).
    pub size: Option<usize>,
    /// Bandwidth threads per initiator node; `None`: all its CPUs.
    pub threads: Option<usize>,
    /// Samples per figure.
    pub repeats: usize,
    /// Small working sets, short samples, few points: seconds, even under
    /// emulation.
    pub quick: bool,
    /// Pages for every working set; `None`: explicit 2 MiB pages when the
    /// target's pool has them, else transparent huge pages, else 4 KiB.
    pub huge_pages: Option<HugePages>,
}

impl MatrixConfig {
    /// The full default: latency and bandwidth, sized from the measured
    /// cache, five repeats.
    pub fn full() -> Self {
        MatrixConfig {
            measurements: Measurements::default(),
            size: None,
            threads: None,
            repeats: 5,
            quick: false,
            huge_pages: None,
        }
    }

    /// `--quick`: latency and bandwidth over [`QUICK_SIZE`], three repeats.
    pub fn quick() -> Self {
        MatrixConfig {
            repeats: 3,
            quick: true,
            ..Self::full()
        }
    }

    fn sample(&self) -> Duration {
        if self.quick {
            Duration::from_millis(10)
        } else {
            Duration::from_millis(100)
        }
    }
}

/// The `--quick` chase working set when no `--size` is given.
pub const QUICK_SIZE: usize = 32 << 20;

/// The `--quick` bandwidth working set when no `--size` is given.
pub const QUICK_STREAM_SIZE: usize = 128 << 20;

/// The smallest bandwidth working set sized from the cache sweep.
/// Hardware prefetchers let a cache hold more of a sequential stream than
/// of a random chase: on the VMs numalab is developed on, whose chase knee
/// is 8-16 MiB, a 64 MiB read still runs twice as fast as from memory and
/// reads level off from about 100 MiB.
pub const MIN_STREAM_SIZE: usize = 256 << 20;

/// Both working sets of `--quick` on an emulated CPU, where timings mean
/// nothing and every byte costs emulation time.
pub const EMULATED_QUICK_SIZE: usize = 4 << 20;

/// The largest working set of the cache sweep.
pub const SWEEP_LARGEST: usize = 128 << 20;

/// The smallest working set sized from the cache sweep. Other programs
/// running share the last-level cache, so on a busy machine the knee can
/// come out smaller than the cache a quiet run sees (4 MiB instead of 8 on
/// the VMs numalab is developed on); a floor keeps such a run from
/// chasing a working set a quieter moment would partly cache.
pub const MIN_AUTO_SIZE: usize = 32 << 20;

/// The smallest working set numalab measures.
pub const MIN_SIZE: usize = 64 << 10;

/// Checks `config` against the machine: thread counts against each
/// initiator's CPUs, a given size against each target's free memory. Call
/// it before anything is allocated; [`run`] calls it too.
pub fn validate(
    topology: &Topology,
    shape: &Shape,
    config: &MatrixConfig,
) -> Result<(), MatrixError> {
    if config.repeats == 0 {
        return Err(MatrixError::NoRepeats);
    }
    if let Some(threads) = config.threads {
        if threads == 0 {
            return Err(MatrixError::NoThreads);
        }
        for &node in &shape.initiators {
            let cpus = usable_cpus(topology, node);
            if threads > cpus.len() {
                return Err(MatrixError::TooManyThreads {
                    threads,
                    node,
                    available: cpus.len(),
                    cpus: cpus.into_iter().collect(),
                });
            }
        }
    }
    match config.huge_pages {
        Some(HugePages::Transparent)
            if topology.is_this_system()
                && KernelSettings::current().thp_enabled.as_deref() == Some("never") =>
        {
            return Err(MatrixError::HugePagesUnavailable {
                what: "transparent huge pages are disabled (/sys/kernel/mm/transparent_hugepage/enabled is never)".into(),
            });
        }
        Some(HugePages::Explicit2M) if topology.is_this_system() => {
            let size = config.size.unwrap_or(QUICK_SIZE);
            for &node in &shape.targets {
                let free = free_huge_2m(node);
                let needed = peak_bytes(topology, shape, config, size).div_ceil(2 << 20) as u64;
                if free < needed {
                    return Err(MatrixError::HugePagesUnavailable {
                        what: format!(
                            "node {node} has {free} free 2 MiB pages, {needed} needed; reserve them with `echo {needed} > /sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages`"
                        ),
                    });
                }
            }
        }
        _ => {}
    }
    if let Some(size) = config.size {
        if size < MIN_SIZE {
            return Err(MatrixError::TooSmall {
                size,
                min: MIN_SIZE,
            });
        }
        if topology.is_this_system() {
            for &node in &shape.targets {
                let needed = peak_bytes(topology, shape, config, size) as u64;
                check_free(
                    node,
                    needed,
                    &format!("a {} working set", human(size as u64)),
                )?;
            }
        }
    }
    Ok(())
}

/// The most memory one cell holds on its target at once for a working set
/// of `size`.
fn peak_bytes(topology: &Topology, shape: &Shape, config: &MatrixConfig, size: usize) -> usize {
    let m = config.measurements;
    let mut peak = 0;
    if m.latency {
        peak = peak.max(size);
    }
    if m.bandwidth {
        let threads = shape
            .initiators
            .iter()
            .map(|&n| config.threads.unwrap_or(usable_cpus(topology, n).len()))
            .max()
            .unwrap_or(1);
        peak = peak.max(bandwidth_bytes(size, threads));
    }
    if m.loaded {
        peak = peak.max(2 * size);
    }
    peak
}

fn bandwidth_bytes(size: usize, threads: usize) -> usize {
    size.max(threads.max(1) * MIN_SLICE)
}

fn check_free(node: u32, needed: u64, what: &str) -> Result<(), MatrixError> {
    let Ok(memory) = NodeMemory::read(node) else {
        return Ok(()); // no sysfs view: the allocation will tell
    };
    if needed > memory.free_bytes + memory.file_bytes {
        return Err(MatrixError::TooLarge {
            what: what.to_owned(),
            node,
            needed,
            free: memory.free_bytes,
            reclaimable: memory.file_bytes,
        });
    }
    Ok(())
}

/// Whether QEMU emulates this CPU (TCG): the hypervisor bit is set and
/// the hypervisor's CPUID vendor is `TCGTCGTCGTCG`.
pub fn emulated_cpu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, CpuidResult};
        // `__cpuid` is an unsafe fn in older Rust and safe in newer.
        #[allow(unused_unsafe)]
        let cpuid = |leaf: u32| -> CpuidResult {
            // SAFETY: every x86_64 CPU has CPUID, and any leaf may be asked
            // (unknown ones return other leaves' data, never fault).
            unsafe { __cpuid(leaf) }
        };
        // Leaf 1, ECX bit 31: running under a hypervisor. Only then does
        // leaf 0x4000_0000 name one (on bare metal it repeats another leaf).
        let hypervisor = (cpuid(1).ecx >> 31) & 1 == 1;
        if !hypervisor {
            return false;
        }
        let leaf = cpuid(0x4000_0000);
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&leaf.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&leaf.ecx.to_le_bytes());
        vendor[8..].copy_from_slice(&leaf.edx.to_le_bytes());
        &vendor == b"TCGTCGTCGTCG"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Free pages in `node`'s 2 MiB hugetlb pool.
fn free_huge_2m(node: u32) -> u64 {
    NodeMemory::read(node)
        .map(|m| {
            m.huge_pages
                .iter()
                .filter(|p| p.page_bytes == 2 << 20)
                .map(|p| p.free)
                .sum::<u64>()
        })
        .unwrap_or(0)
}

/// The pages to ask for on `node` for `bytes`: explicit 2 MiB pages when
/// its pool has them free, else transparent huge pages unless disabled,
/// else base pages (with the reason).
fn huge_pages_for(node: u32, bytes: usize) -> (HugePages, Option<String>) {
    let needed = bytes.div_ceil(2 << 20) as u64;
    let pool_free = free_huge_2m(node);
    if pool_free >= needed {
        return (HugePages::Explicit2M, None);
    }
    match KernelSettings::current().thp_enabled.as_deref() {
        Some("never") | None => (
            HugePages::None,
            Some(format!(
                "no huge pages: transparent huge pages are disabled and node {node} has {pool_free} free 2 MiB pages ({needed} needed); latency includes TLB misses"
            )),
        ),
        Some(_) => (HugePages::Transparent, None),
    }
}

/// Measures everything `config` asks for on this machine, saying what is
/// being measured through `control`, one short line at a time. A stop
/// asked through `control` (Ctrl-C) finishes the cell being measured,
/// starts no other, and the result holds the cells measured so far,
/// marked `interrupted`.
pub fn run(
    topology: &Topology,
    shape: &Shape,
    config: &MatrixConfig,
    control: &Control,
) -> Result<MatrixReport, MatrixError> {
    let stopped = || control.is_stopped();
    if !topology.is_this_system() {
        return Err(MatrixError::NotThisMachine {
            origin: topology.source.to_string(),
        });
    }
    validate(topology, shape, config)?;
    let environment = Environment::current(topology);
    let cpu_mhz = environment.host.cpu_mhz.filter(|m| *m > 0.0);
    let mut warnings: Vec<MatrixWarning> = Vec::new();
    let sample = config.sample();
    let first_initiator = shape.initiators[0];
    let first_cpu = usable_cpus(topology, first_initiator)[0];
    let home = shape
        .reference
        .get(&first_initiator)
        .copied()
        .unwrap_or(shape.targets[0]);

    // The working sets: the chase's, and the streams'.
    let emulated = emulated_cpu();
    if emulated {
        warnings.push(MatrixWarning::new(
            MatrixWarningKind::Emulated,
            "the CPU is emulated (QEMU TCG): every timing here is emulated and says nothing about memory; the shape, placement and firmware values hold",
        ));
    }
    let mut cache_sweep = None;
    let (size, stream, size_source) = match (config.size, config.quick) {
        (Some(size), _) => (size, size, "--size".to_owned()),
        (None, true) if emulated => (
            EMULATED_QUICK_SIZE,
            EMULATED_QUICK_SIZE,
            format!(
                "--quick on an emulated CPU: {} (timings mean nothing here)",
                human(EMULATED_QUICK_SIZE as u64)
            ),
        ),
        (None, true) => (
            QUICK_SIZE,
            QUICK_STREAM_SIZE,
            format!(
                "--quick defaults, {} chase and {} streams, not checked against the cache: run without --quick to size them from the measured cache",
                human(QUICK_SIZE as u64),
                human(QUICK_STREAM_SIZE as u64)
            ),
        ),
        (None, false) => {
            let free = NodeMemory::read(home).map_or(u64::MAX, |m| m.free_bytes);
            let largest = llc::sweep_sizes(SWEEP_LARGEST.min((free / 4) as usize))
                .last()
                .copied()
                .unwrap_or(MIN_SIZE);
            control.say(&format!(
                "sizing the working set: latency from {} to {} on CPU {first_cpu}, node {home}",
                human(256 << 10),
                human(largest as u64)
            ));
            let pages = config
                .huge_pages
                .unwrap_or_else(|| huge_pages_for(home, largest).0);
            let reported = topology
                .last_level_caches
                .iter()
                .find(|c| c.cpus.contains(first_cpu))
                .map(|c| c.size_bytes);
            let sweep = llc::sweep(first_cpu, home, largest, pages, 1 << 21, reported)?;
            let reported_text = reported.map_or("no size".into(), human);
            let (size, source) = match sweep.knee_bytes {
                Some(knee) if 4 * knee >= MIN_AUTO_SIZE => (
                    4 * knee,
                    format!(
                        "4 x the measured cache knee ({}; the hardware reports {reported_text})",
                        human(knee as u64),
                    ),
                ),
                Some(knee) => (
                    MIN_AUTO_SIZE.min(largest),
                    format!(
                        "the {} floor, above 4 x the measured cache knee ({}; the hardware reports {reported_text})",
                        human(MIN_AUTO_SIZE as u64),
                        human(knee as u64),
                    ),
                ),
                None => {
                    warnings.push(MatrixWarning::new(MatrixWarningKind::WorkingSet, format!(
                        "the latency-versus-size sweep found no cache knee up to {}; measuring {} (use --size to choose)",
                        human(largest as u64),
                        human(largest as u64)
                    )));
                    (
                        largest,
                        "the largest size of the cache sweep (no knee found)".into(),
                    )
                }
            };
            cache_sweep = Some(sweep);
            (
                size,
                size.max(MIN_STREAM_SIZE),
                format!(
                    "{source}; streams at least {}",
                    human(MIN_STREAM_SIZE as u64)
                ),
            )
        }
    };
    // Sizes numalab chose must fit every target with room to spare.
    let (size, stream) = if config.size.is_some() {
        (size, stream)
    } else {
        let fits = shape
            .targets
            .iter()
            .filter_map(|&n| NodeMemory::read(n).ok())
            .map(|m| (m.free_bytes / 3) as usize)
            .min()
            .unwrap_or(usize::MAX)
            .max(MIN_SIZE);
        for (what, bytes) in [("chase", size), ("stream", stream)] {
            if bytes > fits {
                warnings.push(MatrixWarning::new(
                    MatrixWarningKind::WorkingSet,
                    format!(
                    "the {what} working set was cut from {} to {} to fit the targets' free memory",
                    human(bytes as u64),
                    human(fits as u64)
                ),
                ));
            }
        }
        (size.min(fits), stream.min(fits))
    };
    let max_threads = shape
        .initiators
        .iter()
        .map(|&n| config.threads.unwrap_or(usable_cpus(topology, n).len()))
        .max()
        .unwrap_or(1);
    let settings = Settings {
        measurements: config.measurements,
        latency_bytes: size,
        size_source,
        bandwidth_bytes: bandwidth_bytes(stream, max_threads),
        threads: config.threads,
        repeats: config.repeats,
        sample_ms: sample.as_millis() as u64,
        quick: config.quick,
        huge_pages: config.huge_pages,
        isa: Isa::detect(),
        cpu_mhz,
    };

    // Pages per target, said once.
    let mut pages_of = BTreeMap::new();
    for &target in &shape.targets {
        let pages = match config.huge_pages {
            Some(pages) => pages,
            None => {
                let (pages, note) = huge_pages_for(target, size.max(settings.bandwidth_bytes));
                if let Some(note) = note {
                    warnings.push(MatrixWarning::new(
                        MatrixWarningKind::HugePages,
                        format!("node {target}: {note}"),
                    ));
                }
                pages
            }
        };
        pages_of.insert(target, pages);
    }
    let firmware = firmware_cells(topology, shape);
    let firmware_of = |i: u32, t: u32| -> Firmware {
        firmware
            .iter()
            .find(|c| c.initiator == i && c.target == t)
            .map(|c| c.firmware.clone())
            .unwrap_or_default()
    };
    let cells: Vec<(u32, u32)> = shape.cells().collect();

    let latency = if config.measurements.latency && !stopped() {
        let timing = ChaseTiming {
            repeats: config.repeats,
            sample,
        };
        let mut out = Vec::new();
        for (k, &(i, t)) in cells.iter().enumerate() {
            if stopped() {
                break;
            }
            let cpu = usable_cpus(topology, i)[0];
            control.say(&format!(
                "idle latency {i}->{t} ({}/{}): chasing {} from CPU {cpu}",
                k + 1,
                cells.len(),
                human(size as u64)
            ));
            let seed = u64::from(i) << 32 | u64::from(t);
            let huge = pages_of[&t];
            let run = latency::measure(cpu, t, size, huge, timing, seed)?;
            let latency_ns = Figure::of(&run.samples_ns);
            // The 4 KiB comparison: every cell, or the first under --quick.
            let base_pages = if huge != HugePages::None && (!config.quick || k == 0) {
                let base = latency::measure(cpu, t, size, HugePages::None, timing, seed)?;
                let base_ns = Figure::of(&base.samples_ns);
                Some(BasePages {
                    inflation: base_ns.median() / latency_ns.median() - 1.0,
                    latency_ns: base_ns,
                    placement: base.placement,
                })
            } else {
                None
            };
            if let Some(share) = run.pages.huge_share {
                if huge == HugePages::Transparent && share < 0.9 {
                    warnings.push(MatrixWarning::new(MatrixWarningKind::HugePages, format!(
                        "latency {i}->{t}: only {:.0}% of the working set got transparent huge pages (memory fragmented?); the figure includes TLB misses",
                        share * 100.0
                    )));
                }
            }
            out.push(LatencyCell {
                initiator: i,
                target: t,
                cpu,
                size_bytes: size,
                pages: run.pages,
                cycles: cpu_mhz.map(|mhz| latency_ns.median() * mhz / 1000.0),
                latency_ns,
                base_pages,
                ratio_to_local: None,
                firmware: firmware_of(i, t),
                placement: run.placement,
            });
        }
        // Remote over local, per row.
        let medians: BTreeMap<(u32, u32), f64> = out
            .iter()
            .map(|c| ((c.initiator, c.target), c.latency_ns.median()))
            .collect();
        for cell in &mut out {
            cell.ratio_to_local = shape
                .reference
                .get(&cell.initiator)
                .and_then(|r| medians.get(&(cell.initiator, *r)))
                .filter(|local| **local > 0.0)
                .map(|local| cell.latency_ns.median() / local);
        }
        Some(LatencyMatrix { cells: out })
    } else {
        None
    };

    let bandwidth = if config.measurements.bandwidth && !stopped() {
        let timing = StreamTiming {
            repeats: config.repeats,
            sample,
        };
        let mut out = Vec::new();
        for (k, &(i, t)) in cells.iter().enumerate() {
            if stopped() {
                break;
            }
            let threads = config.threads.unwrap_or(usable_cpus(topology, i).len());
            let cpus = spread_cpus(topology, i, threads);
            let bytes = bandwidth_bytes(stream, cpus.len());
            control.say(&format!(
                "bandwidth {i}->{t} ({}/{}): {} on {} {}",
                k + 1,
                cells.len(),
                numalab::units::count(cpus.len(), "thread"),
                if cpus.len() == 1 { "CPU" } else { "CPUs" },
                cpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ));
            let run = bandwidth::measure(&cpus, t, bytes, pages_of[&t], &Kernel::ALL, timing)?;
            let figure = |kernel: Kernel| {
                run.samples
                    .iter()
                    .find(|(k, _)| *k == kernel)
                    .map(|(_, s)| Figure::of(s))
            };
            out.push(BandwidthCell {
                initiator: i,
                target: t,
                cpus,
                size_bytes: run.size,
                pages: run.pages,
                read_gbps: figure(Kernel::Read),
                write_gbps: figure(Kernel::Write),
                copy_gbps: figure(Kernel::Copy),
                read_ratio_to_local: None,
                firmware: firmware_of(i, t),
                placement: run.placement,
            });
        }
        let reads: BTreeMap<(u32, u32), f64> = out
            .iter()
            .filter_map(|c| Some(((c.initiator, c.target), c.read_gbps.as_ref()?.median())))
            .collect();
        for cell in &mut out {
            cell.read_ratio_to_local = match (
                cell.read_gbps.as_ref(),
                shape
                    .reference
                    .get(&cell.initiator)
                    .and_then(|r| reads.get(&(cell.initiator, *r))),
            ) {
                (Some(read), Some(local)) if *local > 0.0 => Some(read.median() / local),
                _ => None,
            };
        }
        Some(BandwidthMatrix { cells: out })
    } else {
        None
    };

    let loaded = if config.measurements.loaded && !stopped() {
        let mut curves = Vec::new();
        let initiators = if config.quick {
            &shape.initiators[..1]
        } else {
            &shape.initiators[..]
        };
        for &i in initiators {
            if stopped() {
                break;
            }
            let target = shape.reference.get(&i).copied().unwrap_or(shape.targets[0]);
            // --threads N: the chase and N - 1 load generators.
            let cpus = spread_cpus(topology, i, config.threads.unwrap_or(usize::MAX));
            let Some((&chase_cpu, load_cpus)) = cpus.split_first().filter(|(_, l)| !l.is_empty())
            else {
                warnings.push(MatrixWarning::new(MatrixWarningKind::Skipped, format!(
                    "loaded latency {i}->{target}: one CPU of node {i} in use, none left to generate load (the chase takes one; --threads counts both)"
                )));
                continue;
            };
            control.say(&format!(
                "loaded latency {i}->{target}: chase on CPU {chase_cpu}, load from {}",
                numalab::units::count(load_cpus.len(), "CPU")
            ));
            let delays: &[u64] = if config.quick {
                &loaded::QUICK_DELAYS
            } else {
                &loaded::DELAYS
            };
            let load_bytes = bandwidth_bytes(stream, load_cpus.len());
            let run = loaded::measure(
                chase_cpu,
                load_cpus,
                target,
                size,
                load_bytes,
                pages_of[&target],
                delays,
                config.repeats,
                sample,
            )?;
            curves.push(LoadedCurve {
                initiator: i,
                target,
                chase_cpu,
                load_cpus: load_cpus.to_vec(),
                size_bytes: size,
                pages: run.pages,
                points: run
                    .points
                    .iter()
                    .map(|p| LoadedPoint {
                        delay: p.delay,
                        load_gbps: p.load_gbps,
                        latency_ns: Figure::of(&p.samples_ns),
                    })
                    .collect(),
                placement: run.chase_placement,
                load_placement: run.load_placement,
            });
        }
        Some(curves)
    } else {
        None
    };

    let c2c = if config.measurements.c2c && !stopped() {
        let round_trips = if config.quick { 20_000 } else { 200_000 };
        let mut cells = Vec::new();
        let mut notes = Vec::new();
        'pairs: for &a in &shape.initiators {
            for &b in &shape.initiators {
                if stopped() {
                    break 'pairs;
                }
                let pair = if a == b {
                    let cpus = spread_cpus(topology, a, 2);
                    (cpus.len() == 2).then(|| (cpus[0], cpus[1]))
                } else {
                    Some((usable_cpus(topology, a)[0], usable_cpus(topology, b)[0]))
                };
                let Some((cpu_a, cpu_b)) = pair else {
                    notes.push(format!(
                        "node {a} has one usable CPU: no pair of cores on the same node"
                    ));
                    continue;
                };
                control.say(&format!(
                    "cache-to-cache {a}<->{b}: CPU {cpu_a} and CPU {cpu_b}"
                ));
                // The line lives on the first core's node when it has memory.
                let home = if topology.nodes_with_memory().contains(a) {
                    a
                } else {
                    shape.reference.get(&a).copied().unwrap_or(shape.targets[0])
                };
                let run = c2c::measure(cpu_a, cpu_b, home, round_trips, config.repeats)?;
                cells.push(C2cCell {
                    node_a: a,
                    node_b: b,
                    cpu_a,
                    cpu_b,
                    latency_ns: Figure::of(&run.samples_ns),
                    placement: run.placement,
                });
            }
        }
        warnings.extend(
            notes
                .iter()
                .map(|note| MatrixWarning::new(MatrixWarningKind::Skipped, note.clone())),
        );
        Some(C2cMatrix {
            nodes: shape.initiators.clone(),
            cells,
            notes,
        })
    } else {
        None
    };

    let interrupted = stopped();
    if interrupted {
        warnings.push(MatrixWarning::new(
            MatrixWarningKind::Interrupted,
            "interrupted (Ctrl-C, SIGTERM or SIGHUP): the result holds the cells measured before it; the others were not measured",
        ));
    }
    let mut result = MatrixReport {
        environment: Some(environment),
        shape: shape.clone(),
        firmware,
        settings,
        cache_sweep,
        latency,
        bandwidth,
        loaded,
        c2c,
        placement_summary: PlacementSummary::default(),
        warnings,
        interrupted,
    };
    finish(&mut result);
    Ok(result)
}

/// Fills the placement summary and adds a warning for every working set
/// not where asked and every noisy figure.
pub fn finish(result: &mut MatrixReport) {
    let mut warnings = Vec::new();
    let audits = result.audits();
    let matching = audits.iter().filter(|(_, a)| a.is_match()).count();
    for (what, audit) in &audits {
        if !audit.is_match() {
            warnings.push(MatrixWarning::new(
                MatrixWarningKind::Placement,
                format!("{what}: pages not where asked: {}", audit.note),
            ));
        }
    }
    let placement_summary = PlacementSummary {
        checked: audits.len(),
        matching,
        all_match: matching == audits.len(),
    };
    // Noise is said once, against what the run's samples can resolve:
    // the figures whose spread is beyond what their samples show by
    // chance on a quiet machine, the worst first.
    let figures = result.figures();
    let mut noisy: Vec<&(String, &Figure)> = figures.iter().filter(|(_, f)| f.noisy).collect();
    if !noisy.is_empty() {
        noisy.sort_by(|a, b| b.1.summary.cv.total_cmp(&a.1.summary.cv));
        let samples = noisy[0].1.summary.n;
        let named: Vec<String> = noisy
            .iter()
            .take(3)
            .map(|(what, f)| format!("{what} (CV {:.1}%)", f.summary.cv * 100.0))
            .collect();
        let more = noisy.len().saturating_sub(named.len());
        warnings.push(MatrixWarning::new(
            MatrixWarningKind::Noisy,
            format!(
                "noisy: {} of {} figures varied more than {} samples of {} ms can by chance on a quiet machine (CV above {:.1}%): {}{}; the machine was busy: re-run on a quiet machine or with more --repeats",
                noisy.len(),
                figures.len(),
                samples,
                result.settings.sample_ms,
                crate::stats::noisy_cv_for(samples) * 100.0,
                named.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ),
        ));
    }
    result.placement_summary = placement_summary;
    for warning in warnings {
        if !result.warnings.contains(&warning) {
            result.warnings.push(warning);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A matrix measured in the emulated two-socket guest, as saved.
    fn saved_matrix() -> MatrixReport {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/results/report-two-socket.json"
        ))
        .unwrap();
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        serde_json::from_value(report["matrix"].clone()).unwrap()
    }

    #[test]
    fn noise_is_judged_against_the_samples_and_said_once() {
        let mut matrix = saved_matrix();
        matrix.warnings.clear();
        // Every figure quiet, then one within chance and two beyond it.
        let quiet = Figure::of(&[10.0, 10.1, 9.9]);
        for cell in &mut matrix.latency.as_mut().unwrap().cells {
            cell.latency_ns = quiet.clone();
        }
        for cell in &mut matrix.c2c.iter_mut().flat_map(|m| &mut m.cells) {
            cell.latency_ns = quiet.clone();
        }
        let bandwidth = matrix.bandwidth.as_mut().unwrap();
        for cell in &mut bandwidth.cells {
            for figure in [
                &mut cell.read_gbps,
                &mut cell.write_gbps,
                &mut cell.copy_gbps,
            ] {
                if figure.is_some() {
                    *figure = Some(quiet.clone());
                }
            }
        }
        // Three samples 6.5% apart: within chance. Two at about 20%: not.
        bandwidth.cells[0].read_gbps = Some(Figure::of(&[100.0, 106.0, 93.0]));
        bandwidth.cells[1].read_gbps = Some(Figure::of(&[100.0, 125.0, 85.0]));
        bandwidth.cells[1].write_gbps = Some(Figure::of(&[50.0, 61.0, 41.0]));
        finish(&mut matrix);
        let noise: Vec<&MatrixWarning> = matrix.warnings.iter().filter(|w| w.is_noise()).collect();
        assert_eq!(noise.len(), 1, "{noise:?}");
        let figures = matrix.figures().len();
        assert!(
            noise[0].message.starts_with(&format!(
                "noisy: 2 of {figures} figures varied more than 3 samples"
            )),
            "{}",
            noise[0].message
        );
        assert!(
            noise[0].message.contains("(CV above 8.6%)"),
            "{}",
            noise[0].message
        );
        assert!(
            !matrix.bandwidth.as_ref().unwrap().cells[0]
                .read_gbps
                .as_ref()
                .unwrap()
                .noisy
        );
    }
}
