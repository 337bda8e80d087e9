//! Experiment files and `--set KEY=VALUE` overrides, as `numalab run` and
//! `numalab sweep` read them, then planned on a two-node machine.
//!
//! Input: the TOML text, optionally followed by a line `%%` and one
//! `--set` argument per line.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use numalab::Topology;
use numalab_bench::experiment::plan::NodeFree;
use numalab_bench::experiment::{Experiment, Plan};

/// Sweeps of more cells than this are read and checked, not expanded.
const MAX_CELLS: usize = 64;

fn topology() -> &'static Topology {
    static TOPOLOGY: OnceLock<Topology> = OnceLock::new();
    TOPOLOGY.get_or_init(|| Topology::from_synthetic("pack:2 numa:1 core:2 pu:2").unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (file, sets) = text.split_once("\n%%\n").unwrap_or((text, ""));
    let sets: Vec<String> = sets.lines().map(str::to_owned).collect();
    let exp = match Experiment::from_toml_str(file, "fuzz.toml") {
        Ok(exp) => exp,
        Err(err) => return drop(err.to_string()),
    };
    let exp = match exp.with_overrides(&sets) {
        Ok(exp) => exp,
        Err(err) => return drop(err.to_string()),
    };
    // The experiment as a result file records it reads back as the same.
    let saved = toml::to_string(&exp).expect("an experiment serialises");
    match Experiment::from_toml_str(&saved, "saved.toml") {
        Ok(again) => assert_eq!(again, exp, "{saved}"),
        Err(err) => panic!("the saved experiment does not read back: {err}\n{saved}"),
    }
    let free = |_node: u32| {
        Some(NodeFree {
            free: 16 << 30,
            reclaimable: 1 << 30,
            huge_2m: 0,
        })
    };
    let cells = exp
        .sweep
        .axes
        .iter()
        .try_fold(1usize, |n, (_, values)| n.checked_mul(values.len()));
    if cells.is_some_and(|n| n <= MAX_CELLS) {
        match exp.cells() {
            Ok(cells) => {
                for (_, cell) in cells {
                    if let Err(err) = Plan::resolve_with(&cell, topology(), &free) {
                        drop(err.to_string());
                    }
                }
            }
            Err(err) => drop(err.to_string()),
        }
    } else if let Err(err) = Plan::resolve_with(&exp, topology(), &free) {
        drop(err.to_string());
    }
});
