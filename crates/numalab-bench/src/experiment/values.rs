//! The values an experiment file is written with: sizes (`150MiB`),
//! durations (`10s`), thread placements (`ratio:3:1`), memory policies
//! (`interleave:0,1`), sharing, access patterns (`strided:256`) and
//! read:write ratios (`2:1`). Each is parsed from its text with an error
//! that says what is valid, and serialised back to the same text, so a
//! result file's copy of the experiment reads like the file it came from.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::kernels::Mix;

/// Implements `Serialize` as the `Display` text and `Deserialize` from a
/// string through `FromStr` (whose error becomes the deserialiser's, so it
/// carries the TOML position).
macro_rules! text_serde {
    ($ty:ty, $expecting:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$ty, E> {
                        self.visit_str(&v.to_string())
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$ty, E> {
                        self.visit_str(&v.to_string())
                    }
                }
                deserializer.deserialize_any(Visitor)
            }
        }
    };
}

/// A number of bytes, written as everywhere in numalab (see
/// [`numalab::units::parse_size`]): `150MiB`, `1G`, `64K`, `4096`; every
/// unit is binary (`150MB` is 150 MiB), underscores are ignored.
///
/// ```
/// use numalab_bench::experiment::ByteSize;
/// assert_eq!("150MiB".parse::<ByteSize>()?.0, 150 << 20);
/// assert_eq!("1.5G".parse::<ByteSize>()?.0, 3 << 29);
/// assert_eq!(ByteSize(3 << 30).to_string(), "3GiB");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        numalab::units::parse_size(&s.replace('_', ""))
            .map(ByteSize)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides it exactly, so the text reads
    /// back to the same number (`150MiB`, `4096`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (1 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ];
        for (scale, unit) in UNITS {
            if self.0 >= scale && self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{}", self.0)
    }
}

text_serde!(ByteSize, "a size such as \"150MiB\" or a number of bytes");

/// A duration, written `10s`, `500ms`, `2m`, `1.5s`, `1h`: longer than
/// zero and at most [`MAX_DURATION`].
///
/// ```
/// use numalab_bench::experiment::Seconds;
/// assert_eq!("500ms".parse::<Seconds>()?.0.as_millis(), 500);
/// assert_eq!(Seconds(std::time::Duration::from_secs(90)).to_string(), "90s");
/// // Refused, never a panic: a duration past the limit, or beyond f64.
/// assert!("25h".parse::<Seconds>().unwrap_err().contains("longer than 24h"));
/// assert!("99999999999999999999s".parse::<Seconds>().is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seconds(pub Duration);

/// The longest duration an experiment takes (`access.duration`, per
/// thread and per run): 24 hours.
///
/// A timed run is repeated (`run.warmup` + `run.repeats` times), so a
/// day per run is already weeks of machine time; anything longer is a
/// slip of the unit (`h` for `s`), and numbers past it (`1e20s`) cannot
/// be held by a [`Duration`] at all.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

impl FromStr for Seconds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let bad = || format!("invalid duration {s:?}; write e.g. 10s, 500ms or 2m");
        let value: f64 = number.parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" => value,
            "ms" => value / 1e3,
            "us" | "µs" => value / 1e6,
            "m" | "min" => value * 60.0,
            "h" => value * 3600.0,
            _ => return Err(bad()),
        };
        if !(secs.is_finite() && secs > 0.0) {
            return Err(format!("duration {s:?} must be longer than zero"));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(format!(
                "duration {s:?} is longer than 24h, the longest numalab runs (write at most 24h)"
            ));
        }
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if !d.is_zero() => Ok(Seconds(d)),
            _ => Err(format!(
                "duration {s:?} is shorter than a nanosecond, the clock's step"
            )),
        }
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{}s", d.as_secs())
        } else if d.as_nanos().is_multiple_of(1_000_000) {
            write!(f, "{}ms", d.as_millis())
        } else {
            write!(f, "{}s", d.as_secs_f64())
        }
    }
}

text_serde!(Seconds, "a duration such as \"10s\" or \"500ms\"");

/// The shortest a run may be (`run.min_time`): a duration, or `off`.
///
/// ```
/// use numalab_bench::experiment::values::MinTime;
/// assert_eq!("50ms".parse::<MinTime>()?.0.as_millis(), 50);
/// assert!("off".parse::<MinTime>()?.0.is_zero());
/// assert_eq!("off".parse::<MinTime>()?.to_string(), "off");
/// assert!("0s".parse::<MinTime>().unwrap_err().contains("write off"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MinTime(pub Duration);

