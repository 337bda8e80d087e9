//! `numalab advise`'s answer, checked against a program whose speed is a
//! known function of where its pages are: placement is real in the guest,
//! timings are not, so the program makes its own. It asks the kernel
//! (`move_pages`) where its memory went and sleeps longer the more of it
//! is off the node it likes. The fastest placement is then known by
//! construction, independent of anything numalab computes.
//!
//! - `advise.decides`: a program that likes one node (a memory-only one
//!   where the preset has one) gets that node's placement recommended,
//!   faster beyond noise, and no placement that puts its pages elsewhere
//!   is called faster; the rounds rotate as documented. A program equally
//!   fast everywhere gets "run it as it is".
//! - `advise.steady`: a program fast under first touch only on the runs
//!   that start on the node its data likes (every other run, as a
//!   scheduler might start it) gets the warning that first touch is
//!   bimodal with the number of runs that would decide, and, advise run
//!   again with those runs (as a user would), the placement that is never
//!   slow: for being steady, or for being faster beyond noise when first
//!   touch's slow runs were enough to move its median.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use numalab::locate::{locate, Sample};
use numalab::{affinity, CpuSet, MemPolicy};
use numalab_bench::advise::{AdviseReport, CandidateResult, MIN_GAIN};
use numalab_bench::document::Document;
use numalab_bench::stats::Verdict;

use super::{Guest, Outcome};

/// The memory the program touches.
const TOUCHED_MIB: usize = 1;

/// Its run time: [`BASE_MS`], plus a penalty times the share of its
/// pages off the node it likes (1 s for `decides`, 3 s for `steady`,
/// whose rule looks at each placement's slowest run against the level of
/// first touch's slow runs). Under emulation starting the program takes
/// about 0.1 s more, so a fast run takes a tenth of a slow one or less,
/// and a run the busy host stalls for a second or two still falls on its
/// own side.
const BASE_MS: u64 = 50;

