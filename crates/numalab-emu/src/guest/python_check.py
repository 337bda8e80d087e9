"""The Python package in the guest (check python.place): arrays placed by
numalab.empty/zeros and moved by numalab.place, each read back from the
kernel's /proc/self/numa_maps (not from numalab), printed as one JSON line
for numalab-guest to compare with the preset.

On the host, `--list` prints what the guest needs to run this script: the
interpreter, the module search path and every file it imported (the
harness copies them into the initramfs at the same paths).
"""

import json
import mmap
import os
import sys

import numpy as np

import numalab

PAGE = os.sysconf("SC_PAGE_SIZE")
PAGES = 1024


def listing():
    files = {os.path.realpath(sys.executable)}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.isfile(path):
            files.add(os.path.realpath(path))
    # numalab's exceptions are imported by its native half when raised.
    import numalab._errors  # noqa: F401

    files.add(os.path.realpath(numalab._errors.__file__))
    print(json.dumps({
        "executable": os.path.realpath(sys.executable),
        "path": [p for p in sys.path if p and os.path.isdir(p)],
        "files": sorted(files),
    }))


def numa_maps(address):
    """The policy and pages per node of the mapping holding `address`."""
    best = None
    with open("/proc/self/numa_maps") as maps:
        for line in maps:
            start = int(line.split()[0], 16)
            if start <= address and (best is None or start > best[0]):
                best = (start, line)
    fields = best[1].split()
    nodes = {}
    for item in fields[2:]:
        key, _, value = item.partition("=")
        if key.startswith("N") and key[1:].isdigit():
            nodes[key[1:]] = int(value)
    return {"policy": fields[1], "nodes": nodes}


def huge_kib(address):
    """AnonHugePages of the mapping holding `address`, from smaps."""
    best, kib = None, 0
    with open("/proc/self/smaps") as smaps:
        current = None
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start = int(head.split("-")[0], 16)
                current = start if start <= address and (best is None or start > best) else None
                if current is not None:
                    best, kib = current, 0
            elif current is not None and head == "AnonHugePages:":
                kib = int(line.split()[1])
    return kib


def memory_nodes():
    with open("/sys/devices/system/node/has_memory") as f:
        text = f.read().strip()
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def check():
    out = {"python": sys.version.split()[0], "numpy": np.__version__, "numalab": numalab.__version__,
           "pages": PAGES, "empty": {}, "zeros": {}}
    # Each array is let go before the next is made: the kernel merges
    # neighbouring mappings of one policy, and numa_maps counts a mapping.
    for node in memory_nodes():
        a = numalab.empty(PAGES * PAGE, "u1", policy=f"bind:{node}")
        a.fill(1)  # the pages are made here, where bind puts them
        out["empty"][str(node)] = numa_maps(a.__array_interface__["data"][0])
        del a
        z = numalab.zeros(PAGES * PAGE, "u1", policy=f"bind:{node}")
        out["zeros"][str(node)] = numa_maps(z.__array_interface__["data"][0])
        del z
    # An array over memory of base pages, written where this thread runs,
    # then moved: each page to its node in the interleave.
    m = mmap.mmap(-1, PAGES * PAGE)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    c = np.frombuffer(m, dtype=np.uint8)
    c[:] = 1
    placed = numalab.place(c, "interleave:all")
    out["place"] = numa_maps(c.__array_interface__["data"][0])
    out["place"]["moved"] = placed.moved
    del c
    # An array of two transparent huge pages (where the kernel gives
    # them), moved: each huge page whole, to its own node.
    huge = int(open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read())
    m = mmap.mmap(-1, 3 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    whole = np.frombuffer(m, dtype=np.uint8)
    skip = -whole.__array_interface__["data"][0] % huge
    h = whole[skip:skip + PAGES * PAGE]
    h[:] = 1
    numalab.place(h, "interleave:all")
    out["place_huge"] = numa_maps(h.__array_interface__["data"][0])
    out["place_huge"]["huge_kib"] = huge_kib(h.__array_interface__["data"][0])
    del h, whole
    # NumPy's own array (malloc'd; transparent huge pages where the kernel
    # gives them, which move whole), moved.
    b = np.ones(PAGES * PAGE, dtype=np.uint8)
    numalab.place(b, "interleave:all")
    out["place_numpy"] = numa_maps(b.__array_interface__["data"][0] + PAGE)
    out["place_numpy"]["huge_kib"] = huge_kib(b.__array_interface__["data"][0] + PAGE)
    # What this kernel lacks is numalab.Unsupported (weighted interleave
    # before Linux 6.9), and what it has works.
    try:
        numalab.empty(PAGE, "u1", policy=f"weighted-interleave:{memory_nodes()[0]}=1")
        out["weighted"] = "made"
    except numalab.Error as err:
        out["weighted"] = type(err).__name__
    print(json.dumps(out))


if __name__ == "__main__":
    listing() if "--list" in sys.argv else check()
