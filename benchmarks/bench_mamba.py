"""Time our Mamba (parallel scan and per-step loop) against transformers' CPU path on the same model.

One small random ``MambaForCausalLM`` (no download) and the :class:`hiddenstate.MambaLM` that
:func:`hiddenstate.interop.transformers_io.from_transformers` makes of it, side by side in one
process, per sequence length T:

* ``fwd``: logits of a batch of token ids (transformers: ``torch.no_grad()``, ``use_cache=False``,
  its pure-torch path: ``causal_conv1d_fn`` and ``mamba_selective_scan``'s per-step loop);
* ``fwd+bwd``: the gradient of ``(logits * g).sum()`` for every parameter (transformers: autograd
  through the same path in training mode; ours: :meth:`MambaLM.backward`, exact BPTT).

Both compute in float32 (transformers' path does whatever the model's dtype) unless
``--dtype float64``. The logits are checked to agree first. Rounds are interleaved in a shuffled
order after a warm-up; medians over rounds; the ratio is ``transformers / ours``. One thread.

Usage::

    python benchmarks/bench_mamba.py [--lengths 64 256] [--batch 4] [--hidden 64] [--state 16]
        [--layers 2] [--rounds 5] [--dtype {float32,float64}] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

ROWS = ("transformers", "ours scan", "ours loop")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 256], help="sequence lengths T")
    p.add_argument("--batch", type=int, default=4, help="N (default 4)")
    p.add_argument("--hidden", type=int, default=64, help="d_model (default 64)")
    p.add_argument("--state", type=int, default=16, help="d_state (default 16)")
    p.add_argument("--layers", type=int, default=2, help="L (default 2)")
    p.add_argument("--vocab", type=int, default=256, help="V (default 256)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per length (default 5)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--quick", action="store_true", help="T = 32; N = 2; d_model = 16; 2 rounds (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.batch, args.hidden, args.rounds = [32], 2, 16, 2
    return args


def implementations(args, T):
    """mode -> name -> a callable; checks that the logits agree first."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    from hiddenstate.interop.transformers_io import from_transformers

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=args.vocab, hidden_size=args.hidden, state_size=args.state,
                      num_hidden_layers=args.layers)
    tdtype = getattr(torch, args.dtype)
    model = MambaForCausalLM(cfg).to(tdtype)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, args.vocab, (args.batch, T))
    g = rng.standard_normal((args.batch, T, args.vocab)).astype(args.dtype)
    tids, tg = torch.from_numpy(ids), torch.from_numpy(g).float()
    scan = from_transformers(model, dtype=args.dtype)
    loop = from_transformers(model, dtype=args.dtype, scan="sequential")

    def hf_fwd():
        model.eval()
        with torch.no_grad():
            return model(tids, use_cache=False).logits

    def hf_bwd():
        model.train()
        model.zero_grad()
        (model(tids, use_cache=False).logits * tg).sum().backward()

    def ours_fwd(lm):
        return lambda: lm(ids)[0]

    def ours_bwd(lm):
        def run():
            _, _, cache = lm.forward(ids)
            return lm.backward(cache, g)
        return run

    ref = hf_fwd().double().numpy()
    for lm in (scan, loop):
        got = lm(ids)[0]
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err < (1e-4 if args.dtype == "float32" else 1e-6), f"logits disagree: {err:.2e}"
    return {"fwd": {"transformers": hf_fwd, "ours scan": ours_fwd(scan), "ours loop": ours_fwd(loop)},
            "fwd+bwd": {"transformers": hf_bwd, "ours scan": ours_bwd(scan), "ours loop": ours_bwd(loop)}}


def main(argv=None) -> int:
    args = parse_args(argv)
    import transformers

    print(f"MambaForCausalLM d_model={args.hidden} d_state={args.state} L={args.layers} V={args.vocab} "
          f"N={args.batch}, {args.dtype}, one thread, {args.rounds} rounds, numpy {np.__version__}, "
          f"transformers {transformers.__version__}")
    print("| T | mode | " + " | ".join(f"{r} ms" for r in ROWS) + " | transformers / ours scan | transformers / ours loop |")
    print("|" + "---|" * (len(ROWS) + 4))
    rng = np.random.default_rng(0)
    for T in args.lengths:
        for mode, fns in implementations(args, T).items():
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
            print(f"| {T} | {mode} | " + " | ".join(f"{med[r]:.1f}" for r in ROWS)
                  + f" | {med['transformers'] / med['ours scan']:.2f} | {med['transformers'] / med['ours loop']:.2f} |")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_mamba.py: interrupted", file=sys.stderr)
        sys.exit(130)
