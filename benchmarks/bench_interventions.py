"""The cost of one edited run and of one causal-trace cell, against the model's own forward pass (issue 32).

Random weights (seeded, no download) with the real-size configs of ``bench_families.py``:
``mamba-130m`` (the config of state-spaces/mamba-130m) and ``bamba-small`` (a 12-layer Bamba
hybrid). One sequence of T tokens; the corrupted prompt changes its first 4 tokens. Measured, in
one process after the model is built and one warm-up forward:

* ``forward``: the transformers forward alone (``torch.no_grad()``, ``use_cache=False``), mean of 3;
* ``intervene``: :func:`hiddenstate.intervene` of one ``StateEdit(layer, T // 2, "replace",
  source=clean)`` on the corrupted ids (its clean and edited model passes, the source's run, our
  block's two chains);
* ``trace setup``, ``trace per layer``, ``trace cell``: :func:`hiddenstate.trace_cost` of that one
  cell (the clean and corrupted runs with every recomputation checked; one layer's states
  recomputed; one edited run), the numbers a sweep's estimate is made of.

The ratios are against ``forward``. One thread for torch and NumPy, the load average printed
before and after.

Usage::

    python benchmarks/bench_interventions.py [--models mamba-130m bamba-small] [--T 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_families import build  # noqa: E402


def measure(name: str, T: int) -> dict:
    """Seconds of the forward, one intervention and one trace cell's parts on ``name``'s model."""
    import numpy as np
    import torch

    import hiddenstate as hs
    from hiddenstate.interop.families import family_of

    torch.set_num_threads(1)
    model = build(name)
    recurrent = [e.index for e in family_of(model).layer_map(model) if e.role == "recurrent"]
    layer = recurrent[len(recurrent) // 2]
    rng = np.random.default_rng(1)
    clean = rng.integers(0, model.config.vocab_size, (1, T))
    corrupted = clean.copy()
    corrupted[:, :4] = rng.integers(0, model.config.vocab_size, (1, 4))
    ids = torch.from_numpy(clean)
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
        start = time.perf_counter()
        for _ in range(3):
            model(input_ids=ids, use_cache=False)
        forward = (time.perf_counter() - start) / 3
    start = time.perf_counter()
    hs.intervene(model, corrupted, [hs.StateEdit(layer, T // 2, "replace", source=clean)])
    intervene = time.perf_counter() - start
    cost = hs.trace_cost(model, clean, corrupted, target=1, layers=[layer], steps=[T // 2])
    return {"forward": forward, "intervene": intervene, "trace setup": cost.setup_seconds,
            "trace per layer": cost.seconds_per_group, "trace cell": cost.seconds_per_run, "layer": layer}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mamba-130m", "bamba-small"])
    parser.add_argument("--T", type=int, default=64)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    for name in args.models:
        got = measure(name, args.T)
        base = got["forward"]
        print(f"{name} (T={args.T}, layer {got.pop('layer')}):")
        for key, seconds in got.items():
            print(f"  {key:<16} {seconds:8.3f} s  {seconds / base:6.2f}x forward")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
