"""Time our recurrent blocks (RG-LRU, lightning attention, short conv) against transformers' CPU path of the same layer.

For every kind, one tiny random transformers layer module (no download) and our block with the
same weights, side by side in one process, per sequence length T:

* ``fwd``: the layer's output for a batch (transformers: ``torch.no_grad()``, no cache: its
  pure-torch path);
* ``fwd+bwd``: the gradient of ``(out * g).sum()`` for every parameter and the input
  (transformers: autograd; ours: the block's exact hand-written backward).

Both compute in float32 unless ``--dtype float64``. The outputs are checked to agree first.
Rounds are interleaved after a warm-up; medians over rounds; the ratio is
``transformers / ours`` (above 1: ours is faster). One thread.

Usage::

    python benchmarks/bench_recurrences.py [--lengths 64 1024] [--batch 2] [--hidden 128] [--rounds 5]
        [--kinds rglru lightning shortconv] [--dtype {float32,float64}] [--quick]
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

KINDS = ("rglru", "lightning", "shortconv")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 1024], help="sequence lengths T")
    p.add_argument("--batch", type=int, default=2, help="N (default 2)")
    p.add_argument("--hidden", type=int, default=128, help="hidden_size M (default 128)")
    p.add_argument("--heads", type=int, default=4, help="heads (default 4)")
    p.add_argument("--chunk", type=int, default=64, help="our lightning attention's chunk (default 64)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per length (default 5)")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--quick", action="store_true", help="T = 32; M = 16; 2 rounds (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.hidden, args.rounds = [32], 16, 2
    return args


def _rglru(args, torch):
    """(ours, theirs, their call, our forward kwargs) for Griffin's recurrent block."""
    import transformers
    from transformers.models.recurrent_gemma import modeling_recurrent_gemma as mrg

    from hiddenstate.kinds.rglru.block import RGLRUBlock

    M = args.hidden
    ours = RGLRUBlock(M, M, num_heads=args.heads, conv_width=4, dtype=args.dtype, rng=np.random.default_rng(0))
    cfg = transformers.RecurrentGemmaConfig(hidden_size=M, lru_width=M, num_attention_heads=args.heads,
                                            conv1d_width=4, num_hidden_layers=1, vocab_size=11)
    theirs = mrg.RecurrentGemmaRecurrentBlock(cfg, 0)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.params.items()})

    def call(x):
        T = x.shape[1]
        return theirs(x, torch.arange(T)[None].expand(x.shape[0], T), None, use_cache=False)[0]

    def kwargs(T, N):
        reset = np.zeros((T, N), dtype=bool)
        reset[0] = True  # transformers' position 0: a document start
        return {"reset": reset}

    return ours, theirs, call, kwargs


def implementations(args, kind, T):
    """mode -> name -> a callable; checks that the outputs agree first."""
    import torch

    torch.set_num_threads(1)
    ours, theirs, call, kwargs = {"rglru": _rglru, "lightning": _lightning, "shortconv": _shortconv}[kind](args, torch)
    theirs.to(getattr(torch, args.dtype))
    rng = np.random.default_rng(1)
    N, M = args.batch, args.hidden
    u = rng.standard_normal((T, N, M)).astype(args.dtype)
    g = rng.standard_normal((T, N, M)).astype(args.dtype)
    ut = torch.from_numpy(np.ascontiguousarray(u.transpose(1, 0, 2)))
    gt = torch.from_numpy(np.ascontiguousarray(g.transpose(1, 0, 2)))
    kw = kwargs(T, N)

    def hf_fwd():
        with torch.no_grad():
            return call(ut)

    def hf_bwd():
        theirs.zero_grad(set_to_none=True)
        x = ut.clone().requires_grad_(True)
        (call(x) * gt).sum().backward()
        return x.grad

    def our_fwd():
        return ours.forward(u, **kw)[0]

    def our_bwd():
        out, _, cache = ours.forward(u, **kw)
        return ours.backward(cache, g)[1]

    a, b = our_fwd().transpose(1, 0, 2), hf_fwd().numpy()
    err = float(np.abs(a - b).max() / np.abs(b).max())
    if err > (1e-3 if args.dtype == "float32" else 1e-5):
        raise SystemExit(f"{kind}: outputs disagree at T={T} (relative {err:.2e})")
    return {"fwd": {"transformers": hf_fwd, "ours": our_fwd}, "fwd+bwd": {"transformers": hf_bwd, "ours": our_bwd}}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> None:
    args = parse_args(argv)
    print(f"N={args.batch} M={args.hidden} heads={args.heads} dtype={args.dtype} rounds={args.rounds} "
          f"(medians, ms; ratio = transformers / ours)")
    print(f"{'kind':<10} {'T':>5} {'mode':<8} {'transformers':>13} {'ours':>10} {'ratio':>7}")
    for kind in args.kinds:
        for T in args.lengths:
            impls = implementations(args, kind, T)
            for mode, fns in impls.items():
                for fn in fns.values():  # warm-up
                    fn()
                times = {name: [] for name in fns}
                for _ in range(args.rounds):
                    for name, fn in fns.items():
                        times[name].append(timed(fn))
                hf, us = (1e3 * float(np.median(times[k])) for k in ("transformers", "ours"))
                print(f"{kind:<10} {T:>5} {mode:<8} {hf:>13.2f} {us:>10.2f} {hf / us:>7.2f}", flush=True)


def _lightning(args, torch):
    """(ours, theirs, their call, our forward kwargs) for MiniMax's lightning attention."""
    import transformers
    from transformers.models.minimax import modeling_minimax as mm

    from hiddenstate.kinds.lightning.block import LightningAttention, slope_rates

    M, H = args.hidden, args.heads
    ours = LightningAttention(M, H, slope_rate=slope_rates(H, 0, 2), chunk=args.chunk, dtype=args.dtype,
                              rng=np.random.default_rng(0))
    cfg = transformers.MiniMaxConfig(hidden_size=M, num_attention_heads=H, num_key_value_heads=H, num_hidden_layers=2,
                                     vocab_size=11, intermediate_size=8, layer_types=["linear_attention"] * 2)
    theirs = mm.MiniMaxLightningAttention(cfg, 0)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.params.items()}, strict=False)
    return ours, theirs, (lambda x: theirs(x, None, None)[0]), (lambda T, N: {})


def _shortconv(args, torch):
    """(ours, theirs, their call, our forward kwargs) for LFM2's gated short convolution."""
    import transformers
    from transformers.models.lfm2 import modeling_lfm2 as ml

    from hiddenstate.kinds.shortconv.block import ShortConv

    M = args.hidden
    ours = ShortConv(M, kernel_size=3, dtype=args.dtype, rng=np.random.default_rng(0))
    cfg = transformers.Lfm2Config(hidden_size=M, conv_L_cache=3, num_hidden_layers=1, vocab_size=11,
                                  intermediate_size=8, num_attention_heads=1, num_key_value_heads=1, layer_types=["conv"])
    theirs = ml.Lfm2ShortConv(cfg, 0)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.params.items()})
    return ours, theirs, (lambda x: theirs(x)), (lambda T, N: {})


if __name__ == "__main__":
    main()
