"""Train a character-level language model on a text file, resume it exactly, and sample from it.

The char-rnn job (Karpathy 2015) with this package's own layers and BPTT:

* the text is encoded with a :class:`~hiddenstate.corpus.Vocabulary`; the last 10 % is the
  validation split;
* :class:`~hiddenstate.corpus.StreamBatcher` cuts the training part into ``N`` parallel streams
  read ``T`` characters at a time; the hidden state is carried from one chunk to the next and
  gradients are cut at the chunk boundary (truncated BPTT, Williams & Peng 1990), and reset when
  a pass over the text starts again;
* Adam (Kingma & Ba 2015), gradient clipping by global L2 norm (Pascanu, Mikolov & Bengio 2013),
  and a cosine learning-rate decay to ``lr * lr_min_ratio``;
* optionally (``ema``), an exponential moving average of the weights (Polyak & Juditsky 1992) is
  what is evaluated, saved as the model and sampled from; training itself uses the raw weights;
* every step is logged to ``<out>/log.jsonl``; the validation loss (nats/char, also bits/char and
  perplexity) every ``eval_every`` steps; ``<out>/loss.png`` is drawn at the end;
* ``<out>/checkpoint`` (see :mod:`hiddenstate.checkpoint`) holds the weights under torch's names
  plus everything that makes ``resume`` continue the very same run: optimizer moments, batcher
  position, the carried hidden state, the RNG state, the elapsed time and the loss history.

Examples
--------
>>> from hiddenstate.train import TrainConfig, train, load, sample
>>> result = train(TrainConfig(steps=300, hidden_size=64, out="runs/tiny"))   # doctest: +SKIP
>>> print(sample("runs/tiny", prime="ROMEO:", length=200, seed=1))            # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hiddenstate.train.checkpoint import META_FILE, load_checkpoint, save_checkpoint
from hiddenstate.train.corpus import StreamBatcher, Vocabulary, load_text, train_val_split
from hiddenstate.functional import log_softmax
from hiddenstate.train.model import CELLS, CharRNN
from hiddenstate.train.optim import Adam, ExponentialMovingAverage, clip_grad_norm

__all__ = [
    "PRESETS",
    "Trained",
    "TrainConfig",
    "TrainResult",
    "evaluate",
    "load",
    "lr_at",
    "resolve_checkpoint",
    "sample",
    "train",
]

CHECKPOINT_DIR = "checkpoint"
LOG_FILE = "log.jsonl"
PLOT_FILE = "loss.png"
_KIND = "hiddenstate.CharRNN"
LN2 = math.log(2.0)


@dataclass
class TrainConfig:
    """Everything that defines a training run (the CLI flags of ``hiddenstate train``).

    Parameters
    ----------
    data : str, optional
        A UTF-8 text file; None: the embedded Shakespeare corpus.
    cell : {"gru", "lstm", "rnn"}
    hidden_size, num_layers : int
        H and L of the recurrent layers.
    embedding_dim : int, optional
        None: one-hot inputs; otherwise a learned embedding of this size.
    dropout : float
        Dropout on every layer's output during training (see :class:`~hiddenstate.model.CharRNN`).
    weight_drop : float
        DropConnect on the recurrent weights during training (Merity et al. 2018; see
        :class:`~hiddenstate.model.CharRNN`), 0 (default) to 0.9.
    seq_len, batch_size : int
        T (truncation length) and N (parallel streams).
    steps : int
        Total optimizer steps of the run (a resumed run continues up to it).
    lr : float
        Peak Adam learning rate.
    lr_min_ratio : float
        The cosine decay ends at ``lr * lr_min_ratio``; 1.0 keeps the rate constant.
    clip : float
        Largest global L2 norm of the gradient.
    ema : float, optional
        None (default): evaluate, save and sample the trained weights themselves. A decay in
        (0, 1), e.g. 0.998: keep an exponential moving average of the weights, updated after every
        step (:class:`~hiddenstate.optim.ExponentialMovingAverage`), and use it for validation,
        for ``model.safetensors`` and for sampling; the raw weights are kept in the checkpoint
        for resuming.
    seed : int
        Seeds the initial weights; with the same seed (and no binding time limit) a run is
        repeatable step for step.
    dtype : {"float32", "float64"}
    eval_every, save_every : int
        Steps between validation passes and between checkpoints (both also at the end).
    max_minutes : float, optional
        Wall-clock limit. The run stops (with a last evaluation and checkpoint) when it is
        reached. The learning-rate schedule follows the step count only, so every run that is
        not cut short by the limit is repeatable bit for bit; a run that the limit stops early
        ends before its rate has fully decayed.
    val_fraction : float
        Fraction of the text, at its end, held out for validation.
    out : str
        Run directory: ``checkpoint/``, ``log.jsonl``, ``loss.png``.
    """

    data: str | None = None
    cell: str = "gru"
    hidden_size: int = 256
    num_layers: int = 1
    embedding_dim: int | None = None
    dropout: float = 0.0
    weight_drop: float = 0.0
    seq_len: int = 64
    batch_size: int = 32
    steps: int = 1500
    lr: float = 8e-3
    lr_min_ratio: float = 0.1
    clip: float = 5.0
    ema: float | None = None
    seed: int = 0
    dtype: str = "float32"
    eval_every: int = 250
    save_every: int = 500
    max_minutes: float | None = None
    val_fraction: float = 0.1
    out: str = "runs/char"

    def to_dict(self) -> dict:
        """A JSON-serializable copy."""
        return dataclasses.asdict(self)


#: Named configurations (``hiddenstate train --preset NAME``); explicit flags override them.
#: Measured on the 2-core development machine (one BLAS thread, embedded Shakespeare):
#:
#: * ``demo`` -- the TrainConfig defaults (GRU, H=256, T=64, N=32, lr 8e-3, 1500 steps, float32)
#:   with a 3-minute limit: validation 1.68 nats/char after 1500 steps, about 74 s of CPU time.
#: * ``long`` -- two GRU layers of 512 with dropout 0.4, T=100, lr 3e-3, 4000 steps: validation
#:   1.583 nats/char, about 35 minutes of CPU time. The other long runs measured (README, "Train
#:   a character model": 768 units, an LSTM, dropout 0.3-0.5, weight drop, a moving average of
#:   the weights) all ended between 1.582 and 1.618 on this validation text, which is a play
#:   never seen in training.
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {"max_minutes": 3.0},
    "long": {
        "cell": "gru", "hidden_size": 512, "num_layers": 2, "dropout": 0.4, "seq_len": 100, "batch_size": 32,
        "steps": 4000, "lr": 3e-3, "eval_every": 250, "save_every": 250, "out": "runs/long",
    },
}

# Settings a resumed run may change; everything else must match the checkpoint.
_RESUMABLE = ("data", "steps", "eval_every", "save_every", "max_minutes", "out")


def _check_config(cfg: TrainConfig) -> TrainConfig:
    """Validate every field once (ValueError/TypeError naming the field)."""
    def integer(name, lo=1, optional=False):
        v = getattr(cfg, name)
        if optional and v is None:
            return
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer; got {type(v).__name__} {v!r}.")
        if v < lo:
            raise ValueError(f"{name} must be >= {lo}; got {v}.")

    def real(name, positive=True, optional=False, upper=None):
        v = getattr(cfg, name)
        if optional and v is None:
            return
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)):
            raise TypeError(f"{name} must be a number; got {type(v).__name__} {v!r}.")
        if not math.isfinite(v) or (v <= 0 if positive else v < 0) or (upper is not None and v > upper):
            rule = "positive and finite" if positive else "non-negative and finite"
            if upper is not None:
                rule += f", at most {upper}"
            raise ValueError(f"{name} must be {rule}; got {v}.")

    for name in ("hidden_size", "num_layers", "seq_len", "batch_size", "steps", "eval_every", "save_every"):
        integer(name)
    integer("embedding_dim", optional=True)
    integer("seed", lo=0)
    real("lr")
    real("clip")
    real("lr_min_ratio", upper=1.0)
    real("max_minutes", optional=True)
    real("val_fraction", upper=0.5)
    real("dropout", positive=False, upper=0.9)
    real("weight_drop", positive=False, upper=0.9)
    real("ema", optional=True)
    if cfg.ema is not None and not cfg.ema < 1.0:
        raise ValueError(f"ema must be a decay in (0, 1) or None; got {cfg.ema}.")
    if cfg.cell not in CELLS:
        raise ValueError(f"cell must be one of {', '.join(CELLS)}; got {cfg.cell!r}.")
    if cfg.dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got {cfg.dtype!r}.")
    if cfg.data is not None and not isinstance(cfg.data, (str, os.PathLike)):
        raise TypeError(f"data must be a path or None; got {type(cfg.data).__name__}.")
    if not isinstance(cfg.out, (str, os.PathLike)) or not str(cfg.out):
        raise ValueError(f"out must be a directory path; got {cfg.out!r}.")
    return cfg


def lr_at(cfg: TrainConfig, progress: float) -> float:
    """Learning rate at a fraction ``progress`` in [0, 1] of the run: cosine from lr to lr*lr_min_ratio."""
    progress = min(max(progress, 0.0), 1.0)
    low = cfg.lr * cfg.lr_min_ratio
    return low + (cfg.lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


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
            logp = log_softmax(logits.reshape(-1, model.vocab_size).astype(np.float64))
        total -= float(logp[np.arange(logp.shape[0]), y.reshape(-1)].sum())
        count += y.size
    return total / count


def _evaluate_weights(model: CharRNN, ema, ids) -> float:
    """:func:`evaluate` with the averaged weights when there are any (the raw ones are restored)."""
    if ema is None or ema.n_averaged == 0:
        return evaluate(model, ids)
    raw = model.state_dict()
    model.load_state_dict(ema.average)
    try:
        return evaluate(model, ids)
    finally:
        model.load_state_dict(raw)


def _metrics(nats: float) -> dict:
    return {"val_loss": nats, "val_bpc": nats / LN2, "val_ppl": math.exp(min(nats, 700.0))}


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def resolve_checkpoint(path) -> Path:
    """Return the checkpoint directory for ``path``: a checkpoint itself, or a run directory.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If ``path`` is a file, or a directory with no checkpoint in it.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a path; got {type(path).__name__}.")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"checkpoint '{p}' does not exist. Give a run directory written by "
                                "`hiddenstate train` (or its checkpoint/ subdirectory).")
    if not p.is_dir():
        raise ValueError(f"checkpoint must be a directory; got '{p}', which is a file. Give the run "
                         "directory (or its checkpoint/ subdirectory), not a file inside it.")
    if (p / META_FILE).is_file():
        return p
    sub = p / CHECKPOINT_DIR
    if (sub / META_FILE).is_file() or (p / f".{CHECKPOINT_DIR}.previous" / META_FILE).is_file():
        return sub
    raise ValueError(f"checkpoint directory '{p}' holds no checkpoint ({META_FILE} is missing, here and in "
                     f"{CHECKPOINT_DIR}/). Give a run directory written by `hiddenstate train`.")


