"""Train a character-level language model on a text file with truncated BPTT, and resume it exactly.

The char-rnn job (Karpathy 2015) with this package's own layers and BPTT:

* the text is encoded with a :class:`~hiddenstate.train.corpus.Vocabulary`; the last
  ``val_fraction`` (10 %) is the validation split;
* :class:`~hiddenstate.train.corpus.StreamBatcher` cuts the training part into ``N`` parallel
  streams read ``T`` characters at a time; the hidden state is carried from one chunk to the next
  and gradients are cut at the chunk boundary (truncated BPTT, Williams & Peng 1990), and reset
  when a pass over the text starts again;
* Adam (Kingma & Ba 2015), gradient clipping by global L2 norm (Pascanu, Mikolov & Bengio 2013),
  and a cosine learning-rate decay to ``lr * lr_min_ratio`` (:func:`~hiddenstate.train.config.lr_at`);
* optionally (``ema``), an exponential moving average of the weights (Polyak & Juditsky 1992) is
  what is evaluated, saved as the model and sampled from; training itself uses the raw weights;
* every step is logged to ``<out>/log.jsonl`` (:mod:`hiddenstate.train.history`); the validation
  loss (nats/char, also bits/char and perplexity) every ``eval_every`` steps; ``<out>/loss.png``
  is drawn at the end;
* ``<out>/checkpoint`` holds a :class:`~hiddenstate.train.snapshot.Snapshot`: the weights under
  torch's names plus everything that makes ``resume`` continue the very same run (optimizer
  moments, batcher position, the carried hidden state, the RNG state, the elapsed time, the history).

Examples
--------
>>> from hiddenstate.train import TrainConfig, train, sample
>>> result = train(TrainConfig(steps=300, hidden_size=64, out="runs/tiny"))   # doctest: +SKIP
>>> print(sample("runs/tiny", prime="ROMEO:", length=200, seed=1))            # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hiddenstate.functional import log_softmax
from hiddenstate.train.config import TrainConfig, lr_at, make_config
from hiddenstate.train.corpus import StreamBatcher, Vocabulary, load_text, train_val_split
from hiddenstate.train.history import LN2, kept_log_lines, loss_metrics, plot_history
from hiddenstate.train.model import CharRNN
from hiddenstate.train.optim import Adam, ExponentialMovingAverage, clip_grad_norm
from hiddenstate.train.rundir import CHECKPOINT_DIR, LOG_FILE, PLOT_FILE, Trained, load, sample
from hiddenstate.train.snapshot import HISTORY, Snapshot

__all__ = ["TrainResult", "evaluate", "train"]


def evaluate(model: CharRNN, ids, *, batch_size: int = 32, seq_len: int = 256) -> float:
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

    Returns
    -------
    float
        Nats per character (divide by ln 2 for bits per character; ``exp`` is the perplexity).

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
    rows = np.ascontiguousarray(ids[: N * R].reshape(N, R).T)  # (R, N)
    total, count, state = 0.0, 0, None
    for start in range(0, R - 1, seq_len):
        stop = min(start + seq_len, R - 1)
        x, y = rows[start:stop], rows[start + 1: stop + 1]  # (T, N) each
        logits, state, _ = model.forward(x, state)  # (T, N, V)
        with np.errstate(under="ignore"):
            logp = log_softmax(logits.reshape(-1, model.vocab_size).astype(np.float64))  # (T*N, V)
        total -= float(logp[np.arange(logp.shape[0]), y.reshape(-1)].sum())
        count += y.size
    return total / count


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes
    ----------
    model, vocab, config
        The trained model (the moving average when ``ema`` is set, as saved), its vocabulary and
        the run's configuration.
    step : int
        Steps completed (equal to ``config.steps`` unless the time limit or the callback stopped it).
    val_loss, val_bpc, val_ppl : float
        Final validation loss in nats/char, bits/char and perplexity.
    train_loss : float
        Mean training loss over the last ``min(100, steps)`` steps (nats/char).
    history : dict of str to ndarray
        ``train_loss`` and ``grad_norm`` per step (index i is step i+1), ``val_step`` and
        ``val_loss`` for every evaluation.
    seconds : float
        Wall-clock time of the run, summed over resumed parts.
    chars_per_s : float
        Training characters per second in this call.
    stopped : {"steps", "time", "callback"}
    out, checkpoint, log, plot : pathlib.Path
        The run directory, its checkpoint, its log and its loss plot.
    """

    model: CharRNN
    vocab: Vocabulary
    config: TrainConfig
    step: int
    val_loss: float
    val_bpc: float
    val_ppl: float
    train_loss: float
    history: dict = field(repr=False)
    seconds: float
    chars_per_s: float
    stopped: str
    out: Path
    checkpoint: Path
    log: Path
    plot: Path | None

    def sample(self, prime: str | None = None, length: int = 500, *, temperature: float = 1.0,
               seed: int | None = 0) -> str:
        """Generate text from the trained model (:func:`~hiddenstate.train.sample` with this source).

        Parameters
        ----------
        prime : str, optional
            Text to condition on (default a newline).
        length : int, default 500
            Characters to generate after the prime.
        temperature : float, default 1.0
            Softmax temperature (>= 0; 0 is greedy).
        seed : int or None, default 0
            Seeds the sampler.

        Returns
        -------
        str
            ``prime`` followed by ``length`` generated characters.
        """
        return sample(self, prime=prime, length=length, temperature=temperature, seed=seed)

    def summary(self) -> str:
        """One line: steps, time and the final validation loss in nats, bits and perplexity.

        Returns
        -------
        str
        """
        return (f"step {self.step}/{self.config.steps} in {self.seconds:.0f} s: validation loss "
                f"{self.val_loss:.4f} nats/char ({self.val_bpc:.4f} bits/char, perplexity {self.val_ppl:.2f})")


