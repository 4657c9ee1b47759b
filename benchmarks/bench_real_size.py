"""Inspection at real sizes against the plain forward pass: wall time and peak memory.

Random weights at real shapes (no download), one sequence, one thread, each measurement in a
fresh process (the model built and the ids made before the clock starts):

* ``qwen3_5``: one gated-DeltaNet layer of Qwen3.5-27B's shape, from transformers'
  ``Qwen3_5TextConfig`` defaults (its docstring's checkpoint "Qwen/Qwen3.5-27B"): hidden 4096, 16
  key heads and 32 value heads of 128 channels, convolution kernel 4, its MLP (intermediate 12288)
  and norms: a ``Qwen3_5ForCausalLM`` of that one ``linear_attention`` decoder layer, with a
  small vocabulary (``--vocab``, default 1024: the embedding is not the layer's; the real 248,320
  would add 2 x 4 GB of embedding and head). T = 4,096 with a window of the last 256 positions by
  default (one step's state is 32 x 128 x 128 numbers: every step of T = 4,096 would be 17 GB in
  float64).
* ``mamba``: the 130M Mamba config (hidden 768, 24 layers, vocabulary 50,280, state 16, expand 2)
  at T = 2,048, by default with a window of the last 512 positions (every step of every layer
  would be about 12 GB in float64).

For each: ``forward`` (``model(ids, use_cache=False)`` under ``torch.no_grad()``) and
``inspect`` (:func:`hiddenstate.inspect_model` with the window, ``record_dtype``, no cap: the
model's forward pass, each recurrent layer recomputed in float64 and held to the model's output,
its records and analyses, no report) and ``states`` (:func:`hiddenstate.record_states` with the
window and ``record_dtype``: every layer proven on the first 64 steps, then every kept step's state
streamed out of one forward pass with our kernels in the mixers' place). Printed: seconds, the
process's peak resident memory above what it held before (+MiB, ``ru_maxrss``), and each against
the forward.

Usage::

    python benchmarks/bench_real_size.py [--models qwen3_5 mamba] [--qwen-length 4096] [--mamba-length 2048]
        [--qwen-window START:STOP] [--mamba-window START:STOP] [--record-dtype {float32,float64}]
        [--scale K] [--vocab V] [--rounds 1] [--modes inspect states]

``--scale K`` divides every width (hidden size, heads, intermediate size) by K, for a machine
with less memory or time: say which was run when quoting the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _window(text):
    start, sep, stop = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"a window is START:STOP; got {text!r}")
    return int(start), int(stop)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", choices=("qwen3_5", "mamba"), default=["qwen3_5", "mamba"])
    p.add_argument("--qwen-length", type=int, default=4096)
    p.add_argument("--mamba-length", type=int, default=2048)
    p.add_argument("--qwen-window", type=_window, default=None, help="default the last 256 positions")
    p.add_argument("--mamba-window", type=_window, default=None, help="default the last 512 positions")
    p.add_argument("--record-dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--scale", type=int, default=1, help="divide every width by K (default 1: real size)")
    p.add_argument("--vocab", type=int, default=1024, help="Qwen3.5's vocabulary (default 1024)")
    p.add_argument("--rounds", type=int, default=1, help="processes per measurement (medians)")
    p.add_argument("--modes", nargs="+", choices=("inspect", "states"), default=["inspect", "states"],
                   help="what is timed beside the forward (default both)")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def build(name, args):
    """The model (float32, eval), its ids (1, T) and the window."""
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(0)
    k = args.scale
    if name == "qwen3_5":
        cfg = transformers.Qwen3_5TextConfig(
            vocab_size=args.vocab, hidden_size=4096 // k, intermediate_size=12288 // k, num_hidden_layers=1,
            layer_types=["linear_attention"], linear_num_key_heads=max(1, 16 // k),
            linear_num_value_heads=max(1, 32 // k), linear_key_head_dim=128, linear_value_head_dim=128,
            linear_conv_kernel_dim=4, num_attention_heads=max(1, 24 // k), num_key_value_heads=max(1, 4 // k),
            head_dim=256)
        model, T = transformers.Qwen3_5ForCausalLM(cfg), args.qwen_length
        window = args.qwen_window or (max(0, T - 256), T)
    else:
        cfg = transformers.MambaConfig(vocab_size=50280, hidden_size=768 // k, state_size=16, num_hidden_layers=24,
                                       expand=2, conv_kernel=4)
        model, T = transformers.MambaForCausalLM(cfg), args.mamba_length
        window = args.mamba_window or (max(0, T - 512), T)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, cfg.vocab_size, (1, T)))
    return model.eval(), ids, window


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def worker(name, mode, args) -> dict:
    import resource
    import time

    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    model, ids, window = build(name, args)
    base = _rss_mib()
    t0 = time.perf_counter()
    if mode == "forward":
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    elif mode == "states":
        import hiddenstate as hs

        hs.record_states(model, ids, window=window, dtype=args.record_dtype, max_bytes=None)
    else:
        import hiddenstate as hs

        hs.inspect_model(model, ids, window=window, record_dtype=args.record_dtype, max_bytes=None)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    params = sum(p.numel() for p in model.parameters())
    return {"seconds": seconds, "mib": max(0.0, peak - base), "T": ids.shape[1], "window": list(window),
            "params": params}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args)))
        return 0
    import numpy as np

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(here, "..", "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    print(f"one sequence, one thread, records {args.record_dtype}, scale 1/{args.scale}, {args.rounds} process(es) "
          "per measurement; +MiB: peak resident memory above the process's before the run")
    head = "".join(f" {m} s | {m} +MiB | {m} / forward time | {m} / forward memory |" for m in args.modes)
    print("| model | params | T | window | forward s | forward +MiB |" + head)
    print("|---|---|---|---|---|---|" + "---|" * 4 * len(args.modes))
    for name in args.models:
        res = {mode: [] for mode in ("forward", *args.modes)}
        for _ in range(args.rounds):
            for mode in res:
                run = subprocess.run([sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:]), "--worker",
                                      name, mode], capture_output=True, text=True, env=env)
                if run.returncode != 0:
                    raise RuntimeError(f"{name} {mode} failed:\n{run.stderr[-3000:]}")
                res[mode].append(json.loads(run.stdout.strip().splitlines()[-1]))
        f = res["forward"]
        fs, fm = np.median([r["seconds"] for r in f]), np.median([r["mib"] for r in f])
        row = f"| {name} | {f[0]['params'] / 1e6:.0f}M | {f[0]['T']} | {f[0]['window'][0]}:{f[0]['window'][1]} | " \
              f"{fs:.2f} | {fm:.0f} |"
        for mode in args.modes:
            s, m = np.median([r["seconds"] for r in res[mode]]), np.median([r["mib"] for r in res[mode]])
            row += f" {s:.2f} | {m:.0f} | {s / fs:.1f} | {m / max(fm, 1e-9):.1f} |"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_real_size.py: interrupted", file=sys.stderr)
        sys.exit(130)
