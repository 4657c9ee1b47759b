"""Time the delta-rule kinds' streamed run (``Kind.stream``) on one layer, and trace its memory against T.

The layer: the gated DeltaNet layer of the TransformerLens bench's Qwen3-Next model
(``bench_transformerlens.build("qwen3_next", 256, 4)``: hidden 256, 2 key heads, 4 value heads
of 64 channels, conv kernel 4; converted by its family's ``convert``), or with ``--kind kda`` a
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` of the same width (4 heads of 64,
random weights). Input N = 1, float32 unless ``--dtype float64``; one thread. Rows:

* ``stream, no sink``: the output alone;
* ``stream, every step``: a :class:`~hiddenstate.kinds.stream.StateSink` keeping every step's
  states (the sink's copies included: T Hv Dk Dv numbers);
* ``stream, last step`` / ``stride 16`` / ``1 head``: sinks keeping the last step, every 16th,
  one value head of every step;
* ``forward`` / ``forward(record=True)``: the block's own call in float64 (what the stream replaces).

Medians over interleaved rounds. Then the traced peak (``tracemalloc``: NumPy's allocations) of
the stream with a sink keeping the last step, against T, beside what every step's states take.

Usage::

    python benchmarks/bench_delta_stream.py [--kind {gated_delta,kda}] [--T 1024] [--rounds 7]
        [--dtype {float32,float64}] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402


def layer(kind):
    """The benchmarked block (float64 parameters, batch_first)."""
    if kind == "kda":
        from hiddenstate.kinds.delta.block import KimiDeltaAttention

        return KimiDeltaAttention(256, num_heads=4, head_dim=64, batch_first=True, rng=np.random.default_rng(0))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_transformerlens import build
    from hiddenstate.interop.families.registry import family_of

    model = build("qwen3_next", 256, 4)
    fam = family_of(model)
    mixers = fam.mixers(model)
    return fam.convert(mixers[next(iter(mixers))], model.config)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("gated_delta", "kda"), default="gated_delta")
    parser.add_argument("--T", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--quick", action="store_true", help="T = 128, 2 rounds, two lengths traced")
    args = parser.parse_args(argv)
    T, rounds = (128, 2) if args.quick else (args.T, args.rounds)
    from hiddenstate.kinds import get_kind
    from hiddenstate.kinds.stream import StateSink

    blk = layer(args.kind)
    stream = get_kind(args.kind).streamer()
    dtype = np.dtype(args.dtype)
    u = np.random.default_rng(0).standard_normal((1, T, blk.d_model)).astype(dtype)
    u64 = u.astype(np.float64)
    err = np.abs(stream(blk, u) - blk.forward(u64)[0]).max() / np.abs(blk.forward(u64)[0]).max()

    def sink(keep, heads=None):
        return StateSink(T, 1, keep, dtype, heads=heads)

    runs = {"stream, no sink": lambda: stream(blk, u),
            "stream, every step": lambda: stream(blk, u, sink(slice(None))),
            "stream, last step": lambda: stream(blk, u, sink(slice(T - 1, T))),
            "stream, stride 16": lambda: stream(blk, u, sink(slice(None, None, 16))),
            "stream, 1 head, every step": lambda: stream(blk, u, sink(slice(None), {"recurrent": np.array([1])})),
            "forward (float64)": lambda: blk.forward(u64),
            "forward(record=True) (float64)": lambda: blk.forward(u64, record=True)}
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    print(f"{blk!r}: N=1, T={T}, {dtype}, one thread, median of {rounds} rounds (load "
          f"{os.getloadavg()[0]:.2f}); stream vs forward max rel. error {err:.1e}\n")
    print("| run | seconds |\n|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {np.median(ts):.4f} |")
    s = blk.spec
    print("\n| T | traced peak, sink of the last step (MiB) | output (MiB) | every step's states (MiB) |\n|---|---|---|---|")
    for n in ((128, 512) if args.quick else (256, 1024, 4096, 16384)):
        x = np.random.default_rng(1).standard_normal((1, n, blk.d_model)).astype(dtype)
        tracemalloc.start()
        stream(blk, x, StateSink(n, 1, slice(n - 1, n), dtype))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        every = n * s.Hv * s.Dk * s.Dv * dtype.itemsize
        print(f"| {n} | {peak / 2 ** 20:.1f} | {x.nbytes / 2 ** 20:.1f} | {every / 2 ** 20:.0f} |")


if __name__ == "__main__":
    main()
