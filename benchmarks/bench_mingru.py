"""Time minGRU (parallel scan and per-step loop) against our GRU and torch.nn.GRU, forward + backward.

What is measured, per sequence length T (N = 32, I = H = 256 by default, one layer, float32
unless ``--dtype float64``): one ``forward`` and one ``backward`` with the same upstream
gradient ``g`` on the output, so that every implementation produces the gradients of all its
parameters and of the input:

* ``minGRU scan``: :class:`hiddenstate.MinGRU` with ``scan="parallel"`` (the chunked
  Brent-Kung scan, no Python loop over the steps of a chunk);
* ``minGRU loop``: the same layer with ``scan="sequential"`` (the per-step loop);
* ``minGRU log``: ``log_space=True``, parallel scan in log space (the paper's form);
* ``GRU``: :class:`hiddenstate.GRU` with ``reset_after=True`` (torch's equations);
* ``torch GRU``: ``torch.nn.GRU`` with autograd, ``(output * g).sum().backward()``.

Method (the project's performance notes): all implementations run in one process, interleaved
within each round in a shuffled order, after a warm-up; medians over rounds; ratios are
``median(row) / median(torch GRU)`` and ``median(row) / median(minGRU scan)``. One BLAS thread.
``--clock cpu`` (process CPU time) ignores the time spent waiting for a CPU on a loaded machine.

Usage::

    python benchmarks/bench_mingru.py [--lengths 128 512 2048] [--batch 32] [--hidden 256]
        [--rounds 7] [--clock {wall,cpu}] [--dtype {float32,float64}] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

import hiddenstate as hs  # noqa: E402

ROWS = ("minGRU scan", "minGRU loop", "minGRU log", "GRU", "torch GRU")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048], help="sequence lengths T")
    p.add_argument("--batch", type=int, default=32, help="N (default 32)")
    p.add_argument("--hidden", type=int, default=256, help="I = H (default 256)")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per length (default 7)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="time.perf_counter or time.process_time")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="T = 16, 64; N = 4; H = 32; 2 rounds (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.batch, args.hidden, args.rounds = [16, 64], 4, 32, 2
    return args


def implementations(T, N, H, dtype, rng):
    """name -> a callable doing one forward + backward; checks that ours agree with torch first."""
    import torch

    torch.set_num_threads(1)
    x = rng.standard_normal((T, N, H)).astype(dtype)
    g = rng.standard_normal((T, N, H)).astype(dtype)
    scan = hs.MinGRU(H, H, rng=np.random.default_rng(1), dtype=dtype)
    loop = hs.MinGRU(H, H, scan="sequential", rng=np.random.default_rng(1), dtype=dtype)
    log = hs.MinGRU(H, H, log_space=True, rng=np.random.default_rng(1), dtype=dtype)
    gru = hs.GRU(H, H, reset_after=True, rng=np.random.default_rng(2), dtype=dtype)
    module = torch.nn.GRU(H, H, dtype=getattr(torch, dtype.__name__))
    with torch.no_grad():
        for k, v in module.named_parameters():
            v.copy_(torch.from_numpy(gru.params[k]))
    tx, tg = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(g)

    def ours(layer):
        def run():
            out, _, cache = layer.forward(x)
            return out, layer.backward(cache, g)
        return run

    def torch_run():
        tx.grad = None
        module.zero_grad()
        out, _ = module(tx)
        (out * tg).sum().backward()
        return out

    fns = {"minGRU scan": ours(scan), "minGRU loop": ours(loop), "minGRU log": ours(log), "GRU": ours(gru),
           "torch GRU": torch_run}
    tol = 1e-3 if dtype == np.float32 else 1e-9
    (o_s, (_, dx_s, _)), (o_l, (_, dx_l, _)) = fns["minGRU scan"](), fns["minGRU loop"]()
    assert np.allclose(o_s, o_l, atol=tol) and np.allclose(dx_s, dx_l, atol=tol), "scan and loop disagree"
    o_g, _ = fns["GRU"]()
    assert np.allclose(o_g, torch_run().detach().numpy(), atol=tol), "our GRU and torch disagree"
    return fns


def main(argv=None) -> int:
    args = parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    dtype = np.dtype(args.dtype).type
    rng = np.random.default_rng(args.seed)
    N, H = args.batch, args.hidden
    print(f"forward + backward, N={N}, I=H={H}, {args.dtype}, one thread, {args.rounds} rounds, "
          f"clock={args.clock}, numpy {np.__version__}")
    header = "| T | " + " | ".join(f"{r} ms" for r in ROWS) + " | torch GRU / minGRU scan | minGRU loop / scan | GRU / minGRU scan |"
    print(header)
    print("|" + "---|" * (len(ROWS) + 4))
    from tqdm.auto import tqdm

    for T in args.lengths:
        fns = implementations(T, N, H, dtype, rng)
        times = {name: [] for name in fns}
        order = list(fns)
        # a bar of the rounds on stderr, on a terminal only (disable=None); erased when done
        for _ in tqdm(range(args.rounds), desc=f"T={T}", unit="round", leave=False, file=sys.stderr, disable=None):
            rng.shuffle(order)
            for name in order:
                t0 = clock()
                fns[name]()
                times[name].append(clock() - t0)
        med = {name: 1e3 * float(np.median(v)) for name, v in times.items()}
        s = med["minGRU scan"]
        print(f"| {T} | " + " | ".join(f"{med[r]:.1f}" for r in ROWS)
              + f" | {med['torch GRU'] / s:.1f} | {med['minGRU loop'] / s:.2f} | {med['GRU'] / s:.1f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback
        print("bench_mingru.py: interrupted", file=sys.stderr)
        sys.exit(130)
