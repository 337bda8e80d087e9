//! Memory: where pages are, placing new memory and moving what exists,
//! and the calling thread's policy and CPUs.

use numalab::audit::audit_in_units;
use numalab::locate::{locate, PageHistogram, Sample};
use numalab::RangeMode;
use numalab::{affinity, BufferOptions, CpuSet, HugePages, MemPolicy, NodeBuffer, NodeSet};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{self, raise};
use crate::topology;

/// A policy string as the CLI and numactl spell it (`interleave:all`,
/// `bind:1`, `preferred:0`, `local`, `weighted-interleave:0=3,1=1`),
/// resolved against this machine and checked.
fn policy(spec: &str) -> PyResult<MemPolicy> {
    topology()?.parse_policy(spec).map_err(errors::from_policy)
}

/// Checks a policy string; returns it as numalab writes it.
#[pyfunction]
fn check_policy(spec: &str) -> PyResult<String> {
    Ok(policy(spec)?.to_string())
}

/// A histogram as a dict: page_size, pages (asked about), nodes {node:
/// pages}, not_present, unknown.
fn histogram<'py>(py: Python<'py>, found: &PageHistogram) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("page_size", found.page_size)?;
    dict.set_item("pages", found.queried)?;
    dict.set_item("nodes", found.per_node.clone())?;
    dict.set_item("not_present", found.not_present)?;
    dict.set_item("unknown", found.unknown)?;
    Ok(dict)
}

fn located(py: Python<'_>, address: usize, length: usize) -> PyResult<PageHistogram> {
    // The package holds the object for the call; move_pages reports an
    // address that is not mapped as such, never faults on it.
    py.detach(|| locate(address as *const u8, length, Sample::All))
        .map_err(|err| raise("Error", err.to_string()))
}

/// Where the pages of `[address, address + length)` are.
#[pyfunction]
fn locate_range<'py>(
    py: Python<'py>,
    address: usize,
    length: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let found = located(py, address, length)?;
    histogram(py, &found)
}

/// The pages of `[address, address + length)` checked against `spec`:
/// verdict, expected nodes, the share on them, numalab's note, and the
/// pages found. `touched_from` is the node `local` follows (this thread's
/// node by default).
#[pyfunction]
#[pyo3(signature = (address, length, spec, touched_from=None))]
fn audit_range<'py>(
    py: Python<'py>,
    address: usize,
    length: usize,
    spec: &str,
    touched_from: Option<u32>,
) -> PyResult<Bound<'py, PyDict>> {
    let policy = policy(spec)?;
    let found = located(py, address, length)?;
    let touched = NodeSet::single(touched_from.unwrap_or_else(|| affinity::current().node));
    let check = audit_in_units(&policy, &touched, &found, 1);
    let dict = PyDict::new(py);
    dict.set_item("policy", check.policy.to_string())?;
    dict.set_item(
        "verdict",
        serde_json::to_value(check.verdict)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
    )?;
    dict.set_item("match", check.is_match())?;
    dict.set_item(
        "expected_nodes",
        check.expected_nodes.iter().collect::<Vec<u32>>(),
    )?;
    dict.set_item("on_expected", check.on_expected)?;
    dict.set_item("note", check.note.clone())?;
    dict.set_item("found", histogram(py, &found)?)?;
    Ok(dict)
}

/// Applies `spec` to the whole pages of `[address, address + length)`
/// (`mbind`), moving the pages already there when `move_pages` is true;
/// returns the pages before and after.
#[pyfunction]
fn place_range<'py>(
    py: Python<'py>,
    address: usize,
    length: usize,
    spec: &str,
    move_pages: bool,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let policy = policy(spec)?;
    let before = located(py, address, length)?;
    let mode = if move_pages {
        RangeMode::Move
    } else {
        RangeMode::FutureOnly
    };
    py.detach(|| policy.apply_to_pages(address as *const u8, length, mode))
        .map_err(errors::from_policy)?;
    let after = located(py, address, length)?;
    Ok((histogram(py, &before)?, histogram(py, &after)?))
}

