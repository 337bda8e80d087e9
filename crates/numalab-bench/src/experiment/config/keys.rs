//! Every key of the experiment file, documented once ([`KEYS`]), and the
//! nearest key to a misspelt one.

/// One documented key of the experiment file.
///
/// ```
/// use numalab_bench::experiment::KEYS;
/// let key = KEYS.iter().find(|k| k.path == "memory.size").unwrap();
/// assert_eq!(key.default, "256MiB");
/// assert_eq!(key.meaning, "bytes per region");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Dotted path, e.g. `memory.policy`.
    pub path: &'static str,
    /// Default, as written in a file (`-` when required or unset).
    pub default: &'static str,
    /// Values accepted.
    pub values: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Every key of the experiment file (docs/experiment-file.md is made from
/// this table; a test keeps it and the types in step).
pub const KEYS: &[Key] = &[
    Key { path: "name", default: "the file's name", values: "text", meaning: "short name, used in titles and file names" },
    Key { path: "description", default: "", values: "text", meaning: "what the experiment shows" },
    Key { path: "threads.count", default: "1", values: "1 to 4096", meaning: "worker threads" },
    Key { path: "threads.placement", default: "balanced", values: "balanced | ratio:3:1 | nodes:0,1 | cpus:0-5,12-17", meaning: "balanced: even split over the nodes with CPUs; ratio: split over those nodes in id order in this ratio (the deck's unbalanced runs); nodes: even split over these nodes; cpus: exactly these CPUs in order. Within a node, one CPU per core first, then SMT siblings" },
    Key { path: "threads.oversubscribe", default: "false", values: "bool", meaning: "allow more threads than CPUs (they share CPUs; otherwise such a plan is refused)" },
    Key { path: "memory.size", default: "256MiB", values: "150MiB, 1G, 64K, 4096 (binary units, as everywhere in numalab)", meaning: "bytes per region" },
    Key { path: "memory.policy", default: "local", values: "local | remote | first-touch | replicate[:NODES] | interleave[:NODES] | weighted-interleave:0=3,1=1 | bind:N | preferred:N | preferred-many:NODES | default", meaning: "local: each region bound to its threads' node; remote: to the nearest other node; first-touch: no policy, each thread faults in its own share; replicate: a copy of each region bound to every node with CPUs (or to NODES), each thread reading its own node's copy (or the nearest), every write going to all copies (see memory.replication); the rest are the kernel's policies as numactl spells them" },
    Key { path: "memory.sharing", default: "per-node", values: "shared | per-node | per-thread", meaning: "one region for all threads, one per node with threads (the deck's 2 x 150 MB), or one per thread" },
    Key { path: "memory.huge_pages", default: "none", values: "none | thp | 2M", meaning: "base pages, transparent huge pages (madvised, 2 MiB-aligned) or explicit 2 MiB pages from the hugetlb pool" },
    Key { path: "memory.replication", default: "copies", values: "copies | broadcast | log", meaning: "with replicate: copies: the engine stores every write to every copy, with sync = rwlock under the stripe's lock on every copy (taken in copy order, all held during the write; readers take only their own copy's lock: the deck's Experiment 2), with sync = none without locks; broadcast, log: every read and write goes through numalab::replicated::Replicated in that mode, whose own locks guard the copies (access.sync and lock_stripes do not apply). Ignored by the other policies" },
    Key { path: "access.pattern", default: "random", values: "random | sequential | strided:BYTES | copy", meaning: "random: uniform op-size-aligned offsets over the whole region; sequential/strided: each thread walks its own share; copy: each thread copies the first half of its share into the second (which starts half a page later, so no load and store are a multiple of 4 KiB apart)" },
    Key { path: "access.op_size", default: "64", values: "bytes, multiple of 8", meaning: "bytes per read or write (the deck's RW_SIZE)" },
    Key { path: "access.read_write", default: "1:0 (copy: 1:1)", values: "R:W", meaning: "reads to writes, interleaved exactly (2:1 is R R W R R W ...)" },
    Key { path: "access.ops", default: "10000000", values: "1 to 10^12; ops x op_size at most 2^60 bytes", meaning: "operations in total (reads plus writes; a copy counts one of each), split evenly across the threads; left out, numalab lengthens runs that fall under the machine's noise floor" },
    Key { path: "access.duration", default: "-", values: "10s, 500ms, 2m, at most 24h", meaning: "instead of ops: every thread runs this long" },
    Key { path: "access.sync", default: "none", values: "none | rwlock", meaning: "rwlock: a reader-writer lock per stripe of the region, shared for reads and exclusive for writes (the deck's Experiment 2)" },
    Key { path: "access.lock_stripes", default: "1024", values: "1 to 65536", meaning: "locks per region with sync = rwlock; each guards an equal stripe" },
    Key { path: "access.latency_sample", default: "1024", values: "0 or more", meaning: "time one operation in this many for the latency percentiles (0: none); moved up to the next number sharing no factor with reads + writes, so reads and writes are both timed. Each thread keeps a uniform sample of at most 65536 timings of each kind (1048576 per run over all threads, at least 256 a thread); the result says how many were kept (samples) of how many timed (timed)" },
    Key { path: "access.isa", default: "auto", values: "auto | avx512 | avx2 | scalar", meaning: "vector instructions for sequential and copy operations of 256 bytes or more" },
    Key { path: "access.stores", default: "cached", values: "cached | non_temporal", meaning: "stores through the caches, or streaming stores around them (sequential writes and copies)" },
    Key { path: "access.seed", default: "1", values: "integer", meaning: "seed of the per-thread random generators (thread i, repeat r get distinct streams)" },
    Key { path: "run.repeats", default: "5", values: "1 to 1000", meaning: "measured runs; figures are their median, with min, max and CV" },
    Key { path: "run.warmup", default: "1", values: "0 to 100", meaning: "unmeasured runs first" },
    Key { path: "run.min_time", default: "-", values: "a duration: 50ms, 1s; or off", meaning: "the shortest a run may be; left out, this machine's noise floor, measured before each run: runs numalab sizes (no access.ops or access.duration) are lengthened past it, others warned about" },
    Key { path: "run.counters", default: "true", values: "bool", meaning: "read perf counters per thread (hardware where the PMU allows, software events otherwise)" },
    Key { path: "run.control", default: "false", values: "bool", meaning: "numalab sweep (--control): run every local cell a second time, as an A/A control whose difference from local is the machine's noise floor (\"differences under 6% cannot be told apart here\"); needs local among memory.policy's values" },
    Key { path: "run.max_repeats", default: "run.repeats", values: "a multiple of run.repeats, at most 20 times it and 1000", meaning: "numalab sweep: while some difference of the sweep's table holds 0 (≈), run run.repeats more rounds, up to this many repeats, looking again after each; the intervals are then repeated intervals (Pocock's boundary over the looks), which hold at 95% wherever the sweep stopped, so looking more often does not find more differences that are not there" },
    Key { path: "run.order", default: "interleaved", values: "interleaved | grouped", meaning: "numalab sweep: interleaved runs every cell's first repeat, then every cell's second, and so on, each after the cell's own warm-ups and set-up, so a slow minute of the machine hits every cell alike; grouped runs each cell's repeats back to back (faster, but drift between cells then looks like a difference)" },
    Key { path: "sweep.\"KEY\"", default: "-", values: "list", meaning: "numalab sweep: runs every combination of the listed values of these keys, e.g. \"threads.count\" = [1, 2, 4]; at most 10000 combinations" },
];

/// The keys `--set` and `[sweep]` accept (every key but `sweep` itself).
pub fn settable_keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .map(|k| k.path)
        .filter(|p| !p.starts_with("sweep."))
}

/// The nearest of `candidates` to `wrong`, if any is close enough to be a
/// plausible typo.
pub fn nearest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(wrong, c), c))
        .filter(|(score, _)| *score >= 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}
