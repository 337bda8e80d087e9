//! The few facts a program needs to choose a placement: which nodes,
//! their memory now, their distances. hwloc is the library for the rest.

use std::ffi::c_uint;

use numalab::system::NodeMemory;
use numalab::Topology;

use crate::error::{boundary, numalab_status, out, Error};

/// This machine's topology, read once per process.
pub(crate) fn topology() -> Result<&'static Topology, Error> {
    Topology::system_once().map_err(|e| Error::new(numalab_status::NUMALAB_EOTHER, e.to_string()))
}

/// `node` as a set of one, checked to exist and be allowed here.
fn checked(nodes: &[c_uint]) -> Result<numalab::NodeSet, Error> {
    if let Some(node) = nodes.iter().find(|&&n| n > numalab::NodeSet::MAX) {
        return Err(Error::new(
            numalab_status::NUMALAB_ENODE,
            format!(
                "node {node} is out of range: Linux numbers nodes from 0 to {}",
                numalab::NodeSet::MAX
            ),
        ));
    }
    let set: numalab::NodeSet = nodes.iter().copied().collect();
    topology()?.check_nodes(&set)?;
    Ok(set)
}

fn node_at(index: c_uint) -> Result<u32, Error> {
    let nodes = &topology()?.nodes;
    nodes.get(index as usize).map(|n| n.id).ok_or_else(|| {
        Error::invalid(format!(
            "index {index}: this machine has {} node(s)",
            nodes.len()
        ))
    })
}

/// How many NUMA nodes the machine has.
///
/// # Safety
///
/// `count` points at an unsigned int.
#[no_mangle]
pub unsafe extern "C" fn numalab_node_count(count: *mut c_uint) -> numalab_status {
    boundary(|| {
        *out(count, "count")? = topology()?.nodes.len() as c_uint;
        Ok(())
    })
}

/// The id of the `index`-th node (ids can have holes: 0, 2, 5).
///
/// # Safety
///
/// `id` points at an unsigned int.
#[no_mangle]
pub unsafe extern "C" fn numalab_node_id(index: c_uint, id: *mut c_uint) -> numalab_status {
    boundary(|| {
        *out(id, "id")? = node_at(index)?;
        Ok(())
    })
}

/// Node `node`'s memory in bytes: installed (`total`) and free now
/// (`free`); either may be NULL.
///
/// # Safety
///
/// `total` and `free` point at integers or are NULL.
#[no_mangle]
pub unsafe extern "C" fn numalab_node_memory(
    node: c_uint,
    total: *mut u64,
    free: *mut u64,
) -> numalab_status {
    boundary(|| {
        checked(&[node])?;
        let memory = NodeMemory::read(node)
            .map_err(|e| Error::new(numalab_status::NUMALAB_EOTHER, format!("node {node}: {e}")))?;
        // SAFETY: NULL or one integer each.
        unsafe {
            if let Some(t) = total.as_mut() {
                *t = memory.total_bytes;
            }
            if let Some(f) = free.as_mut() {
                *f = memory.free_bytes;
            }
        }
        Ok(())
    })
}

/// The firmware's distance (SLIT) from node `from` to node `to`: 10 is
/// local. A machine with one node has 10.
///
/// # Safety
///
/// `distance` points at an unsigned int.
#[no_mangle]
pub unsafe extern "C" fn numalab_distance(
    from: c_uint,
    to: c_uint,
    distance: *mut c_uint,
) -> numalab_status {
    boundary(|| {
        let slot = out(distance, "distance")?;
        let topology = topology()?;
        checked(&[from, to])?;
        *slot = match topology.distance(from, to) {
            Some(d) => d as c_uint,
            None if from == to => 10,
            None => {
                return Err(Error::new(
                    numalab_status::NUMALAB_EUNSUPPORTED,
                    "the firmware gives no distances on this machine",
                ))
            }
        };
        Ok(())
    })
}
