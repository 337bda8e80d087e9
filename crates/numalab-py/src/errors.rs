//! numalab's errors as the package's exceptions (`numalab.Error` and its
//! subclasses, defined in `python/numalab/_errors.py` so that each can
//! also be the built-in exception Python programs already catch:
//! `numalab.RingNotFound` is a `FileNotFoundError`, `numalab.PolicyError`
//! a `ValueError`). The message is numalab's own.

use std::io;

use numalab::ring::RingError;
use numalab::{BufferError, PolicyError, SpecError};
use pyo3::prelude::*;
use pyo3::PyErr;

/// The exception `kind` of `numalab._errors` with `message`.
pub fn raise(kind: &'static str, message: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("numalab._errors")
            .and_then(|module| module.getattr(kind))
            .and_then(|class| class.call1((message,)));
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(err) => err,
        }
    })
}

/// The kind of an operating-system error.
fn os_kind(err: &io::Error) -> &'static str {
    match err.kind() {
        io::ErrorKind::PermissionDenied => "PermissionDenied",
        io::ErrorKind::NotFound => "NotFound",
        _ => "Error",
    }
}

pub fn from_spec(err: SpecError) -> PyErr {
    let kind = match err {
        SpecError::Parse(_) => "PolicyError",
        _ => "NodeError",
    };
    raise(kind, err.to_string())
}

/// The exception for a policy error, wherever it comes from (a buffer,
/// a ring's placement, a thread).
fn policy_kind(err: &PolicyError) -> &'static str {
    match err {
        PolicyError::Node(SpecError::Parse(_)) | PolicyError::Parse { .. } => "PolicyError",
        PolicyError::Node(_) => "NodeError",
        PolicyError::Unsupported { .. } => "Unsupported",
        PolicyError::Rejected { source, .. } => os_kind(source),
        PolicyError::NotMoved { .. } => "NotMoved",
        _ => "Error",
    }
}

pub fn from_policy(err: PolicyError) -> PyErr {
    raise(policy_kind(&err), err.to_string())
}

pub fn from_buffer(err: BufferError) -> PyErr {
    match err {
        BufferError::Policy(err) => from_policy(err),
        BufferError::InsufficientMemory { .. } => raise("NodeError", err.to_string()),
        other => raise("Error", other.to_string()),
    }
}

pub fn from_ring(err: RingError) -> PyErr {
    let kind = match &err {
        RingError::NotFound { .. } => "RingNotFound",
        RingError::Exists { .. } => "RingExists",
        RingError::Timeout { .. } => "Timeout",
        RingError::NotHeld { .. } => "Released",
        RingError::Placement(BufferError::Policy(policy)) => policy_kind(policy),
        RingError::Placement(BufferError::InsufficientMemory { .. }) => "NodeError",
        RingError::InvalidName { .. } | RingError::InvalidSize(_) | RingError::Size(_) => {
            "InvalidArgument"
        }
        RingError::TooLarge { .. } => "InvalidArgument",
        _ => match numalab::os_error(&err) {
            Some(source) => os_kind(source),
            None => "RingError",
        },
    };
    raise(kind, err.to_string())
}

pub fn from_fincore(err: numalab_bench::fincore::FincoreError) -> PyErr {
    let kind = numalab::os_error(&err).map_or("Error", os_kind);
    raise(kind, err.to_string())
}
