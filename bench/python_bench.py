"""The Python package's speed against the same loops in Rust, measured in
one run (bash bench/python.sh runs it; arguments: the bindings_reference
bench binary, the numalab binary, then --quick (1 GiB per run, 3 rounds)
or nothing (4 GiB, 7 rounds), and --rounds N to change the rounds).

* ring: a reader that sums each block in place with NumPy
  (``block.view(np.uint64).sum()``) against the same loop in Rust on the
  same ring (bindings_reference ring-sum), readers on the last CPU, the
  writer on the first. Two writers:
  - ``numalab ring``'s Rust writer worker (``ring-worker --mode
    in-place``), which fills every block: the reader reads data another
    core just wrote, as a pipeline does. Target: Python >= 0.9x Rust from
    1 MiB to 64 MiB blocks.
  - a writer that commits blocks without writing them (bindings_reference
    ring-commit): the reader sums data already in its cache, so the
    figure is the reader's own cost per block, Python's overhead and
    NumPy's summing against Rust's loop, at its harshest.
* locate: ``numalab.locate`` of a 1 GiB array against the library's
  ``NodeBuffer::locate`` of 1 GiB, each located ``rounds`` times in one
  process. Target: Python time <= 1.1x Rust.

Each figure is the median of the rounds, which alternate which side goes
first. Prints one JSON line per figure and a table.
"""

import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

import numalab

reference = sys.argv[1]
numalab_bin = sys.argv[2]
quick = "--quick" in sys.argv[3:]
rounds = 3 if quick else 7
if "--rounds" in sys.argv:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
volume = (1 << 30) if quick else (4 << 30)
blocks_sizes = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
cpus = sorted(os.sched_getaffinity(0))
writer_cpu, reader_cpu = cpus[0], cpus[-1]


def pinned(cpu):
    return lambda: os.sched_setaffinity(0, {cpu})


def writer_command(kind, name):
    if kind == "filled":
        return [numalab_bin, "ring-worker", "--role", "writer", "--name", name, "--cpus", str(writer_cpu),
                "--mode", "in-place", "--timeout", "60", "--volume", str(volume), "--readers", "1"]
    return [reference, "ring-commit", name, str(volume)]


def one_run(kind, block_size, side, index):
    name = f"pybench-{os.getpid()}-{block_size}-{index}"
    with numalab.Ring.create(name, block_size=block_size, blocks=8) as ring:
        writer = subprocess.Popen(writer_command(kind, name), preexec_fn=pinned(writer_cpu),
                                  stdout=subprocess.DEVNULL)
        if side == "rust":
            out = subprocess.run([reference, "ring-sum", name], preexec_fn=pinned(reader_cpu),
                                 capture_output=True, text=True, check=True).stdout
            result = json.loads(out)
        else:
            result = {}

            def read():
                os.sched_setaffinity(0, {reader_cpu})
                reader = ring.reader(timeout=60)
                total, nbytes, first = np.uint64(0), 0, None
                for transfer in reader.transfers():
                    for block in reader:
                        if first is None:
                            first = time.perf_counter()
                        total += block.view(np.uint64).sum(dtype=np.uint64)
                        nbytes += block.nbytes
                result.update(bytes=nbytes, seconds=time.perf_counter() - first, sum=int(total))
                reader.close()

            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
        if writer.wait(timeout=120) != 0:
            raise SystemExit(f"the writer failed ({writer.returncode})")
    assert result["bytes"] == volume, result
    return result["bytes"] / result["seconds"] / 1e6  # MB/s


