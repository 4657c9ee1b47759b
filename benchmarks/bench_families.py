"""Wall time and peak memory of ``inspect_model`` on real-size recurrent transformers models, against their forward.

Random weights (seeded, no download) with real configs:

* ``mamba-130m``: ``MambaConfig(hidden_size=768, num_hidden_layers=24, state_size=16, expand=2,
  vocab_size=50280)``, the config of state-spaces/mamba-130m (129M parameters);
* ``bamba-small``: a small Bamba hybrid (``BambaConfig`` of 12 layers, ``hidden_size`` 768,
  attention at layers 5 and 11, Mamba-2 mixers of 24 heads of 64 with ``d_state`` 64, one
  group, a SwiGLU MLP of 2,048, vocabulary 50,280: 174M parameters).

Each measurement runs in a fresh subprocess (so its peak resident memory, ``ru_maxrss``, is its
own) after the model is built: ``forward``, the transformers forward alone (``torch.no_grad()``,
``use_cache=False``, transformers' CPU path); ``recompute``, :func:`recompute_layers` (that
forward with hooks, and the chosen layers recomputed by our float64 blocks with every step
recorded); ``inspect``, the whole :func:`hiddenstate.inspect_model` (the same, then every
analysis); ``inspect+report``, with the HTML report written. The ratios are against
``forward``. One thread for torch and NumPy (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``),
the load average printed before and after. Goal (issue 25): the whole inspection of the 130M
model's chosen layers within 10x its own forward, under 4 GB.

Usage::

    python benchmarks/bench_families.py [--models mamba-130m bamba-small] [--T 512]
        [--layers-mamba 0,8,16,23] [--layers-bamba 0,6] [--what forward recompute inspect inspect+report]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

WHAT = ("forward", "recompute", "inspect", "inspect+report")


def build(name: str):
    """The seeded random model of ``name`` (eval mode)."""
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "mamba-130m":
        cfg = transformers.MambaConfig(hidden_size=768, num_hidden_layers=24, state_size=16, expand=2,
                                       vocab_size=50280)
        return transformers.MambaForCausalLM(cfg).eval()
    if name == "bamba-small":
        cfg = transformers.BambaConfig(vocab_size=50280, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                       num_attention_heads=12, num_key_value_heads=4, attn_layer_indices=[5, 11],
                                       mamba_n_heads=24, mamba_d_head=64, mamba_n_groups=1, mamba_d_state=64,
                                       mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256)
        return transformers.BambaForCausalLM(cfg).eval()
    raise ValueError(f"model must be mamba-130m or bamba-small; got {name!r}.")


def child(name: str, what: str, T: int, layers: list) -> dict:
    """One measurement, in this process: build, then time ``what``; peak RSS from ru_maxrss."""
    import resource
    import tempfile
    import time

    import numpy as np
    import torch

    torch.set_num_threads(1)
    model = build(name)
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, model.config.vocab_size, (1, T)))
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # GiB (ru_maxrss is KiB on Linux)
    params = sum(p.numel() for p in model.parameters())
    extra = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        if what == "forward":
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)
        elif what == "recompute":
            from hiddenstate.interop.families import recompute_layers

            rc = recompute_layers(model, ids, layers=layers)
            extra["errors"] = [float(e) for e in rc.errors]
        else:
            import hiddenstate as hs

            out = os.path.join(tmp, "report.html") if what == "inspect+report" else None
            an = hs.inspect_model(model, ids, layers=layers, out=out)
            extra["errors"] = [float(la.recomputed) for la in an.layers]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    return {"model": name, "what": what, "T": T, "layers": layers, "params": params, "wall_s": wall, "cpu_s": cpu,
            "rss_built_gib": rss_built, "peak_rss_gib": peak, **extra}


def measure(name: str, what: str, T: int, layers: list) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", name, what, str(T), ",".join(map(str, layers))],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["mamba-130m", "bamba-small"])
    p.add_argument("--T", type=int, default=512)
    p.add_argument("--layers-mamba", default="0,8,16,23")
    p.add_argument("--layers-bamba", default="0,6")
    p.add_argument("--what", nargs="+", default=list(WHAT), choices=WHAT)
    p.add_argument("--child", nargs=4, metavar=("MODEL", "WHAT", "T", "LAYERS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        name, what, T, layers = args.child
        print(json.dumps(child(name, what, int(T), [int(i) for i in layers.split(",")])))
        return 0
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs; one thread")
    for name in args.models:
        layers = [int(i) for i in (args.layers_mamba if name.startswith("mamba") else args.layers_bamba).split(",")]
        rows = [measure(name, what, args.T, layers) for what in args.what]
        base = next((r for r in rows if r["what"] == "forward"), None)
        print(f"\n{name}: {rows[0]['params'] / 1e6:.0f}M parameters, T={args.T} tokens, recorded layers {layers}; "
              f"model built: {rows[0]['rss_built_gib']:.2f} GiB resident")
        print(f"| {'measured':16s} | {'wall s':>7s} | {'CPU s':>7s} | {'x forward':>9s} | {'peak RSS GiB':>12s} | "
              "worst recomputation error |")
        print("|" + "|".join("-" * w for w in (18, 9, 9, 11, 14, 27)) + "|")
        for r in rows:
            ratio = f"{r['wall_s'] / base['wall_s']:.1f}" if base else "-"
            err = f"{max(r['errors']):.1e}" if r.get("errors") else ""
            print(f"| {r['what']:16s} | {r['wall_s']:7.2f} | {r['cpu_s']:7.2f} | {ratio:>9s} | "
                  f"{r['peak_rss_gib']:12.2f} | {err:25s} |")
        sys.stdout.flush()
    load1 = os.getloadavg()
    print(f"\nload average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