@dataclass
class _Corpus:
    """The run's text as ids: the vocabulary, the two splits, and what the checkpoint records of it."""

    vocab: Vocabulary
    train_ids: np.ndarray  # (M_train,) int64
    val_ids: np.ndarray  # (M_val,) int64
    info: dict

    @classmethod
    def read(cls, cfg: TrainConfig, loaded: Trained | None) -> _Corpus:
        text = load_text(cfg.data)
        sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if loaded is not None and sha256 != loaded.snapshot.text["sha256"]:
            raise ValueError(f"data must be the text the checkpoint was trained on; got "
                             f"{cfg.data or 'the embedded corpus'!r}, whose contents differ. Resume with the same file.")
        vocab = Vocabulary(text) if loaded is None else loaded.vocab
        train_ids, val_ids = train_val_split(vocab.encode(text), cfg.val_fraction)
        if val_ids.size < 2:
            raise ValueError(f"data must leave at least 2 validation characters; got {val_ids.size} from "
                             f"{len(text)} characters. Use a longer text.")
        info = {"chars": len(text), "sha256": sha256, "source": cfg.data or "embedded shakespeare.txt",
                "train_chars": int(train_ids.size), "val_chars": int(val_ids.size)}
        return cls(vocab, train_ids, val_ids, info)


