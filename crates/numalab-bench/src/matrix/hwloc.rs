//! `numalab matrix --hwloc-xml`: the figures of a matrix as hwloc's
//! memory attributes, for `hwloc_xml::export` to write into the
//! topology's XML (read back by `lstopo --memattrs` and any program that
//! asks hwloc which node is fastest).

use numalab::topology::hwloc_xml::{Attribute, MeasuredValue};

use super::{Figure, MatrixReport};

/// The figures of `result` as hwloc memory-attribute values, in hwloc's
/// integer units (ns, MiB/s, medians rounded to the nearest), and the
/// cells left out because their working set was not on the target node
/// (the figure is not that node's).
pub fn values(result: &MatrixReport) -> (Vec<MeasuredValue>, Vec<String>) {
    let measured = |f: Option<&Figure>| f.filter(|f| f.summary.n > 0).map(Figure::median);
    let mib_per_s = |gbps: f64| (gbps * 1e9 / (1u64 << 20) as f64).round() as u64;
    let mut values = Vec::new();
    let mut left_out = Vec::new();
    for cell in result.latency.iter().flat_map(|m| &m.cells) {
        let (initiator, target) = (cell.initiator, cell.target);
        if !cell.placement.is_match() {
            left_out.push(format!("latency {initiator}->{target}"));
            continue;
        }
        if let Some(ns) = measured(Some(&cell.latency_ns)) {
            for attribute in [Attribute::Latency, Attribute::ReadLatency] {
                let value = ns.round() as u64;
                values.push(MeasuredValue {
                    attribute,
                    initiator,
                    target,
                    value,
                });
            }
        }
    }
    for cell in result.bandwidth.iter().flat_map(|m| &m.cells) {
        let (initiator, target) = (cell.initiator, cell.target);
        if !cell.placement.is_match() {
            left_out.push(format!("bandwidth {initiator}->{target}"));
            continue;
        }
        let (read, write) = (
            measured(cell.read_gbps.as_ref()),
            measured(cell.write_gbps.as_ref()),
        );
        let mean = match (read, write) {
            (Some(r), Some(w)) => Some((r + w) / 2.0),
            (one, other) => one.or(other),
        };
        for (attribute, gbps) in [
            (Attribute::Bandwidth, mean),
            (Attribute::ReadBandwidth, read),
            (Attribute::WriteBandwidth, write),
        ] {
            if let Some(gbps) = gbps {
                let value = mib_per_s(gbps);
                values.push(MeasuredValue {
                    attribute,
                    initiator,
                    target,
                    value,
                });
            }
        }
    }
    (values, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_medians_in_hwlocs_units_from_cells_where_asked() {
        use numalab::audit::{audit, PlacementAudit};
        use numalab::locate::PageHistogram;
        use numalab::{HugePages, MemPolicy};
        use numalab::{NodeSet, Topology};

        use crate::kernels::Isa;
        use crate::matrix::latency::Pages;
        use crate::matrix::{
            BandwidthCell, BandwidthMatrix, Firmware, LatencyCell, LatencyMatrix, Measurements,
            NodeSelection, PlacementSummary, Settings, Shape,
        };

        // Pages of a working set bound to `target`, found on node `on`.
        let placed = |target: u32, on: u32| -> PlacementAudit {
            let pages = PageHistogram {
                page_size: 4096,
                queried: 256,
                per_node: [(on, 256)].into(),
                ..Default::default()
            };
            audit(
                &MemPolicy::Bind(NodeSet::single(target)),
                &NodeSet::new(),
                &pages,
            )
        };
        let pages = Pages {
            requested: HugePages::None,
            huge_share: None,
        };
        let latency = |target: u32, on: u32, ns: &[f64]| LatencyCell {
            initiator: 0,
            target,
            cpu: 0,
            size_bytes: 1 << 20,
            pages,
            latency_ns: Figure::of(ns),
            cycles: None,
            base_pages: None,
            ratio_to_local: None,
            firmware: Firmware::default(),
            placement: placed(target, on),
        };
        let bandwidth =
            |initiator: u32, read: Option<&[f64]>, write: Option<&[f64]>| BandwidthCell {
                initiator,
                target: 1,
                cpus: vec![0],
                size_bytes: 1 << 20,
                pages,
                read_gbps: read.map(Figure::of),
                write_gbps: write.map(Figure::of),
                copy_gbps: None,
                read_ratio_to_local: None,
                firmware: Firmware::default(),
                placement: placed(1, 1),
            };
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let result = MatrixReport {
            environment: None,
            shape: Shape::of(&topology, &NodeSelection::default()).unwrap(),
            firmware: Vec::new(),
            settings: Settings {
                measurements: Measurements::default(),
                latency_bytes: 1 << 20,
                size_source: "--size".into(),
                bandwidth_bytes: 1 << 20,
                threads: None,
                repeats: 3,
                sample_ms: 10,
                quick: true,
                huge_pages: None,
                isa: Isa::Scalar,
                cpu_mhz: None,
            },
            cache_sweep: None,
            latency: Some(LatencyMatrix {
                // 0 -> 1: the pages were on node 0, so not node 1's figure.
                cells: vec![latency(0, 0, &[90.4, 80.0, 99.0]), latency(1, 0, &[95.0])],
            }),
            bandwidth: Some(BandwidthMatrix {
                cells: vec![
                    bandwidth(0, Some(&[10.0, 9.0, 11.0]), Some(&[6.0])),
                    bandwidth(1, None, Some(&[6.0])),
                ],
            }),
            loaded: None,
            c2c: None,
            placement_summary: PlacementSummary::default(),
            warnings: Vec::new(),
            interrupted: false,
        };
        let (values, left_out) = values(&result);
        let value = |attribute, initiator, target, value| MeasuredValue {
            attribute,
            initiator,
            target,
            value,
        };
        // 10 GB/s = 9536.7 MiB/s, 6 GB/s = 5722.0, their mean 7629.4.
        assert_eq!(
            values,
            [
                value(Attribute::Latency, 0, 0, 90),
                value(Attribute::ReadLatency, 0, 0, 90),
                value(Attribute::Bandwidth, 0, 1, 7629),
                value(Attribute::ReadBandwidth, 0, 1, 9537),
                value(Attribute::WriteBandwidth, 0, 1, 5722),
                value(Attribute::Bandwidth, 1, 1, 5722),
                value(Attribute::WriteBandwidth, 1, 1, 5722),
            ]
        );
        assert_eq!(left_out, ["latency 0->1"]);
    }
}
