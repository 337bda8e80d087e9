//! What `numalab matrix --plan` shows: the matrix a topology has and its
//! firmware values, nothing measured.

use numalab::Topology;
use serde::{Deserialize, Serialize};

use super::shape::{firmware_cells, FirmwareCell, Shape};
use crate::document::Schema;

/// The `--plan` document (`numalab.matrix-plan`): what would be measured.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::document::{Document, Schema};
/// use numalab_bench::matrix::{NodeSelection, PlanReport, Shape};
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let shape = Shape::of(&topology, &NodeSelection::default())?;
/// let plan = PlanReport::of(&topology, shape);
/// assert_eq!(plan.firmware.len(), 4, "2 x 2 cells");
/// let text = Document::new(&plan).to_json()?;
/// assert!(text.contains("\"schema\": \"numalab.matrix-plan\""));
/// let back: PlanReport = Document::parse(&text)?;
/// assert_eq!(back.shape, plan.shape);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// Where the topology came from.
    pub source: String,
    /// Rows and columns.
    pub shape: Shape,
    /// SLIT and HMAT of every cell.
    pub firmware: Vec<FirmwareCell>,
}

impl PlanReport {
    /// The plan of `shape` on `topology`, with its firmware values.
    pub fn of(topology: &Topology, shape: Shape) -> PlanReport {
        PlanReport {
            source: topology.source.to_string(),
            firmware: firmware_cells(topology, &shape),
            shape,
        }
    }
}

impl Schema for PlanReport {
    const NAME: &'static str = "numalab.matrix-plan";
    const VERSION: u32 = super::SCHEMA_VERSION;
}