class _Trainer:
    """The state of a run between steps: model, optimizer, moving average, batcher, RNG, carry, history."""

    def __init__(self, cfg: TrainConfig, corpus: _Corpus):
        self.cfg, self.corpus = cfg, corpus
        self.batcher = StreamBatcher(corpus.train_ids, cfg.batch_size, cfg.seq_len)
        self.rng = np.random.default_rng(cfg.seed)  # the initial weights, then the dropout masks
        self.model = CharRNN(corpus.vocab.size, cfg.hidden_size, cfg.num_layers, cell=cfg.cell,
                             embedding_dim=cfg.embedding_dim, dropout=cfg.dropout, weight_drop=cfg.weight_drop,
                             dtype=np.dtype(cfg.dtype), rng=self.rng)
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
        self.step, self.carry = int(snap.step), snap.carry
        self.history = {key: list(snap.history[key]) for key in HISTORY}
        if self.step > self.cfg.steps:
            raise ValueError(f"steps must be at least the checkpoint's step {self.step} to resume; "
                             f"got {self.cfg.steps}.")

    def snapshot(self, val_loss: float | None, elapsed_s: float) -> Snapshot:
        """Everything the checkpoint of this moment holds."""
        weights, raw = self.model.state_dict(), None
        if self.ema is not None:
            raw, weights = weights, {k: v.copy() for k, v in self.ema.average.items()}
        return Snapshot(model=self.model.config(), train=self.cfg.to_dict(), vocab=self.corpus.vocab.to_json(),
                        step=self.step, val_loss=val_loss, batcher=self.batcher.state_dict(),
                        rng=self.rng.bit_generator.state, elapsed_s=elapsed_s, text=self.corpus.info,
                        weights=weights, adam=self.opt.state_dict(), history=self.history, carry=self.carry,
                        raw_weights=raw, ema_steps=None if self.ema is None else self.ema.n_averaged)

    def train_step(self) -> dict:
        """One optimizer step on the next (T, N) chunk; returns the step's log record."""
        cfg = self.cfg
        self.opt.lr = lr_at(cfg, self.step / cfg.steps)  # by step only, so a run is repeatable on any machine
        if self.batcher.at_epoch_start:
            self.carry = None  # a new pass over the text: the carried state no longer follows on
        inputs, targets = self.batcher.next_batch()  # (T, N) each
        loss, grads, self.carry = self.model.loss_and_grads(inputs, targets, self.carry, training=True, rng=self.rng)
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss became {loss} at step {self.step + 1}. Lower --lr or --clip.")
        norm = clip_grad_norm(grads, cfg.clip)
        self.opt.step(grads)
        if self.ema is not None:
            self.ema.update()
        self.step += 1
        self.history["train_loss"].append(float(loss))
        self.history["grad_norm"].append(float(norm))
        return {"step": self.step, "train_loss": float(loss), "grad_norm": float(norm), "lr": self.opt.lr,
                "epoch": self.batcher.epoch}

    def evaluate(self) -> float:
        """:func:`evaluate` on the validation text, with the averaged weights when there are any."""
        if self.ema is None or self.ema.n_averaged == 0:
            return evaluate(self.model, self.corpus.val_ids)
        raw = self.model.state_dict()
        self.model.load_state_dict(self.ema.average)
        try:
            return evaluate(self.model, self.corpus.val_ids)
        finally:
            self.model.load_state_dict(raw)

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


class _Progress:
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
                   "val": "-" if val is None else f"{val:.3f}",
                   "chars/s": f"{self.chars_per_s:,.0f}" if self.chars_per_s else "-"}
        if self.budget_s is not None:
            postfix["budget left"] = _format_time(self.budget_s - elapsed_s)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_steps(trainer: _Trainer, log_file, ckpt_dir: Path, clock: Callable[[], float], budget_s: float | None,
               progress: _Progress, callback) -> tuple[str, float | None]:
    """Step until ``steps``, the time budget (s) or the callback; log, evaluate and save on schedule."""
    cfg, history = trainer.cfg, trainer.history
    last_val = history["val_loss"][-1] if history["val_loss"] else None
    while trainer.step < cfg.steps:
        record = trainer.train_step()
        record["elapsed_s"] = round(clock(), 3)
        out_of_time = budget_s is not None and clock() >= budget_s
        stop = bool(callback(dict(record))) if callback is not None else False
        final = trainer.step == cfg.steps or out_of_time or stop
        if trainer.step % cfg.eval_every == 0 or final:
            last_val = trainer.validate()
            record.update(loss_metrics(last_val))
            progress.evaluated(trainer.step, history, last_val, clock())
        log_file.write(json.dumps(record) + "\n")
        if trainer.step % cfg.save_every == 0 or final:
            log_file.flush()
            trainer.snapshot(last_val, clock()).save(ckpt_dir)
        progress.stepped(history, last_val, clock())
        if final and trainer.step < cfg.steps:
            return ("time" if out_of_time else "callback"), last_val
    return "steps", last_val


def _out_dir(cfg: TrainConfig) -> Path:
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a directory; got '{out}', which is a file. Choose another path.")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _plot_title(cfg: TrainConfig, val_loss: float) -> str:
    return (f"{cfg.cell.upper()} H={cfg.hidden_size} L={cfg.num_layers} T={cfg.seq_len} N={cfg.batch_size} "
            f"lr={cfg.lr:g}" + (f" dropout={cfg.dropout:g}" if cfg.dropout else "")
            + (f" weight_drop={cfg.weight_drop:g}" if cfg.weight_drop else "")
            + f" {cfg.dtype}; final val {val_loss:.3f} nats/char")