def ring_figures(kind):
    rows = []
    for block_size in blocks_sizes:
        mbs = {"python": [], "rust": []}
        for r in range(rounds):
            order = ["python", "rust"] if r % 2 == 0 else ["rust", "python"]
            for side in order:
                mbs[side].append(one_run(kind, block_size, side, f"{r}{side}"))
        py, rs = statistics.median(mbs["python"]), statistics.median(mbs["rust"])
        ratios = [p / q for p, q in zip(mbs["python"], mbs["rust"])]
        row = {"figure": f"ring reader, sum of each block, writer {kind}", "block_bytes": block_size,
               "python_mb_s": round(py), "rust_mb_s": round(rs), "ratio": round(statistics.median(ratios), 3),
               "ratio_least": round(min(ratios), 3), "ratio_most": round(max(ratios), 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


LOCATE_SIZE = 1 << 30


def locate_rounds():
    """In a fresh interpreter (`--locate N`): numalab.locate of a 1 GiB
    array N times, and the native call alone, as seconds."""
    from numalab import _native

    a = numalab.zeros(LOCATE_SIZE, np.uint8)
    address = a.__array_interface__["data"][0]
    whole, native = [], []
    for _ in range(int(sys.argv[sys.argv.index("--locate") + 1])):
        start = time.perf_counter()
        found = numalab.locate(a)
        whole.append(time.perf_counter() - start)
        assert found.present == LOCATE_SIZE // found.page_size
        start = time.perf_counter()
        _native.locate_range(address, LOCATE_SIZE)
        native.append(time.perf_counter() - start)
    print(json.dumps({"seconds": whole, "native": native}))


def locate_figure():
    # Each side in processes of its own, as a program would be, several
    # of them alternating: the kernel's time per page differs by up to a
    # fifth from one process to the next (seen on both sides alike).
    py_times, native, rs_times = [], [], []
    for r in range(2 * rounds):
        for side in (["python", "rust"] if r % 2 == 0 else ["rust", "python"]):
            if side == "python":
                out = subprocess.run([sys.executable, __file__, reference, numalab_bin, "--locate", "3"],
                                     capture_output=True, text=True, check=True).stdout
                py_times.extend(json.loads(out)["seconds"])
                native.extend(json.loads(out)["native"])
            else:
                out = subprocess.run([reference, "locate", str(LOCATE_SIZE), "3"],
                                     capture_output=True, text=True, check=True).stdout
                rs_times.extend(json.loads(out)["seconds"])
    py, rs = statistics.median(py_times), statistics.median(rs_times)
    row = {"figure": "locate 1 GiB", "python_s": round(py, 4), "rust_s": round(rs, 4), "ratio": round(py / rs, 3),
           "native_call_s": round(statistics.median(native), 4)}
    print(json.dumps(row), flush=True)
    return row


def main():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# {cpu}, {len(cpus)} CPUs; numpy {np.__version__}, Python {sys.version.split()[0]}; "
          f"volume {volume >> 20} MiB per run, {rounds} rounds", flush=True)
    filled = ring_figures("filled")
    hot = ring_figures("committing only")
    loc = locate_figure()
    print()
    print("| block | fed by numalab ring's writer: Python / Rust MB/s | ratio (least-most) | target >= 0.9 from 1 MiB "
          "| cache-hot (writer commits only): Python / Rust MB/s | ratio |")
    print("|---|---|---|---|---|---|")
    for row, h in zip(filled, hot):
        met = "" if row["block_bytes"] < (1 << 20) else ("met" if row["ratio"] >= 0.9 else "missed")
        print(f"| {row['block_bytes'] >> 10} KiB | {row['python_mb_s']} / {row['rust_mb_s']} | "
              f"{row['ratio']} ({row['ratio_least']}-{row['ratio_most']}) | {met} | "
              f"{h['python_mb_s']} / {h['rust_mb_s']} | {h['ratio']} |")
    print()
    print(f"locate 1 GiB: Python {loc['python_s']} s (of which the native call {loc['native_call_s']} s), "
          f"Rust {loc['rust_s']} s: {loc['ratio']}x the time, target <= 1.1: "
          f"{'met' if loc['ratio'] <= 1.1 else 'missed'}")


if "--locate" in sys.argv:
    locate_rounds()
else:
    main()
