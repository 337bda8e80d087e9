//! The C library in the guest: a C program linked with `libnumalab.a`
//! (`src/guest/c_check.c`, built by the harness) allocates with
//! `numalab_alloc` under `bind:N` for every node with memory and under
//! `interleave:all`, locates the pages with `numalab_locate`, and reads
//! each allocation back from the kernel's `/proc/self/numa_maps`.

use std::fs;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{Guest, Outcome};
use crate::harness::{C_CHECK, C_MISSING};

/// Pages per allocation, as the program makes them.
const PAGES: u64 = 1024;

fn counts(v: &Value) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = v
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(n, c)| Some((n.parse().ok()?, c.as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

fn show(pages: &[(u32, u64)]) -> String {
    let parts: Vec<String> = pages.iter().map(|(n, c)| format!("N{n}={c}")).collect();
    if parts.is_empty() {
        "no pages".into()
    } else {
        parts.join(" ")
    }
}

/// Each `bind:N` allocation has policy `bind:N` and all its pages on N in
/// numa_maps, and numalab_locate counts the same; the `interleave:all` one
/// has policy `interleave:<nodes with memory>` and its pages split evenly
/// (to within one) over them.
pub fn place(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if let Ok(why) = fs::read_to_string(C_MISSING) {
        out.not_applicable(format!("no C program in the guest: {}", why.trim()));
        return Ok(());
    }
    let output = Command::new(C_CHECK)
        .output()
        .with_context(|| format!("running {C_CHECK}"))?;
    if !output.status.success() {
        bail!(
            "{C_CHECK} exited {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let memory = guest.preset.memory_nodes();
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("reading {l:?}")))
        .collect::<Result<_>>()?;
    out.same("allocations", memory.len() + 1, lines.len());
    for line in &lines {
        let policy = line["policy"].as_str().unwrap_or("?");
        if let Some(err) = line["error"].as_str() {
            out.check(
                format!("numalab_alloc(\"{policy}\")"),
                "NUMALAB_OK",
                err,
                false,
            );
            continue;
        }
        let kernel = counts(&line["nodes"]);
        let located = counts(&line["located"]);
        out.same(
            format!("numalab_locate(\"{policy}\") against numa_maps"),
            show(&kernel),
            show(&located),
        );
        match policy.strip_prefix("bind:") {
            Some(node) => {
                out.same(
                    format!("numalab_alloc(\"{policy}\"): numa_maps policy"),
                    policy,
                    line["numa_maps"].as_str().unwrap_or("none"),
                );
                out.same(
                    format!("numalab_alloc(\"{policy}\"): numa_maps pages"),
                    format!("N{node}={PAGES}"),
                    show(&kernel),
                );
            }
            None => {
                out.same(
                    "numalab_alloc(\"interleave:all\"): numa_maps policy",
                    format!("interleave:{memory}"),
                    line["numa_maps"].as_str().unwrap_or("none"),
                );
                let share = PAGES / memory.len().max(1) as u64;
                let even = kernel.len() == memory.len()
                    && kernel
                        .iter()
                        .all(|(n, c)| memory.contains(*n) && c.abs_diff(share) <= 1);
                out.check(
                    "numalab_alloc(\"interleave:all\"): numa_maps pages",
                    format!("{PAGES} pages split evenly (to within 1) over nodes {memory}"),
                    show(&kernel),
                    even,
                );
            }
        }
    }
    Ok(())
}