@dataclass
class Trained:
    """A model loaded from a checkpoint (see :func:`load`)."""

    model: CharRNN
    vocab: Vocabulary
    config: TrainConfig
    step: int
    meta: dict
    arrays: dict = field(repr=False, default_factory=dict)
    path: Path | None = None

    @property
    def val_loss(self) -> float | None:
        """The last validation loss in nats/char recorded before the checkpoint (None if none)."""
        return self.meta.get("val_loss")

    def sample(self, prime: str | None = None, length: int = 500, *, temperature: float = 1.0,
               seed: int | None = 0) -> str:
        """See :func:`sample`."""
        return sample(self, prime=prime, length=length, temperature=temperature, seed=seed)


def load(path) -> Trained:
    """Load a model, its vocabulary and its training state from a checkpoint or run directory.

    Parameters
    ----------
    path : str or os.PathLike
        A run directory (``--out`` of ``hiddenstate train``) or its ``checkpoint/`` subdirectory.

    Returns
    -------
    Trained
        ``model`` (:class:`~hiddenstate.model.CharRNN`), ``vocab``, ``config``, ``step``, ``meta``,
        ``arrays`` (optimizer and carried state) and ``path``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it holds no checkpoint, a file is truncated or tampered with, or the checkpoint was not
        written by :func:`train`.
    """
    ckpt = resolve_checkpoint(path)
    params, meta, arrays = load_checkpoint(ckpt)
    if not isinstance(meta, dict) or meta.get("kind") != _KIND:
        raise ValueError(f"checkpoint '{ckpt}' was not written by hiddenstate.train (kind "
                         f"{meta.get('kind') if isinstance(meta, dict) else None!r}); it cannot be loaded as a model.")
    try:
        vocab = Vocabulary.from_json(meta["vocab"])
        model_cfg = dict(meta["model"])
        model_cfg["dtype"] = np.dtype(model_cfg["dtype"])
        model = CharRNN(**model_cfg, rng=np.random.default_rng(0))
        config = TrainConfig(**meta["train"])
        step = int(meta["step"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"checkpoint '{ckpt}' has an incomplete or unknown meta.json ({error}). "
                         "It was written by another version or edited.") from None
    if model.vocab_size != vocab.size:
        raise ValueError(f"checkpoint '{ckpt}' is inconsistent: vocabulary of {vocab.size} characters, model "
                         f"for {model.vocab_size}.")
    model.load_state_dict(params)
    return Trained(model=model, vocab=vocab, config=config, step=step, meta=meta, arrays=arrays, path=ckpt)


def sample(source, prime: str | None = None, length: int = 500, *, temperature: float = 1.0,
           seed: int | None = 0) -> str:
    """Generate text from a trained model.

    Parameters
    ----------
    source : str, os.PathLike, Trained or TrainResult
        A checkpoint or run directory, or a loaded/trained model.
    prime : str, optional
        Text to condition on; returned at the start of the result. Default: a newline (or the
        vocabulary's first character if the text had none).
    length : int, default 500
        Characters to generate after the prime.
    temperature : float, default 1.0
        Softmax temperature (> 0), or 0 for greedy decoding.
    seed : int or None, default 0
        Seeds the sampler: the same seed gives the same text. None: fresh entropy.

    Returns
    -------
    str
        ``prime`` followed by ``length`` generated characters.

    Raises
    ------
    ValueError
        If ``prime`` is empty or uses characters outside the model's vocabulary, or ``length`` or
        ``temperature`` is out of range.
    """
    if isinstance(source, (str, os.PathLike)):
        source = load(source)
    model, vocab = source.model, source.vocab
    if prime is None:
        prime = "\n" if "\n" in vocab.chars else vocab.chars[0]
    if not isinstance(prime, str):
        raise TypeError(f"prime must be a str; got {type(prime).__name__}.")
    if not prime:
        raise ValueError("prime must hold at least one character; got ''. Omit it to start from a newline.")
    unknown = sorted(set(prime) - set(vocab.chars))
    if unknown:
        shown = ", ".join(repr(c) for c in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        raise ValueError(f"prime must only use characters the model was trained on; got {len(unknown)} unknown "
                         f"character(s): {shown}. Remove them or train on a text that has them.")
    ids = model.sample(vocab.encode(prime), length, temperature=temperature, rng=np.random.default_rng(seed))
    return prime + vocab.decode(ids)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes
    ----------
    model, vocab, config
        The trained model, its vocabulary and the run's configuration.
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
    out, checkpoint, log, plot : Path
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
        """See :func:`sample`."""
        return sample(self, prime=prime, length=length, temperature=temperature, seed=seed)

    def summary(self) -> str:
        """One line: steps, time and the final validation loss in nats, bits and perplexity."""
        return (f"step {self.step}/{self.config.steps} in {self.seconds:.0f} s: validation loss "
                f"{self.val_loss:.4f} nats/char ({self.val_bpc:.4f} bits/char, perplexity {self.val_ppl:.2f})")


def _resume_config(saved: TrainConfig, overrides: dict, ckpt: Path, default_out: Path) -> TrainConfig:
    merged = saved.to_dict()
    merged["out"] = str(default_out)
    for key, value in overrides.items():
        if key in _RESUMABLE:
            merged[key] = value
        elif value != merged.get(key):
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"{flag} must match the checkpoint being resumed ({merged.get(key)!r}); got "
                             f"{value!r}. Drop the flag: a resumed run keeps its configuration "
                             f"(only {', '.join('--' + k.replace('_', '-') for k in _RESUMABLE)} may change).")
    return TrainConfig(**merged)


def _read_log(path: Path, upto: int) -> list[str]:
    """Lines of an existing log with step <= upto (what a resumed run keeps)."""
    if not path.is_file():
        return []
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if int(json.loads(line)["step"]) <= upto:
                kept.append(line)
        except (ValueError, KeyError, TypeError):
            continue
    return kept


def plot_history(history: dict, path, *, title: str = "", vocab_size: int | None = None) -> Path:
    """Draw training (per step, smoothed) and validation loss against step into a PNG (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.0), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    train_loss = np.asarray(history["train_loss"], dtype=np.float64)
    steps = np.arange(1, train_loss.size + 1)
    if train_loss.size:
        ax.plot(steps, train_loss, color="#9ecae1", lw=0.6, label="train (per step)")
        k = max(1, min(50, train_loss.size // 20))
        if train_loss.size >= k:
            smooth = np.convolve(train_loss, np.ones(k) / k, mode="valid")
            ax.plot(steps[k - 1:], smooth, color="#0072B2", lw=1.4, label=f"train ({k}-step mean)")
    if len(history["val_step"]):
        ax.plot(history["val_step"], history["val_loss"], "o-", color="#D55E00", ms=3.5, lw=1.4,
                label="validation")
        best = float(np.min(history["val_loss"]))
        ax.axhline(best, color="#D55E00", lw=0.6, ls=":")
    if vocab_size:
        ax.axhline(math.log(vocab_size), color="#7f7f7f", lw=0.8, ls="--", label=f"ln V = {math.log(vocab_size):.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/char)")
    if title:
        ax.set_title(title, fontsize=9.5)
    ax.grid(True, color="#e8eaed")
    ax.legend(frameon=False, fontsize=8)
    if train_loss.size:
        top = float(np.max(train_loss)) if vocab_size is None else min(float(np.max(train_loss)),
                                                                        math.log(vocab_size) + 0.5)
        ax.set_ylim(bottom=max(0.0, float(np.min(train_loss)) - 0.2), top=max(top, math.log(vocab_size or 2)) + 0.1)
    secondary = ax.secondary_yaxis("right", functions=(lambda n: n / LN2, lambda b: b * LN2))
    secondary.set_ylabel("bits/char")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def _state_arrays(state) -> dict[str, np.ndarray]:
    if state is None:
        return {}
    if isinstance(state, tuple):
        return {"carry.h": np.ascontiguousarray(state[0]), "carry.c": np.ascontiguousarray(state[1])}
    return {"carry.h": np.ascontiguousarray(state)}


def _format_time(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def train(config: TrainConfig | dict | None = None, *, resume=None, progress: bool = True,
          callback: Callable[[dict], bool | None] | None = None, verbose: bool = True) -> TrainResult:
    """Train a :class:`~hiddenstate.model.CharRNN` on a text with truncated BPTT.

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
    """
    t_start = time.perf_counter()
    if isinstance(config, TrainConfig):
        given = {f.name: getattr(config, f.name) for f in dataclasses.fields(TrainConfig)}
        if resume is not None:  # only the fields that differ from the defaults count as "given"
            default = TrainConfig()
            given = {k: v for k, v in given.items() if v != getattr(default, k)}
    elif config is None:
        given = {}
    elif isinstance(config, dict):
        names = {f.name for f in dataclasses.fields(TrainConfig)}
        unknown = sorted(set(config) - names)
        if unknown:
            raise TypeError(f"config has unknown field(s) {unknown}; allowed: {sorted(names)}.")
        given = dict(config)
    else:
        raise TypeError(f"config must be a TrainConfig, a dict or None; got {type(config).__name__}.")

    loaded, run_dir = None, None
    if resume is not None:
        loaded = load(resume)
        run_dir = loaded.path.parent if loaded.path.name == CHECKPOINT_DIR else loaded.path
        cfg = _resume_config(loaded.config, given, loaded.path, run_dir)
    else:
        cfg = TrainConfig(**given)
    cfg = _check_config(cfg)

    text = load_text(cfg.data)
    vocab = Vocabulary(text) if loaded is None else loaded.vocab
    if loaded is not None:
        if _sha256_text(text) != loaded.meta["text"]["sha256"]:
            raise ValueError(f"data must be the text the checkpoint was trained on; got "
                             f"{cfg.data or 'the embedded corpus'!r}, whose contents differ. Resume with the same file.")
    ids = vocab.encode(text)
    train_ids, val_ids = train_val_split(ids, cfg.val_fraction)
    if val_ids.size < 2:
        raise ValueError(f"data must leave at least 2 validation characters; got {val_ids.size} from "
                         f"{len(text)} characters. Use a longer text.")
    batcher = StreamBatcher(train_ids, cfg.batch_size, cfg.seq_len)
    rng = np.random.default_rng(cfg.seed)
    model = CharRNN(vocab.size, cfg.hidden_size, cfg.num_layers, cell=cfg.cell,
                    embedding_dim=cfg.embedding_dim, dropout=cfg.dropout, weight_drop=cfg.weight_drop,
                    dtype=np.dtype(cfg.dtype), rng=rng)
    opt = Adam(model.params, lr=cfg.lr)
    ema = None if cfg.ema is None else ExponentialMovingAverage(model.params, decay=cfg.ema)

    history = {"train_loss": [], "grad_norm": [], "val_step": [], "val_loss": []}
    step, elapsed_before, state = 0, 0.0, None
    if loaded is not None:
        arrays = loaded.arrays
        if ema is None:
            model.load_state_dict(loaded.model.params)
        else:  # model.safetensors holds the averages; the raw weights travel as "weights.*"
            model.load_state_dict({k[len("weights."):]: v for k, v in arrays.items() if k.startswith("weights.")})
            ema.load_state_dict({"step": arrays["ema.step"], **{"average." + k: v for k, v in loaded.model.params.items()}})
        opt.load_state_dict({k[len("adam."):]: v for k, v in arrays.items() if k.startswith("adam.")})
        batcher.load_state_dict(loaded.meta["batcher"])
        rng.bit_generator.state = loaded.meta["rng"]
        step = loaded.step
        elapsed_before = float(loaded.meta["elapsed_s"])
        if "carry.h" in arrays:
            state = (arrays["carry.h"], arrays["carry.c"]) if "carry.c" in arrays else arrays["carry.h"]
            state = tuple(a.copy() for a in state) if isinstance(state, tuple) else state.copy()
        for key in history:
            history[key] = arrays[f"history.{key}"].tolist()
        if step > cfg.steps:
            raise ValueError(f"steps must be at least the checkpoint's step {step} to resume; got {cfg.steps}.")

    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a directory; got '{out}', which is a file. Choose another path.")
    out.mkdir(parents=True, exist_ok=True)
    ckpt_dir = out / CHECKPOINT_DIR
    log_path = out / LOG_FILE
    kept = _read_log(run_dir / LOG_FILE, step) if loaded is not None else []  # the log up to the checkpoint
    log_path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    log_file = open(log_path, "a", encoding="utf-8")

    budget_s = None if cfg.max_minutes is None else cfg.max_minutes * 60.0
    chars_per_step = cfg.batch_size * cfg.seq_len
    text_info = {"chars": len(text), "sha256": _sha256_text(text), "source": cfg.data or "embedded shakespeare.txt",
                 "train_chars": int(train_ids.size), "val_chars": int(val_ids.size)}

    def elapsed() -> float:
        return elapsed_before + (time.perf_counter() - t_start)

    def save(val_loss):
        meta = {
            "kind": _KIND,
            "model": model.config(),
            "train": cfg.to_dict(),
            "vocab": vocab.to_json(),
            "step": step,
            "val_loss": val_loss,
            "batcher": batcher.state_dict(),
            "rng": rng.bit_generator.state,
            "elapsed_s": elapsed(),
            "text": text_info,
            "torch": (f"torch.nn.{cfg.cell.upper()}({model.rnn.input_size}, {cfg.hidden_size}, "
                      f"num_layers={cfg.num_layers}) loads the 'rnn.' weights (prefix stripped)"),
        }
        arrays = {"adam." + k: v for k, v in opt.state_dict().items()}
        weights = model.state_dict()
        if ema is not None:
            arrays.update({"weights." + k: v for k, v in weights.items()})
            arrays["ema.step"] = np.array(ema.n_averaged, dtype=np.int64)
            weights = {k: v.copy() for k, v in ema.average.items()}
        arrays.update(_state_arrays(state))
        arrays["history.train_loss"] = np.asarray(history["train_loss"], dtype=np.float64)
        arrays["history.grad_norm"] = np.asarray(history["grad_norm"], dtype=np.float64)
        arrays["history.val_step"] = np.asarray(history["val_step"], dtype=np.int64)
        arrays["history.val_loss"] = np.asarray(history["val_loss"], dtype=np.float64)
        save_checkpoint(ckpt_dir, weights, meta, arrays)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        interactive = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        bar = tqdm(total=cfg.steps, initial=step, unit="step", dynamic_ncols=True, smoothing=0.1,
                   mininterval=0.1 if interactive else 5.0, desc=f"{cfg.cell} H={cfg.hidden_size}x{cfg.num_layers}")
    last_val = history["val_loss"][-1] if history["val_loss"] else None
    stopped = "steps"
    window_t, window_chars = time.perf_counter(), 0
    chars_per_s = 0.0
    t_loop = time.perf_counter()
    first_step = step
    try:
        while step < cfg.steps:
            opt.lr = lr_at(cfg, step / cfg.steps)  # by step only, so a run is repeatable on any machine
            if batcher.at_epoch_start:
                state = None  # a new pass over the text: the carried state no longer follows on
            inputs, targets = batcher.next_batch()  # (T, N) each
            loss, grads, state = model.loss_and_grads(inputs, targets, state, training=True, rng=rng)
            if not math.isfinite(loss):
                raise FloatingPointError(f"training loss became {loss} at step {step + 1}. Lower --lr or --clip.")
            norm = clip_grad_norm(grads, cfg.clip)
            opt.step(grads)
            if ema is not None:
                ema.update()
            step += 1
            history["train_loss"].append(float(loss))
            history["grad_norm"].append(float(norm))
            window_chars += chars_per_step
            now = time.perf_counter()
            if now - window_t >= 2.0:
                chars_per_s = window_chars / (now - window_t)
                window_t, window_chars = now, 0
            record = {"step": step, "train_loss": float(loss), "grad_norm": float(norm), "lr": opt.lr,
                      "epoch": batcher.epoch, "elapsed_s": round(elapsed(), 3)}
            out_of_time = budget_s is not None and elapsed() >= budget_s
            stop = bool(callback(dict(record))) if callback is not None else False
            final = step == cfg.steps or out_of_time or stop
            if step % cfg.eval_every == 0 or final:
                last_val = _evaluate_weights(model, ema, val_ids)
                history["val_step"].append(step)
                history["val_loss"].append(last_val)
                record.update(_metrics(last_val))
                if bar is None and verbose:
                    print(f"step {step}/{cfg.steps}  train {np.mean(history['train_loss'][-cfg.eval_every:]):.4f}  "
                          f"val {last_val:.4f} nats/char ({last_val / LN2:.3f} bits/char)  "
                          f"elapsed {_format_time(elapsed())}", flush=True)
            log_file.write(json.dumps(record) + "\n")
            if step % cfg.save_every == 0 or final:
                log_file.flush()
                save(last_val)
            if bar is not None:
                recent = history["train_loss"][-50:]
                postfix = {"loss": f"{np.mean(recent):.3f}",
                           "val": "-" if last_val is None else f"{last_val:.3f}",
                           "chars/s": f"{chars_per_s:,.0f}" if chars_per_s else "-"}
                if budget_s is not None:
                    postfix["budget left"] = _format_time(budget_s - elapsed())
                bar.set_postfix(postfix, refresh=False)
                bar.update(1)
            if final and step < cfg.steps:
                stopped = "time" if out_of_time else "callback"
                break
    finally:
        log_file.close()
        if bar is not None:
            bar.close()
    if step == first_step and last_val is None:  # nothing to do (already at cfg.steps)
        last_val = _evaluate_weights(model, ema, val_ids)
    if ema is not None and ema.n_averaged:  # the result's model is the averaged one, as saved
        model.load_state_dict(ema.average)
    loop_s = time.perf_counter() - t_loop
    if step > first_step:
        chars_per_s = (step - first_step) * chars_per_step / loop_s
    plot = plot_history(history, out / PLOT_FILE, vocab_size=vocab.size,
                        title=(f"{cfg.cell.upper()} H={cfg.hidden_size} L={cfg.num_layers} T={cfg.seq_len} "
                               f"N={cfg.batch_size} lr={cfg.lr:g}" + (f" dropout={cfg.dropout:g}" if cfg.dropout else "")
                               + (f" weight_drop={cfg.weight_drop:g}" if cfg.weight_drop else "")
                               + f" {cfg.dtype}; final val {last_val:.3f} nats/char"))
    m = _metrics(last_val)
    hist = {k: np.asarray(v) for k, v in history.items()}
    return TrainResult(model=model, vocab=vocab, config=cfg, step=step, val_loss=m["val_loss"],
                       val_bpc=m["val_bpc"], val_ppl=m["val_ppl"],
                       train_loss=float(np.mean(history["train_loss"][-100:])) if history["train_loss"] else math.nan,
                       history=hist, seconds=elapsed(), chars_per_s=chars_per_s, stopped=stopped, out=out,
                       checkpoint=ckpt_dir, log=log_path, plot=plot)
