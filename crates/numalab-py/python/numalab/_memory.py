"""Where memory is, placing new memory and moving what exists, and the
calling thread's policy and CPUs."""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._errors import InvalidArgument

Shape = Union[int, Sequence[int]]


@dataclass(frozen=True)
class Pages:
    """Where the pages of some memory are, as ``move_pages(2)`` reports.

    ``nodes`` maps each node to the pages present on it; ``not_present``
    pages were never touched (or are swapped out); ``unknown`` ones the
    kernel would not report.
    """

    page_size: int
    pages: int
    nodes: Dict[int, int] = field(default_factory=dict)
    not_present: int = 0
    unknown: int = 0

    @property
    def present(self) -> int:
        """Pages present on some node."""
        return sum(self.nodes.values())

    def on(self, node: int) -> int:
        """Pages present on ``node``."""
        return self.nodes.get(node, 0)

    def fraction(self, node: int) -> float:
        """Share of the present pages on ``node``, 0 to 1 (0 when none are
        present)."""
        present = self.present
        return self.on(node) / present if present else 0.0

    @classmethod
    def _from(cls, found: Dict[str, Any]) -> "Pages":
        return cls(
            page_size=found["page_size"],
            pages=found["pages"],
            nodes={int(n): int(c) for n, c in found["nodes"].items()},
            not_present=found["not_present"],
            unknown=found["unknown"],
        )


@dataclass(frozen=True)
class Audit:
    """Some memory's pages checked against a policy, as numalab's audit
    checks them (``numalab exec`` prints the same ``note``)."""

    policy: str
    #: ``match``, ``spilled`` (allowed, not preferred), ``mismatch`` or
    #: ``empty`` (no page present).
    verdict: str
    match: bool
    expected_nodes: List[int]
    #: Share of the present pages on the expected nodes, 0 to 1.
    on_expected: float
    note: str
    found: Pages


@dataclass(frozen=True)
class Placed:
    """What :func:`place` did: the pages before and after, and how many
    pages changed node (counted from the two histograms)."""

    policy: str
    before: Pages
    after: Pages

    @property
    def moved(self) -> int:
        """Pages that arrived on a node (the sum of each node's gain)."""
        nodes = set(self.before.nodes) | set(self.after.nodes)
        return sum(max(0, self.after.on(n) - self.before.on(n)) for n in nodes)


def _as_array(obj: Any) -> np.ndarray:
    """An ndarray viewing ``obj``'s memory (no copy): the object itself, or
    a view through the buffer protocol."""
    if isinstance(obj, np.ndarray):
        return obj
    try:
        view = memoryview(obj)
    except TypeError:
        raise InvalidArgument(
            f"a {type(obj).__name__} has no memory to locate: expected an object with "
            "the buffer protocol (a NumPy array, bytearray, mmap, memoryview)"
        ) from None
    except (ValueError, BufferError) as err:
        # A closed mmap, a released memoryview.
        raise InvalidArgument(f"the {type(obj).__name__} has no memory now: {err}") from None
    try:
        return np.asarray(view)
    except (TypeError, ValueError, NotImplementedError):
        # A format NumPy does not read (ctypes structures): its bytes.
        return np.asarray(view.cast("B"))


def _span(obj: Any) -> Tuple[np.ndarray, int, int]:
    """``obj`` as an array, and the first address and length of the bytes
    it spans (a strided view spans from its lowest to its highest byte)."""
    array = _as_array(obj)
    if array.size == 0:
        return array, 0, 0
    start = array.__array_interface__["data"][0]
    low = high = start
    for extent, stride in zip(array.shape, array.strides):
        reach = stride * (extent - 1)
        if reach < 0:
            low += reach
        else:
            high += reach
    return array, low, high + array.itemsize - low


def locate(obj: Any) -> Pages:
    """Where the pages of ``obj`` are: any object with the buffer protocol
    (a NumPy array, bytearray, mmap, memoryview).

    >>> import numalab, numpy as np
    >>> a = np.ones(1 << 20)
    >>> numalab.locate(a).present > 0
    True
    """
    array, address, length = _span(obj)
    found = _native.locate_range(address, length)
    del array  # held until the pages were located
    return Pages._from(found)


def audit(obj: Any, policy: str, touched_from: Optional[int] = None) -> Audit:
    """Checks where ``obj``'s pages are against ``policy`` (as the CLI
    spells it: ``bind:1``, ``interleave:all``, ``local``). ``local`` expects
    the node of the thread that first touched the memory: ``touched_from``,
    or this thread's node.
    """
    array, address, length = _span(obj)
    found = _native.audit_range(address, length, policy, touched_from)
    del array
    return Audit(
        policy=found["policy"],
        verdict=found["verdict"],
        match=found["match"],
        expected_nodes=list(found["expected_nodes"]),
        on_expected=found["on_expected"],
        note=found["note"],
        found=Pages._from(found["found"]),
    )


def place(obj: Any, policy: str, move: bool = True) -> Placed:
    """Applies ``policy`` to the memory of ``obj`` (``mbind(2)``) and, when
    ``move``, moves the pages already there (a move to an interleave puts
    each page where the interleave would have). The policy covers whole
    pages: bytes of other objects sharing ``obj``'s first or last page
    follow it too, as with libnuma's ``numa_tonode_memory``.
    """
    array, address, length = _span(obj)
    if length == 0:
        _native.check_policy(policy)
        empty = Pages(page_size=0, pages=0)
        return Placed(policy=policy, before=empty, after=empty)
    before, after = _native.place_range(address, length, policy, bool(move))
    del array
    return Placed(
        policy=_native.check_policy(policy),
        before=Pages._from(before),
        after=Pages._from(after),
    )


