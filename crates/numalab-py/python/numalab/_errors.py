"""numalab's exceptions.

Every error numalab raises is a :class:`numalab.Error`; each kind is also
the built-in exception a Python program already catches for it, so
``except FileNotFoundError`` catches a ring that does not exist and
``except ValueError`` a malformed policy string. The message is numalab's
own, the same the ``numalab`` command prints.
"""


class Error(Exception):
    """Any error numalab raises."""


class InvalidArgument(Error, ValueError, TypeError):
    """An argument numalab cannot use: a negative size, a dtype of Python
    objects, an object without the buffer protocol, a block length past the
    block's end."""


class PolicyError(InvalidArgument):
    """A malformed memory-policy string (``"bind:x"``, ``"spread"``)."""


class NodeError(InvalidArgument):
    """A node that does not exist, is not allowed here (cpuset), or lacks
    what its role needs (memory for a policy, CPUs for a binding), or has
    too little free memory."""


class Unsupported(Error, OSError):
    """The running kernel lacks what was asked (weighted interleave before
    Linux 6.9, preferred-many before 5.15, a kernel without NUMA)."""


class NotMoved(Error):
    """Some pages could not be moved (in use or pinned)."""


class PermissionDenied(Error, PermissionError):
    """The operating system refused: another user's ring, a file that
    cannot be read."""


class NotFound(Error, FileNotFoundError):
    """A file that does not exist."""


class RingError(Error):
    """A ring error: a dead writer, a corrupt or foreign segment."""


class RingNotFound(RingError, FileNotFoundError):
    """No ring has that name."""


class RingExists(RingError, FileExistsError):
    """A ring with that name exists already (``numalab ring --cleanup
    NAME`` removes a stale one)."""


class Timeout(RingError, TimeoutError):
    """The other side did not come within the timeout."""


class Closed(Error, ValueError):
    """The ring, writer or reader was closed (as a closed file raises
    ``ValueError``)."""


class Released(Error, RuntimeError):
    """A block used after it was given back to the ring: its memory may
    hold another block's bytes now."""


class InvalidState(Error, RuntimeError):
    """A call that cannot be made now: a write while a claimed block waits
    for its commit, a handle another thread is using."""


__all__ = [
    "Error",
    "InvalidArgument",
    "PolicyError",
    "NodeError",
    "Unsupported",
    "NotMoved",
    "PermissionDenied",
    "NotFound",
    "RingError",
    "RingNotFound",
    "RingExists",
    "Timeout",
    "Closed",
    "Released",
    "InvalidState",
]
