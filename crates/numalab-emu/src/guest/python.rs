//! The Python package in the guest: `numalab.empty(..., policy="bind:N")`,
//! `numalab.zeros` and `numalab.place(array, "interleave:all")` run by a
//! real CPython with NumPy (the host's interpreter and the package's
//! installed wheel, copied into the initramfs of presets with `python =
//! true`), their pages read back from the kernel's `/proc/self/numa_maps`
//! by the script and compared here with the preset.

use std::fs;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{Guest, Outcome};
use crate::harness::{PYTHON_ENV, PYTHON_MISSING};

/// The script the guest's Python runs (also the host's `--list`).
pub const SCRIPT: &str = include_str!("python_check.py");

/// Pages per node of one mapping, as the script reports numa_maps.
fn pages(entry: &Value) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = entry["nodes"]
        .as_object()
        .map(|nodes| {
            nodes
                .iter()
                .filter_map(|(n, c)| Some((n.parse().ok()?, c.as_u64()?)))
                .filter(|(_, c)| *c > 0)
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

fn show(pages: &[(u32, u64)]) -> String {
    if pages.is_empty() {
        return "no pages".into();
    }
    pages
        .iter()
        .map(|(n, c)| format!("N{n}={c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Placement from Python lands where the preset says: every page of
/// `empty(bind:N)` and `zeros(bind:N)` on N, for each node with memory;
/// an array of base pages moved by `place(interleave:all)` split evenly
/// (to within a page) over the nodes with memory, and NumPy's own array
/// and an array of huge pages the same to within a transparent huge page
/// where it has them (each moves whole); a weighted interleave made where
/// the kernel has it (Linux 6.9), `numalab.Unsupported` where not.
pub fn place(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let env = match fs::read_to_string(PYTHON_ENV) {
        Ok(env) => env,
        Err(_) => {
            let why = fs::read_to_string(PYTHON_MISSING).unwrap_or_else(|_| {
                "this preset boots without the Python package (presets.toml: python = true)".into()
            });
            out.not_applicable(why.trim().to_owned());
            return Ok(());
        }
    };
    let mut lines = env.lines();
    let (Some(python), Some(path)) = (lines.next(), lines.next()) else {
        bail!("{PYTHON_ENV} holds no interpreter and path: {env:?}");
    };
    fs::write("/tmp/python_check.py", SCRIPT).context("writing the script")?;
    let output = Command::new(python)
        .args(["-S", "-B", "/tmp/python_check.py"])
        .env("PYTHONPATH", path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .with_context(|| format!("running {python}"))?;
    if !output.status.success() {
        bail!(
            "the Python check exited {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let report: Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("reading {:?}", String::from_utf8_lossy(&output.stdout)))?;
    out.note(format!(
        "Python {}, NumPy {}, numalab {}; pages in transparent huge pages (smaps): {} of the array of huge pages, {} of np.ones(...)",
        report["python"].as_str().unwrap_or("?"),
        report["numpy"].as_str().unwrap_or("?"),
        report["numalab"].as_str().unwrap_or("?"),
        report["place_huge"]["huge_kib"].as_u64().unwrap_or(0) / 4,
        report["place_numpy"]["huge_kib"].as_u64().unwrap_or(0) / 4,
    ));
    let total = report["pages"].as_u64().unwrap_or(0);
    let memory = guest.preset.memory_nodes();
    for call in ["empty", "zeros"] {
        for node in memory.iter() {
            let entry = &report[call][node.to_string()];
            out.same(
                format!("numalab.{call}(policy=\"bind:{node}\"): numa_maps policy"),
                format!("bind:{node}"),
                entry["policy"].as_str().unwrap_or("none"),
            );
            out.same(
                format!("numalab.{call}(policy=\"bind:{node}\"): numa_maps pages"),
                format!("N{node}={total}"),
                show(&pages(entry)),
            );
        }
    }
    // numa_maps writes node lists as the kernel does: `0-1`, `0,2`.
    let interleave = format!("interleave:{memory}");
    // A transparent huge page moves whole: its base pages, from the kernel.
    let huge_page = fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(2 << 20)
        / 4096;
    for (key, what) in [
        ("place", "an array of base pages"),
        ("place_huge", "an array of huge pages"),
        ("place_numpy", "np.ones(...)"),
    ] {
        let placed = &report[key];
        out.same(
            format!("numalab.place({what}, \"interleave:all\"): numa_maps policy"),
            &interleave,
            placed["policy"].as_str().unwrap_or("none"),
        );
        let huge = placed["huge_kib"].as_u64().unwrap_or(0) * 1024 / 4096;
        let slack = if huge > 0 { huge_page } else { 1 };
        let found = pages(placed);
        let sum: u64 = found.iter().map(|(_, c)| c).sum();
        let share = sum / memory.len().max(1) as u64;
        let even = found.len() == memory.len()
            && found
                .iter()
                .all(|(n, c)| memory.contains(*n) && c.abs_diff(share) <= slack);
        out.check(
            format!("numalab.place({what}, \"interleave:all\"): numa_maps pages"),
            format!("{sum} pages split evenly (to within {slack}) over nodes {memory}"),
            show(&found),
            even && sum >= total,
        );
    }
    let weighted = guest.kernel_at_least(6, 9);
    out.same(
        "numalab.empty(policy=\"weighted-interleave:N=1\")",
        if weighted { "made" } else { "Unsupported" },
        report["weighted"].as_str().unwrap_or("none"),
    );
    Ok(())
}