def train(config: TrainConfig | dict | None = None, *, resume=None, progress: bool = True,
          callback: Callable[[dict], bool | None] | None = None, verbose: bool = True) -> TrainResult:
    """Train a :class:`~hiddenstate.train.model.CharRNN` on a text with truncated BPTT.

    Parameters
    ----------
    config : TrainConfig or dict, optional
        The run. A dict gives only the fields to set (the rest take TrainConfig's defaults, or,
        with ``resume``, the checkpoint's values).
    resume : path, optional
        A run or checkpoint directory to continue. The model, data and optimization settings come
        from the checkpoint; only ``data`` (a moved file; its contents must be the same),
        ``steps``, ``eval_every``, ``save_every``, ``max_minutes`` and ``out`` may be changed
        (other differing fields raise ValueError). Continuing a run stopped
        at step k gives the same losses, bit for bit, as the run that never stopped.
    progress : bool, default True
        Show a tqdm progress bar on stderr (step, train loss, validation loss, chars/s, time left).
    callback : callable, optional
        Called after every step with that step's log record (a dict); returning True stops the
        run there (with a last evaluation and checkpoint).
    verbose : bool, default True
        Print a line at each evaluation when there is no progress bar.

    Returns
    -------
    TrainResult
        Its ``model`` holds the weights that were saved: the moving average when ``ema`` is set.

    Raises
    ------
    FileNotFoundError, IsADirectoryError
        A missing data file or checkpoint, or a directory given as the data file.
    ValueError, TypeError
        An invalid setting, an empty or non-UTF-8 data file, a text too short for one batch, or a
        resume whose data or settings do not match its checkpoint.
    FloatingPointError
        The training loss became infinite or NaN.
    """
    t_start = time.perf_counter()
    loaded = None if resume is None else load(resume)
    if loaded is None:
        cfg = make_config(config)
    else:
        cfg = make_config(config, saved=loaded.config, out=loaded.run_dir)
    corpus = _Corpus.read(cfg, loaded)
    trainer = _Trainer(cfg, corpus)
    elapsed_before = 0.0
    if loaded is not None:
        trainer.restore(loaded.snapshot)
        elapsed_before = float(loaded.snapshot.elapsed_s)

    def clock() -> float:
        return elapsed_before + (time.perf_counter() - t_start)

    out = _out_dir(cfg)
    log_path = out / LOG_FILE
    kept = [] if loaded is None else kept_log_lines(loaded.run_dir / LOG_FILE, trainer.step)  # the log up to the checkpoint
    log_path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    first_step = trainer.step
    budget_s = None if cfg.max_minutes is None else cfg.max_minutes * 60.0
    with open(log_path, "a", encoding="utf-8") as log_file:
        meter = _Progress(cfg, first_step, bar=progress, verbose=verbose, budget_s=budget_s)
        t_loop = time.perf_counter()
        try:
            stopped, last_val = _run_steps(trainer, log_file, out / CHECKPOINT_DIR, clock, budget_s, meter, callback)
        finally:
            meter.close()
    loop_s = time.perf_counter() - t_loop
    if last_val is None:  # nothing to do (already at cfg.steps) and never evaluated
        last_val = trainer.evaluate()
    model = trainer.final_model()
    chars_per_s = (trainer.step - first_step) * cfg.batch_size * cfg.seq_len / loop_s if trainer.step > first_step else 0.0
    plot = plot_history(trainer.history, out / PLOT_FILE, vocab_size=corpus.vocab.size, title=_plot_title(cfg, last_val))
    m = loss_metrics(last_val)
    history = trainer.history
    return TrainResult(model=model, vocab=corpus.vocab, config=cfg, step=trainer.step, val_loss=m["val_loss"],
                       val_bpc=m["val_bpc"], val_ppl=m["val_ppl"],
                       train_loss=float(np.mean(history["train_loss"][-100:])) if history["train_loss"] else math.nan,
                       history={k: np.asarray(v) for k, v in history.items()}, seconds=clock(),
                       chars_per_s=chars_per_s, stopped=stopped, out=out, checkpoint=out / CHECKPOINT_DIR,
                       log=log_path, plot=plot)
