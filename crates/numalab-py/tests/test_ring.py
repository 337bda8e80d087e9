"""The ring from Python: blocks as arrays, transfers, and the same segment
read and written by `numalab ring`'s Rust workers both ways."""

import json
import os
import threading
import time

import numpy as np
import pytest

import numalab
from conftest import nodes_with_memory, numa_maps_of_file, run_worker

# A bound on how long a test may wait for the other side before it fails
# (never reached when things work: each wait ends on the other side's
# progress).
LIMIT = 60.0


def words(first, count):
    """The sequence words of `numalab ring --verify`: word i of the stream."""
    i = np.arange(first, first + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (i * np.uint64(0x9E3779B97F4A7C15)) ^ (i >> np.uint64(29))


def test_a_ring_is_placed_where_its_policy_says(ring_name):
    node = nodes_with_memory()[-1]
    with numalab.Ring.create(ring_name, block_size=64 << 10, blocks=8, policy=f"bind:{node}") as ring:
        assert (ring.blocks, ring.block_size, ring.policy) == (8, 64 << 10, f"bind:{node}")
        lines = numa_maps_of_file(os.stat(ring.path).st_ino)
        assert lines and all(f" bind:{node} " in line for line in lines), lines
        kernel_pages = sum(
            int(item.split("=")[1]) for line in lines for item in line.split()
            if item.startswith(f"N{node}=")
        )
        data_pages = (8 * (64 << 10)) // os.sysconf("SC_PAGE_SIZE")
        # The mapping holds the blocks and the ring's header and
        # descriptors; pages() counts the blocks.
        assert kernel_pages >= data_pages
        assert ring.pages() == {node: data_pages}
        path = ring.path
    assert not os.path.exists(path), "closing the ring its process made removes its name"


def test_python_writer_to_python_reader_in_place_and_by_copy(ring_name):
    ring = numalab.Ring.create(ring_name, block_size=4096, blocks=4)
    reader = ring.reader(timeout=LIMIT)
    got = []

    def read():
        for transfer in reader.transfers():
            blocks = [(b.seq, b.view(np.uint32).copy(), b.starts_transfer, b.ends_transfer) for b in reader]
            got.append((transfer, blocks))

    thread = threading.Thread(target=read)
    thread.start()
    with ring.writer(timeout=LIMIT) as writer:
        writer.begin_transfer({"SOURCE": "J0437-4715", "NCHAN": 1024})
        data = np.arange(3000, dtype=np.uint32)  # 12000 bytes: 3 blocks
        writer.write(data)
        writer.end_transfer()
        writer.begin_transfer({"SOURCE": "B1937+21"})
        with writer.claim() as block:
            block.view(np.uint32)[:] = 7
            block.commit(1024, last=True)
        assert block.released
    thread.join(LIMIT)
    assert not thread.is_alive()
    (t1, b1), (t2, b2) = got
    assert t1 == numalab.Transfer(1, {"SOURCE": "J0437-4715", "NCHAN": "1024"})
    assert np.array_equal(np.concatenate([b[1] for b in b1]), np.arange(3000, dtype=np.uint32))
    assert b1[0][2] and b1[-1][3]
    assert t2.header == {"SOURCE": "B1937+21"}
    assert len(b2) == 1 and np.array_equal(b2[0][1], np.full(256, 7, dtype=np.uint32))
    reader.close()
    ring.close()


def test_blocks_are_arrays_viewing_the_ring_and_refused_after_release(ring_name):
    with numalab.Ring.create(ring_name, block_size=4096, blocks=4) as ring:
        reader = ring.reader(timeout=LIMIT)
        writer = ring.writer(timeout=LIMIT)
        writer.write(np.full(4096, 3, dtype=np.uint8))
        writer.finish()
        block = reader.next_block()
        array = block.array
        assert array.dtype == np.uint8 and array.shape == (4096,) and not array.flags.writeable
        assert np.asarray(block).base is not None  # a view, not a copy
        assert array.sum() == 3 * 4096
        block.release()
        with pytest.raises(numalab.Released):
            block.array
        with pytest.raises(RuntimeError):
            block.view(np.uint16)
        block.release()  # twice changes nothing
        # The transfer's end came in a block of its own (the writer had
        # filled the last one), then the end of the stream.
        end = reader.next_block()
        assert (end.nbytes, end.ends_transfer) == (0, True)
        assert reader.next_block() is None
        reader.close()
        with pytest.raises(numalab.Closed):
            reader.next_block()


def test_the_gil_is_released_while_a_reader_waits(ring_name):
    # The reader waits (no timeout of its own) for data only this thread
    # writes: with the GIL held while waiting, this thread could not run
    # and the join below would give up.
    ring = numalab.Ring.create(ring_name, block_size=4096, blocks=2)
    reader = ring.reader()
    sums = []
    thread = threading.Thread(target=lambda: sums.extend(int(b.array.sum()) for b in reader))
    thread.start()
    writer = ring.writer(timeout=LIMIT)
    writer.wait_for_readers(1, timeout=LIMIT)
    writer.write(np.ones(8192, dtype=np.uint8))
    writer.end_transfer()
    thread.join(LIMIT)
    assert not thread.is_alive() and sums == [4096, 4096]
    writer.close()
    reader.close()
    ring.close()


def test_a_python_reader_reads_what_the_rust_writer_writes(ring_name, numalab_bin):
    volume = 10 * 65536 + 4096
    with numalab.Ring.create(ring_name, block_size=65536, blocks=4) as ring:
        reader = ring.reader(timeout=LIMIT)
        worker = run_worker(numalab_bin, "writer", ring_name, volume)
        offset = 0
        for block in reader:
            w = block.view(np.uint64)
            assert np.array_equal(w, words(offset // 8, len(w))), f"block {block.seq}"
            offset += block.nbytes
        out, err = worker.communicate(timeout=LIMIT)
        assert worker.returncode == 0, err
        assert offset == volume
        assert json.loads(out)["bytes"] == volume
        reader.close()


@pytest.mark.parametrize("in_place", [False, True])
def test_the_rust_reader_reads_what_a_python_writer_writes(ring_name, numalab_bin, in_place):
    volume = 6 * 65536
    with numalab.Ring.create(ring_name, block_size=65536, blocks=4) as ring:
        worker = run_worker(numalab_bin, "reader", ring_name, volume)
        with ring.writer(timeout=LIMIT) as writer:
            writer.wait_for_readers(1, timeout=LIMIT)
            for first in range(0, volume // 8, 65536 // 8):
                data = words(first, 65536 // 8)
                if in_place:
                    with writer.claim() as block:
                        block.view(np.uint64)[:] = data
                        block.commit()
                else:
                    writer.write(data)
        out, err = worker.communicate(timeout=LIMIT)
        assert worker.returncode == 0, err
        assert json.loads(out)["bytes"] == volume


def test_a_corrupted_word_is_caught_by_the_rust_reader(ring_name, numalab_bin):
    with numalab.Ring.create(ring_name, block_size=65536, blocks=4) as ring:
        worker = run_worker(numalab_bin, "reader", ring_name, 65536)
        with ring.writer(timeout=LIMIT) as writer:
            writer.wait_for_readers(1, timeout=LIMIT)
            data = words(0, 65536 // 8)
            data[5] ^= np.uint64(1)
            writer.write(data)
        out, err = worker.communicate(timeout=LIMIT)
        assert worker.returncode != 0 and "byte 40 of the stream is wrong" in err, err


def test_ctrl_c_ends_a_wait_without_a_limit(ring_name, tmp_path):
    import signal
    import subprocess
    import sys

    script = tmp_path / "wait.py"
    # A background job of a script starts with SIGINT ignored, and Python
    # then leaves it so: the child asks for Python's own handler.
    script.write_text(
        "import signal, sys, numalab\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"ring = numalab.Ring.create({ring_name!r}, block_size=4096, blocks=2)\n"
        "reader = ring.reader()\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    reader.next_block()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n"
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "waiting"
    # Signal it once it sleeps in the wait (LIMIT only bounds a failure).
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "S":
                break
        time.sleep(0.001)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=LIMIT)
    assert (child.returncode, out.strip()) == (3, "interrupted")


def test_a_handle_in_use_by_another_thread_is_refused_not_deadlocked(ring_name):
    with numalab.Ring.create(ring_name, block_size=4096, blocks=2) as ring:
        reader = ring.reader()
        waiting = threading.Thread(target=lambda: list(reader))
        waiting.start()
        # Once the other thread is in its wait it holds the handle until
        # data comes: ask until it is refused (LIMIT only bounds a failure).
        writer = ring.writer(timeout=LIMIT)
        refused, deadline = None, time.monotonic() + LIMIT
        while refused is None and time.monotonic() < deadline:
            try:
                reader.set_timeout(None)
            except numalab.InvalidState as err:
                refused = err
            time.sleep(0.001)
        assert refused is not None and "another thread" in str(refused)
        writer.write(np.ones(4096, dtype=np.uint8))
        writer.finish()
        waiting.join(LIMIT)
        assert not waiting.is_alive()
        reader.close()
