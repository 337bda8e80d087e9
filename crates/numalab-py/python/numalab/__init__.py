"""numalab for Python: where a NumPy array's pages are, arrays placed on the
NUMA nodes you choose, numalab's shared-memory ring read and written as
arrays, and a file's cached pages per node.

>>> import numalab
>>> a = numalab.zeros((1 << 20,), "f8", policy="interleave:all")
>>> numalab.audit(a, "interleave:all").match
True

The policy strings are those of the ``numalab`` command and numactl:
``local``, ``bind:1``, ``preferred:0``, ``interleave:all``,
``interleave:0,1``, ``preferred-many:0,2``, ``weighted-interleave:0=3,1=1``
(``all`` means the nodes with memory this process may use, ``!1`` all but
node 1). See docs/python.md.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Union

from . import _errors, _native
from ._errors import (
    Closed,
    Error,
    InvalidArgument,
    InvalidState,
    NodeError,
    NotFound,
    NotMoved,
    PermissionDenied,
    PolicyError,
    Released,
    RingError,
    RingExists,
    RingNotFound,
    Timeout,
    Unsupported,
)
from ._memory import (
    Audit,
    Pages,
    Placed,
    audit,
    bind,
    empty,
    locate,
    place,
    thread_cpus,
    thread_policy,
    zeros,
)
from ._ring import ReadBlock, Reader, Ring, Transfer, WriteBlock, Writer, remove

__version__: str = _native.version()

PathLike = Union[str, "os.PathLike[str]"]


def topology() -> Dict[str, Any]:
    """This machine now, as ``numalab topo --json`` prints it: nodes with
    their CPUs and memory, the distances (SLIT) and HMAT figures, caches,
    devices near each node, each node's memory now (total and free), the
    kernel's settings and which policies it supports."""
    return json.loads(_native.topology_json())


def fincore(*paths: PathLike, strict: bool = True) -> Dict[str, Any]:
    """Each file's cached pages per node (a directory: the files under it),
    as ``numalab fincore --json`` reports them; nothing is read from disk.

    A path that cannot be read raises (:class:`NotFound`,
    :class:`PermissionDenied`, or :class:`Error`), as ``numalab fincore``
    exits 1; with ``strict=False`` the report lists it under ``failed``
    beside the others."""
    if not paths:
        raise InvalidArgument("fincore needs at least one path")
    report = json.loads(_native.fincore_json([os.fspath(p) for p in paths]))
    if strict and report.get("failed"):
        first = report["failed"][0]
        message = f"{first['path']}: {first['error']}"
        if "(os error 2)" in first["error"]:
            raise NotFound(message)
        if "(os error 13)" in first["error"] or "(os error 1)" in first["error"]:
            raise PermissionDenied(message)
        raise Error(message)
    return report


def check_policy(policy: str) -> str:
    """Checks a policy string on this machine; returns it as numalab writes
    it (``interleave:all`` becomes ``interleave:0,1`` on two nodes)."""
    return _native.check_policy(policy)


__all__ = [
    "__version__",
    # memory
    "locate",
    "audit",
    "empty",
    "zeros",
    "place",
    "bind",
    "thread_policy",
    "thread_cpus",
    "check_policy",
    "Pages",
    "Audit",
    "Placed",
    # the machine
    "topology",
    "fincore",
    # the ring
    "Ring",
    "Writer",
    "Reader",
    "ReadBlock",
    "WriteBlock",
    "Transfer",
    "remove",
    # errors: numalab.Error and its kinds
    *_errors.__all__,
]