/// `numalab-guest --placement-speed LIKES CPUS PENALTY_MS [OTHER_CPUS
/// STATEFILE]`: moves itself to `CPUS`, touches 1 MiB, asks the kernel
/// where each page is, and sleeps 50 ms plus `PENALTY_MS` times the share
/// of pages off node `LIKES` (`none`: 50 ms plus all of `PENALTY_MS`
/// wherever they are, so that a program as fast everywhere runs as long
/// as a slow one, and the tens of milliseconds an emulated start varies
/// by stay a few percent of it). With
/// `OTHER_CPUS` and
/// `STATEFILE`, its runs under the default policy start on `CPUS` and
/// `OTHER_CPUS` in turn, counted in `STATEFILE`: first touch then puts its
/// memory on one node, then the other, as a scheduler starting it on
/// either would.
pub fn placement_speed(args: &[String]) -> Result<()> {
    let usage = "--placement-speed LIKES CPUS PENALTY_MS [OTHER_CPUS STATEFILE]";
    let (likes, cpus, penalty) = match args {
        [likes, cpus, penalty, ..] => (likes, cpus, penalty),
        _ => bail!("usage: {usage}"),
    };
    let penalty: u64 = penalty.parse().context("PENALTY_MS is milliseconds")?;
    let likes: Option<u32> = match likes.as_str() {
        "none" => None,
        node => Some(node.parse().context("LIKES is a node number or none")?),
    };
    let cpus: CpuSet = cpus.parse().context("CPUS is a CPU list")?;
    let start = match args {
        [_, _, _, other, statefile] if MemPolicy::of_thread()? == MemPolicy::Default => {
            let other: CpuSet = other.parse().context("OTHER_CPUS is a CPU list")?;
            let runs: u64 = std::fs::read_to_string(statefile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            std::fs::write(statefile, (runs + 1).to_string())
                .with_context(|| format!("writing {statefile}"))?;
            if runs.is_multiple_of(2) {
                cpus
            } else {
                other
            }
        }
        [_, _, _] | [_, _, _, _, _] => cpus,
        _ => bail!("usage: {usage}"),
    };
    affinity::bind_thread_to_cpus(&start).context("moving to the starting CPUs")?;
    let page = numalab::system::page_size();
    let mut memory = vec![0u8; TOUCHED_MIB << 20];
    for byte in memory.iter_mut().step_by(page) {
        *byte = 1;
    }
    let found = locate(
        std::hint::black_box(&memory).as_ptr(),
        memory.len(),
        Sample::All,
    )?;
    let present = found.present();
    if present == 0 {
        bail!("none of the {TOUCHED_MIB} MiB just written is present");
    }
    let away = likes.map_or(present, |node| {
        present - found.per_node.get(&node).copied().unwrap_or(0)
    });
    let ms = BASE_MS + penalty * away / present;
    std::thread::sleep(Duration::from_millis(ms));
    println!("{away} of {present} pages off the liked node: {ms} ms");
    Ok(())
}

/// Whether the guest runs the suite's newer kernel (6.9 or later). The
/// decisions are checked there only: they are advise's statistics over
/// placements, and the placements themselves are checked on both kernels
/// (`advise.placements`); on both, these checks would add minutes of
/// emulated runs.
fn newer_kernel(guest: &Guest, out: &mut Outcome) -> bool {
    let newer = guest.kernel_at_least(6, 9);
    if !newer {
        out.not_applicable(format!(
            "Linux {}: advise's decisions are checked on the suite's newer kernel (6.9 or later); advise.placements checks the placements on both",
            guest.kernel
        ));
    }
    newer
}

/// `numalab advise --warmup 0 --json ARGS -- <this program>
/// --placement-speed PROGRAM…`, read.
fn advise(guest: &Guest, args: &[&str], program: &[&str]) -> Result<AdviseReport> {
    let me = std::env::current_exe()?;
    let me = me.to_str().context("the guest program's path")?;
    let mut all = vec!["advise", "--warmup", "0", "--json"];
    all.extend(args);
    all.extend(["--", me, "--placement-speed"]);
    all.extend(program);
    let ran = guest.numalab_ok(&all)?;
    Document::parse(&ran.stdout).context("reading numalab advise --json")
}

/// Each placement's median and its speed against first touch, for the
/// notes.
fn table(report: &AdviseReport) -> String {
    report
        .candidates
        .iter()
        .map(|c| {
            let median = c.summary.as_ref().map_or(f64::NAN, |s| s.median);
            match &c.vs_first_touch {
                Some(d) => format!(
                    "{} {median:.3} s ({:+.0}% time, {:+.0}% to {:+.0}%)",
                    c.candidate.name,
                    d.relative * 100.0,
                    d.low * 100.0,
                    d.high * 100.0
                ),
                // First touch: every run, in order.
                None => format!(
                    "{} {median:.3} s ({})",
                    c.candidate.name,
                    c.times()
                        .iter()
                        .map(|t| format!("{t:.3}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where a candidate asks the kernel to put memory: `Some(node)` when all
/// of it goes to one node.
fn places_on(candidate: &CandidateResult) -> Option<u32> {
    match &candidate.candidate.policy {
        Some(MemPolicy::Bind(nodes)) if nodes.len() == 1 => nodes.first(),
        Some(MemPolicy::Preferred(node)) => Some(*node),
        _ => None,
    }
}

/// The rounds as the JSON shows them: in each, every placement once, and
/// each round starting one placement further along than the one before
/// (docs/advise.md), first touch first in the first.
fn rotation(report: &AdviseReport, rounds: usize, out: &mut Outcome) {
    let count = report.candidates.len();
    let mut seen = Vec::new();
    let mut ok = true;
    for round in 0..rounds {
        let mut runs: Vec<(usize, usize)> = report
            .candidates
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.runs
                    .iter()
                    .filter(move |r| r.round == round)
                    .map(move |r| (r.order, i))
            })
            .collect();
        runs.sort_unstable();
        let order: Vec<usize> = runs.iter().map(|&(_, i)| i).collect();
        let expected: Vec<usize> = (0..count).map(|step| (step + round) % count).collect();
        ok &= order == expected;
        seen.push(format!("{order:?}"));
    }
    out.check(
        "the rounds, by each run's round and order in the JSON",
        format!("{rounds} rounds of all {count} placements, round r starting at placement r"),
        seen.join(" "),
        ok,
    );
}

/// The node a program likes and the CPUs it starts on, for `decides`: it
/// starts on the first CPU node, and likes a memory-only node where the
/// preset has one (only `--preferred` reaches it), else a node with
/// memory other than the one first touch fills from there.
fn liking(guest: &Guest) -> Result<(u32, CpuSet)> {
    let preset = &guest.preset;
    let Some(start) = preset.cpu_nodes().first() else {
        bail!("the preset has no node with CPUs");
    };
    let home = preset.home_node(start);
    let others = preset
        .memory_nodes()
        .difference(&[home].into_iter().collect());
    let likes = others
        .intersection(&preset.memory_only_nodes())
        .first()
        .or_else(|| others.last())
        .context("the preset has one node with memory")?;
    Ok((likes, preset.cpus_of(start)))
}

/// advise recommends the placement that is fastest by construction, and
/// "run it as it is" for a program that is as fast everywhere.
pub fn decides(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !newer_kernel(guest, out) {
        return Ok(());
    }
    let memory = guest.preset.memory_nodes().len();
    if memory > 4 {
        out.not_applicable(format!(
            "{memory} nodes with memory: up to {} placements run 6 times each would take minutes under emulation",
            2 * memory + 1
        ));
        return Ok(());
    }
    let (likes, start) = liking(guest)?;
    let (likes_arg, start_arg) = (likes.to_string(), start.to_string());
    // Only --preferred reaches a node without CPUs: the binds would add
    // slow placements and nothing to decide.
    let memory_only = guest.preset.memory_only_nodes().contains(likes);
    let placements = if memory_only {
        "preferred"
    } else {
        "bind,preferred"
    };
    // Six runs: one stalled by a busy host leaves the interval clear.
    let runs = 6;
    let report = advise(
        guest,
        &["--runs", "6", "--placements", placements],
        &[&likes_arg, &start_arg, "1000"],
    )?;
    out.note(format!(
        "likes node {likes}, starts on CPUs {start}: {}",
        table(&report)
    ));
    // Fastest by construction: every placement that puts all memory on
    // the liked node (--preferred only, for a node without CPUs).
    let fastest: Vec<&str> = report
        .candidates
        .iter()
        .filter(|c| places_on(c) == Some(likes))
        .map(|c| c.candidate.name.as_str())
        .collect();
    let recommendation = report.recommendation.as_ref();
    let recommended = recommendation.map_or("none", |r| r.name.as_str());
    out.check(
        "recommended",
        format!("one of {fastest:?}"),
        recommended,
        fastest.contains(&recommended),
    );
    if memory_only {
        out.same(
            format!("the options for node {likes}, which has no CPUs"),
            format!("--preferred={likes}"),
            recommendation.map_or("", |r| r.options.as_str()),
        );
    }
    for candidate in report.candidates.iter().skip(1) {
        let verdict = candidate.vs_first_touch.as_ref().map(|d| d.verdict);
        let name = candidate.candidate.name.as_str();
        if name == recommended {
            out.check(
                format!("{name} against first touch"),
                "faster, its interval excluding 1",
                format!("{verdict:?}"),
                verdict == Some(Verdict::Lower),
            );
        } else if fastest.contains(&name) {
            // As fast by construction: a stalled run may widen its
            // interval, never make it slower.
            let relative = candidate.vs_first_touch.as_ref().map(|d| d.relative);
            out.check(
                format!("{name} against first touch"),
                "less time",
                format!("{relative:?}"),
                relative.is_some_and(|r| r < 0.0),
            );
        } else {
            // Off the liked node, as first touch is: as fast by
            // construction. Its own cost (a policy, pinning) may show as
            // a steady percent beyond noise either way, which advise
            // does not call faster below MIN_GAIN (docs/advise.md).
            let faster = candidate
                .vs_first_touch
                .as_ref()
                .filter(|d| d.verdict == Verdict::Lower)
                .map(|d| -d.relative);
            out.check(
                format!("{name}, which puts memory off node {likes} as first touch does"),
                format!(
                    "not faster than first touch by {:.0}% or more beyond noise",
                    MIN_GAIN * 100.0
                ),
                format!("{verdict:?}, {faster:?} less time"),
                faster.is_none_or(|gain| gain < MIN_GAIN),
            );
        }
    }
    rotation(&report, runs, out);

    // As fast wherever its memory is: first touch stays.
    let level = advise(
        guest,
        &["--runs", "3", "--placements", "preferred"],
        &["none", &start_arg, "1000"],
    )?;
    out.note(format!("as fast everywhere: {}", table(&level)));
    let recommendation = level.recommendation.as_ref();
    out.check(
        "a program as fast everywhere: recommended",
        "first-touch, with no options (run it as it is)",
        format!(
            "{:?} {:?}",
            recommendation.map(|r| &r.name),
            recommendation.map(|r| &r.options)
        ),
        recommendation.is_some_and(|r| r.name == "first-touch" && r.options.is_empty()),
    );
    Ok(())
}

/// Two nodes with CPUs whose first touch lands on different nodes: the
/// program's data likes the second's, and it starts on the first's CPUs
/// (slow) and the second's (fast) in turn.
fn two_homes(guest: &Guest) -> Option<(CpuSet, CpuSet, u32)> {
    let preset = &guest.preset;
    let cpu_nodes = preset.cpu_nodes();
    let fast = cpu_nodes.iter().last()?;
    let likes = preset.home_node(fast);
    let slow = cpu_nodes.iter().find(|&n| preset.home_node(n) != likes)?;
    Some((preset.cpus_of(slow), preset.cpus_of(fast), likes))
}

/// The number in "--runs N would decide".
fn runs_that_decide(sentence: &str) -> Option<usize> {
    let (before, _) = sentence.split_once(" would decide")?;
    before.rsplit_once("--runs ")?.1.parse().ok()
}

/// What `advise.steady` expects, `BIND` standing for the bind it names.
const EXPECTED_STEADY: &str = "BIND, for being steady or faster beyond noise, each answer before it a bimodal warning naming more runs";

/// A first touch that is slow every other run: too few runs, and advise
/// warns and says how many would decide; that many, and the placement
/// that is never slow wins.
pub fn steady(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !newer_kernel(guest, out) {
        return Ok(());
    }
    let both = guest
        .preset
        .cpu_nodes()
        .intersection(&guest.preset.memory_nodes())
        .len();
    if both > 4 {
        out.not_applicable(format!(
            "{both} nodes with CPUs and memory: {} placements run up to 10 times each would take minutes under emulation",
            both + 1
        ));
        return Ok(());
    }
    let Some((slow, fast, likes)) = two_homes(guest) else {
        out.not_applicable(
            "the preset has no two nodes with CPUs whose first touch lands on different nodes",
        );
        return Ok(());
    };
    let statefile = "/tmp/numalab-steady-runs";
    let _ = std::fs::remove_file(statefile);
    let (likes_arg, slow_arg, fast_arg) = (likes.to_string(), slow.to_string(), fast.to_string());
    let program = [
        likes_arg.as_str(),
        slow_arg.as_str(),
        "3000",
        fast_arg.as_str(),
        statefile,
    ];
    let bound = format!("bind:{likes}");
    // As a user would: run advise, and while it warns that first touch
    // is bimodal with too few runs, run it again with the runs it names.
    // Normally 4 runs warn and the runs named decide; a run the busy
    // host stalls can make first touch look slow more often, and advise
    // may decide sooner. Either way each answer is the steady bind or a
    // warning naming more runs, and the third at the latest decides.
    let mut runs = 4;
    let mut said = Vec::new();
    for call in 1..=3 {
        let runs_arg = runs.to_string();
        let report = advise(
            guest,
            &["--runs", &runs_arg, "--placements", "bind"],
            &program,
        )?;
        out.note(format!(
            "{runs} runs; likes node {likes}, first touch starts on CPUs {slow}, then {fast}: {}",
            table(&report)
        ));
        let Some(recommendation) = report.recommendation.as_ref() else {
            bail!("advise with {runs} runs recommended nothing");
        };
        let warned = recommendation.bimodal.as_deref().unwrap_or_default();
        // The steady bind wins for being steady, or, when first touch's
        // slow runs were the majority and moved its median, for being
        // faster beyond noise: either answer is the placement never slow.
        let faster = report
            .candidates
            .iter()
            .find(|c| c.candidate.name == bound)
            .and_then(|c| c.vs_first_touch.as_ref())
            .is_some_and(|d| d.verdict == Verdict::Lower);
        let steady = recommendation
            .evidence
            .contains("recommended for being steady");
        if recommendation.name == bound && (steady || faster) {
            let why = if steady {
                "for being steady"
            } else {
                "faster beyond noise"
            };
            said.push(format!("{runs} runs: {bound} {why}"));
            out.check(
                "advise, its advice followed",
                EXPECTED_STEADY.replace("BIND", &bound),
                said.join("; "),
                true,
            );
            if call == 1 {
                out.note("decided at 4 runs: stalled runs made first touch look slow in more than half of them".to_owned());
            }
            return Ok(());
        }
        let named = runs_that_decide(warned).filter(|&n| n > runs);
        said.push(format!(
            "{runs} runs: {}{}",
            recommendation.name,
            named.map_or(String::new(), |n| format!(", --runs {n} would decide"))
        ));
        let bimodal = recommendation.name == "first-touch"
            && warned.contains("first touch was slow in")
            && named.is_some();
        if !bimodal {
            out.check(
                "advise, its advice followed",
                EXPECTED_STEADY.replace("BIND", &bound),
                format!("{}: {:?}", said.join("; "), recommendation.evidence),
                false,
            );
            return Ok(());
        }
        runs = named.unwrap_or(runs + 2);
    }
    out.check(
        "advise, its advice followed",
        format!("{} within 3 calls", EXPECTED_STEADY.replace("BIND", &bound)),
        said.join("; "),
        false,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::runs_that_decide;

    #[test]
    fn finds_the_number_of_runs_in_the_warning() {
        let said = "first touch was slow in 2 of 4 runs (...): too few runs to tell; --runs 6 would decide";
        assert_eq!(runs_that_decide(said), Some(6));
        assert_eq!(runs_that_decide("no number here"), None);
    }
}
