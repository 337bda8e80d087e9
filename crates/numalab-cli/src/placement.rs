//! Placement options spelt as `numactl` spells them, checked against the
//! machine before anything runs.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab::policy::parse_weights;
use numalab::{CpuSet, MemPolicy, NodeSet, Role, Support, Topology};

/// Memory policy and CPU binding options.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Placement (numactl spellings)")]
pub struct PlacementArgs {
    /// Allocate only from NODES (MPOL_BIND); `0-3,7`, `all`, `!1`
    #[arg(long, short = 'm', value_name = "NODES", group = "policy")]
    pub membind: Option<String>,

    /// Spread pages round-robin over NODES (MPOL_INTERLEAVE)
    #[arg(long, short = 'i', value_name = "NODES", group = "policy")]
    pub interleave: Option<String>,

    /// Allocate from NODE first, from others when it is full (MPOL_PREFERRED)
    #[arg(long, short = 'p', value_name = "NODE", group = "policy")]
    pub preferred: Option<String>,

    /// Allocate from the nearest of NODES first (MPOL_PREFERRED_MANY, Linux 5.15)
    #[arg(long, value_name = "NODES", group = "policy")]
    pub preferred_many: Option<String>,

    /// Interleave by weight (MPOL_WEIGHTED_INTERLEAVE, Linux 6.9): `0=3,1=1`
    /// (or `0:3,1:1`) sets the kernel's weights for the run (root) and
    /// restores them after; plain NODES use the kernel's current weights
    #[arg(long, short = 'w', value_name = "NODES[=WEIGHT]", group = "policy")]
    pub weighted_interleave: Option<String>,

    /// Allocate on the node of the CPU that first touches each page (MPOL_LOCAL)
    #[arg(long, short = 'l', group = "policy")]
    pub localalloc: bool,

    /// Run only on the CPUs of NODES (nodes without CPUs are refused);
    /// numactl's older spelling --cpubind is taken too
    #[arg(
        long,
        short = 'N',
        alias = "cpubind",
        value_name = "NODES",
        group = "cpus"
    )]
    pub cpunodebind: Option<String>,

    /// Run only on CPUS (`0-3,8`, `all`, `!0`)
    #[arg(long, short = 'C', value_name = "CPUS", group = "cpus")]
    pub physcpubind: Option<String>,
}

/// Placement options resolved against a topology.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// The memory policy, if one was asked for.
    pub policy: Option<MemPolicy>,
    /// The CPUs, if a binding was asked for.
    pub cpus: Option<CpuSet>,
    /// Weighted-interleave weights to install in the kernel for the run.
    pub weights: Option<BTreeMap<u32, u8>>,
}

