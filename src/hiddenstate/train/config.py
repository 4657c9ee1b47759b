"""What defines a training run: :class:`TrainConfig`, its rules, the named presets, the schedule.

Every field of :class:`TrainConfig` has one rule in :data:`RULES` (from
:mod:`hiddenstate.core.validation`); :func:`check_config` applies them and the CLI's flags of
``hiddenstate train`` convert their text with the very same rules. :func:`make_config` turns what
a caller gives (a TrainConfig, a dict of fields, or nothing; a checkpoint's configuration when
resuming) into the checked configuration of the run, and :func:`lr_at` is the learning-rate
schedule, a function of the step only.

Examples
--------
>>> cfg = make_config({"hidden_size": 64, "steps": 100})
>>> cfg.hidden_size, cfg.cell, round(lr_at(cfg, 1.0), 6)
(64, 'gru', 0.0008)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hiddenstate.core.validation import choice, drop_probability, nonnegative_int, positive_int, real
from hiddenstate.train.model import CELLS

__all__ = ["DTYPES", "PRESETS", "RESUMABLE", "RULES", "TrainConfig", "check_config", "lr_at", "make_config"]

#: The floating types a run can train in (``TrainConfig.dtype``).
DTYPES = ("float32", "float64")


@dataclass
class TrainConfig:
    """Everything that defines a training run (the CLI flags of ``hiddenstate train``).

    Fields are checked by :func:`check_config` (by :func:`~hiddenstate.train.train`), each with
    its rule in :data:`RULES`.

    Parameters
    ----------
    data : str, optional
        A UTF-8 text file; None: the embedded Shakespeare corpus.
    cell : {"gru", "lstm", "mingru", "minlstm", "rnn", "mamba"}, default "gru"
        ``"mingru"``/``"minlstm"``: the linear recurrences of Feng et al. (2024) in residual blocks
        (:class:`~hiddenstate.train.blocks.MinStack`); ``"mamba"``: Mamba blocks with RMS norms
        on a residual stream (:class:`~hiddenstate.kinds.ssm.stack.MambaStack`, ``hidden_size``
        as ``d_model``, ``d_state`` 16, ``d_conv`` 4, ``expand`` 2); ``weight_drop`` must then be 0.
    hidden_size : int, default 256
        H, units per recurrent layer (positive).
    num_layers : int, default 1
        L, stacked recurrent layers (positive).
    embedding_dim : int, optional
        None (default): one-hot inputs; otherwise E, the size of a learned embedding.
    dropout : float, default 0.0
        Dropout on every layer's output during training, in [0, 1) (Zaremba et al. 2014; see
        :class:`~hiddenstate.train.model.CharRNN`).
    weight_drop : float, default 0.0
        DropConnect on the recurrent weights during training, in [0, 1) (Merity et al. 2018; see
        :class:`~hiddenstate.train.model.CharRNN`).
    seq_len : int, default 64
        T, the truncation length of BPTT.
    batch_size : int, default 32
        N, parallel streams.
    steps : int, default 1500
        Total optimizer steps of the run (a resumed run continues up to it).
    lr : float, default 8e-3
        Peak Adam learning rate, > 0.
    lr_min_ratio : float, default 0.1
        In (0, 1]: the cosine decay ends at ``lr * lr_min_ratio``; 1.0 keeps the rate constant.
    clip : float, default 5.0
        Largest global L2 norm of the gradient, > 0.
    ema : float, optional
        None (default): evaluate, save and sample the trained weights themselves. A decay in
        (0, 1), e.g. 0.998: keep an exponential moving average of the weights, updated after every
        step (:class:`~hiddenstate.train.optim.ExponentialMovingAverage`), and use it for
        validation, for ``model.safetensors`` and for sampling; the raw weights are kept in the
        checkpoint for resuming.
    seed : int, default 0
        Seeds the initial weights and the dropout masks (non-negative); with the same seed (and
        no binding time limit) a run is repeatable step for step.
    dtype : {"float32", "float64"}, default "float32"
    eval_every, save_every : int, default 250, 500
        Steps between validation passes and between checkpoints (both also at the end).
    max_minutes : float, optional
        Wall-clock limit in minutes (> 0). The run stops (with a last evaluation and checkpoint)
        when it is reached. The learning-rate schedule follows the step count only, so every run
        that is not cut short by the limit is repeatable bit for bit; a run that the limit stops
        early ends before its rate has fully decayed.
    val_fraction : float, default 0.1
        Fraction of the text, at its end, held out for validation, in (0, 0.5].
    out : str, default "runs/char"
        Run directory: ``checkpoint/``, ``log.jsonl``, ``loss.png``.
    tune_initial_state : str, optional
        A run or checkpoint directory: train only the initial state of its model's recurrent
        layers (one row, :mod:`hiddenstate.train.initial_state`), its weights frozen, on ``data``;
        every batch starts from the tuned state (no state is carried between chunks). The model
        fields (``cell`` ... ``dtype``) and the vocabulary are that model's; ``ema`` must be None.
        The checkpoint holds the tuned state beside the frozen weights.
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
    tune_initial_state: str | None = None

    def to_dict(self) -> dict:
        """A JSON-serializable copy of the configuration.

        Returns
        -------
        dict
            Field name -> value; ``TrainConfig(**d)`` rebuilds it. ``tune_initial_state`` appears
            only in a tuning run's (None is its default), so the checkpoints of other runs stay
            what they were before the field existed (readable by earlier versions).
        """
        d = dataclasses.asdict(self)
        if d.get("tune_initial_state") is None:
            d.pop("tune_initial_state", None)
        return d


