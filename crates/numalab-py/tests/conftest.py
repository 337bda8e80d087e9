"""What the package's tests share: the kernel's own account of where pages
are (/proc/self/numa_maps, get_mempolicy through ctypes), the machine as
sysfs describes it, the `numalab` binary for the Rust side of the ring,
and unique ring names.

Every placement is checked against the kernel, never against numalab's
own report of it.
"""

import ctypes
import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_names = itertools.count()


def numa_maps_entry(address):
    """The /proc/self/numa_maps line of the mapping holding ``address``:
    (policy, {field: value}, {node: pages})."""
    best = None
    for line in Path("/proc/self/numa_maps").read_text().splitlines():
        start = int(line.split()[0], 16)
        if start <= address and (best is None or start > best[0]):
            best = (start, line)
    assert best is not None, f"no mapping at {address:#x}"
    fields = best[1].split()
    policy = fields[1]
    values, nodes = {}, {}
    for item in fields[2:]:
        if "=" not in item:
            continue
        key, value = item.split("=", 1)
        if key.startswith("N") and key[1:].isdigit():
            nodes[int(key[1:])] = int(value)
        else:
            values[key] = value
    return policy, values, nodes


def numa_maps_of_file(inode):
    """The numa_maps lines of a shared-memory file mapped here, by inode
    (a ring's segment is made unnamed, then linked)."""
    out = []
    for line in Path("/proc/self/numa_maps").read_text().splitlines():
        if f"file=/dev/shm/#{inode}" in line or f"/{inode} " in line:
            out.append(line)
    return out


MPOL_NAMES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local", 5: "preferred-many", 6: "weighted-interleave"}


def kernel_thread_policy():
    """The calling thread's policy from get_mempolicy(2) through ctypes:
    (mode name, nodes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    mode = ctypes.c_int(0)
    mask = (ctypes.c_ulong * 16)()
    SYS_get_mempolicy = 239  # x86-64
    if libc.syscall(SYS_get_mempolicy, ctypes.byref(mode), mask, 16 * 64, None, 0) != 0:
        raise OSError(ctypes.get_errno(), "get_mempolicy")
    nodes = [i for i in range(16 * 64) if mask[i // 64] >> (i % 64) & 1]
    return MPOL_NAMES.get(mode.value & 0xFF, str(mode.value)), nodes


def nodes_with_memory():
    """Nodes with memory, as sysfs lists them."""
    text = Path("/sys/devices/system/node/has_memory").read_text().strip()
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def kernel_list(nodes):
    """Nodes as the kernel writes a list in numa_maps: `0-1`, `0,2`."""
    nodes = sorted(nodes)
    parts, start = [], None
    for i, n in enumerate(nodes):
        if start is None:
            start = n
        if i + 1 == len(nodes) or nodes[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


@pytest.fixture
def ring_name(request):
    """A ring name no other test or run uses; removed after the test."""
    name = f"pytest-{os.getpid()}-{next(_names)}"
    yield name
    import numalab

    try:
        numalab.remove(name, force=True)
    except numalab.Error:
        pass


def _numalab_bin():
    given = os.environ.get("NUMALAB_BIN")
    if given:
        return given
    for candidate in (REPO / "target/release/numalab", REPO / "target/debug/numalab"):
        if candidate.is_file():
            return str(candidate)
    return shutil.which("numalab")


@pytest.fixture
def numalab_bin():
    """The numalab binary (its ring workers are the Rust side of the
    interoperation tests): $NUMALAB_BIN, the repository's build, or PATH.
    Missing, the test is skipped with the reason, and fails under CI=true."""
    path = _numalab_bin()
    if path is None:
        reason = "no numalab binary: set NUMALAB_BIN or build it (cargo build -p numalab-cli)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def run_worker(numalab_bin, role, name, volume, *, mode="copy", readers=1, timeout=60):
    """Starts one of `numalab ring`'s workers on ring ``name``, checking
    sequence words (--verify); returns the process."""
    return subprocess.Popen(
        [numalab_bin, "ring-worker", "--role", role, "--name", name, "--cpus", "0",
         "--mode", mode, "--timeout", str(timeout), "--volume", str(volume),
         "--readers", str(readers), "--verify"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
