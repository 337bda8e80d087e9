"""Placing and locating memory, checked against the kernel's own account
(/proc/self/numa_maps, get_mempolicy) and sysfs."""

import mmap
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import numalab
from conftest import kernel_list, kernel_thread_policy, numa_maps_entry, nodes_with_memory

PAGE = os.sysconf("SC_PAGE_SIZE")


def address(array):
    return array.__array_interface__["data"][0]


def test_empty_is_bound_before_its_first_touch_and_lands_there():
    node = nodes_with_memory()[-1]
    a = numalab.empty((256, 1024), "f8", policy=f"bind:{node}")
    assert a.shape == (256, 1024) and a.dtype == np.float64 and a.flags.c_contiguous
    policy, values, nodes = numa_maps_entry(address(a))
    assert policy == f"bind:{node}"
    assert "anon" not in values, "empty() must not touch its pages"
    a.fill(1.5)
    policy, values, nodes = numa_maps_entry(address(a))
    assert nodes == {node: a.nbytes // PAGE}
    assert a.sum() == 1.5 * a.size


def test_zeros_interleaves_over_every_node_with_memory():
    a = numalab.zeros(1 << 20, np.uint32, policy="interleave:all")
    expected = kernel_list(nodes_with_memory())
    policy, values, nodes = numa_maps_entry(address(a))
    assert policy == f"interleave:{expected}"
    # zeros() touched every page: the kernel counts them all.
    assert sum(nodes.values()) == a.nbytes // PAGE
    assert int(values["anon"]) == a.nbytes // PAGE
    assert not a.any()


def test_fortran_order_and_shapes():
    a = numalab.empty((3, 5, 7), "i2", policy="local", order="F")
    assert a.flags.f_contiguous and a.shape == (3, 5, 7)
    assert numalab.empty(0, "f4").size == 0
    assert numalab.zeros((2, 0)).shape == (2, 0)


def test_locate_counts_what_the_kernel_counts():
    a = numalab.zeros(3 << 20, "u1", policy="local")
    found = numalab.locate(a)
    _, _, nodes = numa_maps_entry(address(a))
    assert found.nodes == nodes
    assert found.pages == a.nbytes // PAGE and found.page_size == PAGE
    # Half the pages of an untouched array.
    b = numalab.empty(4 << 20, "u1")
    b[: 2 << 20] = 1
    half = numalab.locate(b)
    assert half.present == (2 << 20) // PAGE and half.not_present == (2 << 20) // PAGE


def test_locate_takes_every_object_with_the_buffer_protocol():
    block = bytearray(5 * PAGE)
    assert numalab.locate(block).present >= 5
    assert numalab.locate(memoryview(block)[PAGE:]).pages >= 4
    assert numalab.locate(bytes(3 * PAGE)).pages >= 3
    with mmap.mmap(-1, 8 * PAGE) as m:
        m[:] = b"x" * (8 * PAGE)
        found = numalab.locate(m)
        assert found.pages == 8 and found.present == 8
    a = np.ones((64, 1024))
    strided = a[::8, ::2]
    # A strided view spans from its lowest to its highest byte.
    assert numalab.locate(strided).pages >= (a.nbytes - 8 * 1024 * 7) // PAGE
    assert numalab.locate(a[::-1]).pages == numalab.locate(a).pages
    assert numalab.locate(np.empty(0)).pages == 0


def test_place_moves_pages_and_the_kernel_agrees():
    node = nodes_with_memory()[0]
    a = np.ones(4 << 20, dtype=np.uint8)  # malloc'd by NumPy, touched
    placed = numalab.place(a, f"bind:{node}")
    assert placed.after.on(node) == placed.after.present == numalab.locate(a).present
    start = address(a) // PAGE * PAGE
    policy, _, nodes = numa_maps_entry(start + PAGE)
    assert policy == f"bind:{node}"
    assert set(nodes) == {node}


def test_audit_checks_the_policy():
    node = nodes_with_memory()[0]
    a = numalab.zeros(1 << 20, "u1", policy=f"bind:{node}")
    check = numalab.audit(a, f"bind:{node}")
    assert check.match and check.verdict == "match" and check.on_expected == 1.0
    assert check.found.present == a.nbytes // PAGE
    untouched = numalab.empty(1 << 20, "u1")
    assert numalab.audit(untouched, "local").verdict == "empty"


def test_bind_sets_and_restores_the_threads_policy_and_cpus():
    node = nodes_with_memory()[0]
    cpus_before = os.sched_getaffinity(0)
    policy_before = kernel_thread_policy()
    with numalab.bind(f"bind:{node}", cpus="0"):
        assert kernel_thread_policy() == ("bind", [node])
        assert os.sched_getaffinity(0) == {0}
        assert numalab.thread_policy() == f"bind:{node}"
    assert kernel_thread_policy() == policy_before
    assert os.sched_getaffinity(0) == cpus_before

    with pytest.raises(KeyError):
        with numalab.bind("interleave:all"):
            assert kernel_thread_policy()[0] == "interleave"
            raise KeyError("the block failed")
    assert kernel_thread_policy() == policy_before

    @numalab.bind(f"preferred:{node}")
    def work():
        return kernel_thread_policy()

    assert work() == ("preferred", [node])
    assert kernel_thread_policy() == policy_before

    # Nested, and on another thread: each restores its own.
    with numalab.bind(f"bind:{node}"):
        with numalab.bind("interleave:all"):
            assert kernel_thread_policy()[0] == "interleave"
        assert kernel_thread_policy() == ("bind", [node])
    # A thread already running keeps its own policy (a thread started
    # inside the block inherits the block's, as Linux gives it).
    seen, go = [], threading.Event()
    t = threading.Thread(target=lambda: (go.wait(), seen.append(kernel_thread_policy())))
    t.start()
    with numalab.bind(f"bind:{node}"):
        go.set()
        t.join()
    assert seen == [policy_before]


def test_bind_refuses_before_changing_anything():
    before = (kernel_thread_policy(), os.sched_getaffinity(0))
    with pytest.raises(numalab.PolicyError):
        numalab.bind("bind:x")
    with pytest.raises(numalab.InvalidArgument):
        numalab.bind(cpus="0", nodes="0")
    with pytest.raises(numalab.NodeError):
        with numalab.bind(cpus="4096"):
            pass
    assert (kernel_thread_policy(), os.sched_getaffinity(0)) == before


def test_topology_matches_sysfs():
    topo = numalab.topology()
    assert topo["schema"] == "numalab.topo"
    node_dirs = sorted(int(p.name[4:]) for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert [n["id"] for n in topo["topology"]["nodes"]] == node_dirs
    distances = topo["topology"]["distances"]
    if distances is None:
        # hwloc gives no matrix for one node.
        assert len(node_dirs) == 1
    else:
        assert distances["nodes"] == node_dirs
        for row, node in zip(distances["values"], node_dirs):
            sysfs = [int(x) for x in Path(f"/sys/devices/system/node/node{node}/distance").read_text().split()]
            assert row == sysfs
    memory = {m["node"]: m for m in topo["memory_now"]}
    for node in node_dirs:
        meminfo = Path(f"/sys/devices/system/node/node{node}/meminfo").read_text()
        total_kb = int(next(l for l in meminfo.splitlines() if "MemTotal" in l).split()[-2])
        assert memory[node]["total_bytes"] == total_kb * 1024


def test_fincore_counts_what_util_linux_counts(tmp_path):
    import shutil
    import subprocess

    if shutil.which("fincore") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("util-linux's fincore is missing")
        pytest.skip("util-linux's fincore is missing")
    path = tmp_path / "data"
    path.write_bytes(os.urandom(3 << 20))
    path.read_bytes()
    report = numalab.fincore(path)
    theirs = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "PAGES", str(path)],
                            capture_output=True, text=True, check=True).stdout.split()
    assert report["total"]["cached"] == int(theirs[0])
    assert report["files"][0]["path"] == str(path)
    with pytest.raises(numalab.NotFound) as err:
        numalab.fincore(tmp_path / "missing")
    assert isinstance(err.value, FileNotFoundError)
    both = numalab.fincore(path, tmp_path / "missing", strict=False)
    assert [f["path"] for f in both["failed"]] == [str(tmp_path / "missing")]
    assert both["total"]["cached"] == int(theirs[0])


def test_the_readmes_python_example_runs_as_written(capsys):
    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example.strip().splitlines()) == 5
    exec(compile(example, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Pages(" in out and "interleave:" in out and "total_bytes" in out