#: Named configurations (``hiddenstate train --preset NAME``); explicit flags override them.
#: Measured on the 2-core development machine (one BLAS thread, embedded Shakespeare):
#:
#: * ``demo`` -- the TrainConfig defaults (GRU, H=256, T=64, N=32, lr 8e-3, float32) with 1000
#:   steps instead of 1500 and a 3-minute limit: validation 1.720 nats/char (1500 steps: 1.683) in
#:   about 50 s of CPU time, 56 s on an idle machine, so the steps end well inside the limit on a
#:   busy one too (1500 steps took 83 s idle and up to 178 s busy, 7 s short of the limit).
#: * ``long`` -- two GRU layers of 512 with dropout 0.4, T=100, lr 3e-3, 4000 steps: validation
#:   1.583 nats/char, about 35 minutes of CPU time. The other long runs measured (README, "Train
#:   a character model": 768 units, an LSTM, dropout 0.3-0.5, weight drop, a moving average of
#:   the weights) all ended between 1.582 and 1.618 on this validation text, which is a play
#:   never seen in training.
#: * ``mingru`` -- two minGRU blocks of 128 (:class:`~hiddenstate.train.blocks.MinStack`), lr 4e-3, 800
#:   steps and the 3-minute limit: a step costs 1.25-1.6x a demo step (0.055 s against 0.044 s at load
#:   3.8), so 800 steps end well inside the limit on a busy machine too (80 s at load 5, when the demo's
#:   1000 took 61 s; 1500 steps took 152 s of the 180). README, "A character model of linear recurrences".
#: * ``mamba`` -- two Mamba blocks of d_model 64 (:class:`~hiddenstate.kinds.ssm.stack.MambaStack`:
#:   d_state 16, d_conv 4, expand 2), lr 4e-3, 600 steps and the 3-minute limit. A Mamba step is far
#:   dearer than a GRU's at equal width (its state is (Di, S) = (128, 16) per layer and row): measured
#:   at T=64, N=32, float32, load 2.2, 0.40 s for 2 x 128, 0.21 s for 2 x 64 (0.18 s for 1 x 128), so
#:   2 x 64 is the size whose 600 steps fit the limit. Measured once (2026-12-01, load about 2.5,
#:   under nice): validation 1.846 nats/char after 600 steps, 140 s (100 s user CPU).
#: * ``mingru-long`` -- three minGRU blocks of 256, dropout 0.25, T=100, lr 3e-3, 4000 steps (the long
#:   preset's budget). Their validation losses: README, "A character model of linear recurrences"
#:   (generated from docs/results.json by scripts/readme_results.py).
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {"steps": 1000, "max_minutes": 3.0},
    "long": {
        "cell": "gru", "hidden_size": 512, "num_layers": 2, "dropout": 0.4, "seq_len": 100, "batch_size": 32,
        "steps": 4000, "lr": 3e-3, "eval_every": 250, "save_every": 250, "out": "runs/long",
    },
    "mingru": {"cell": "mingru", "hidden_size": 128, "num_layers": 2, "lr": 4e-3, "steps": 800,
               "max_minutes": 3.0, "out": "runs/mingru"},
    "mamba": {"cell": "mamba", "hidden_size": 64, "num_layers": 2, "lr": 4e-3, "steps": 600,
              "max_minutes": 3.0, "out": "runs/mamba"},
    "mingru-long": {
        "cell": "mingru", "hidden_size": 256, "num_layers": 3, "dropout": 0.25, "seq_len": 100, "batch_size": 32,
        "steps": 4000, "lr": 3e-3, "eval_every": 250, "save_every": 250, "out": "runs/mingru-long",
    },
}

