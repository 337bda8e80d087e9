"""numalab's shared-memory ring, its blocks as NumPy arrays.

The segment, protocol and placement are the Rust library's: a Python reader
reads what ``numalab ring``'s workers or a Rust program write, and a Rust
reader reads what Python writes. Every process using a ring must go
through numalab (this package, the library or the CLI).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from . import _native
from ._errors import InvalidArgument
from ._memory import _Exporter, _dtype, _span


@dataclass(frozen=True)
class Transfer:
    """A transfer: numbered from 1 in the order the writer began them, with
    the key-value header the writer sent with its first block."""

    id: int
    header: Dict[str, str] = field(default_factory=dict)


def _transfer(pair: Optional[Tuple[int, Dict[str, str]]]) -> Optional[Transfer]:
    return None if pair is None else Transfer(id=pair[0], header=dict(pair[1]))


class _Block:
    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def seq(self) -> int:
        """The block's sequence number (from 0 when the ring was made)."""
        return self._native.seq

    @property
    def nbytes(self) -> int:
        """Bytes: what the writer committed (read), or the whole block
        (write)."""
        return self._native.length

    @property
    def released(self) -> bool:
        """Whether the block was given back (its memory is no longer its)."""
        return self._native.released

    @property
    def array(self) -> np.ndarray:
        """The block's bytes as a ``uint8`` array viewing the ring (no
        copy): read-only for a read block. Valid until the block is given
        back; asking after that raises :class:`numalab.Released`."""
        address = self._native.address  # raises Released
        if self.nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        return np.asarray(_Exporter(self._native, address, self.nbytes, not self._native.writable))

    def view(self, dtype: Any) -> np.ndarray:
        """The block's bytes as ``dtype`` (its length a whole number of
        items)."""
        dt = _dtype(dtype)
        if self.nbytes % dt.itemsize:
            raise InvalidArgument(
                f"block {self.seq} has {self.nbytes} bytes, not a whole number of {dt} items"
            )
        return self.array.view(dt)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.array
        return array if dtype is None else array.astype(dtype)

    def __len__(self) -> int:
        return self.nbytes


class ReadBlock(_Block):
    """A block lent by a :class:`Reader`, in place. It is given back when
    the reader is asked for the next one, or by :meth:`release` (or at the
    end of a ``with`` block)."""

    def __init__(self, native: Any, reader: "Reader") -> None:
        super().__init__(native)
        self._reader = reader

    @property
    def starts_transfer(self) -> bool:
        return self._native.starts_transfer

    @property
    def ends_transfer(self) -> bool:
        return self._native.ends_transfer

    @property
    def transfer(self) -> Optional[Transfer]:
        """The transfer the block belongs to, with its header."""
        return _transfer(self._native.transfer)

    def release(self) -> None:
        """Gives the block back to the writer (nothing if it was already)."""
        self._reader._native.release(self._native)

    def __enter__(self) -> "ReadBlock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<numalab.ReadBlock seq={self.seq} nbytes={self.nbytes}{' released' if self.released else ''}>"


class WriteBlock(_Block):
    """A whole block claimed from the :class:`Writer`, to fill in place and
    publish with :meth:`commit`. A ``with`` block that ends without a
    commit publishes nothing."""

    def __init__(self, native: Any, writer: "Writer") -> None:
        super().__init__(native)
        self._writer = writer

    def commit(self, nbytes: Optional[int] = None, last: bool = False) -> None:
        """Publishes the first ``nbytes`` bytes (the whole block by
        default); ``last`` ends the transfer with it."""
        n = self.nbytes if nbytes is None else nbytes
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise InvalidArgument(f"nbytes={nbytes!r}: expected a count of bytes from 0 to {self.nbytes}")
        self._writer._native.commit(self._native, int(n), bool(last))

    def abandon(self) -> None:
        """Gives the block back unpublished."""
        self._writer._native.abandon(self._native)

    def __enter__(self) -> "WriteBlock":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.released:
            self.abandon()

    def __repr__(self) -> str:
        return f"<numalab.WriteBlock seq={self.seq} nbytes={self.nbytes}{' released' if self.released else ''}>"


