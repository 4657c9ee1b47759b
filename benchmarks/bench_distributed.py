"""Two processes (torchrun, gloo) against one, and against one process with two BLAS threads.

Runs ``hiddenstate train`` on a preset's model (default ``long``: two GRU layers of 512, T=100,
N=32, float32) for a fixed number of steps in four modes, interleaved round by round so that
the machine's load falls on all of them alike:

* ``1 process x 1 thread``  -- ``hiddenstate train`` (the default);
* ``2 processes x 1 thread`` -- ``torchrun --nproc-per-node 2 -m hiddenstate train`` (each rank
  reads N/2 rows and draws only its rows' masks; the gradient is all-reduced in buckets while the
  backward pass runs, the loss and the stop decision in its last bucket);
* ``1 process x 2 threads`` -- ``OMP_NUM_THREADS=2 hiddenstate train``;
* ``2 lone processes of N/2 rows`` -- two ``hiddenstate train --batch-size N/2`` side by side, with
  no collective between them: the ceiling of 2 ranks on this machine (each does a rank's work,
  and they share the memory system as ranks do); its rate is the slower one's.

Steps/s is read from the run's own log (``elapsed_s`` of each step), from the ``--skip``-th step to
the last, so start-up, the rendezvous and the final validation pass are left out. A mode's speed-up
is the median over rounds of its rate divided by the one-process rate of the same round: this
machine's speed drifts by tens of percent between minutes, which a ratio of medians would mix in. Then the
gradient all-reduce alone is timed on 2 ranks (the model's parameter count in one float32 bucket):
what a step would wait for if no bucket overlapped the backward pass. The 1-minute load
average is printed before and after: the ratios mean something only together with it.

``--baseline SRC`` adds a fifth mode, ``2 processes x 1 thread (baseline)``: the same run with
``PYTHONPATH=SRC`` (another checkout's ``src``, e.g. the code before a change), interleaved with
the others so that both see the same load.

Usage::

    python benchmarks/bench_distributed.py [--preset long] [--steps 30] [--rounds 5] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ALLREDUCE = r"""
import sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
n, reps = int(sys.argv[1]), int(sys.argv[2])
flat = torch.zeros(n, dtype=torch.float32)
for _ in range(5):
    dist.all_reduce(flat)
times = []
for _ in range(reps):
    dist.barrier()
    t = time.perf_counter()
    dist.all_reduce(flat)
    times.append(time.perf_counter() - t)
if dist.get_rank() == 0:
    times.sort()
    print(times[len(times) // 2])
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(threads: int, src: str | None = None) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    e.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo",
             PYTHONWARNINGS="ignore")
    if src is not None:
        e["PYTHONPATH"] = os.path.abspath(src)
    return e


def run_mode(mode: str, preset: str, steps: int, out: Path, baseline: str | None = None,
             batch_size: int = 32) -> list[list[float]]:
    """The ``elapsed_s`` of every step of one run of ``mode`` (a list per run: two for the lone pair)."""
    flags = ["train", "--preset", preset, "--steps", str(steps), "--eval-every", str(10 * steps), "--save-every",
             str(10 * steps), "--max-minutes", "60", "--quiet", "--out", str(out)]
    if mode.startswith("2 lone"):
        halves = [out / "a", out / "b"]
        procs = [subprocess.Popen([sys.executable, "-m", "hiddenstate", *flags[:-1], str(half), "--batch-size",
                                   str(batch_size // 2)], env=env(1), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for half in halves]
        for proc in procs:
            _, err = proc.communicate(timeout=3600)
            if proc.returncode:
                raise SystemExit(f"{mode}: exit {proc.returncode}: {err[-2000:]}")
        return [[json.loads(line)["elapsed_s"] for line in (h / "log.jsonl").read_text().splitlines()] for h in halves]
    if mode.startswith("2 processes"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "hiddenstate", *flags]
        threads = 1
    else:
        cmd = [sys.executable, "-m", "hiddenstate", *flags]
        threads = 2 if "2 threads" in mode else 1
    src = baseline if mode.endswith("(baseline)") else None
    subprocess.run(cmd, env=env(threads, src), check=True, capture_output=True, text=True, timeout=3600)
    return [[json.loads(line)["elapsed_s"] for line in (out / "log.jsonl").read_text().splitlines()]]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="long")
    p.add_argument("--steps", type=int, default=30, help="steps per run (default 30)")
    p.add_argument("--skip", type=int, default=5, help="steps left out at the start of each run (default 5)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--baseline", metavar="SRC", help="also run 2 processes with PYTHONPATH=SRC (another checkout)")
    args = p.parse_args(argv)
    from hiddenstate.train import PRESETS
    from hiddenstate.train.config import make_config
    from hiddenstate.train.model import CharRNN

    cfg = make_config(dict(PRESETS[args.preset]) | {"max_minutes": None})
    params = CharRNN(63, cfg.hidden_size, cfg.num_layers, cell=cfg.cell, dropout=cfg.dropout).num_params
    modes = ["1 process x 1 thread", "2 processes x 1 thread", "1 process x 2 threads",
             f"2 lone processes of {cfg.batch_size // 2} rows"]
    if args.baseline:
        modes.append("2 processes x 1 thread (baseline)")
    load0 = os.getloadavg()[0]
    print(f"preset {args.preset!r}: {cfg.cell} H={cfg.hidden_size} L={cfg.num_layers} T={cfg.seq_len} "
          f"N={cfg.batch_size} {cfg.dtype}, {params:,} parameters; {args.steps} steps a run, the first {args.skip} "
          f"left out; load average {load0:.2f} on {os.cpu_count()} CPUs", flush=True)
    rates = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for i, mode in enumerate(modes[r % len(modes):] + modes[:r % len(modes)]):
                runs = run_mode(mode, args.preset, args.steps, Path(tmp) / f"r{r}-{i}", args.baseline, cfg.batch_size)
                rate = min((len(e) - args.skip) / (e[-1] - e[args.skip - 1]) for e in runs)
                rates[mode].append(rate)
                print(f"  round {r + 1}/{args.rounds}  {mode:30s} {rate:6.3f} steps/s", flush=True)
        script = Path(tmp) / "allreduce.py"
        script.write_text(ALLREDUCE)
        res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                              "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script),
                              str(params), "50"], env=env(1), check=True, capture_output=True, text=True, timeout=600)
        allreduce_s = float(res.stdout.strip().splitlines()[-1])
    load1 = os.getloadavg()[0]
    # the machine's own speed drifts between minutes (a shared host: one process's rate moved by 30% within
    # one run of this script), so each mode is set against the one-process run of its own round
    base = np.asarray(rates[modes[0]])
    print(f"\n| mode | steps/s (median of {args.rounds}) | ms a step | speed-up over 1 process x 1 thread "
          f"(median of the rounds' ratios) | the rounds' ratios |")
    print("|---|---|---|---|---|")
    for m in modes:
        med, ratios = float(np.median(rates[m])), np.asarray(rates[m]) / base
        print(f"| {m} | {med:.3f} | {1e3 / med:.0f} | {float(np.median(ratios)):.2f}x | "
              f"{', '.join(f'{x:.2f}' for x in ratios)} |")
    print(f"\ngradient all-reduce on 2 ranks (gloo, 127.0.0.1, {params:,} float32 in one bucket): "
          f"{1e3 * allreduce_s:.1f} ms a step (median of 50)")
    print(f"load average {load0:.2f} before, {load1:.2f} after, on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