#: Settings a resumed run may change; every other field must match the checkpoint.
RESUMABLE = ("data", "steps", "eval_every", "save_every", "max_minutes", "out")

_positive = functools.partial(real, low=0.0, low_open=True)

#: The rule of every numeric or named field: ``RULES[field](name, value)`` returns the value
#: (as int, float or str) or raises TypeError/ValueError ``"<name> must ...; got ..."``. The
#: fields whose default is None (``embedding_dim``, ``ema``, ``max_minutes``) also accept None.
RULES: dict[str, Callable[[str, Any], Any]] = {
    "cell": functools.partial(choice, options=CELLS),
    "dtype": functools.partial(choice, options=DTYPES),
    "hidden_size": positive_int,
    "num_layers": positive_int,
    "embedding_dim": positive_int,
    "seq_len": positive_int,
    "batch_size": positive_int,
    "steps": positive_int,
    "eval_every": positive_int,
    "save_every": positive_int,
    "seed": nonnegative_int,
    "lr": _positive,
    "clip": _positive,
    "max_minutes": _positive,
    "lr_min_ratio": functools.partial(real, low=0.0, high=1.0, low_open=True),
    "val_fraction": functools.partial(real, low=0.0, high=0.5, low_open=True),
    "dropout": drop_probability,
    "weight_drop": drop_probability,
    "ema": functools.partial(real, low=0.0, high=1.0, low_open=True, high_open=True),
}
_OPTIONAL = frozenset(f.name for f in dataclasses.fields(TrainConfig) if f.default is None)


def check_config(cfg: TrainConfig) -> TrainConfig:
    """Check every field of ``cfg`` against its rule (:data:`RULES`, and paths for data/out).

    Parameters
    ----------
    cfg : TrainConfig

    Returns
    -------
    TrainConfig
        ``cfg`` itself.

    Raises
    ------
    TypeError
        A field of the wrong type (e.g. ``steps=2.5``), ``data`` not a path or None.
    ValueError
        A value outside its range or not among its choices, ``out`` empty or not a path; the
        message names the field: ``"hidden_size must be a positive integer; got 0."``.
    """
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"config must be a TrainConfig; got {type(cfg).__name__}.")
    for name, rule in RULES.items():
        value = getattr(cfg, name)
        if not (value is None and name in _OPTIONAL):
            rule(name, value)
    if cfg.data is not None and not isinstance(cfg.data, (str, os.PathLike)):
        raise TypeError(f"data must be a path or None; got {type(cfg.data).__name__}.")
    if cfg.tune_initial_state is not None and not isinstance(cfg.tune_initial_state, (str, os.PathLike)):
        raise TypeError(f"tune_initial_state must be a run directory path or None; got "
                        f"{type(cfg.tune_initial_state).__name__}.")
    if cfg.tune_initial_state is not None and cfg.ema is not None:
        raise ValueError(f"ema must be None with tune_initial_state (only the initial state is trained); got {cfg.ema}.")
    if not isinstance(cfg.out, (str, os.PathLike)) or not str(cfg.out):
        raise ValueError(f"out must be a directory path; got {cfg.out!r}.")
    return cfg


