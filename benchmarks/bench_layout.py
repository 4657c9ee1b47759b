"""Time every kernel of the package in two source trees, interleaved: did a reorganisation slow one down?

For every recurrence kind (classic GRU and LSTM layers, minGRU, Mamba, Mamba-2, the gated delta
rule, KDA, mLSTM, RWKV-4, the RG-LRU, lightning attention, the short convolution) one block of a
fixed size runs its forward pass and its forward + exact backward pass on one random batch. With
``--compare OLD_SRC NEW_SRC`` each round runs one child process per tree (``PYTHONPATH`` set to
that tree's ``src``), alternating which goes first, and the table gives the median time per tree
and the ratio ``new / old`` (above 1: the new tree is slower). Without it, this process's
``hiddenstate`` is timed once.

The blocks are found by their public names, tried at the module paths of both layouts (0.2 and 0.3),
so one script measures either tree. One BLAS thread; float32.

Usage::

    python benchmarks/bench_layout.py --compare OLD/src NEW/src [--rounds 5] [--T 256]
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import importlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

# name -> (module paths to try, new layout first; constructor keywords); every block takes (T, N, d) input
BLOCKS = {
    "GRU": (["hiddenstate"], {}),
    "LSTM": (["hiddenstate"], {}),
    "MinGRU": (["hiddenstate"], {}),
    "Mamba": (["hiddenstate"], {"d_state": 16}),
    "Mamba2": (["hiddenstate"], {"d_state": 32, "head_dim": 16}),
    "GatedDeltaNet": (["hiddenstate.kinds.delta.block", "hiddenstate.gated_delta"], {"head_k_dim": 16}),
    "KimiDeltaAttention": (["hiddenstate.kinds.delta.block", "hiddenstate.gated_delta"], {"head_dim": 16}),
    "MLSTMLayer": (["hiddenstate.kinds.mlstm.block", "hiddenstate.mlstm"], {"num_heads": 4}),
    "RWKVTimeMix": (["hiddenstate.kinds.rwkv.block", "hiddenstate.rwkv"], {}),
    "RGLRUBlock": (["hiddenstate.kinds.rglru.block", "hiddenstate.rglru"], {}),
    "LightningAttention": (["hiddenstate.kinds.lightning.block", "hiddenstate.lightning"], {"num_heads": 4}),
    "ShortConv": (["hiddenstate.kinds.shortconv.block", "hiddenstate.shortconv"], {}),
}
CLASSIC = ("GRU", "LSTM", "MinGRU")


def find(name: str):
    paths, _ = BLOCKS[name]
    for path in paths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                module = importlib.import_module(path)
        except ImportError:
            continue
        if hasattr(module, name):
            return getattr(module, name)
    raise ImportError(f"{name} not found at {paths}")


def build(name: str, d: int):
    cls = find(name)
    rng = np.random.default_rng(0)
    if name in CLASSIC:
        return cls(d, d, dtype=np.float32, rng=rng)
    return cls(d, **BLOCKS[name][1], dtype=np.float32, rng=rng)


def time_block(name: str, T: int, N: int, d: int, repeats: int) -> dict:
    block = build(name, d)
    x = np.random.default_rng(1).standard_normal((T, N, d)).astype(np.float32)
    out = block.forward(x)
    y = out[0]
    g = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    times = {}
    for what in ("fwd", "fwd+bwd"):
        best = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = block.forward(x)
            if what == "fwd+bwd":
                block.backward(res[2] if name not in CLASSIC else res[-1], g)
            best.append(time.perf_counter() - t0)
        times[what] = min(best)
    return times


def run_here(T: int, N: int, d: int, repeats: int) -> dict:
    return {name: time_block(name, T, N, d, repeats) for name in BLOCKS}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--compare", nargs=2, metavar=("OLD_SRC", "NEW_SRC"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--N", type=int, default=4)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement in a child (its minimum is kept)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child or not a.compare:
        result = run_here(a.T, a.N, a.d, a.repeats)
        if a.child:
            import hiddenstate

            print(json.dumps({"source": hiddenstate.__file__, "times": result}))
        else:
            print("\n".join(f"{k}: {v}" for k, v in result.items()))
        return
    trees = {"old": a.compare[0], "new": a.compare[1]}
    samples = {t: [] for t in trees}
    load_before = os.getloadavg()[0]
    for r in range(a.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for tree in order:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(trees[tree])}
            out = subprocess.run([sys.executable, __file__, "--child", "--T", str(a.T), "--N", str(a.N),
                                  "--d", str(a.d), "--repeats", str(a.repeats)], env=env, capture_output=True,
                                 text=True, check=True)
            child = json.loads(out.stdout.splitlines()[-1])
            if not os.path.abspath(child["source"]).startswith(os.path.abspath(trees[tree])):
                raise SystemExit(f"the {tree} tree's child imported {child['source']}, not {trees[tree]}")
            samples[tree].append(child["times"])
    print(f"T={a.T}, N={a.N}, d={a.d}, float32, one thread; {a.rounds} interleaved rounds; load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("| block | pass | old (ms) | new (ms) | new / old |\n|---|---|---|---|---|")
    for name in BLOCKS:
        for what in ("fwd", "fwd+bwd"):
            med = {t: 1e3 * statistics.median(s[name][what] for s in samples[t]) for t in trees}
            print(f"| {name} | {what} | {med['old']:.2f} | {med['new']:.2f} | {med['new'] / med['old']:.3f} |")


if __name__ == "__main__":
    main()
