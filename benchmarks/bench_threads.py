"""One BLAS thread against two for the main job's training step (what ``HIDDENSTATE_NUM_THREADS`` sets).

Times hiddenstate's own ``Trainer.train_step`` on a preset (default ``long``: two GRU layers of
512, T=100, N=32) with one and with two OpenBLAS threads (threadpoolctl), interleaved step by
step, wall clock (the point is elapsed time). (Splitting the batch across two Python threads with
one BLAS thread each was measured too, on a shared 2-core machine at load 2.2: 0.82x of one
thread's speed for the demo, 1.14x for the long preset, against 1.30x and 1.46x for two BLAS
threads, so hiddenstate does not do it.)

Prints the medians, the speed-up of each over one thread and the 1-minute load average before
and after (the ratios only mean something together with how busy the machine was).

Usage::

    python benchmarks/bench_threads.py [--preset long] [--steps 6]
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "2"  # let BLAS start two threads; each timed mode limits them itself

import time  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from hiddenstate.train import PRESETS  # noqa: E402
from hiddenstate.train.config import make_config  # noqa: E402
from hiddenstate.train.steps import Corpus, Trainer  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="long", choices=sorted(PRESETS))
    p.add_argument("--steps", type=int, default=6, help="timed steps per mode (default 6)")
    args = p.parse_args(argv)
    cfg = make_config(dict(PRESETS[args.preset]) | {"max_minutes": None})
    corpus = Corpus.read(cfg, None)
    modes = {"1 BLAS thread": 1, "2 BLAS threads": 2}
    trainers = {m: Trainer(cfg, corpus) for m in modes}
    times = {m: [] for m in modes}
    load0 = os.getloadavg()[0]
    print(f"preset {args.preset!r}: {cfg.cell} H={cfg.hidden_size} L={cfg.num_layers} T={cfg.seq_len} "
          f"N={cfg.batch_size} {cfg.dtype}; load average {load0:.1f} on {os.cpu_count()} CPUs", flush=True)
    for step in range(args.steps + 1):  # step 0 warms up
        for m in list(modes)[step % 2:] + list(modes)[:step % 2]:
            with threadpool_limits(limits=modes[m], user_api="blas"):
                t = time.perf_counter()
                trainers[m].train_step()
                if step:
                    times[m].append(time.perf_counter() - t)
        print(f"  step {step}/{args.steps}", flush=True)
    base = float(np.median(times["1 BLAS thread"]))
    for m, v in times.items():
        med = float(np.median(v))
        print(f"{m:16s} {1e3 * med:8.1f} ms a step   speed-up over one thread {base / med:.2f}x")
    print(f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
