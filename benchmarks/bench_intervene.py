"""The cost of one edited run (``hiddenstate.intervene`` with one StateEdit) against the model's forward and inspection.

Random weights (seeded, no download), one thread for torch and NumPy:

* ``mamba-130m``: ``MambaConfig(hidden_size=768, num_hidden_layers=24, state_size=16, expand=2,
  vocab_size=50280)``, the config of state-spaces/mamba-130m;
* ``jamba-small``: a small Jamba hybrid (``JambaConfig`` of 8 layers, ``hidden_size`` 256,
  attention at layers 2 and 6, a MoE of 4 experts (top 2) at every odd layer, Mamba mixers of
  ``d_state`` 16, expand 2; vocabulary 50,280).

What is timed, on one sequence of T tokens (default 256), each the median of ``--rounds`` runs
after one warm-up run:

* ``forward``: the transformers model alone (``torch.no_grad()``, ``use_cache=False``);
* ``intervene``: :func:`hiddenstate.intervene` with one ``StateEdit(layer=L, step=T // 2,
  op="zero")`` (L the edited recurrent layer, ``--layer``; default the model's middle recurrent
  layer): the clean and the edited runs, everything after the edited layer as the model's own code;
* ``recompute``: :func:`hiddenstate.interop.families.recompute_layers` of that one layer (the
  forward with its hook, our float64 block with every step recorded, the state-part check);
* ``inspect``: :func:`hiddenstate.inspect_model` of that one layer (the same, then its analyses);
* ``trace cell``: one cell of :func:`hiddenstate.causal_trace` (a corrupted prompt whose first 4
  tokens differ, the clean state of that layer restored at step T // 2), as
  :func:`hiddenstate.trace_cost` times it; its setup (the clean and corrupted runs) once per sweep.

The table gives each time, and ``intervene`` against ``forward``, ``recompute`` and ``inspect``.
The load average is printed before and after: run it on an idle machine for the numbers you report.

Usage::

    python benchmarks/bench_intervene.py [--models mamba-130m jamba-small] [--T 256] [--rounds 5] [--layer L]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODELS = ("mamba-130m", "jamba-small")


def build(name: str):
    """The seeded random model of ``name`` (eval mode)."""
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "mamba-130m":
        cfg = transformers.MambaConfig(hidden_size=768, num_hidden_layers=24, state_size=16, expand=2,
                                       vocab_size=50280)
        return transformers.MambaForCausalLM(cfg).eval()
    if name == "jamba-small":
        cfg = transformers.JambaConfig(vocab_size=50280, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
                                       num_attention_heads=8, num_key_value_heads=2, mamba_d_state=16,
                                       mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=16, attn_layer_period=4,
                                       attn_layer_offset=2, expert_layer_period=2, expert_layer_offset=1,
                                       num_experts=4, num_experts_per_tok=2)
        return transformers.JambaForCausalLM(cfg).eval()
    raise ValueError(f"model must be one of {', '.join(MODELS)}; got {name!r}.")


def median_time(fn, rounds: int) -> float:
    """The median wall time of ``rounds`` calls of ``fn`` (seconds), after one warm-up call."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, T: int, rounds: int, layer=None) -> dict:
    """Build ``name``, then time forward, intervene, recompute and inspect on one sequence of T tokens."""
    import numpy as np
    import torch

    import hiddenstate as hs
    from hiddenstate.interop.families import family_of, recompute_layers

    torch.set_num_threads(1)
    model = build(name)
    recurrent = [e.index for e in family_of(model).layer_map(model) if e.role == "recurrent"]
    layer = recurrent[len(recurrent) // 2] if layer is None else layer
    ids = np.random.default_rng(1).integers(0, model.config.vocab_size, (1, T))
    tids = torch.from_numpy(ids)
    edit = hs.StateEdit(layer=layer, step=T // 2, op="zero")

    def forward():
        with torch.no_grad():
            model(input_ids=tids, use_cache=False)

    out = {"model": name, "T": T, "layer": layer, "params": sum(p.numel() for p in model.parameters())}
    out["forward"] = median_time(forward, rounds)
    out["intervene"] = median_time(lambda: hs.intervene(model, ids, [edit]), rounds)
    out["recompute"] = median_time(lambda: recompute_layers(model, ids, layers=[layer]), rounds)
    out["inspect"] = median_time(lambda: hs.inspect_model(model, ids, layers=[layer]), rounds)
    corrupted = ids.copy()
    corrupted[:, :4] = np.random.default_rng(2).integers(0, model.config.vocab_size, (1, 4))
    cost = hs.trace_cost(model, ids, corrupted, target=1, layers=[layer], steps=[T // 2])
    out["trace cell"], out["trace setup"] = cost.seconds_per_run, cost.setup_seconds
    return out


def table(rows: list) -> str:
    """The results as a Markdown table: times (ms) and intervene's ratios."""
    lines = ["| model | T | edited layer | forward ms | intervene ms | recompute ms | inspect ms | intervene / forward "
             "| intervene / recompute | intervene / inspect | trace cell / forward | trace setup / forward |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} ({r['params'] / 1e6:.0f}M) | {r['T']} | {r['layer']} | {1e3 * r['forward']:.0f} "
                     f"| {1e3 * r['intervene']:.0f} | {1e3 * r['recompute']:.0f} | {1e3 * r['inspect']:.0f} "
                     f"| {r['intervene'] / r['forward']:.2f} | {r['intervene'] / r['recompute']:.2f} "
                     f"| {r['intervene'] / r['inspect']:.2f} | {r['trace cell'] / r['forward']:.2f} "
                     f"| {r['trace setup'] / r['forward']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--T", type=int, default=256, help="tokens of the one sequence (default 256)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each, after one warm-up (default 5)")
    parser.add_argument("--layer", type=int, default=None, help="the edited recurrent layer (default the middle one)")
    args = parser.parse_args(argv)
    if args.T < 2 or args.rounds < 1:
        parser.error(f"--T must be >= 2 and --rounds >= 1; got {args.T} and {args.rounds}.")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; one thread; medians of "
          f"{args.rounds} rounds", flush=True)
    rows = [measure(name, args.T, args.rounds, args.layer) for name in args.models]
    print(table(rows))
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