impl FromStr for MinTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim() == "off" {
            return Ok(MinTime(Duration::ZERO));
        }
        s.parse::<Seconds>()
            .map(|d| MinTime(d.0))
            .map_err(|e| format!("{e}; to time runs of any length, write off"))
    }
}

impl fmt::Display for MinTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            f.write_str("off")
        } else {
            Seconds(self.0).fmt(f)
        }
    }
}

text_serde!(MinTime, "a duration such as \"50ms\", or \"off\"");

/// Which CPUs the threads run on.
///
/// ```
/// use numalab_bench::experiment::ThreadPlacement;
/// let p: ThreadPlacement = "ratio:3:1".parse()?;
/// assert_eq!(p, ThreadPlacement::Ratio(vec![3, 1]));
/// assert_eq!(p.to_string(), "ratio:3:1");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ThreadPlacement {
    /// Spread evenly over every node with CPUs (the deck's balanced split).
    #[default]
    Balanced,
    /// Split over the nodes with CPUs, in id order, in this ratio (the
    /// deck's unbalanced split: `ratio:3:1` puts three quarters of the
    /// threads on the first node).
    Ratio(Vec<u32>),
    /// Spread evenly over these nodes (`nodes:0,1`; `nodes:all` and
    /// `nodes:!1` are the nodes with CPUs, as numactl writes lists).
    Nodes(String),
    /// Exactly these CPUs, in this order (`cpus:0-5,12-17`).
    Cpus(String),
}

/// Checks the syntax of a node list in numactl's spelling (`0-3,7`,
/// `all`, `!1`); which nodes it names is resolved against the topology by
/// the plan ([`numalab::Topology::resolve_nodes`]).
fn node_list_syntax(list: &str) -> Result<(), numalab::ParseSetError> {
    let list = list.trim();
    if list == "all" {
        return Ok(());
    }
    numalab::NodeSet::from_str(list.strip_prefix('!').unwrap_or(list)).map(|_| ())
}

impl FromStr for ThreadPlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let valid = "expected balanced, ratio:3:1, nodes:0,1 or cpus:0-5,12-17";
        match (kind, arg.trim()) {
            ("balanced", "") => Ok(ThreadPlacement::Balanced),
            ("ratio", parts) if !parts.is_empty() => {
                let ratio = parts
                    .split(':')
                    .map(|p| p.trim().parse::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| {
                        format!("invalid ratio {s:?}: write whole numbers, as in ratio:3:1")
                    })?;
                if ratio.iter().all(|&r| r == 0) {
                    return Err(format!("ratio {s:?} puts no thread anywhere"));
                }
                Ok(ThreadPlacement::Ratio(ratio))
            }
            ("nodes", list) if !list.is_empty() => {
                node_list_syntax(list).map_err(|e| format!("invalid placement {s:?}: {e}"))?;
                Ok(ThreadPlacement::Nodes(list.to_owned()))
            }
            ("cpus", list) if !list.is_empty() => {
                numalab::CpuSet::from_str(list)
                    .map_err(|e| format!("invalid placement {s:?}: {e}"))?;
                Ok(ThreadPlacement::Cpus(list.to_owned()))
            }
            _ => Err(format!("invalid thread placement {s:?}; {valid}")),
        }
    }
}

impl fmt::Display for ThreadPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThreadPlacement::Balanced => f.write_str("balanced"),
            ThreadPlacement::Ratio(parts) => {
                f.write_str("ratio")?;
                parts.iter().try_for_each(|p| write!(f, ":{p}"))
            }
            ThreadPlacement::Nodes(list) => write!(f, "nodes:{list}"),
            ThreadPlacement::Cpus(list) => write!(f, "cpus:{list}"),
        }
    }
}

text_serde!(
    ThreadPlacement,
    "a placement such as \"balanced\" or \"ratio:3:1\""
);

