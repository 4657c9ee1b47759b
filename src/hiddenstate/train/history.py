"""A run's loss history: the per-step log (``log.jsonl``), its curves, and the loss plot.

Every step of :func:`~hiddenstate.train.train` appends one JSON record to ``<out>/log.jsonl``::

    {"step": 250, "train_loss": 1.93, "grad_norm": 0.41, "lr": 0.0079, "epoch": 0, "elapsed_s": 31.2,
     "val_loss": 1.88, "val_bpc": 2.71, "val_ppl": 6.55}            # val_* at evaluations only

``epoch`` is the number of passes over the training text completed when the step ended: it goes
up on the step that reads a pass's last chunk. Losses are mean cross-entropies in nats per character; :func:`loss_metrics` adds bits per
character (nats / ln 2) and the perplexity (exp of nats).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from hiddenstate.report.figures import COLORS, figure, save_png, style

__all__ = ["LN2", "kept_log_lines", "loss_metrics", "plot_history", "read_history"]

#: ln 2: nats per bit.
LN2 = math.log(2.0)


def loss_metrics(nats: float) -> dict[str, float]:
    """A validation loss in the three units the log and the result report.

    Parameters
    ----------
    nats : float
        Mean cross-entropy in nats per character.

    Returns
    -------
    dict
        ``{"val_loss": nats, "val_bpc": nats / ln 2, "val_ppl": exp(nats)}`` (the exponent is
        capped at 700 so the perplexity stays finite).
    """
    return {"val_loss": nats, "val_bpc": nats / LN2, "val_ppl": math.exp(min(nats, 700.0))}


def _records(path: Path):
    """(line, record) for every line of a log that is a JSON object with a step; others are skipped."""
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
            int(record["step"])
        except (ValueError, KeyError, TypeError):
            continue
        yield line, record


def kept_log_lines(path, upto: int) -> list[str]:
    """The lines of an existing log with ``step <= upto``: what a run resumed at ``upto`` keeps.

    Parameters
    ----------
    path : str or os.PathLike
        A ``log.jsonl``; a missing file has no lines.
    upto : int
        The checkpoint's step.

    Returns
    -------
    list of str
        The lines, without their newline, in file order (unreadable lines are dropped).

    Raises
    ------
    ValueError
        A step appears twice (or goes back): two processes wrote to the log, or it was edited, and
        the history it would continue is not one run's.
    """
    path = Path(path)
    if not path.is_file():
        return []
    kept, last = [], 0
    for line, record in _records(path):
        step = int(record["step"])
        if step <= last:
            raise ValueError(f"'{path}' must list each step once, in order; got step {step} after step {last}. "
                             "Two processes wrote to this run (or the log was edited), so it is not one run's "
                             "history. Move the log away to resume without it (the checkpoint is unaffected).")
        last = step
        if step <= upto:
            kept.append(line)
    return kept


def read_history(path) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The training and validation loss curves recorded in a ``log.jsonl``.

    Parameters
    ----------
    path : str or os.PathLike
        A run's ``log.jsonl``.

    Returns
    -------
    dict or None
        ``{"train": (steps, nats), "validation": (steps, nats)}``, each a pair of float64 arrays of
        shape (K,) (nats per character against the optimizer step; a curve without any point is
        left out); None without a log or without any point.
    """
    path = Path(path)
    if not path.is_file():
        return None
    curves = {"train": ([], []), "validation": ([], [])}
    for _, record in _records(path):
        for name, key in (("train", "train_loss"), ("validation", "val_loss")):
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                curves[name][0].append(record["step"])
                curves[name][1].append(value)
    out = {name: (np.asarray(s, dtype=np.float64), np.asarray(v, dtype=np.float64))
           for name, (s, v) in curves.items() if s}
    return out or None


def plot_history(history: dict, path, *, title: str = "", vocab_size: int | None = None) -> Path:
    """Draw the training loss (per step and smoothed) and the validation loss into a PNG.

    Parameters
    ----------
    history : dict
        ``train_loss`` of shape (S,) (index i is step i+1), ``val_step`` and ``val_loss`` of shape
        (K,), in nats per character (:attr:`~hiddenstate.train.TrainResult.history`).
    path : str or os.PathLike
        The PNG to write (parent directories are created).
    title : str, optional
    vocab_size : int, optional
        V: draws ln V, the loss of a uniform guess, and caps the y axis just above it.

    Returns
    -------
    pathlib.Path
        The file written. The right axis reads bits per character.
    """
    train_loss = np.asarray(history["train_loss"], dtype=np.float64)  # (S,)
    steps = np.arange(1, train_loss.size + 1)
    ln_v = math.log(vocab_size) if vocab_size else None
    with style():
        fig, ax = figure(7.0, 4.0)
        if train_loss.size:
            ax.plot(steps, train_loss, color=COLORS[0], alpha=0.35, lw=0.6, label="train (per step)")
            k = max(1, min(50, train_loss.size // 20))
            smooth = np.convolve(train_loss, np.ones(k) / k, mode="valid")  # (S - k + 1,)
            ax.plot(steps[k - 1:], smooth, color=COLORS[0], lw=1.4, label=f"train ({k}-step mean)")
        if len(history["val_step"]):
            ax.plot(history["val_step"], history["val_loss"], "o-", color=COLORS[1], ms=3.5, lw=1.4,
                    label="validation")
            ax.axhline(float(np.min(history["val_loss"])), color=COLORS[1], lw=0.6, ls=":")
        if ln_v is not None:
            ax.axhline(ln_v, color=COLORS[6], lw=0.8, ls="--", label=f"ln V = {ln_v:.2f}")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats/char)")
        if title:
            ax.set_title(title, fontsize=9.5)
        if ax.get_legend_handles_labels()[0]:  # an empty history has nothing to label
            ax.legend()
        if train_loss.size:
            top = float(np.max(train_loss)) if ln_v is None else min(float(np.max(train_loss)), ln_v + 0.5)
            ax.set_ylim(bottom=max(0.0, float(np.min(train_loss)) - 0.2), top=max(top, ln_v or LN2) + 0.1)
        secondary = ax.secondary_yaxis("right", functions=(lambda n: n / LN2, lambda b: b * LN2))
        secondary.set_ylabel("bits/char")
        return save_png(fig, path)