class _Exporter:
    """Lends memory to NumPy through ``__array_interface__``; the array
    keeps it (and the memory) alive."""

    __slots__ = ("_owner", "__array_interface__")

    def __init__(self, owner: Any, address: int, length: int, readonly: bool) -> None:
        self._owner = owner
        self.__array_interface__ = {
            "version": 3,
            "shape": (length,),
            "typestr": "|u1",
            "data": (address, readonly),
        }


def _shape(shape: Shape) -> Tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        dims: Tuple[Any, ...] = (shape,)
    else:
        try:
            dims = tuple(shape)
        except TypeError:
            raise InvalidArgument(f"shape {shape!r}: expected an int or a sequence of ints") from None
    out = []
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise InvalidArgument(f"shape {shape!r}: {d!r} is not an int")
        if d < 0:
            raise InvalidArgument(f"shape {shape!r}: negative dimensions are not allowed")
        out.append(int(d))
    return tuple(out)


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as err:
        raise InvalidArgument(f"dtype {dtype!r}: {err}") from None
    if dt.hasobject:
        raise InvalidArgument(
            f"dtype {dt}: an array of Python objects holds pointers, not data; "
            "place the data itself"
        )
    return dt


def _placed(shape: Shape, dtype: Any, policy: str, huge_pages: str, order: str, prefault: bool) -> np.ndarray:
    dims = _shape(shape)
    dt = _dtype(dtype)
    if order not in ("C", "F"):
        raise InvalidArgument(f"order {order!r}: expected 'C' or 'F'")
    nbytes = math.prod(dims) * dt.itemsize
    if nbytes == 0:
        _native.check_policy(policy)
        return np.empty(dims, dtype=dt, order=order)
    memory = _native.Memory(nbytes, policy, prefault, huge_pages)
    raw = np.asarray(_Exporter(memory, memory.address, nbytes, False))
    return raw.view(dt).reshape(dims, order=order)


def empty(shape: Shape, dtype: Any = float, policy: str = "local", *, huge_pages: str = "none", order: str = "C") -> np.ndarray:
    """A new array whose pages ``policy`` places before anything touches
    them (``interleave:all``, ``bind:1``, ``preferred:0``,
    ``weighted-interleave:0=3,1=1``, ``local``: the CLI's and numactl's
    spellings). Like :func:`numpy.empty`, its pages are made as they are
    first written: each lands where the policy says, on whichever thread
    writes it. ``huge_pages``: ``none``, ``thp`` or ``2M``.

    >>> import numalab
    >>> a = numalab.empty((1024, 1024), "f8", policy="bind:0")
    >>> a.shape, a.dtype.name
    ((1024, 1024), 'float64')
    """
    return _placed(shape, dtype, policy, huge_pages, order, prefault=False)


def zeros(shape: Shape, dtype: Any = float, policy: str = "local", *, huge_pages: str = "none", order: str = "C") -> np.ndarray:
    """As :func:`empty`, every page made now (on this thread, where the
    policy puts it) and zero: the placement is decided, and
    :func:`audit` can check it, before the array is used."""
    return _placed(shape, dtype, policy, huge_pages, order, prefault=True)


class bind(contextlib.ContextDecorator):
    """Runs a block (or, as a decorator, a function) with the calling
    thread's memory policy and CPUs set, and restores both after, however
    the block ends.

    ``policy`` as :func:`empty` takes it; ``cpus`` in numactl's list syntax
    (``0-3,8``, ``all``, ``!0``) or ``nodes`` (run on those nodes' CPUs,
    as ``numactl --cpunodebind``), not both. Everything is checked before
    anything changes.

    >>> import numalab
    >>> with numalab.bind("bind:0", nodes="0"):
    ...     pass
    """

    _saved = threading.local()

    def __init__(self, policy: Optional[str] = None, *, cpus: Optional[str] = None, nodes: Optional[str] = None) -> None:
        if cpus is not None and nodes is not None:
            raise InvalidArgument("give cpus or nodes, not both")
        if policy is not None:
            _native.check_policy(policy)
        self.policy = policy
        self.cpus = cpus
        self.nodes = nodes

    def _stack(self) -> List[Tuple[str, str]]:
        stack = getattr(self._saved, "stack", None)
        if stack is None:
            stack = self._saved.stack = []
        return stack

    def __enter__(self) -> "bind":
        saved = (_native.thread_policy(), _native.thread_cpus())
        try:
            if self.cpus is not None:
                _native.set_thread_cpus(self.cpus)
            elif self.nodes is not None:
                _native.set_thread_nodes(self.nodes)
            if self.policy is not None:
                _native.set_thread_policy(self.policy)
        except BaseException:
            _restore(saved)
            raise
        self._stack().append(saved)
        return self

    def __exit__(self, *exc: Any) -> None:
        _restore(self._stack().pop())


def _restore(saved: Tuple[str, str]) -> None:
    policy, cpus = saved
    _native.set_thread_policy(policy)
    _native.set_thread_cpus(cpus)


def thread_policy() -> str:
    """The calling thread's memory policy, as numalab writes it
    (``default`` when it has none of its own)."""
    return _native.thread_policy()


def thread_cpus() -> str:
    """The CPUs the calling thread may run on, in numactl's list syntax."""
    return _native.thread_cpus()