/// Anonymous memory placed by a policy before its first touch, for a
/// NumPy array to view (`__array_interface__` in the package).
#[pyclass(module = "numalab._native", frozen)]
struct Memory {
    buffer: NodeBuffer,
}

#[pymethods]
impl Memory {
    /// `length` bytes placed by `spec`; touched now (each page placed) when
    /// `prefault`.
    #[new]
    #[pyo3(signature = (length, spec, prefault, huge_pages="none"))]
    fn new(
        py: Python<'_>,
        length: usize,
        spec: &str,
        prefault: bool,
        huge_pages: &str,
    ) -> PyResult<Memory> {
        let policy = policy(spec)?;
        let huge: HugePages = huge_pages
            .parse()
            .map_err(|err: String| raise("InvalidArgument", err))?;
        let options = BufferOptions::new(policy)
            .prefault(prefault)
            .huge_pages(huge);
        let buffer = py
            .detach(|| NodeBuffer::with_options(length, options))
            .map_err(errors::from_buffer)?;
        Ok(Memory { buffer })
    }

    /// The first byte's address.
    #[getter]
    fn address(&self) -> usize {
        self.buffer.as_ptr() as usize
    }

    /// Bytes.
    #[getter]
    fn length(&self) -> usize {
        self.buffer.len()
    }

    /// The policy, as numalab writes it.
    #[getter]
    fn policy(&self) -> String {
        self.buffer.policy().to_string()
    }

    /// The node of the thread that made it (what `local` follows).
    #[getter]
    fn touched_from(&self) -> Vec<u32> {
        self.buffer.touched_from().iter().collect()
    }
}

/// The calling thread's memory policy, as numalab writes it.
#[pyfunction]
fn thread_policy() -> PyResult<String> {
    MemPolicy::of_thread()
        .map(|p| p.to_string())
        .map_err(|err| raise("Error", format!("get_mempolicy: {err}")))
}

/// Sets the calling thread's memory policy.
#[pyfunction]
fn set_thread_policy(spec: &str) -> PyResult<()> {
    // `default` (no policy of the thread's own) resolves to nothing to
    // check; it is what a thread starts with.
    let policy = policy(spec)?;
    policy.apply_to_thread().map_err(errors::from_policy)
}

/// The calling thread's CPUs, in numactl's list syntax.
#[pyfunction]
fn thread_cpus() -> PyResult<String> {
    affinity::thread_cpus()
        .map(|cpus| cpus.to_string())
        .map_err(|err| raise("Error", format!("sched_getaffinity: {err}")))
}

/// Binds the calling thread to `cpus` (numactl's list syntax, `all`, `!0`),
/// checked against what this process may use.
#[pyfunction]
fn set_thread_cpus(spec: &str) -> PyResult<()> {
    let cpus: CpuSet = topology()?.parse_cpus(spec).map_err(errors::from_spec)?;
    affinity::bind_thread_to_cpus(&cpus).map_err(|err| raise("Error", err.to_string()))
}

/// Binds the calling thread to the CPUs of `spec`'s nodes.
#[pyfunction]
fn set_thread_nodes(spec: &str) -> PyResult<()> {
    let topology = topology()?;
    let nodes = topology
        .resolve_nodes(spec, numalab::Role::Cpus)
        .map_err(errors::from_spec)?;
    affinity::bind_thread_to_nodes(topology, &nodes).map_err(|err| raise("Error", err.to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Memory>()?;
    m.add_function(wrap_pyfunction!(check_policy, m)?)?;
    m.add_function(wrap_pyfunction!(locate_range, m)?)?;
    m.add_function(wrap_pyfunction!(audit_range, m)?)?;
    m.add_function(wrap_pyfunction!(place_range, m)?)?;
    m.add_function(wrap_pyfunction!(thread_policy, m)?)?;
    m.add_function(wrap_pyfunction!(set_thread_policy, m)?)?;
    m.add_function(wrap_pyfunction!(thread_cpus, m)?)?;
    m.add_function(wrap_pyfunction!(set_thread_cpus, m)?)?;
    m.add_function(wrap_pyfunction!(set_thread_nodes, m)?)?;
    Ok(())
}