/// Where each region's pages go, as an experiment asks for it. Resolved
/// against a topology into a kernel [`MemPolicy`](numalab::MemPolicy) per
/// region by the plan.
///
/// ```
/// use numalab_bench::experiment::PolicySpec;
/// assert_eq!("remote".parse::<PolicySpec>()?, PolicySpec::Remote);
/// assert_eq!("interleave".parse::<PolicySpec>()?.to_string(), "interleave");
/// assert_eq!("replicate".parse::<PolicySpec>()?, PolicySpec::Replicate(None));
/// assert_eq!("replicate:0,1".parse::<PolicySpec>()?.to_string(), "replicate:0,1");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PolicySpec {
    /// Each region on the node of the threads that use it.
    #[default]
    Local,
    /// Each region on the nearest other node (by firmware distance).
    Remote,
    /// No policy: each thread faults in its own share of its region, and
    /// the kernel puts those pages on the thread's node (or wherever it
    /// finds memory).
    FirstTouch,
    /// Any kernel policy in numactl's spelling, checked against the
    /// topology: `interleave` (every node with memory), `interleave:0,1`,
    /// `weighted-interleave:0=3,1=1`, `bind:1`, `preferred:1`,
    /// `preferred-many:0,2`, `default`.
    Kernel(String),
    /// One copy of each region per node (`replicate`: every node with
    /// CPUs, or the nearest node with memory for one without;
    /// `replicate:0,1`: these nodes), each bound to its node. Threads read
    /// the copy of their node (or the nearest one); writes go to every
    /// copy, as `memory.replication` says.
    Replicate(Option<String>),
}

impl FromStr for PolicySpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let name = s.split(':').next().unwrap_or(s);
        match s {
            "local" => return Ok(PolicySpec::Local),
            "remote" => return Ok(PolicySpec::Remote),
            "first-touch" => return Ok(PolicySpec::FirstTouch),
            "replicate" => return Ok(PolicySpec::Replicate(None)),
            "interleave" => return Ok(PolicySpec::Kernel("interleave".into())),
            _ => {}
        }
        if let Some(list) = s.strip_prefix("replicate:") {
            let list = list.trim();
            if list.is_empty() {
                return Err(format!(
                    "invalid policy {s:?}: name the nodes, as in replicate:0,1, or write replicate"
                ));
            }
            // Syntax only here, as for the kernel's policies.
            node_list_syntax(list).map_err(|e| format!("invalid policy {s:?}: {e}"))?;
            return Ok(PolicySpec::Replicate(Some(list.to_owned())));
        }
        match name {
            "interleave" | "weighted-interleave" | "bind" | "preferred" | "preferred-many"
            | "default" => {
                // Syntax only here; nodes are checked against the
                // topology when the plan is made.
                let probe = s
                    .replace(":all", ":0")
                    .replace(":!", ":");
                probe
                    .parse::<numalab::MemPolicy>()
                    .map_err(|e| e.to_string())?;
                Ok(PolicySpec::Kernel(s.to_owned()))
            }
            _ => Err(format!(
                "unknown memory policy {s:?}; expected local, remote, first-touch, replicate[:NODES], \
                 interleave[:NODES], weighted-interleave:0=3,1=1, bind:N, preferred:N, \
                 preferred-many:NODES or default"
            )),
        }
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySpec::Local => f.write_str("local"),
            PolicySpec::Remote => f.write_str("remote"),
            PolicySpec::FirstTouch => f.write_str("first-touch"),
            PolicySpec::Kernel(text) => f.write_str(text),
            PolicySpec::Replicate(None) => f.write_str("replicate"),
            PolicySpec::Replicate(Some(nodes)) => write!(f, "replicate:{nodes}"),
        }
    }
}

text_serde!(
    PolicySpec,
    "a policy such as \"local\", \"remote\" or \"interleave\""
);

/// How the copies of a replicated region (`memory.policy = "replicate"`)
/// are kept identical.
///
/// ```
/// use numalab_bench::experiment::values::Replication;
/// let r: Replication = toml::Value::String("log".into()).try_into()?;
/// assert_eq!(r, Replication::Log);
/// assert_eq!(Replication::Copies.to_string(), "copies");
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Replication {
    /// The engine keeps the copies itself: a thread reads its own node's
    /// copy; a write stores to every copy, under `access.sync`'s striped
    /// locks (one set per copy, on its node: the deck's Experiment 2) or
    /// with none.
    #[default]
    Copies,
    /// Every read and write goes through [`numalab::replicated::Replicated`]
    /// in broadcast mode (its own reader-writer locks; `access.sync` does
    /// not apply).
    Broadcast,
    /// Through [`numalab::replicated::Replicated`] in log mode (node
    /// replication).
    Log,
}

