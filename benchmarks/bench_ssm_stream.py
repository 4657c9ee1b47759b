"""Time the streamed runs of Mamba and Mamba-2 (:mod:`hiddenstate.kinds.ssm.stream`) and trace their peak memory.

One random :class:`hiddenstate.Mamba` (d_model 256: Di = 512, S = 16) and one
:class:`hiddenstate.Mamba2` (d_model 256, expand 2, head_dim 64, d_state 64: 8 heads) over one
sequence (N = 1) per length T, each row the best of ``--rounds``:

* ``stream, 1 step``: ``kind.streamer()`` with a sink keeping the last step, float32 and float64;
* ``stream, all``: the same keeping every step (the sink's copies included);
* ``forward(record=True)``: the block's own float64 run that records every step;
* ``peak``: the memory :mod:`tracemalloc` traces during the float32 stream keeping one step, and
  during ``forward(record=True)``.

One thread. Usage::

    python benchmarks/bench_ssm_stream.py [--lengths 256 1024 4096] [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096], help="sequence lengths T")
    p.add_argument("--rounds", type=int, default=5, help="timed runs per row (the best is shown)")
    p.add_argument("--quick", action="store_true", help="a smoke run: T = 64, one round")
    return p.parse_args(argv)


def best(f, rounds):
    """The shortest of ``rounds`` runs of ``f()``, in ms."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def peak(f):
    """The peak of the memory traced while ``f()`` runs, in MiB."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        f()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def row(stream, block, T, rounds, rng):
    """One row's cells: the four streams' times, the recording forward's time, the two peaks."""
    from hiddenstate.kinds.stream import StateSink

    cells = []
    for dtype in (np.float32, np.float64):
        u = rng.standard_normal((1, T, block.d_model)).astype(dtype)
        for keep in (slice(T - 1, T), slice(None)):
            cells.append(f"{best(lambda: stream(block, u, StateSink(T, 1, keep, dtype)), rounds):.0f}")  # noqa: B023
    u64 = rng.standard_normal((1, T, block.d_model))
    cells.append(f"{best(lambda: block.forward(u64, record=True), rounds):.0f}")
    u32 = u64.astype(np.float32)
    cells.append(f"{peak(lambda: stream(block, u32, StateSink(T, 1, slice(T - 1, T), np.float32))):.1f}")
    cells.append(f"{peak(lambda: block.forward(u64, record=True)):.0f}")
    return cells


def main(argv=None):
    from hiddenstate import Mamba, Mamba2
    from hiddenstate.kinds import kind_of_block

    args = parse_args(argv)
    lengths, rounds = ([64], 1) if args.quick else (args.lengths, args.rounds)
    rng = np.random.default_rng(0)
    blocks = {"Mamba (Di 512, S 16)": Mamba(256, batch_first=True, rng=rng),
              "Mamba-2 (8 heads, P 64, S 64)": Mamba2(256, head_dim=64, d_state=64, batch_first=True, rng=rng)}
    print(f"load {os.getloadavg()[0]:.2f}, one thread, N = 1, the best of {rounds}; times in ms, memory in MiB\n")
    print("| block | T | stream f32, 1 step | f32, all | f64, 1 step | f64, all | forward(record=True) f64 "
          "| peak stream f32 | peak forward |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, block in blocks.items():
        stream = kind_of_block(block).streamer()
        for T in lengths:
            print(f"| {name} | {T} | " + " | ".join(row(stream, block, T, rounds, rng)) + " |")


if __name__ == "__main__":
    main()
