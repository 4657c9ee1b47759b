"""Time our mLSTM and RWKV-4 layers against transformers' CPU path of the same layer, side by side in one run.

For each kind, one small random layer of transformers (no download) and ours with the same
weights, per sequence length T:

* ``mlstm``: transformers' ``xLSTMLayer`` (its native torch kernels: the chunkwise form for the
  multiple of ``chunk_size`` = 64 steps, the recurrent step for the rest) against
  :class:`hiddenstate.kinds.mlstm.block.MLSTMLayer` with ``scan="chunkwise"`` and ``scan="parallel"``;
* ``rwkv``: transformers' ``RwkvSelfAttention`` (``rwkv_linear_attention_cpu``, its per-step loop,
  the CPU path whenever the CUDA kernel is not loaded) against :class:`hiddenstate.kinds.rwkv.block.RWKVTimeMix`.

Modes: ``fwd`` (transformers under ``torch.no_grad()``), ``fwd+bwd`` (the gradient of
``(out * g).sum()`` for every parameter and the input: autograd against our exact backward).
float32 unless ``--dtype float64``; the outputs are checked to agree first. Rounds are
interleaved in a shuffled order after a warm-up; medians; the ratio is ``transformers / ours``.
One thread.

Usage::

    python benchmarks/bench_mlstm_rwkv.py [--lengths 64 1024] [--batch 4] [--hidden 64] [--heads 4]
        [--rounds 5] [--dtype {float32,float64}] [--kinds mlstm rwkv] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

KINDS = ("mlstm", "rwkv")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 1024], help="sequence lengths T")
    p.add_argument("--batch", type=int, default=4, help="N (default 4)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size M (default 64)")
    p.add_argument("--heads", type=int, default=4, help="mLSTM heads (default 4)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per length (default 5)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--quick", action="store_true", help="T = 32; N = 2; M = 16; 2 rounds (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.batch, args.hidden, args.heads, args.rounds = [32], 2, 16, 2, 2
    return args


def _timers(hf_layer, hf_call, ours, u, g):
    """mode -> name -> callable for one transformers layer and our layers (time-major u and g)."""
    import torch

    tu = torch.from_numpy(np.ascontiguousarray(u.transpose(1, 0, 2)))
    tg = torch.from_numpy(np.ascontiguousarray(g.transpose(1, 0, 2)))

    def hf_fwd():
        with torch.no_grad():
            return hf_call(tu)

    def hf_bwd():
        hf_layer.zero_grad()
        x = tu.clone().requires_grad_(True)
        (hf_call(x) * tg).sum().backward()

    def fwd(lay):
        return lambda: lay.forward(u)[0]

    def bwd(lay):
        def run():
            out, _, cache = lay.forward(u)
            return lay.backward(cache, g)
        return run

    ref = hf_fwd().double().numpy().transpose(1, 0, 2)
    for name, lay in ours.items():
        got = lay.forward(u)[0]
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err < (1e-4 if u.dtype == np.float32 else 1e-9), f"{name}: outputs disagree: {err:.2e}"
    return {"fwd": {"transformers": hf_fwd, **{n: fwd(lay) for n, lay in ours.items()}},
            "fwd+bwd": {"transformers": hf_bwd, **{n: bwd(lay) for n, lay in ours.items()}}}


def mlstm_timers(args, T):
    import torch
    from transformers import xLSTMConfig
    from transformers.models.xlstm.modeling_xlstm import xLSTMLayer

    from hiddenstate.kinds.mlstm.block import MLSTMLayer

    rng = np.random.default_rng(0)
    ours = {f"ours {s}": MLSTMLayer(args.hidden, args.heads, scan=s, dtype=args.dtype, rng=np.random.default_rng(0))
            for s in ("chunkwise", "parallel")}
    first = next(iter(ours.values()))
    for v in first.params.values():  # off the structured initial values (zero gate weights)
        v += (0.1 * rng.standard_normal(v.shape)).astype(v.dtype)
    for lay in ours.values():
        lay.load_state_dict(first.params)
    cfg = xLSTMConfig(hidden_size=args.hidden, num_heads=args.heads, num_hidden_layers=1, vocab_size=11,
                      chunk_size=64)
    hf = xLSTMLayer(cfg).to(getattr(torch, args.dtype))
    hf.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in first.params.items()})
    u = rng.standard_normal((T, args.batch, args.hidden)).astype(args.dtype)
    g = rng.standard_normal(u.shape).astype(args.dtype)
    return "xLSTMLayer", _timers(hf, lambda x: hf(x)[0], ours, u, g)


def rwkv_timers(args, T):
    import torch
    from transformers import RwkvConfig
    from transformers.models.rwkv.modeling_rwkv import RwkvSelfAttention

    from hiddenstate.kinds.rwkv.block import RWKVTimeMix

    rng = np.random.default_rng(0)
    ours = {"ours": RWKVTimeMix(args.hidden, dtype=args.dtype, rng=np.random.default_rng(0))}
    lay = ours["ours"]
    for v in lay.params.values():
        v += (0.1 * rng.standard_normal(v.shape)).astype(v.dtype)
    cfg = RwkvConfig(hidden_size=args.hidden, attention_hidden_size=args.hidden, num_hidden_layers=1, vocab_size=11)
    hf = RwkvSelfAttention(cfg, 0).to(getattr(torch, args.dtype))
    hf.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in lay.params.items()})
    u = rng.standard_normal((T, args.batch, args.hidden)).astype(args.dtype)
    g = rng.standard_normal(u.shape).astype(args.dtype)
    return "RwkvSelfAttention", _timers(hf, lambda x: hf(x)[0], ours, u, g)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import transformers

    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"M={args.hidden} mLSTM heads={args.heads} N={args.batch}, {args.dtype}, one thread, {args.rounds} rounds, "
          f"numpy {np.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
    print("| kind | T | mode | transformers ms | ours ms | transformers / ours |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for kind in args.kinds:
        for T in args.lengths:
            label, modes = (mlstm_timers if kind == "mlstm" else rwkv_timers)(args, T)
            for mode, fns in modes.items():
                for f in fns.values():  # warm-up
                    f()
                times = {name: [] for name in fns}
                order = list(fns)
                for _ in range(args.rounds):
                    rng.shuffle(order)
                    for name in order:
                        t0 = time.perf_counter()
                        fns[name]()
                        times[name].append(time.perf_counter() - t0)
                med = {name: 1e3 * float(np.median(v)) for name, v in times.items()}
                for name in fns:
                    if name != "transformers":
                        print(f"| {kind} ({label} vs {name}) | {T} | {mode} | {med['transformers']:.1f} | "
                              f"{med[name]:.1f} | {med['transformers'] / med[name]:.2f} |")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_mlstm_rwkv.py: interrupted", file=sys.stderr)
        sys.exit(130)
