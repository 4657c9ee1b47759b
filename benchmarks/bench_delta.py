"""Time our gated delta rule layers against transformers' CPU path of the same layer.

One random layer module of transformers per kind (no download: ``Qwen3NextGatedDeltaNet``,
``OlmoHybridGatedDeltaNet``, ``KimiLinearDeltaAttention`` from tiny configs) and our
:class:`hiddenstate.kinds.delta.block.GatedDeltaNet` / :class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention`
with the same weights, side by side in one process, per sequence length T:

* ``fwd``: the layer's output for a batch (transformers: ``torch.no_grad()``, no cache, its
  pure-torch path: ``causal_conv1d_fn`` and ``torch_chunk_gated_delta_rule`` /
  ``chunk_kimi_delta_attention``, chunks of 64);
* ``fwd+bwd``: the gradient of ``(out * g).sum()`` for every parameter and the input
  (transformers: autograd through the same path; ours: the layer's exact ``backward``).

Ours runs in the chunked form (``ours chunk``, Q = 64) and the per-step loop (``ours loop``).
Both sides compute in float32 unless ``--dtype float64`` (transformers' kernels compute in
float32 whatever the module's dtype). The outputs are checked to agree first. Rounds are
interleaved in a shuffled order after a warm-up; medians over rounds; the ratio is
``transformers / ours`` (above 1: ours is faster). One thread.

Usage::

    python benchmarks/bench_delta.py [--lengths 64 1024] [--kinds qwen3_next olmo_hybrid kimi]
        [--batch 2] [--hidden 128] [--heads 2] [--head-dim 32] [--rounds 3] [--dtype {float32,float64}] [--quick]
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

ROWS = ("transformers", "ours chunk", "ours loop")
KINDS = ("qwen3_next", "olmo_hybrid", "kimi")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 1024], help="sequence lengths T")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--batch", type=int, default=2, help="N (default 2)")
    p.add_argument("--hidden", type=int, default=128, help="d_model (default 128)")
    p.add_argument("--heads", type=int, default=2, help="key heads Hk (value heads 2 Hk; KDA: 2 Hk heads)")
    p.add_argument("--head-dim", type=int, default=32, help="Dk = Dv (default 32)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per length (default 3)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--quick", action="store_true", help="T = 70; N = 1; d_model = 16; 1 round (a smoke run)")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.batch, args.hidden, args.head_dim, args.rounds = [70], 1, 16, 8, 1
    return args


def build(kind, args):
    """transformers' module and our layer with the same weights."""
    import torch
    import transformers

    from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention

    M, Hk, D = args.hidden, args.heads, args.head_dim
    Hv = 2 * Hk
    if kind == "qwen3_next":
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet as cls
        cfg = transformers.Qwen3NextConfig(hidden_size=M, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
                                           linear_key_head_dim=D, linear_value_head_dim=D, num_hidden_layers=1,
                                           layer_types=["linear_attention"])
        ours = GatedDeltaNet(M, num_k_heads=Hk, num_v_heads=Hv, head_k_dim=D, eps=cfg.rms_norm_eps, dtype=args.dtype)
    elif kind == "olmo_hybrid":
        from transformers.models.olmo_hybrid.modeling_olmo_hybrid import OlmoHybridGatedDeltaNet as cls
        cfg = transformers.OlmoHybridConfig(hidden_size=M, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
                                            linear_key_head_dim=D, linear_value_head_dim=D, num_hidden_layers=2,
                                            layer_types=["linear_attention", "full_attention"],
                                            num_attention_heads=2, num_key_value_heads=2)
        ours = GatedDeltaNet(M, num_k_heads=Hk, num_v_heads=Hv, head_k_dim=D, layout="olmo_hybrid",
                             allow_neg_eigval=cfg.linear_allow_neg_eigval, dtype=args.dtype)
    else:
        from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention as cls
        cfg = transformers.KimiLinearConfig(hidden_size=M, linear_num_heads=Hv, linear_head_dim=D,
                                            num_hidden_layers=1, layer_types=["linear_attention"])
        ours = KimiDeltaAttention(M, num_heads=Hv, head_dim=D, eps=cfg.rms_norm_eps, dtype=args.dtype)
    torch.manual_seed(0)
    m = cls(cfg, 0).to(getattr(torch, args.dtype))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(1.0, 16.0).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) - 3.0)
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    ours.load_state_dict({k: v.detach().numpy() for k, v in m.state_dict().items()})
    ours.batch_first = True
    return m, ours


def implementations(kind, args, T):
    """mode -> name -> a callable; checks that the outputs agree first."""
    import torch

    torch.set_num_threads(1)
    m, ours = build(kind, args)
    rng = np.random.default_rng(1)
    u = rng.standard_normal((args.batch, T, args.hidden)).astype(args.dtype)
    g = rng.standard_normal(u.shape).astype(args.dtype)
    tu, tg = torch.from_numpy(u), torch.from_numpy(g)

    def hf_fwd():
        with torch.no_grad():
            return m(tu)

    def hf_bwd():
        m.zero_grad()
        x = tu.clone().requires_grad_(True)
        (m(x) * tg).sum().backward()

    def ours_fwd(chunk):
        def run():
            ours.chunk = chunk
            return ours(u)[0]
        return run

    def ours_bwd(chunk):
        def run():
            ours.chunk = chunk
            _, _, cache = ours.forward(u)
            return ours.backward(cache, g)
        return run

    ref = hf_fwd().double().numpy()
    for chunk in (64, None):
        got = ours_fwd(chunk)()
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err < (1e-3 if args.dtype == "float32" else 1e-5), f"{kind} outputs disagree: {err:.2e}"
    return {"fwd": {"transformers": hf_fwd, "ours chunk": ours_fwd(64), "ours loop": ours_fwd(None)},
            "fwd+bwd": {"transformers": hf_bwd, "ours chunk": ours_bwd(64), "ours loop": ours_bwd(None)}}


def main(argv=None) -> int:
    args = parse_args(argv)
    import transformers
    from transformers.utils import logging

    logging.set_verbosity_error()  # the "falling back to its reference PyTorch implementation" notes
    print(f"d_model={args.hidden} Hk={args.heads} Hv={2 * args.heads} Dk=Dv={args.head_dim} N={args.batch}, "
          f"{args.dtype}, one thread, {args.rounds} rounds, numpy {np.__version__}, "
          f"transformers {transformers.__version__}")
    print("| layer | T | mode | " + " | ".join(f"{r} ms" for r in ROWS)
          + " | transformers / ours chunk | transformers / ours loop |")
    print("|" + "---|" * (len(ROWS) + 5))
    rng = np.random.default_rng(0)
    for kind in args.kinds:
        for T in args.lengths:
            for mode, fns in implementations(kind, args, T).items():
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
                print(f"| {kind} | {T} | {mode} | " + " | ".join(f"{med[r]:.1f}" for r in ROWS)
                      + f" | {med['transformers'] / med['ours chunk']:.2f}"
                      + f" | {med['transformers'] / med['ours loop']:.2f} |")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_delta.py: interrupted", file=sys.stderr)
        sys.exit(130)