def _given_fields(config, resuming: bool) -> dict:
    """The fields a caller set: all of a TrainConfig's (when resuming, those off the defaults)."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    if isinstance(config, TrainConfig):
        given = {name: getattr(config, name) for name in names}
        if resuming:  # only the fields that differ from the defaults count as "given"
            default = TrainConfig()
            given = {k: v for k, v in given.items() if v != getattr(default, k)}
        return given
    if config is None:
        return {}
    if isinstance(config, dict):
        unknown = sorted(set(config) - set(names))
        if unknown:
            raise TypeError(f"config has unknown field(s) {unknown}; allowed: {sorted(names)}.")
        return dict(config)
    raise TypeError(f"config must be a TrainConfig, a dict or None; got {type(config).__name__}.")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def make_config(config: TrainConfig | dict | None = None, *, saved: TrainConfig | None = None,
                out=None) -> TrainConfig:
    """The checked configuration of a run, from what the caller gave (and a checkpoint's).

    Parameters
    ----------
    config : TrainConfig, dict or None
        A dict (or None) gives only the fields to set; the others take TrainConfig's defaults, or
        ``saved``'s values.
    saved : TrainConfig, optional
        The configuration of the run being resumed. Only the fields in :data:`RESUMABLE` may then
        differ from it; a TrainConfig ``config`` counts only its fields that differ from the
        defaults.
    out : str or os.PathLike, optional
        With ``saved``: the run directory used unless ``config`` sets ``out`` (the directory
        resumed from).

    Returns
    -------
    TrainConfig
        A new, checked configuration.

    Raises
    ------
    TypeError
        ``config`` of another type, unknown fields, or a field of the wrong type.
    ValueError
        A field out of range, or (resuming) a non-resumable field that differs from ``saved``:
        ``"--hidden-size must match the checkpoint being resumed (24); got 32. ..."``.
    """
    given = _given_fields(config, resuming=saved is not None)
    if saved is None:
        return check_config(TrainConfig(**given))
    merged = saved.to_dict()
    if out is not None:
        merged["out"] = str(out)
    for key, value in given.items():
        if key in RESUMABLE:
            merged[key] = value
        elif value != merged.get(key):
            raise ValueError(f"{_flag(key)} must match the checkpoint being resumed ({merged.get(key)!r}); got "
                             f"{value!r}. Drop the flag: a resumed run keeps its configuration "
                             f"(only {', '.join(_flag(k) for k in RESUMABLE)} may change).")
    return check_config(TrainConfig(**merged))


def lr_at(cfg: TrainConfig, progress: float) -> float:
    """Learning rate at a fraction of the run: a cosine from ``lr`` down to ``lr * lr_min_ratio``.

    ``lr_min + (lr - lr_min) * (1 + cos(pi * progress)) / 2`` (Loshchilov & Hutter 2017, SGDR,
    Eq. 5, one cycle without restarts).

    Parameters
    ----------
    cfg : TrainConfig
        Its ``lr`` and ``lr_min_ratio``.
    progress : float
        ``step / steps``; clipped to [0, 1].

    Returns
    -------
    float
        The rate, between ``lr * lr_min_ratio`` and ``lr``.
    """
    progress = min(max(progress, 0.0), 1.0)
    low = cfg.lr * cfg.lr_min_ratio
    return low + (cfg.lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))