impl Replication {
    /// The library's mode, when the reads and writes go through it.
    pub fn library_mode(self) -> Option<numalab::replicated::Mode> {
        match self {
            Replication::Copies => None,
            Replication::Broadcast => Some(numalab::replicated::Mode::Broadcast),
            Replication::Log => Some(numalab::replicated::Mode::Log),
        }
    }
}

impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Replication::Copies => "copies",
            Replication::Broadcast => "broadcast",
            Replication::Log => "log",
        })
    }
}

/// How many regions there are and who uses each.
///
/// Written in kebab case in the experiment file; `per-node` is the default.
///
/// ```
/// use numalab_bench::experiment::{Experiment, Sharing};
/// let exp = Experiment::from_toml_str("[memory]\nsharing = \"per-thread\"\n", "x.toml")?;
/// assert_eq!(exp.memory.sharing, Sharing::PerThread);
/// assert_eq!(exp.memory.sharing.to_string(), "per-thread");
/// assert_eq!(Sharing::default(), Sharing::PerNode);
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// One region every thread uses.
    Shared,
    /// One region per node that runs threads, used by that node's threads
    /// (the deck's 2 × 150 MB).
    #[default]
    PerNode,
    /// One private region per thread.
    PerThread,
}

impl fmt::Display for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sharing::Shared => "shared",
            Sharing::PerNode => "per-node",
            Sharing::PerThread => "per-thread",
        })
    }
}

/// The order in which a thread visits its memory.
///
/// ```
/// use numalab_bench::experiment::Pattern;
/// assert_eq!("strided:256".parse::<Pattern>()?, Pattern::Strided(256));
/// assert_eq!(Pattern::Copy.to_string(), "copy");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pattern {
    /// Operations at uniformly random op-size-aligned offsets of the whole
    /// region (the deck's simulator).
    #[default]
    Random,
    /// Each thread walks its own contiguous share of the region, one
    /// operation after the other, wrapping at its end.
    Sequential,
    /// As sequential, with this many bytes between the starts of
    /// successive operations.
    Strided(u64),
    /// Each thread copies the first half of its share into the second half
    /// (a read and a write per operation; likwid-bench's `copy`).
    Copy,
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        match s {
            "random" => Ok(Pattern::Random),
            "sequential" => Ok(Pattern::Sequential),
            "copy" => Ok(Pattern::Copy),
            _ => match s.strip_prefix("strided:") {
                Some(stride) => {
                    let stride: ByteSize = stride.parse()?;
                    if stride.0 == 0 {
                        return Err(format!("stride in {s:?} must be at least one byte"));
                    }
                    Ok(Pattern::Strided(stride.0))
                }
                None => Err(format!(
                    "unknown access pattern {s:?}; expected random, sequential, strided:BYTES or copy"
                )),
            },
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Random => f.write_str("random"),
            Pattern::Sequential => f.write_str("sequential"),
            Pattern::Strided(stride) => write!(f, "strided:{stride}"),
            Pattern::Copy => f.write_str("copy"),
        }
    }
}

text_serde!(Pattern, "a pattern such as \"random\" or \"strided:256\"");

/// A read:write ratio in the file's spelling (`2:1`).
///
/// ```
/// use numalab_bench::experiment::ReadWrite;
/// let rw: ReadWrite = "2:1".parse()?;
/// assert_eq!((rw.0.reads, rw.0.writes), (2, 1));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadWrite(pub Mix);

impl FromStr for ReadWrite {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(ReadWrite)
    }
}

impl fmt::Display for ReadWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

text_serde!(ReadWrite, "a read:write ratio such as \"2:1\"");

/// What guards the memory while threads access it.
///
/// ```
/// use numalab_bench::experiment::{values::Sync, Experiment};
/// let exp = Experiment::from_toml_str("[access]\nsync = \"rwlock\"\n", "x.toml")?;
/// assert_eq!(exp.access.sync, Sync::Rwlock);
/// assert_eq!(exp.access.sync.to_string(), "rwlock");
/// assert_eq!(Sync::default(), Sync::None, "threads race unless told otherwise");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sync {
    /// Nothing: threads race, as the deck's Experiment 1.
    #[default]
    None,
    /// A reader-writer lock per stripe of the region (`lock_stripes`
    /// stripes), taken shared for a read and exclusive for a write: the
    /// deck's Experiment 2.
    Rwlock,
}

impl fmt::Display for Sync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sync::None => "none",
            Sync::Rwlock => "rwlock",
        })
    }
}