class Writer:
    """The ring's one writer. Data goes in by copy (:meth:`write`) or in
    place (:meth:`claim`); readers see it in order, in transfers."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def set_timeout(self, seconds: Optional[float]) -> None:
        """How long a write may wait for a reader to free a block (None: as
        long as it takes)."""
        self._native.set_timeout(seconds)

    def wait_for_readers(self, count: int = 1, timeout: Optional[float] = None) -> None:
        """Waits until ``count`` readers have joined
        (:class:`numalab.Timeout` after ``timeout`` seconds)."""
        self._native.wait_for_readers(count, timeout)

    def begin_transfer(self, header: Optional[Mapping[str, Any]] = None) -> None:
        """Begins a transfer; readers get ``header`` (keys without spaces,
        values of one line) with its first block."""
        pairs = [(str(k), str(v)) for k, v in (header or {}).items()]
        self._native.begin_transfer(pairs)

    def write(self, data: Any) -> None:
        """Copies ``data`` (any object with the buffer protocol) into the
        ring, filling blocks one after another; the GIL is released while
        it copies and waits."""
        array, address, length = _span(data)
        if length and not (array.flags.c_contiguous or array.flags.f_contiguous):
            array = np.ascontiguousarray(array)
            array, address, length = _span(array)
        if length:
            self._native.write(address, length)
        del array

    def flush(self) -> None:
        """Publishes the partly filled block, if any."""
        self._native.flush()

    def claim(self, timeout: Optional[float] = None) -> WriteBlock:
        """The next whole block, to fill in place."""
        return WriteBlock(self._native.claim(timeout), self)

    def end_transfer(self) -> None:
        """Ends the current transfer."""
        self._native.end_transfer()

    def finish(self) -> None:
        """Ends the transfer and the stream: readers get the end once they
        have read everything. The writer is closed."""
        self._native.finish()

    def close(self) -> None:
        """Lets go of the writer, ending the stream as :meth:`finish`."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Reader:
    """One of the ring's readers: it reads every block from the moment it
    joined, in order. Iterating over it gives the blocks of the current
    (or next) transfer, each given back when the next is asked for::

        for block in reader:
            total += block.view(np.float32).sum()
    """

    def __init__(self, native: Any, timeout: Optional[float]) -> None:
        self._native = native
        if timeout is not None:
            self._native.set_timeout(timeout)

    def set_timeout(self, seconds: Optional[float]) -> None:
        """How long to wait for the next block or transfer
        (:class:`numalab.Timeout` after it; None: as long as it takes)."""
        self._native.set_timeout(seconds)

    def next_block(self) -> Optional[ReadBlock]:
        """Gives back the block lent before and lends the next; None at the
        end of the stream."""
        native = self._native.next_block()
        return None if native is None else ReadBlock(native, self)

    def next_transfer(self) -> Optional[Transfer]:
        """Skips the rest of the current transfer and waits for the next;
        None at the end of the stream."""
        return _transfer(self._native.next_transfer())

    def transfers(self) -> Iterator[Transfer]:
        """Each transfer in turn; iterate over the reader for its blocks."""
        while True:
            transfer = self.next_transfer()
            if transfer is None:
                return
            yield transfer

    def __iter__(self) -> Iterator[ReadBlock]:
        while True:
            block = self.next_block()
            if block is None:
                return
            if block.nbytes == 0 and block.ends_transfer:
                # A transfer's empty last block carries only its end.
                block.release()
                return
            yield block
            if block.ends_transfer:
                block.release()
                return

    @property
    def skipped(self) -> int:
        """Blocks this reader missed (``lag`` back-pressure)."""
        return self._native.skipped

    def close(self) -> None:
        """Gives back the block lent, and leaves the ring."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Ring:
    """A named ring of equal blocks in shared memory, its memory placed on
    the node you choose. Make one with :meth:`create`, open one another
    process made with :meth:`open`.

    >>> import numalab
    >>> with numalab.Ring.create("doc-ring", block_size=1 << 20, blocks=4) as ring:
    ...     ring.blocks
    4
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def create(
        cls,
        name: str,
        size: Optional[int] = None,
        block_size: int = 4 << 20,
        *,
        blocks: Optional[int] = None,
        policy: str = "local",
        huge_pages: str = "none",
        lock: bool = False,
        max_readers: int = 8,
        backpressure: str = "block",
        header_size: int = 4096,
    ) -> "Ring":
        """Makes ring ``name`` (1 to 100 of ``A-Z a-z 0-9 . _ -``):
        ``size`` bytes, or ``blocks`` blocks, of ``block_size`` bytes (a
        multiple of 64), placed by ``policy`` before any page is touched.
        ``backpressure``: ``block`` (the writer waits for the slowest
        reader) or ``lag`` (a slow reader misses blocks).
        ``header_size``: bytes for each transfer's header. Dropping the
        ring this process made (or :meth:`close`) removes its name, unless
        :meth:`keep` was called."""
        if (size is None) == (blocks is None):
            raise InvalidArgument("give size or blocks, not both (nor neither)")
        for label, value in (("size", size), ("blocks", blocks), ("block_size", block_size),
                             ("max_readers", max_readers), ("header_size", header_size)):
            if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)
                                      or not 0 <= value < 1 << 63):
                raise InvalidArgument(f"{label}={value!r}: expected a non-negative int below 2**63")
        total = int(size) if size is not None else int(blocks) * int(block_size)  # type: ignore[arg-type]
        if max_readers > 0xFFFFFFFF:
            raise InvalidArgument(f"max_readers={max_readers}: at most 64 readers")
        return cls(_native.Ring.create(name, total, int(block_size), policy, huge_pages, bool(lock),
                                       int(max_readers), backpressure, int(header_size)))

    @classmethod
    def open(cls, name: str) -> "Ring":
        """Opens ring ``name`` another process (Python, Rust, ``numalab
        ring``) made; its header is checked first."""
        return cls(_native.Ring.open(name))

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def path(self) -> str:
        """The segment's file (in ``/dev/shm``, or ``/dev/hugepages``)."""
        return self._native.path

    @property
    def block_size(self) -> int:
        return self._native.block_size

    @property
    def blocks(self) -> int:
        return self._native.blocks

    @property
    def policy(self) -> str:
        """The memory policy its creator asked for."""
        return self._native.policy

    def pages(self) -> Dict[int, int]:
        """Where the ring's pages are: pages per node."""
        return dict(self._native.pages())

    def audit(self) -> Tuple[bool, str]:
        """Whether every page is where the policy puts it, and numalab's
        note saying so."""
        return self._native.audit_note()

    def stats(self) -> Dict[str, Any]:
        """The ring's counters, as ``numalab ring --list --json`` shows
        each ring."""
        return json.loads(self._native.stats_json())

    def writer(self, timeout: Optional[float] = None) -> Writer:
        """Attaches the writer (one at a time)."""
        writer = Writer(self._native.writer())
        if timeout is not None:
            writer.set_timeout(timeout)
        return writer

    def reader(self, backpressure: Optional[str] = None, timeout: Optional[float] = None) -> Reader:
        """Joins as a reader (``block`` or ``lag``; the ring's default when
        None)."""
        return Reader(self._native.reader(backpressure), timeout)

    def keep(self) -> None:
        """Keeps the segment's name after this process lets go of a ring it
        made."""
        self._native.keep()

    def close(self) -> None:
        """Lets go of the ring. Arrays of blocks still held stay valid
        memory."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<numalab.Ring {self._native.name!r} closed>"
        return f"<numalab.Ring {self.name!r} {self.blocks} x {self.block_size} bytes, {self.policy}>"


def remove(name: str, force: bool = False) -> List[str]:
    """Removes ring ``name`` when no process holds it (``numalab ring
    --cleanup NAME``); ``force`` removes it even then. Returns the files
    removed."""
    return list(_native.remove(name, force))
