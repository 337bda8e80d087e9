//! `numalab._native`: the Python package's native half, a thin layer over
//! the `numalab` library (and, for the documents `numalab topo --json` and
//! `numalab fincore --json` print, `numalab-bench`). The package's Python
//! half (`python/numalab/`) turns objects with the buffer protocol into
//! addresses and lengths through NumPy and makes NumPy arrays of the memory
//! this module hands out through `__array_interface__`, so the module works
//! with the limited API of every CPython from 3.9 (one abi3 wheel).
//!
//! Nothing here is public API: `numalab._native` takes raw addresses,
//! which the package checks and keeps alive for the call.

use numalab::Topology;
use pyo3::prelude::*;

mod errors;
mod memory;
mod ring;

use errors::raise;

/// This machine's topology, loaded once per process (as libnuma reads it
/// once): policy strings such as `interleave:all` resolve against it.
fn topology() -> PyResult<&'static Topology> {
    Topology::system_once().map_err(|err| raise("Error", err.to_string()))
}

/// The `numalab.topo` document `numalab topo --json` prints, for this
/// machine now.
#[pyfunction]
fn topology_json(py: Python<'_>) -> PyResult<String> {
    let topology = Topology::system().map_err(|err| raise("Error", err.to_string()))?;
    let report = py.detach(move || numalab_bench::topo::TopoReport::gather(topology));
    numalab_bench::document::Document::new(&report)
        .to_json()
        .map_err(|err| raise("Error", err.to_string()))
}

/// The `numalab.fincore` document `numalab fincore --json PATH…` prints.
#[pyfunction]
fn fincore_json(py: Python<'_>, paths: Vec<std::path::PathBuf>) -> PyResult<String> {
    let report = py
        .detach(|| numalab_bench::fincore::run(&paths))
        .map_err(errors::from_fincore)?;
    numalab_bench::document::Document::new(&report)
        .to_json()
        .map_err(|err| raise("Error", err.to_string()))
}

/// The numalab version this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(topology_json, m)?)?;
    m.add_function(wrap_pyfunction!(fincore_json, m)?)?;
    memory::register(m)?;
    ring::register(m)?;
    Ok(())
}
