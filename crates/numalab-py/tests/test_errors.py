"""Every way in from Python that numalab refuses ends in an exception of
numalab's, never a crash; each is also the built-in exception Python
programs catch for it."""

import gc
import mmap
import threading

import numpy as np
import pytest

import numalab
from conftest import nodes_with_memory


@pytest.mark.parametrize("policy", ["spread", "bind:x", "bind:", "preferred:0,1,", "local:0", "", "interleave:0-"])
def test_a_malformed_policy_is_a_policy_error(policy):
    with pytest.raises(numalab.PolicyError) as err:
        numalab.empty(16, policy=policy)
    assert isinstance(err.value, ValueError) and isinstance(err.value, numalab.Error)


def test_a_node_that_cannot_hold_memory_is_a_node_error():
    missing = max(nodes_with_memory()) + 100
    for call in (lambda: numalab.empty(16, policy=f"bind:{missing}"),
                 lambda: numalab.place(np.ones(1024), f"bind:{missing}"),
                 lambda: numalab.Ring.create("pytest-never", block_size=4096, blocks=2, policy=f"bind:{missing}")):
        with pytest.raises(numalab.NodeError) as err:
            call()
        assert f"node {missing}" in str(err.value)


def test_more_memory_than_the_node_has_is_refused_before_any_is_taken():
    with pytest.raises(numalab.NodeError) as err:
        numalab.empty(1 << 58, "u1", policy=f"bind:{nodes_with_memory()[0]}")
    assert "free" in str(err.value) or "memory" in str(err.value)


@pytest.mark.parametrize("shape", [-1, (3, -2), (2.5,), "ab", (None,)])
def test_a_bad_shape_is_an_invalid_argument(shape):
    with pytest.raises(numalab.InvalidArgument):
        numalab.empty(shape)


@pytest.mark.parametrize("dtype", [object, "not-a-dtype", [("a", object)]])
def test_a_dtype_without_data_is_refused(dtype):
    with pytest.raises(numalab.InvalidArgument) as err:
        numalab.zeros(4, dtype)
    assert isinstance(err.value, (TypeError, ValueError))


def test_an_object_without_memory_cannot_be_located():
    for obj in (42, "text", None, [1, 2, 3]):
        with pytest.raises(numalab.InvalidArgument) as err:
            numalab.locate(obj)
        assert isinstance(err.value, TypeError)


def test_a_closed_mmap_cannot_be_located():
    m = mmap.mmap(-1, 4096)
    m.close()
    with pytest.raises(numalab.InvalidArgument):
        numalab.locate(m)


def test_memory_being_located_cannot_be_freed_under_it():
    # The package holds the object for the call; dropping every other
    # reference in another thread (which frees nothing yet) and closing an
    # mmap while it is located (which Python refuses) crash nothing.
    done = []
    a = np.ones(32 << 20, dtype=np.uint8)
    t = threading.Thread(target=lambda: done.append(numalab.locate(a).present))
    t.start()
    del a
    gc.collect()
    t.join()
    assert done and done[0] > 0
    m = mmap.mmap(-1, 1 << 20)
    m.write(b"x" * (1 << 20))
    view = memoryview(m)
    with pytest.raises(BufferError):
        m.close()  # exported: Python keeps it open
    assert numalab.locate(view).present == 256
    view.release()
    m.close()


def test_ring_errors(ring_name):
    with pytest.raises(numalab.RingNotFound) as err:
        numalab.Ring.open(ring_name)
    assert isinstance(err.value, FileNotFoundError)
    ring = numalab.Ring.create(ring_name, block_size=4096, blocks=2)
    with pytest.raises(numalab.RingExists) as err:
        numalab.Ring.create(ring_name, block_size=4096, blocks=2)
    assert isinstance(err.value, FileExistsError) and "--cleanup" in str(err.value)
    for bad in (dict(block_size=100, blocks=2), dict(block_size=4096, blocks=1),
                dict(block_size=-4096, blocks=2), dict(size=4096, blocks=2, block_size=4096),
                dict(block_size=4096, blocks=2, backpressure="drop"), dict(block_size=4096, blocks=2, huge_pages="3M"),
                dict(block_size=4096, size=1 << 70)):
        with pytest.raises(numalab.InvalidArgument):
            numalab.Ring.create(ring_name + "-x", **bad)
    with pytest.raises(numalab.InvalidArgument):
        numalab.Ring.create("a/b", block_size=4096, blocks=2)

    writer = ring.writer(timeout=0.2)
    with pytest.raises(numalab.RingError):
        ring.writer()  # one writer at a time
    with pytest.raises(numalab.Timeout) as err:
        writer.wait_for_readers(1, timeout=0.1)
    assert isinstance(err.value, TimeoutError)
    with pytest.raises(numalab.InvalidArgument):
        writer.begin_transfer({"TWO WORDS": "x"})
    with pytest.raises(numalab.InvalidArgument):
        writer.set_timeout(-1)

    reader = ring.reader(timeout=0.1)
    with pytest.raises(numalab.Timeout):
        reader.next_block()  # nothing written yet
    block = writer.claim()
    with pytest.raises(numalab.InvalidState):
        writer.write(b"x")  # a claimed block waits for its commit
    with pytest.raises(numalab.InvalidState):
        writer.claim()
    with pytest.raises(numalab.InvalidArgument):
        block.commit(4097)
    block.commit(5)
    with pytest.raises(numalab.Released):
        block.commit(5)  # published once only
    with pytest.raises(numalab.Released):
        block.array
    read = reader.next_block()
    assert read.nbytes == 5
    with pytest.raises(numalab.InvalidArgument):
        writer._native.commit(read._native, 1, False)  # a read block
    writer.close()
    with pytest.raises(numalab.Closed):
        writer.write(b"x")
    reader.close()
    ring.close()
    with pytest.raises(numalab.Closed):
        ring.reader()
    with pytest.raises(numalab.Closed):
        ring.blocks


def test_a_block_outlives_its_ring_without_a_crash(ring_name):
    ring = numalab.Ring.create(ring_name, block_size=4096, blocks=2)
    reader = ring.reader(timeout=5)
    with ring.writer(timeout=5) as writer:
        writer.write(np.full(4096, 9, dtype=np.uint8))
    block = reader.next_block()
    array = block.array
    reader.close()
    ring.close()
    del ring, reader
    gc.collect()
    # The memory stays mapped while the array lives: reading it is safe.
    assert int(array[0]) == 9
    with pytest.raises(numalab.Released):
        block.array


def test_a_ring_this_user_may_not_open_is_permission_denied():
    # The segment is made by this process; the opener is a process that
    # may not read it: as root, one that has given up root for nobody
    # (after importing numalab, so it needs no access to this
    # environment); as anyone else, this user after the segment's mode
    # is taken away (root would ignore the mode).
    import os
    import subprocess
    import sys

    opener = (
        "import os, sys, numalab\n"
        "if os.geteuid() == 0:\n"
        "    os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        "    numalab.Ring.open(sys.argv[1])\n"
        "except numalab.PermissionDenied as err:\n"
        "    assert isinstance(err, PermissionError) and isinstance(err, numalab.Error)\n"
        "    print(err)\n"
        "    sys.exit(0)\n"
        "sys.exit('opened a ring it may not read')\n"
    )
    with numalab.Ring.create(f"pytest-denied-{os.getpid()}", block_size=4096, blocks=2) as ring:
        if os.geteuid() != 0:
            os.chmod(ring.path, 0)
        run = subprocess.run([sys.executable, "-c", opener, ring.name], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert ring.path in run.stdout, run.stdout