/// Which vector instructions the sequential kernels use.
///
/// ```
/// use numalab_bench::experiment::{values::IsaChoice, Experiment};
/// use numalab_bench::kernels::Isa;
/// let exp = Experiment::from_toml_str("[access]\nisa = \"scalar\"\n", "x.toml")?;
/// assert_eq!(exp.access.isa, IsaChoice::Scalar);
/// assert_eq!(exp.access.isa.resolve(), Isa::Scalar);
/// // `auto` picks the widest this CPU has.
/// assert_eq!(IsaChoice::Auto.resolve(), Isa::detect());
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsaChoice {
    /// The widest this CPU has.
    #[default]
    Auto,
    /// 64-bit scalar loads and stores.
    Scalar,
    /// AVX2 (256-bit).
    Avx2,
    /// AVX-512 (512-bit).
    Avx512,
}

impl IsaChoice {
    /// The ISA to run with on this CPU.
    pub fn resolve(self) -> crate::kernels::Isa {
        use crate::kernels::Isa;
        match self {
            IsaChoice::Auto => Isa::detect(),
            IsaChoice::Scalar => Isa::Scalar,
            IsaChoice::Avx2 => Isa::Avx2,
            IsaChoice::Avx512 => Isa::Avx512,
        }
    }
}

impl fmt::Display for IsaChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IsaChoice::Auto => "auto",
            IsaChoice::Scalar => "scalar",
            IsaChoice::Avx2 => "avx2",
            IsaChoice::Avx512 => "avx512",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        for (text, bytes) in [
            ("150MiB", 150u64 << 20),
            ("150MB", 150 << 20),
            ("1GiB", 1 << 30),
            ("64KiB", 64 << 10),
            ("2M", 2 << 20),
            ("4096", 4096),
            ("1_000", 1000),
            ("1.5GiB", 3 << 29),
        ] {
            assert_eq!(text.parse::<ByteSize>().unwrap().0, bytes, "{text}");
        }
        for bad in ["", "MiB", "12 parsecs", "-1"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
        assert_eq!(ByteSize(150 << 20).to_string(), "150MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        for bytes in [1u64, 4096, 150 << 20, (3 << 30) + 4096] {
            let text = ByteSize(bytes).to_string();
            assert_eq!(
                text.parse::<ByteSize>().unwrap().0,
                bytes,
                "{text} reads back"
            );
        }
    }

    #[test]
    fn durations_parse_and_print() {
        assert_eq!("10s".parse::<Seconds>().unwrap().0, Duration::from_secs(10));
        assert_eq!("2m".parse::<Seconds>().unwrap().0, Duration::from_secs(120));
        assert_eq!("1.5s".parse::<Seconds>().unwrap().to_string(), "1500ms");
        assert!("0s".parse::<Seconds>().is_err());
        assert!("10".parse::<Seconds>().is_err());
    }

    #[test]
    fn placements_round_trip() {
        for text in [
            "balanced",
            "ratio:3:1",
            "ratio:1:1:2",
            "nodes:0,1",
            "cpus:0-5,12-17",
        ] {
            let p: ThreadPlacement = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
        }
        for bad in [
            "ratio",
            "ratio:a:b",
            "ratio:0:0",
            "nodes:",
            "cpus:x",
            "round-robin",
        ] {
            assert!(bad.parse::<ThreadPlacement>().is_err(), "{bad}");
        }
    }

    #[test]
    fn policies_round_trip() {
        for text in [
            "local",
            "remote",
            "first-touch",
            "interleave",
            "interleave:0,1",
            "interleave:all",
            "weighted-interleave:0=3,1=1",
            "bind:1",
            "preferred:0",
            "preferred-many:0,2",
            "default",
            "replicate",
            "replicate:0,1",
            "replicate:all",
        ] {
            let p: PolicySpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(p.to_string(), text);
        }
        for bad in [
            "near",
            "bind",
            "preferred:0,1",
            "local:1",
            "interleave:x",
            "replicate:",
            "replicate:x",
        ] {
            assert!(bad.parse::<PolicySpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_round_trip() {
        for text in ["random", "sequential", "strided:256", "copy"] {
            assert_eq!(text.parse::<Pattern>().unwrap().to_string(), text);
        }
        assert_eq!(
            "strided:4KiB".parse::<Pattern>().unwrap(),
            Pattern::Strided(4096)
        );
        assert!("strided:0".parse::<Pattern>().is_err());
        assert!("zigzag".parse::<Pattern>().is_err());
    }
}
