"""The application layer: checkpoint -> probe -> report, as ``hiddenstate inspect`` and ``demo`` run it.

This is the one module that joins the three: it loads a trained character model
(:mod:`hiddenstate.train`), measures its hidden state (:mod:`hiddenstate.probe`) and writes the
HTML report (:mod:`hiddenstate.report`). None of those packages imports this one.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from hiddenstate.probe.analysis import analyze_model
from hiddenstate.report import build_report
from hiddenstate.train.corpus import load_text
from hiddenstate.train.history import read_history
from hiddenstate.train.rundir import LOG_FILE, load, run_dir_of
from hiddenstate.validation import generator, positive_int

__all__ = ["inspect_checkpoint", "loss_history"]


def loss_history(run_dir) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """Training and validation loss curves from a run's ``log.jsonl`` (the report's loss section).

    Parameters
    ----------
    run_dir : str or os.PathLike
        A run directory of :func:`hiddenstate.train.train`.

    Returns
    -------
    dict or None
        ``{"train": (steps, nats), "validation": (steps, nats)}``, each a pair of float64 arrays of
        shape (K,) (nats per character against the optimizer step; a curve without any point is
        left out); None without a log or without any point
        (:func:`hiddenstate.train.history.read_history`).
    """
    return read_history(pathlib.Path(os.fspath(run_dir)) / LOG_FILE)


def inspect_checkpoint(checkpoint, out="report.html", text_file=None, *, n_chars: int = 2000,
                       rng: np.random.Generator | None = None) -> pathlib.Path:
    """Analyse a trained character model and write its HTML report (``hiddenstate inspect``).

    Parameters
    ----------
    checkpoint : str or os.PathLike
        A run directory of :func:`hiddenstate.train.train` or its ``checkpoint/`` subdirectory.
    out : str or os.PathLike, default "report.html"
        The HTML file to write.
    text_file : str or os.PathLike, optional
        Text to run the model on; characters outside the model's vocabulary are dropped.
        Default: the start of the run's validation text (the tail of its training corpus).
    n_chars : int, default 2000
        Characters of text analysed (one sequence; all of them appear in the coloured view).
    rng : numpy.random.Generator, optional
        Fixed-point starts (default ``default_rng(0)``).

    Returns
    -------
    pathlib.Path
        The report written.

    Raises
    ------
    FileNotFoundError
        From :func:`hiddenstate.train.load` when there is no checkpoint at ``checkpoint``.
    ValueError
        From :func:`hiddenstate.train.load` for an invalid checkpoint; when the text has fewer than
        20 characters of the model's vocabulary; when ``n_chars`` is not positive.
    TypeError
        When ``n_chars`` is not an integer or ``rng`` not a :class:`numpy.random.Generator`.
    """
    n_chars = positive_int("n_chars", n_chars)
    rng = np.random.default_rng(0) if rng is None else generator(rng)
    trained = load(checkpoint)
    model, vocab, cfg = trained.model, trained.vocab, trained.config
    if text_file is not None:
        raw = load_text(text_file)
        source = pathlib.Path(text_file).name
    else:
        corpus = load_text(cfg.data)
        raw = corpus[round(len(corpus) * (1.0 - cfg.val_fraction)):]
        nl = raw.find("\n")
        raw = raw[nl + 1:] if 0 <= nl < 200 else raw  # start at a line
        source = "validation text"
    known = set(vocab.chars)
    text = "".join(ch for ch in raw if ch in known)[:n_chars]
    if len(text) < 20:
        raise ValueError(f"text must contain at least 20 characters of the model's vocabulary; got {len(text)}. "
                         "Pass --text with a text in the training language.")
    ids = vocab.encode(text)  # (T,)
    x = model.embed(ids[:, None])  # (T, 1, I)
    space = vocab.encode(" ")[0] if " " in known else None
    fp_input = None if space is None else np.asarray(model.embed(np.array([[space]]))[0, 0], dtype=np.float64)
    run_dir = run_dir_of(trained.path) if trained.path is not None else pathlib.Path(checkpoint)
    meta = {"training steps": trained.step}
    if trained.val_loss is not None:
        meta["val loss (nats/char)"] = float(trained.val_loss)
    if cfg.ema is not None:
        meta["weights"] = f"moving average, decay {cfg.ema:g}"
    an = analyze_model(model.rnn, x, tokens=ids[:, None], text=text, loss=loss_history(run_dir),
                       fixed_point_input=fp_input, rng=rng, title_meta=meta)
    data = "embedded Shakespeare" if cfg.data is None else pathlib.Path(cfg.data).name
    layers = f"{model.num_layers} × {model.hidden_size}" if model.num_layers > 1 else f"{model.hidden_size}"
    subtitle = (f"Character-level {model.cell.upper()} ({layers} units) trained {trained.step:,} steps on {data}; "
                f"measured on {len(text):,} characters of {source}"
                + ("; fixed points with the input held at ' '." if space is not None else "."))
    return build_report(out, an, title="Inside the hidden state", subtitle=subtitle, max_chars=len(text))
