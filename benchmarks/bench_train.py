"""The main job side by side with torch: the demo's training step and its validation pass.

What is timed (one process, interleaved, medians; the same thread count for both libraries):

* ``train step``: hiddenstate's own :class:`hiddenstate.train.steps.Trainer.train_step` on the
  ``demo`` preset (GRU with ``reset_after=True``, H=256, T=64, N=32, float32, one-hot input,
  Adam at lr 8e-3 with the cosine schedule, global-norm clipping at 5, state carried across
  chunks), against the exact torch equivalent written out below: ``charrnn_to_torch`` of the
  same initial model, ``torch.optim.Adam`` with the same schedule,
  ``torch.nn.utils.clip_grad_norm_`` at 5, the same batches in the same order, the state
  carried (detached) in the same way. Both start from the same weights, so their losses agree
  step by step (printed).
* ``validation pass``: :func:`hiddenstate.train.evaluate` (32 rows, chunks of 256, state
  carried) on the validation text, against the torch model under ``torch.no_grad()`` reading
  the same rows the same way.

Usage::

    python benchmarks/bench_train.py [--threads 1] [--steps 40] [--val-rounds 3] [--clock {wall,cpu}]
"""

from __future__ import annotations

import argparse
import math
import os
import sys

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads for both libraries (default 1)")
    p.add_argument("--steps", type=int, default=40, help="timed training steps of each library (default 40)")
    p.add_argument("--val-rounds", type=int, default=3, help="timed validation passes of each library (default 3)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: time.perf_counter; cpu: time.process_time (single-threaded runs only) (default wall)")
    p.add_argument("--preset", default="demo", help="the training preset to time (default demo)")
    args = p.parse_args(argv)
    if args.threads < 1 or args.steps < 2 or args.val_rounds < 1:
        p.error("--threads and --val-rounds must be >= 1 and --steps >= 2.")
    if args.clock == "cpu" and args.threads != 1:
        p.error("--clock cpu sums the CPU time of all threads; use it with --threads 1 only.")
    return args


ARGS = parse_args() if __name__ == "__main__" else None
for _var in _THREAD_VARS:  # before numpy and torch are imported
    os.environ[_var] = str(ARGS.threads if ARGS else 1)

import time  # noqa: E402

import numpy as np  # noqa: E402

from hiddenstate.interop import charrnn_to_torch  # noqa: E402
from hiddenstate.train import PRESETS, evaluate, lr_at  # noqa: E402
from hiddenstate.train.config import make_config  # noqa: E402
from hiddenstate.train.corpus import StreamBatcher  # noqa: E402
from hiddenstate.train.steps import Corpus, Trainer  # noqa: E402


class TorchTrainer:
    """The demo's training step written in torch: same model, batches, schedule, clipping, carry."""

    def __init__(self, torch, cfg, corpus, model):
        self.torch, self.cfg = torch, cfg
        self.module = charrnn_to_torch(model)  # the same initial weights
        self.module.train()
        self.opt = torch.optim.Adam(self.module.parameters(), lr=cfg.lr)
        self.batcher = StreamBatcher(corpus.train_ids, cfg.batch_size, cfg.seq_len)
        self.carry, self.step = None, 0

    def train_step(self) -> float:
        torch, cfg = self.torch, self.cfg
        for group in self.opt.param_groups:
            group["lr"] = lr_at(cfg, self.step / cfg.steps)
        if self.batcher.at_epoch_start:
            self.carry = None
        inputs, targets = self.batcher.next_batch()
        x = torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.int64))
        y = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64))
        self.opt.zero_grad(set_to_none=True)
        logits, state = self.module(x, self.carry)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), cfg.clip)
        self.opt.step()
        self.carry = tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()
        self.step += 1
        return loss.item()

    def evaluate(self, ids, batch_size=32, seq_len=256) -> float:
        """:func:`hiddenstate.train.evaluate`, in torch: same rows, chunks and carried state."""
        torch = self.torch
        ids = np.asarray(ids, dtype=np.int64)
        N = max(1, min(batch_size, ids.size // 2))
        R = ids.size // N
        rows = torch.from_numpy(np.ascontiguousarray(ids[: N * R].reshape(N, R).T))
        total, count, state = 0.0, 0, None
        self.module.eval()
        with torch.no_grad():
            for start in range(0, R - 1, seq_len):
                stop = min(start + seq_len, R - 1)
                logits, state = self.module(rows[start:stop], state)
                y = rows[start + 1: stop + 1]
                total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                                 y.reshape(-1), reduction="sum"))
                count += y.numel()
        self.module.train()
        return total / count


