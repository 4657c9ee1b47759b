"""The steps of a training run: its text as ids, the trainer's state, the loop and its guards.

:func:`~hiddenstate.train.train` (:mod:`hiddenstate.train.loop`) claims the run directory and
then hands over to these:

* :class:`Corpus` -- the text as ids: vocabulary, training and validation splits (checked: at
  least 2 distinct characters, one batch of training text), what the checkpoint records of it;
* :class:`Trainer` -- model, optimizer, moving average, batcher, RNG, carried state and history
  between steps; :meth:`Trainer.train_step` is one truncated-BPTT step;
* :class:`StepLoop` -- steps until ``steps``, the time budget, the callback or a signal; logs,
  evaluates and saves on schedule. Each step runs with floating-point errors raised, so a run
  that diverges stops with one message (:class:`~hiddenstate.train.guards.TrainingDiverged`)
  instead of printing NumPy's warnings; a failed write names its file
  (:class:`~hiddenstate.train.guards.RunWriteError`);
* :class:`Progress` -- the tqdm bar (or a line per evaluation);
* :func:`evaluate` -- the validation loss of a model on a token stream.

Only :func:`evaluate` is public API (re-exported by :mod:`hiddenstate.train`); the classes are
the machinery of :func:`~hiddenstate.train.train`.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hiddenstate.core.functional import log_softmax
from hiddenstate.train.config import TrainConfig, lr_at
from hiddenstate.train.corpus import StreamBatcher, Vocabulary, load_text, train_val_split
from hiddenstate.train.distributed.world import LOCAL, World
from hiddenstate.train.guards import (
    DeferredSignals,
    RunWriteError,
    TrainingDiverged,
    TrainingInterrupted,
    divergence,
)
from hiddenstate.train.history import LN2, loss_metrics
from hiddenstate.train.initial_state import broadcast_state
from hiddenstate.train.model import CharRNN
from hiddenstate.train.optim import Adam, ExponentialMovingAverage, clip_grad_norm
from hiddenstate.train.rundir import CHECKPOINT_DIR, LOG_FILE, Trained
from hiddenstate.train.rundir.checkpoint import load_checkpoint
from hiddenstate.train.rundir.snapshot import HISTORY, Snapshot

__all__ = ["evaluate"]


def evaluate(model: CharRNN, ids, *, batch_size: int = 32, seq_len: int = 256, initial_state=None) -> float:
    """Mean cross-entropy in nats per character of a token stream, reading it with carried state.

    The stream is cut into ``batch_size`` contiguous rows (its last ``M mod batch_size`` tokens
    are left out); each row starts from a zero state and is read in chunks of ``seq_len`` with
    the state carried across chunks, so every prediction except a row's first has the whole row
    before it as context.

    Parameters
    ----------
    model : CharRNN
    ids : ndarray of shape (M,), integer, M >= 2
    batch_size : int, default 32
        Rows read in parallel (fewer if the stream is short).
    seq_len : int, default 256
    initial_state : ndarray or pair, optional
        The state every row starts from, one row (or ``batch_size`` rows) in the model's format
        (:mod:`hiddenstate.train.initial_state`), e.g. a tuned one; None: zeros.

    Returns
    -------
    float
        Nats per character (divide by ln 2 for bits per character; ``exp`` is the perplexity).

    Raises
    ------
    ValueError
        ``ids`` not 1-D or shorter than 2 tokens; an ``initial_state`` that is not one for ``model``.
    """
    total, count = nll_sum(model, ids, batch_size=batch_size, seq_len=seq_len, initial_state=initial_state)
    return total / count


def validation_rows(ids, batch_size: int = 32) -> np.ndarray:
    """The (R, N) layout :func:`evaluate` reads a stream in: N contiguous rows side by side.

    Parameters
    ----------
    ids : ndarray of shape (M,), integer, M >= 2
    batch_size : int, default 32
        N (fewer if the stream is short).

    Returns
    -------
    ndarray of shape (R, N), int64
        Column n is tokens ``[n R, (n+1) R)``; the last ``M mod N`` tokens are left out.

    Raises
    ------
    ValueError
        ``ids`` not 1-D or shorter than 2 tokens.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size < 2:
        raise ValueError(f"ids must be a 1-D stream of at least 2 tokens; got shape {ids.shape}.")
    N = max(1, min(batch_size, ids.size // 2))
    R = ids.size // N
    return np.ascontiguousarray(ids[: N * R].reshape(N, R).T)  # (R, N)


def nll_sum(model: CharRNN, ids, *, batch_size: int = 32, seq_len: int = 256, rows: slice | None = None,
            initial_state=None) -> tuple:
    """The summed cross-entropy (nats) and the number of predictions of :func:`evaluate`, for some rows.

    Parameters
    ----------
    model : CharRNN
    ids : ndarray of shape (M,), integer, M >= 2
    batch_size, seq_len : int
        As in :func:`evaluate`.
    rows : slice, optional
        The streams (columns of :func:`validation_rows`) to read; None: all. A process of a
        distributed run reads its share and the sums are added up over the processes.
    initial_state : ndarray or pair, optional
        The state of one row that every row starts from (None: zeros).

    Returns
    -------
    total : float
        Nats, summed over the predictions.
    count : int
        The predictions made (0 for no rows).

    Raises
    ------
    ValueError
        ``ids`` not 1-D or shorter than 2 tokens.
    """
    rows = validation_rows(ids, batch_size) if rows is None else validation_rows(ids, batch_size)[:, rows]  # (R, n)
    R = rows.shape[0]
    total, count = 0.0, 0
    if rows.shape[1] == 0:
        return total, count
    state = None if initial_state is None else broadcast_state(model, initial_state, rows.shape[1])
    for start in range(0, R - 1, seq_len):
        stop = min(start + seq_len, R - 1)
        x, y = rows[start:stop], rows[start + 1: stop + 1]  # (T, N) each
        logits, state, _ = model.forward(x, state, need_cache=False)  # (T, N, V); no backward follows
        with np.errstate(under="ignore"):
            logp = log_softmax(logits.reshape(-1, model.vocab_size).astype(np.float64))  # (T*N, V)
        total -= float(logp[np.arange(logp.shape[0]), y.reshape(-1)].sum())
        count += y.size
    return total, count


@dataclass
class Corpus:
    """The run's text as ids: the vocabulary, the two splits, and what the checkpoint records of it."""

    vocab: Vocabulary
    train_ids: np.ndarray  # (M_train,) int64
    val_ids: np.ndarray  # (M_val,) int64
    info: dict

    @classmethod
    def read(cls, cfg: TrainConfig, loaded: Trained | None, base: Trained | None = None) -> Corpus:
        text = load_text(cfg.data, name="data")
        source = f"'{cfg.data}'" if cfg.data else "the embedded corpus"
        sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if loaded is not None and sha256 != loaded.snapshot.text["sha256"]:
            raise ValueError(f"data must be the text the checkpoint was trained on; got {source}, whose contents "
                             "differ. Resume with the same file (--data FILE if it moved).")
        known = loaded or base  # resuming, or tuning a model's initial state: that model's vocabulary
        vocab = Vocabulary(text) if known is None else known.vocab
        unknown = sorted(set(text) - set(vocab.chars)) if base is not None else []
        if unknown:
            raise ValueError(f"data must only use the characters of the model being tuned (--tune-initial-state); got "
                             f"{len(unknown)} unknown: {''.join(unknown[:20])!r} in {source}.")
        if vocab.size < 2:
            raise ValueError(f"data must hold at least 2 distinct characters; got {vocab.size} ({vocab.chars!r}) in "
                             f"{source}: there is nothing to predict (every loss would be 0). Use a real text.")
        if round(len(text) * cfg.val_fraction) < 2:  # before the split, whose message names val_fraction
            raise ValueError(f"data must leave at least 2 validation characters; got "
                             f"{round(len(text) * cfg.val_fraction)} from {len(text)} characters. Use a longer text.")
        train_ids, val_ids = train_val_split(vocab.encode(text), cfg.val_fraction)
        if val_ids.size < 2:
            raise ValueError(f"data must leave at least 2 validation characters; got {val_ids.size} from "
                             f"{len(text)} characters. Use a longer text.")
        N, T = cfg.batch_size, cfg.seq_len
        if train_ids.size < N * (T + 1):
            raise ValueError(f"the training text must hold at least --batch-size x (--seq-len + 1) = {N} x {T + 1} = "
                             f"{N * (T + 1)} characters for one batch; got {train_ids.size} (of the {len(text)} "
                             f"characters of {source}; the last {cfg.val_fraction:.0%} are the validation text). "
                             "Lower --batch-size or --seq-len, or use a longer --data.")
        info = {"chars": len(text), "sha256": sha256, "source": cfg.data or "embedded shakespeare.txt",
                "train_chars": int(train_ids.size), "val_chars": int(val_ids.size)}
        return cls(vocab, train_ids, val_ids, info)


class _Diverged(FloatingPointError):
    """A loss, gradient or weight that means the run diverged (the message says which)."""


#: The public name of :class:`_Diverged`, for the device trainer (:mod:`hiddenstate.train.device`).
Diverged = _Diverged


class Trainer:
    """The state of a run between steps: model, optimizer, moving average, batcher, RNG, carry, history."""

    def __init__(self, cfg: TrainConfig, corpus: Corpus, world: World = LOCAL):
        self.cfg, self.corpus, self.world = cfg, corpus, world
        self.batcher = StreamBatcher(corpus.train_ids, cfg.batch_size, cfg.seq_len)
        self.rng = np.random.default_rng(cfg.seed)  # the initial weights, then the dropout masks
        self.mask_rng = world.mask_generator(self.rng, cfg.batch_size)  # this process's rows of the masks
        self.model = CharRNN(corpus.vocab.size, cfg.hidden_size, cfg.num_layers, cell=cfg.cell,
                             embedding_dim=cfg.embedding_dim, dropout=cfg.dropout, weight_drop=cfg.weight_drop,
                             dtype=np.dtype(cfg.dtype), rng=self.rng)
        self.groups = self.model.gradient_groups()  # the order the backward pass finishes the gradients in
        self.opt = Adam(self.model.params, lr=cfg.lr)
        self.ema = None if cfg.ema is None else ExponentialMovingAverage(self.model.params, decay=cfg.ema)
        self.history: dict[str, list] = {key: [] for key in HISTORY}
        self.step = 0
        self.carry = None  # (L, N, H), a pair for the LSTM, or None at the start of a pass

    def restore(self, snap: Snapshot) -> None:
        """Continue from a checkpoint: the state that the run had after step ``snap.step``."""
        if self.ema is None:
            self.model.load_state_dict(snap.weights)
        else:  # model.safetensors holds the averages; training resumes from the raw weights
            self.model.load_state_dict(snap.raw_weights)
            self.ema.load_state_dict({"step": np.array(snap.ema_steps, dtype=np.int64),
                                      **{"average." + k: v for k, v in snap.weights.items()}})
        self.opt.load_state_dict(snap.adam)
        self.batcher.load_state_dict(snap.batcher)
        self.rng.bit_generator.state = snap.rng
        self.step, self.carry = int(snap.step), self.world.shard_state(snap.carry)
        self.history = {key: list(snap.history[key]) for key in HISTORY}
        if self.step > self.cfg.steps:
            raise ValueError(f"steps must be at least the checkpoint's step {self.step} to resume; "
                             f"got {self.cfg.steps}.")

    def snapshot(self, val_loss: float | None, elapsed_s: float) -> Snapshot:
        """Everything the checkpoint of this moment holds."""
        self.world.check_same_weights(self.model.params)  # ranks: still one model
        weights, raw = self.model.state_dict(), None
        if self.ema is not None:
            raw, weights = weights, {k: v.copy() for k, v in self.ema.average.items()}
        return Snapshot(model=self.model.config(), train=self.cfg.to_dict(), vocab=self.corpus.vocab.to_json(),
                        step=self.step, val_loss=val_loss, batcher=self.batcher.state_dict(),
                        rng=self.rng.bit_generator.state, elapsed_s=elapsed_s, text=self.corpus.info,
                        weights=weights, adam=self.opt.state_dict(), history=self.history,
                        carry=self.world.gather_state(self.carry),
                        raw_weights=raw, ema_steps=None if self.ema is None else self.ema.n_averaged)

    def train_step(self) -> dict:
        """One optimizer step on the next (T, N) chunk; returns the step's log record."""
        cfg = self.cfg
        self.opt.lr = lr_at(cfg, self.step / cfg.steps)  # by step only, so a run is repeatable on any machine
        if self.batcher.at_epoch_start:
            self.carry = None  # a new pass over the text: the carried state no longer follows on
        inputs, targets = self.world.shard(self.batcher.next_batch())  # (T, N) each (a rank: its rows)
        loss, grads, self.carry = self._compute(inputs, targets)
        loss, grads = self.world.average(loss, grads)  # a rank: the whole batch's (waits for the buckets)
        why = divergence(loss, self.model.vocab_size)
        if why:
            raise _Diverged(f"the training loss {why}")
        norm = clip_grad_norm(grads, cfg.clip)
        if not math.isfinite(norm):
            raise _Diverged(f"the gradient norm became {norm}")
        self.opt.step(grads)
        if self.ema is not None:
            self.ema.update()
        if not all(np.isfinite(p).all() for p in self.model.params.values()):
            raise _Diverged("the weights became non-finite")
        self.step += 1
        self.history["train_loss"].append(float(loss))
        self.history["grad_norm"].append(float(norm))
        return {"step": self.step, "train_loss": float(loss), "grad_norm": float(norm), "lr": self.opt.lr,
                "epoch": self.batcher.epoch}

    def _compute(self, inputs, targets) -> tuple:
        """This process's loss, gradients and carried state of a chunk (a rank reduces each layer's as it is final)."""
        return self.world.local(
            lambda ready=None: self.model.loss_and_grads(inputs, targets, self.carry, training=True, rng=self.mask_rng,
                                                         ready=ready),
            self.model.params, self.groups)

    def evaluate(self) -> float:
        """:func:`evaluate` on the validation text, with the averaged weights when there are any."""
        rows = self.world.val_rows(validation_rows(self.corpus.val_ids).shape[1])
        if self.ema is None or self.ema.n_averaged == 0:
            total, count = nll_sum(self.model, self.corpus.val_ids, rows=rows)
        else:
            raw = self.model.state_dict()
            self.model.load_state_dict(self.ema.average)
            try:
                total, count = nll_sum(self.model, self.corpus.val_ids, rows=rows)
            finally:
                self.model.load_state_dict(raw)
        total, count = self.world.sum(total, count)  # a rank: the sums over every rank's rows
        return total / count

    def validate(self) -> float:
        """:meth:`evaluate`, recorded in the history at the current step."""
        nats = self.evaluate()
        self.history["val_step"].append(self.step)
        self.history["val_loss"].append(nats)
        return nats

    def final_model(self) -> CharRNN:
        """The model as saved: the averaged weights when there are any."""
        if self.ema is not None and self.ema.n_averaged:
            self.model.load_state_dict(self.ema.average)
        return self.model


def _format_time(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """The tqdm bar on stderr (step, loss, validation loss, chars/s, budget left), or printed lines."""

    def __init__(self, cfg: TrainConfig, step: int, *, bar: bool, verbose: bool, budget_s: float | None):
        self.cfg, self.verbose, self.budget_s = cfg, verbose, budget_s
        self.bar = None
        if bar:
            from tqdm.auto import tqdm

            interactive = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
            self.bar = tqdm(total=cfg.steps, initial=step, unit="step", dynamic_ncols=True, smoothing=0.1,
                            mininterval=0.1 if interactive else 5.0, desc=f"{cfg.cell} H={cfg.hidden_size}x{cfg.num_layers}")
        self.window_t, self.window_chars, self.chars_per_s = time.perf_counter(), 0, 0.0

    def evaluated(self, step: int, history: dict, val: float, elapsed_s: float) -> None:
        """Without a bar, print the evaluation on one line."""
        if self.bar is None and self.verbose:
            train = np.mean(history["train_loss"][-self.cfg.eval_every:])
            print(f"step {step}/{self.cfg.steps}  train {train:.4f}  val {val:.4f} nats/char "
                  f"({val / LN2:.3f} bits/char)  elapsed {_format_time(elapsed_s)}", flush=True)

    def stepped(self, history: dict, val: float | None, elapsed_s: float) -> None:
        """Count one step's characters and move the bar."""
        self.window_chars += self.cfg.batch_size * self.cfg.seq_len
        now = time.perf_counter()
        if now - self.window_t >= 2.0:
            self.chars_per_s = self.window_chars / (now - self.window_t)
            self.window_t, self.window_chars = now, 0
        if self.bar is None:
            return
        postfix = {"loss": f"{np.mean(history['train_loss'][-50:]):.3f}",
                   "val": "-" if val is None else f"{val:.3f}"}
        if self.chars_per_s:  # shown from the first measurement on (after 2 s), never as a placeholder
            postfix["chars/s"] = f"{self.chars_per_s:,.0f}"
        if self.budget_s is not None:
            postfix["budget left"] = _format_time(self.budget_s - elapsed_s)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: An overflow or a NaN stops the run (as TrainingDiverged, nothing printed); an underflow to 0 is harmless.
_FP_RAISE = {"over": "raise", "invalid": "raise", "divide": "raise", "under": "ignore"}


class StepLoop:
    """One call of :func:`~hiddenstate.train.train`: the loop, its clocks, the files it writes, what is on disk."""

    def __init__(self, trainer: Trainer, out: Path, log_file, *, clock: Callable[[], float],
                 part_clock: Callable[[], float], budget_s: float | None, progress: Progress, callback,
                 signals: DeferredSignals, saved_step: int | None):
        self.trainer, self.out, self.log_file = trainer, out, log_file
        self.clock, self.part_clock, self.budget_s = clock, part_clock, budget_s
        self.progress, self.callback, self.signals = progress, callback, signals
        self.saved_step = saved_step  # the step of the checkpoint on disk
        self.checkpoint = out / CHECKPOINT_DIR

    def _on_disk(self) -> str:
        if self.saved_step is None:
            return "No checkpoint was saved."
        return f"The checkpoint of step {self.saved_step} in '{self.checkpoint}' is intact."

    def guarded(self, compute: Callable, what: str, step: int):
        """``compute()`` with floating-point errors raised; a divergence at ``step`` becomes TrainingDiverged."""
        cfg = self.trainer.cfg
        try:
            with np.errstate(**_FP_RAISE):
                return compute()
        except FloatingPointError as error:
            why = str(error) if isinstance(error, _Diverged) else f"{what} hit a floating-point error ({error})"
            raise TrainingDiverged(f"training diverged at step {step}: {why}. Lower the learning rate (--lr, now "
                                   f"{cfg.lr:g}) or the gradient clipping norm (--clip, now {cfg.clip:g}). "
                                   f"{self._on_disk()}", step=step, checkpoint_step=self.saved_step) from None

    def write_failed(self, error: OSError, doing: str) -> RunWriteError:
        """An OSError while writing, with the file and the state of the checkpoint on disk."""
        try:
            _, meta, _ = load_checkpoint(self.checkpoint)
            kept = f"the checkpoint of step {meta.get('step')} in '{self.checkpoint}' is intact"
        except FileNotFoundError:
            kept = "no checkpoint had been saved before"
        except (OSError, ValueError) as again:
            kept = f"the previous checkpoint could not be read back ({' '.join(str(again).split())})"
        return RunWriteError(error.errno, f"{error.strerror or error} while {doing}; {kept}.")

    def log(self, record: dict) -> None:
        try:
            self.log_file.write(json.dumps(record) + "\n")
        except OSError as error:
            raise self.write_failed(error, f"writing '{self.out / LOG_FILE}' at step {record['step']}") from None

    def save(self, last_val: float | None) -> None:
        step = self.trainer.step
        try:
            self.log_file.flush()
        except OSError as error:
            raise self.write_failed(error, f"writing '{self.out / LOG_FILE}' at step {step}") from None
        try:
            snapshot = self.trainer.snapshot(last_val, self.clock())  # a rank: every row's state, gathered
            if self.trainer.world.leader:  # only the leader (rank 0) writes the run directory
                snapshot.save(self.checkpoint)
        except OSError as error:
            raise self.write_failed(error, f"saving the checkpoint of step {step} to '{self.checkpoint}'") from None
        self.saved_step = step

    def interrupted(self, saved: bool) -> TrainingInterrupted:
        return TrainingInterrupted(self.signals.received, step=self.saved_step, checkpoint=self.checkpoint, saved=saved)

    def run(self) -> tuple[str, float | None]:
        """Step until ``steps``, the time budget, the callback or a signal; log, evaluate and save on schedule."""
        trainer = self.trainer
        cfg, history, V = trainer.cfg, trainer.history, trainer.model.vocab_size

        def validate() -> float:
            nats = trainer.validate()
            why = divergence(nats, V)
            if why:
                raise _Diverged(f"the validation loss {why}")
            return nats

        last_val = history["val_loss"][-1] if history["val_loss"] else None
        if self.callback is None:  # ranks: the stop agreement rides in the step's all-reduce (a callback decides after it)
            trainer.world.watch(lambda: (self.budget_s is not None and self.part_clock() >= self.budget_s,
                                         self.signals.received))
        if self.signals.received is not None and trainer.step < cfg.steps:
            raise self.interrupted(saved=False)  # before the first step: nothing new to save
        while trainer.step < cfg.steps:
            record = self.guarded(trainer.train_step, "the training step", trainer.step + 1)
            record["elapsed_s"] = round(self.clock(), 3)
            out_of_time = self.budget_s is not None and self.part_clock() >= self.budget_s
            stop = bool(self.callback(dict(record))) if self.callback is not None else False
            out_of_time, stop, signum = trainer.world.agree(out_of_time, stop, self.signals.received)  # ranks: all stop
            final = trainer.step == cfg.steps or out_of_time or stop
            if trainer.step % cfg.eval_every == 0 or final:
                last_val = self.guarded(validate, "the validation pass", trainer.step)
                record.update(loss_metrics(last_val))
                self.progress.evaluated(trainer.step, history, last_val, self.clock())
            self.log(record)
            saved = trainer.step % cfg.save_every == 0 or final
            if saved:
                self.save(last_val)
            self.progress.stepped(history, last_val, self.part_clock())
            signum = trainer.world.signal(signum, self.signals.received)  # ranks: the one agreed on above
            if signum is not None and not final:
                if not saved:
                    self.save(last_val)
                raise TrainingInterrupted(signum, step=self.saved_step, checkpoint=self.checkpoint, saved=True)
            if final and trainer.step < cfg.steps:
                return ("time" if out_of_time else "callback"), last_val
        return "steps", last_val
