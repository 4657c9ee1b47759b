"""Every layer's per-step states, side by side with TransformerLens 4.x's ``hook_ssm_state`` (its opt-in eager scan).

The same saved models (random weights, ``save_pretrained`` directories written here; hidden 256,
4 layers by default): Mamba-1, Mamba-2 and Qwen3-Next. For each, in a fresh process per
measurement (``--rounds`` processes each, medians), one thread:

* ``TL``: ``TransformerBridge.boot_transformers(DIR, hf_model=model)``, every SSM mixer's
  ``eager_scan = True``, ``run_with_cache(ids, names_filter=hook_ssm_state)`` (every layer's
  state at every step, float32);
* ``ours f32`` / ``ours f64``: :func:`hiddenstate.record_states` on the same model (every layer
  proven against the model's own mixer on the first 64 steps, output and state part, then every
  step's state of every layer streamed out of one forward pass with our kernels in the mixers'
  place, float32 / float64);
* ``ours full f32`` (with ``--full``): :func:`hiddenstate.interop.families.hooks.recompute_layers`
  (the model's own forward pass, every layer recomputed in float64 and held to the model's output
  at every step, everything recorded: gates, readouts, selective parameters; records float32).

Printed: wall time of the capture (model loaded before the clock starts), the process's peak
resident memory above what it held before the capture (+MiB, from ``ru_maxrss``), and the ratios
``TL / ours`` (above 1: ours is faster or smaller). TransformerLens is an optional benchmark
dependency, never a runtime one: when ``transformer_lens`` is not importable by ``--tl-python``
(default this interpreter), the script says so and runs ours only. Install it beside the
project's environment, not into it (``benchmarks/README.md``).

Usage::

    python benchmarks/bench_transformerlens.py [--length 1024] [--hidden 256] [--layers 4] [--rounds 3]
        [--models mamba mamba2 qwen3_next] [--tl-python /path/to/venv/bin/python] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODELS = ("mamba", "mamba2", "qwen3_next")
RUNNERS = ("TL", "ours f32", "ours f64")
FULL = "ours full f32"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--length", type=int, default=1024, help="T, tokens of one sequence (default 1024)")
    p.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    p.add_argument("--layers", type=int, default=4, help="layers (default 4)")
    p.add_argument("--rounds", type=int, default=3, help="processes per measurement (default 3; medians)")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--tl-python", default=sys.executable,
                   help="the Python that imports transformer_lens (default this one)")
    p.add_argument("--quick", action="store_true", help="T = 64, hidden 64, 2 layers, 1 round (a smoke run)")
    p.add_argument("--full", action="store_true", help="also time recompute_layers (every step proven, all recorded)")
    p.add_argument("--worker", nargs=3, metavar=("RUNNER", "DIR", "T"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.length, args.hidden, args.layers, args.rounds = 64, 64, 2, 1
    return args


def build(name, hidden, layers):
    """A random transformers model of ``name`` (float32)."""
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "mamba":
        cfg = transformers.MambaConfig(vocab_size=1000, hidden_size=hidden, state_size=16, num_hidden_layers=layers,
                                       expand=2)
        return transformers.MambaForCausalLM(cfg).eval()
    if name == "mamba2":
        cfg = transformers.Mamba2Config(vocab_size=1000, hidden_size=hidden, state_size=64, num_hidden_layers=layers,
                                        expand=2, head_dim=64, num_heads=2 * hidden // 64, n_groups=1, chunk_size=64)
        return transformers.Mamba2ForCausalLM(cfg).eval()
    kinds = (["linear_attention"] * 3 + ["full_attention"]) * layers
    kinds = kinds[:layers - 1] + ["full_attention"]  # one attention layer at least (transformers' mask needs it)
    cfg = transformers.Qwen3NextConfig(
        vocab_size=1000, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, layer_types=kinds[:layers],
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden // 2,
        shared_expert_intermediate_size=hidden // 2, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=hidden // 4, linear_value_head_dim=hidden // 4, linear_conv_kernel_dim=4)
    return transformers.Qwen3NextForCausalLM(cfg).eval()


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def worker(runner, directory, T) -> dict:
    """One measurement in this process: seconds and peak +MiB of capturing every layer's every step's state."""
    import time

    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, model.config.vocab_size, (1, int(T))))
    if runner == "TL":
        from transformer_lens.model_bridge import TransformerBridge

        bridge = TransformerBridge.boot_transformers(directory, hf_model=model, device="cpu",
                                                     tokenizer=_tokenizer())
        mixers = [m for _, m in bridge.named_modules() if hasattr(m, "eager_scan") and hasattr(m, "hook_ssm_state")]
        for m in mixers:
            m.eager_scan = True

        def capture():
            with torch.no_grad():
                _, cache = bridge.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_ssm_state"))
            return [v for _, v in cache.items()]
    elif runner == FULL:
        from hiddenstate.interop.families.hooks import recompute_layers

        def capture():
            return recompute_layers(model, ids, record_dtype="float32", max_bytes=None).records
    else:
        from hiddenstate import record_states

        dtype = "float32" if runner == "ours f32" else "float64"

        def capture():
            return list(record_states(model, ids, dtype=dtype, max_bytes=None).states.values())
    base = _rss_mib()
    t0 = time.perf_counter()
    got = capture()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "mib": max(0.0, _peak_mib() - base), "layers": len(got)}


def _tokenizer():
    """A one-word tokenizer (the ids are given; TransformerBridge wants one, and there is no download)."""
    import transformers
    from tokenizers import Tokenizer, models

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")), unk_token="[UNK]")


def _has_tl(python) -> str | None:
    """None when ``python`` imports transformer_lens, else why not (its last line of error)."""
    run = subprocess.run([python, "-c", "import transformer_lens"], capture_output=True, text=True)
    if run.returncode == 0:
        return None
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {run.returncode}"


def _measure(python, runner, directory, T):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([python, os.path.abspath(__file__), "--worker", runner, directory, str(T)],
                         capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"{runner} on {directory} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    import numpy as np

    why = _has_tl(args.tl_python)
    runners = list(RUNNERS) if why is None else [r for r in RUNNERS if r != "TL"]
    runners += [FULL] if args.full else []
    if why is not None:
        print(f"transformer_lens is not importable by {args.tl_python} ({why}): ours only. Install TransformerLens "
              "4.x beside this environment and pass --tl-python (benchmarks/README.md).")
    print(f"hidden {args.hidden}, {args.layers} layers, N=1, T={args.length}, one thread, {args.rounds} process(es) "
          f"per measurement, medians; +MiB: peak resident memory above the process's before the capture")
    print("| model | " + " | ".join(f"{r} s | {r} +MiB" for r in runners)
          + (" | TL / ours f32 time | TL / ours f32 memory | TL / ours f64 time | TL / ours f64 memory |"
             if "TL" in runners else " |"))
    print("|" + "---|" * (1 + 2 * len(runners) + (4 if "TL" in runners else 0)))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            directory = os.path.join(tmp, name)
            build(name, args.hidden, args.layers).save_pretrained(directory)
            res = {r: [] for r in runners}
            for _ in range(args.rounds):  # interleaved
                for r in runners:
                    res[r].append(_measure(args.tl_python if r == "TL" else sys.executable, r, directory, args.length))
            med = {r: (float(np.median([m["seconds"] for m in v])), float(np.median([m["mib"] for m in v])))
                   for r, v in res.items()}
            row = f"| {name} | " + " | ".join(f"{med[r][0]:.2f} | {med[r][1]:.0f}" for r in runners)
            if "TL" in runners:
                tl = med["TL"]
                row += "".join(f" | {tl[0] / med[o][0]:.2f} | {tl[1] / max(med[o][1], 1e-9):.2f}"
                               for o in ("ours f32", "ours f64"))
            print(row + " |", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("bench_transformerlens.py: interrupted", file=sys.stderr)
        sys.exit(130)