def main(args):
    try:
        import torch
    except ImportError:
        sys.exit("bench_train.py needs torch (pip install torch) as the reference implementation.")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.preset not in PRESETS:
        sys.exit(f"--preset must be one of {sorted(PRESETS)}; got {args.preset!r}.")
    cfg = make_config(dict(PRESETS[args.preset]) | {"max_minutes": None})
    corpus = Corpus.read(cfg, None)
    ours = Trainer(cfg, corpus)
    theirs = TorchTrainer(torch, cfg, corpus, ours.model)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"main job: preset {args.preset!r}: {cfg.cell} H={cfg.hidden_size} L={cfg.num_layers} T={cfg.seq_len} "
          f"N={cfg.batch_size} {cfg.dtype}, Adam lr {cfg.lr} (cosine), clip {cfg.clip}; threads {args.threads}; "
          f"clock {args.clock}", flush=True)
    t_ours, t_torch, worst = [], [], 0.0
    for step in range(args.steps + 1):  # step 0 warms both up and is not timed
        order = (0, 1) if step % 2 else (1, 0)
        for who in order:
            t = clock()
            if who == 0:
                loss_ours = ours.train_step()["train_loss"]
                (t_ours if step else []).append(clock() - t)
            else:
                loss_torch = theirs.train_step()
                (t_torch if step else []).append(clock() - t)
        worst = max(worst, abs(loss_ours - loss_torch))
        if step % 10 == 0:
            print(f"  step {step}/{args.steps}: loss ours {loss_ours:.4f}, torch {loss_torch:.4f}", file=sys.stderr,
                  flush=True)
    step_o, step_t = 1e3 * float(np.median(t_ours)), 1e3 * float(np.median(t_torch))
    v_ours, v_torch, val_o, val_t = [], [], None, None
    for r in range(args.val_rounds):
        for who in ((0, 1) if r % 2 else (1, 0)):
            t = clock()
            if who == 0:
                val_o = evaluate(ours.model, corpus.val_ids)
                v_ours.append(clock() - t)
            else:
                val_t = theirs.evaluate(corpus.val_ids)
                v_torch.append(clock() - t)
        print(f"  validation pass {r + 1}/{args.val_rounds}", file=sys.stderr, flush=True)
    vo, vt = float(np.median(v_ours)), float(np.median(v_torch))
    rows = [("train step (ms)", f"{step_o:.1f}", f"{step_t:.1f}", f"{step_o / step_t:.2f}"),
            ("validation pass (s)", f"{vo:.2f}", f"{vt:.2f}", f"{vo / vt:.2f}")]
    header = ("main job", "ours", "torch", "ratio")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print(f"after {args.steps + 1} steps: train loss ours {loss_ours:.4f}, torch {loss_torch:.4f} (largest step "
          f"difference {worst:.2e}); validation {val_o:.4f} vs {val_t:.4f} nats/char "
          f"({len(corpus.val_ids)} characters); ratio < 1: hiddenstate is faster.")
    if not (math.isfinite(worst) and worst < 0.05 and abs(val_o - val_t) < 0.05):
        print("WARNING: the two implementations disagree (loss difference above 0.05 nats/char).")


if __name__ == "__main__":
    try:
        main(ARGS)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback
        print(f"{os.path.basename(sys.argv[0])}: interrupted", file=sys.stderr)
        sys.exit(130)