impl PlacementArgs {
    /// Checks every option against `topology` and the kernel.
    pub fn resolve(&self, topology: &Topology) -> Result<Placement> {
        let mut placement = Placement::default();
        // `all` and `!N` mean the allowed nodes with memory.
        let nodes = |flag: &str, spec: &str| -> Result<NodeSet> {
            topology
                .resolve_nodes(spec, Role::Memory)
                .with_context(|| format!("--{flag}={spec}"))
        };
        placement.policy = if let Some(spec) = &self.membind {
            Some(MemPolicy::Bind(nodes("membind", spec)?))
        } else if let Some(spec) = &self.interleave {
            Some(MemPolicy::Interleave(nodes("interleave", spec)?))
        } else if let Some(spec) = &self.preferred_many {
            Some(MemPolicy::PreferredMany(nodes("preferred-many", spec)?))
        } else if let Some(spec) = &self.preferred {
            let several = spec.contains([',', '-']) || spec.trim() == "all" || spec.contains('!');
            if several {
                bail!("--preferred={spec}: takes one node; use --preferred-many for several");
            }
            let set = nodes("preferred", spec)?;
            Some(MemPolicy::Preferred(set.first().unwrap_or(0)))
        } else if let Some(spec) = &self.weighted_interleave {
            let policy = if spec.contains([':', '=']) {
                let weights =
                    parse_weights(spec).with_context(|| format!("--weighted-interleave={spec}"))?;
                let listed: NodeSet = weights.keys().copied().collect();
                topology
                    .check_memory_nodes(&listed)
                    .with_context(|| format!("--weighted-interleave={spec}"))?;
                placement.weights = Some(weights.clone());
                MemPolicy::WeightedInterleave(weights)
            } else {
                let listed = nodes("weighted-interleave", spec)?;
                let table = numalab::system::KernelSettings::current()
                    .interleave_weights
                    .unwrap_or_default();
                MemPolicy::WeightedInterleave(
                    listed
                        .iter()
                        .map(|n| (n, table.get(&n).copied().unwrap_or(1)))
                        .collect(),
                )
            };
            Some(policy)
        } else if self.localalloc {
            Some(MemPolicy::Local)
        } else {
            None
        };
        if let Some(policy) = &placement.policy {
            if topology.is_this_system() {
                Support::probe().require(policy)?;
            }
        }

        placement.cpus = if let Some(spec) = &self.cpunodebind {
            // `all` and `!N` mean the allowed nodes with CPUs.
            let set = topology
                .resolve_nodes(spec, Role::Cpus)
                .with_context(|| format!("--cpunodebind={spec}"))?;
            Some(topology.cpus_of(&set).intersection(&topology.allowed_cpus))
        } else if let Some(spec) = &self.physcpubind {
            Some(
                topology
                    .parse_cpus(spec)
                    .with_context(|| format!("--physcpubind={spec}"))?,
            )
        } else {
            None
        };
        Ok(placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        // Two nodes with CPUs, 8 CPUs each.
        Topology::from_synthetic("pack:2 numa:1 core:4 pu:2").unwrap()
    }

    fn args(f: impl FnOnce(&mut PlacementArgs)) -> PlacementArgs {
        let mut a = PlacementArgs::default();
        f(&mut a);
        a
    }

    #[test]
    fn resolves_numactl_options() {
        let t = topo();
        let p = args(|a| a.membind = Some("1".into())).resolve(&t).unwrap();
        assert_eq!(p.policy, Some(MemPolicy::Bind(NodeSet::single(1))));
        let p = args(|a| a.interleave = Some("all".into()))
            .resolve(&t)
            .unwrap();
        assert_eq!(p.policy.unwrap().to_string(), "interleave:0-1");
        let p = args(|a| a.preferred = Some("0".into()))
            .resolve(&t)
            .unwrap();
        assert_eq!(p.policy, Some(MemPolicy::Preferred(0)));
        let p = args(|a| a.preferred_many = Some("0,1".into()))
            .resolve(&t)
            .unwrap();
        assert_eq!(p.policy.unwrap().to_string(), "preferred-many:0-1");
        let p = args(|a| a.weighted_interleave = Some("0:3,1:1".into()))
            .resolve(&t)
            .unwrap();
        assert_eq!(p.policy.unwrap().to_string(), "weighted-interleave:0=3,1=1");
        assert_eq!(p.weights, Some(BTreeMap::from([(0, 3), (1, 1)])));
        let p = args(|a| a.localalloc = true).resolve(&t).unwrap();
        assert_eq!(p.policy, Some(MemPolicy::Local));
        let p = args(|a| a.cpunodebind = Some("1".into()))
            .resolve(&t)
            .unwrap();
        assert_eq!(p.cpus.unwrap().to_string(), "8-15");
        let p = args(|a| a.physcpubind = Some("0-3,9".into()))
            .resolve(&t)
            .unwrap();
        assert_eq!(p.cpus.unwrap().to_string(), "0-3,9");
        let p = args(|_| {}).resolve(&t).unwrap();
        assert!(p.policy.is_none() && p.cpus.is_none());
    }

    #[test]
    fn errors_name_the_cause() {
        let t = topo();
        let err = |a: PlacementArgs| format!("{:#}", a.resolve(&t).unwrap_err());
        let e = err(args(|a| a.membind = Some("7".into())));
        assert!(
            e.contains("--membind=7")
                && e.contains("node 7 does not exist")
                && e.contains("nodes 0-1"),
            "{e}"
        );
        let e = err(args(|a| a.physcpubind = Some("99".into())));
        assert!(e.contains("CPU 99 does not exist"), "{e}");
        let e = err(args(|a| a.preferred = Some("0-1".into())));
        assert!(e.contains("--preferred-many"), "{e}");
        let e = err(args(|a| a.interleave = Some("0,,1".into())));
        assert!(e.contains("not a number or a range"), "{e}");
        let e = err(args(|a| a.weighted_interleave = Some("0:0".into())));
        assert!(e.contains("weight"), "{e}");
    }

    #[test]
    fn cpu_less_nodes_cannot_run_threads() {
        // Node 1 of this machine has memory but no CPU.
        let xml = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/topologies/cpuless.xml");
        let t = Topology::from_xml_file(xml).unwrap();
        let e = format!(
            "{:#}",
            args(|a| a.cpunodebind = Some("1".into()))
                .resolve(&t)
                .unwrap_err()
        );
        assert!(e.contains("node 1 has no CPUs"), "{e}");
        // but it can hold memory
        let p = args(|a| a.membind = Some("1".into())).resolve(&t).unwrap();
        assert_eq!(p.policy, Some(MemPolicy::Bind(NodeSet::single(1))));
    }
}
