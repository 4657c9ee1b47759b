"""The application layer: checkpoint -> probe -> report, as ``hiddenstate inspect`` and ``demo`` run it.

This is the one module that joins the three: it loads a trained character model
(:mod:`hiddenstate.train`), measures its hidden state (:mod:`hiddenstate.probe`) and writes the
HTML report (:mod:`hiddenstate.report`). None of those packages imports this one.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import time
from dataclasses import dataclass

import numpy as np

from hiddenstate.core.progress import progress
from hiddenstate.core.validation import generator, positive_int
from hiddenstate.kinds.ssm.mamba_analysis import MambaAnalysis, analyze_mamba, char_ids, is_mamba_char_model
from hiddenstate.probe.analysis import analyze_model
from hiddenstate.report import build_report
from hiddenstate.report.family_page import build_family_report
from hiddenstate.report.target import check_report_path
from hiddenstate.train.corpus import load_text
from hiddenstate.train.history import read_history
from hiddenstate.train.rundir import LOG_FILE, Trained, load, run_dir_of, training_text_path

__all__ = ["InspectedText", "char_mamba_report", "check_report_path", "inspect_checkpoint", "inspect_mamba_checkpoint",
           "inspected_text", "loss_history"]



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


@dataclass
class InspectedText:
    """The text a report measures (see :func:`inspected_text`).

    Attributes
    ----------
    text : str
        At most ``n_chars`` characters, all in the model's vocabulary.
    source : str
        ``"validation text"`` or the file's name.
    dropped : int
        Characters outside the vocabulary left out of the stretch of text that ``text`` comes from.
    unknown : str
        The distinct characters dropped, sorted (at most 10).
    """

    text: str
    source: str
    dropped: int
    unknown: str


def inspected_text(trained: Trained, text_file=None, *, n_chars: int = 2000) -> InspectedText:
    """The text :func:`inspect_checkpoint` runs the model on, and what it had to drop.

    Parameters
    ----------
    trained : Trained
        The loaded model (:func:`hiddenstate.train.load`).
    text_file : str or os.PathLike, optional
        A text of the user's; characters outside the vocabulary are dropped (and counted).
        Default: the start of the run's validation text (the tail of its training corpus).
    n_chars : int, default 2000
        Characters kept.

    Returns
    -------
    InspectedText

    Raises
    ------
    FileNotFoundError, IsADirectoryError, ValueError
        ``text_file`` unreadable; the run's training text not found from here or changed since
        training; fewer than 20 characters of the vocabulary.
    """
    n_chars = positive_int("n_chars", n_chars)
    cfg = trained.config
    if text_file is not None:
        raw = load_text(text_file, name="text")
        source = pathlib.Path(text_file).name
    else:
        raw = _training_text(trained)
        raw = raw[round(len(raw) * (1.0 - cfg.val_fraction)):]
        nl = raw.find("\n")
        raw = raw[nl + 1:] if 0 <= nl < 200 else raw  # start at a line
        source = "validation text"
    known = set(trained.vocab.chars)
    kept, dropped, unknown = [], 0, set()
    for ch in raw:
        if ch in known:
            kept.append(ch)
            if len(kept) == n_chars:
                break
        else:
            dropped += 1
            unknown.add(ch)
    text = "".join(kept)
    if len(text) < 20:
        raise ValueError(f"text must contain at least 20 characters of the model's vocabulary; got {len(text)}"
                         f"{f' ({dropped} others dropped)' if dropped else ''}. Pass --text with a text in the "
                         "training language.")
    return InspectedText(text, source, dropped, "".join(sorted(unknown)[:10]))


def _snapshot_history(trained: Trained) -> dict | None:
    """The loss curves a checkpoint keeps (``Snapshot.history``), as :func:`loss_history` gives them; None if empty."""
    hist = trained.snapshot.history
    curves = {}
    train = np.asarray(hist.get("train_loss", []), dtype=np.float64)  # (S,): index i is step i + 1
    if train.size:
        curves["train"] = (np.arange(1, train.size + 1, dtype=np.float64), train)
    val = np.asarray(hist.get("val_loss", []), dtype=np.float64)
    if val.size:
        curves["validation"] = (np.asarray(hist["val_step"], dtype=np.float64), val)
    return curves or None


def _training_text(trained: Trained) -> str:
    """The run's training text, found from here and checked against the checkpoint's SHA-256."""
    cfg = trained.config
    path = training_text_path(cfg, trained.run_dir)
    if path is not None and not os.path.isabs(path) and not os.path.exists(path):
        raise FileNotFoundError(f"the run's training text '{path}' was recorded relative to the folder it was trained "
                                "in, and is not found from here. Run inspect from that folder, or pass --text FILE.")
    text = load_text(path, name="the run's training text")
    expected = trained.snapshot.text.get("sha256") if isinstance(trained.snapshot.text, dict) else None
    if expected and hashlib.sha256(text.encode("utf-8")).hexdigest() != expected:
        raise ValueError(f"the run's training text '{path}' has changed since training (its SHA-256 differs), so its "
                         "validation text is not the one the run held out. Pass --text FILE to choose a text.")
    return text


def inspect_checkpoint(checkpoint, out="report.html", text_file=None, *, n_chars: int = 2000,
                       rng: np.random.Generator | None = None, n_fixed_point_starts: int = 32,
                       echo=None) -> pathlib.Path:
    """Analyse a trained character model and write its HTML report (``hiddenstate inspect``).

    A model of ``cell="mamba"`` gets the Mamba report (:func:`inspect_mamba_checkpoint`; ``rng``
    and ``n_fixed_point_starts`` are then not used: there is no fixed-point search, and the
    report's "Not measured" card says why).

    Parameters
    ----------
    checkpoint : str, os.PathLike or Trained
        A run directory of :func:`hiddenstate.train.train` or its ``checkpoint/`` subdirectory, or
        the model loaded from one.
    out : str or os.PathLike, default "report.html"
        The HTML file to write: new, or a previous report (checked first, :func:`check_report_path`).
    text_file : str or os.PathLike, optional
        Text to run the model on; characters outside the model's vocabulary are dropped, and the
        report's subtitle says how many (:func:`inspected_text`).
        Default: the start of the run's validation text (the tail of its training corpus).
    n_chars : int, default 2000
        Characters of text analysed (one sequence; all of them appear in the coloured view).
    rng : numpy.random.Generator, optional
        Fixed-point starts (default ``default_rng(0)``).
    n_fixed_point_starts : int, default 32
        Starting states of the fixed-point search (0 skips it; fewer is faster at large H), passed to
        :func:`~hiddenstate.probe.analysis.analyze_model`.
    echo : callable, optional
        Called with one line per stage, what it measured and its seconds (``analyze_model``'s
        ``echo``, then the report's rendering); ``hiddenstate inspect`` prints them on stderr off
        a terminal. Default: silent.

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
        20 characters of the model's vocabulary; when ``n_chars`` is not positive; when ``out``
        may not be written (:func:`check_report_path`).
    TypeError
        When ``n_chars`` is not an integer or ``rng`` not a :class:`numpy.random.Generator`.
    """
    n_chars = positive_int("n_chars", n_chars)
    rng = np.random.default_rng(0) if rng is None else generator(rng)
    out = check_report_path(out)
    trained = checkpoint if isinstance(checkpoint, Trained) else load(checkpoint)
    if trained.model.cell == "mamba":
        inspect_mamba_checkpoint(trained, out, text_file, n_chars=n_chars, echo=echo)
        return out
    model, vocab, cfg = trained.model, trained.vocab, trained.config
    measured = inspected_text(trained, text_file, n_chars=n_chars)
    text, source = measured.text, measured.source
    known = set(vocab.chars)
    ids = vocab.encode(text)  # (T,)
    x = model.embed(ids[:, None])  # (T, 1, I)
    space = vocab.encode(" ")[0] if " " in known else None
    fp_input = None if space is None else np.asarray(model.embed(np.array([[space]]))[0, 0], dtype=np.float64)
    run_dir = None if trained.path is None else run_dir_of(trained.path)
    meta = {"training steps": trained.step}
    if measured.dropped:
        meta["characters dropped"] = f"{measured.dropped:,} outside the vocabulary"
    if trained.val_loss is not None:
        meta["val loss (nats/char)"] = float(trained.val_loss)
    if cfg.ema is not None:
        meta["weights"] = f"moving average, decay {cfg.ema:g}"
    loss = None if run_dir is None else loss_history(run_dir)
    if loss is None:  # no log.jsonl beside the checkpoint (e.g. the shipped pretrained one): its own history
        loss = _snapshot_history(trained)
    an = analyze_model(model.rnn, x, tokens=ids[:, None], text=text, loss=loss,
                       fixed_point_input=fp_input, rng=rng, title_meta=meta, n_fixed_point_starts=n_fixed_point_starts,
                       echo=echo)
    data = "embedded Shakespeare" if cfg.data is None else pathlib.Path(cfg.data).name
    layers = f"{model.num_layers} × {model.hidden_size}" if model.num_layers > 1 else f"{model.hidden_size}"
    dropped = (f" ({measured.dropped:,} characters outside the vocabulary dropped)" if measured.dropped else "")
    subtitle = (f"Character-level {model.cell.upper()} ({layers} units) trained {trained.step:,} steps on {data}; "
                f"measured on {len(text):,} characters of {source}{dropped}"
                + ("; fixed points with the input held at ' '." if space is not None else "."))
    t0 = time.perf_counter()
    report = build_report(out, an, title="Inside the hidden state", subtitle=subtitle, max_chars=len(text))
    if echo is not None:
        echo(f"wrote the report (figures and HTML): {time.perf_counter() - t0:.1f} s")
    return report


def char_mamba_report(model, ids, out=None, *, text=None, tokens=None, states=None, max_lag: int = 30,
                      model_name: str | None = None, title: str = "Inside a Mamba model", subtitle: str = "",
                      echo=None) -> MambaAnalysis:
    """Measure a character model of Mamba blocks on its ids and optionally write the Mamba report.

    Parameters
    ----------
    model : CharRNN of cell "mamba"
        Its stack :class:`hiddenstate.kinds.ssm.stack.MambaStack` is traced as it computes
        (:func:`hiddenstate.kinds.ssm.mamba_analysis.trace_mamba`).
    ids : array_like of int, shape (T,) or (T, N)
        Character ids, time-major.
    out : str or os.PathLike, optional
        The report to write: a new file or a previous hiddenstate report (checked before any work).
    text : str, optional
        Sequence 0's characters, one per step: the channels that track text features and the
        report's explorer (without it the "Not measured" card says they need it).
    tokens : array_like of int, shape (T, N), optional
        The ids the memory curve decodes k steps back; default ``ids``.
    states : pair of ndarray, optional
        The CharRNN's initial state ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))`` (None: zeros).
    max_lag : int, default 30
        Largest lag of the Jacobian products.
    model_name : str, optional
        What the summary and the report call the model (default ``"hiddenstate CharRNN (mamba)"``).
    title : str, default "Inside a Mamba model"
    subtitle : str, default ""
    echo : callable, optional
        Called with one line per stage and its seconds (the measurements, then the report).

    Returns
    -------
    MambaAnalysis

    Raises
    ------
    TypeError
        ``model`` is not a CharRNN of cell "mamba"; ids that are not integers.
    ValueError
        Ids not (T,) or (T, N) in [0, V), no step, a state of another shape, an ``out`` that
        may not be written; and the errors of :func:`analyze_mamba`.
    """
    if not is_mamba_char_model(model):
        raise TypeError(f"model must be a hiddenstate CharRNN of cell 'mamba'; got {type(model).__name__}"
                        f"{f' of cell {model.cell!r}' if hasattr(model, 'cell') else ''}.")
    out = None if out is None else check_report_path(out)
    ids = char_ids(ids, model.vocab_size)  # (T, N)
    with progress(1 if out is None else 2, "analysing the Mamba state", unit="stage") as bar:  # a terminal's only
        bar.set_postfix_str("trace, decay, gradient against lag, PCA")
        t0 = time.perf_counter()
        an = analyze_mamba(model, ids, states, max_lag=max_lag, model_name=model_name, text=text,
                           tokens=ids if tokens is None else tokens)
        bar.update()
        if echo is not None:
            echo(f"measured every layer's states, decay (keep gate), time constants, gradient against lag, memory, "
                 f"PCA, channels ({ids.shape[0]:,} steps of {ids.shape[1]:,} sequence(s)): {time.perf_counter() - t0:.1f} s")
        if out is not None:
            bar.set_postfix_str("report")
            t0 = time.perf_counter()
            build_family_report(out, an, title=title, subtitle=subtitle)
            bar.update()
            if echo is not None:
                echo(f"wrote the report (HTML): {time.perf_counter() - t0:.1f} s")
    return an


def inspect_mamba_checkpoint(checkpoint, out="report.html", text_file=None, *, n_chars: int = 2000,
                             echo=None) -> MambaAnalysis:
    """The Mamba report of a trained character model of ``cell="mamba"`` (``hiddenstate inspect``).

    The model reads the text as it was trained to (one-hot or embedded characters, every
    layer ``x + mixer(rms_norm(x))``); every layer's states are measured on every step
    (:func:`char_mamba_report`).

    Parameters
    ----------
    checkpoint : str, os.PathLike or Trained
        A run directory of :func:`hiddenstate.train.train` (or its ``checkpoint/``), or the model
        loaded from one.
    out : str or os.PathLike, default "report.html"
        The HTML file to write: new, or a previous report (checked first, :func:`check_report_path`).
    text_file : str or os.PathLike, optional
        Text to run the model on (characters outside the vocabulary dropped, the subtitle says how
        many); default the start of the run's validation text (:func:`inspected_text`).
    n_chars : int, default 2000
        Characters of text measured (one sequence).
    echo : callable, optional
        Called with one line per stage and its seconds.

    Returns
    -------
    MambaAnalysis
        Its ``layers[l].record`` holds every step's states of layer l.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`inspect_checkpoint`; a checkpoint whose model is not of ``cell="mamba"``.
    """
    n_chars = positive_int("n_chars", n_chars)
    out = check_report_path(out)
    trained = checkpoint if isinstance(checkpoint, Trained) else load(checkpoint)
    model, cfg = trained.model, trained.config
    if model.cell != "mamba":
        raise ValueError(f"checkpoint must hold a model of cell 'mamba' for inspect_mamba_checkpoint; got cell "
                         f"{model.cell!r}. Use inspect_checkpoint.")
    measured = inspected_text(trained, text_file, n_chars=n_chars)
    text = measured.text
    ids = trained.vocab.encode(text)[:, None]  # (T, 1)
    data = "embedded Shakespeare" if cfg.data is None else pathlib.Path(cfg.data).name
    facts = [f"Character-level Mamba ({model.num_layers} block(s), d_model {model.hidden_size}, SSM state "
             f"(Di={model.rnn.d_inner}, S={model.rnn.d_state}) per layer) trained {trained.step:,} steps on {data}"]
    if trained.val_loss is not None:
        facts.append(f"validation loss {float(trained.val_loss):.4f} nats/char")
    if cfg.ema is not None:
        facts.append(f"moving-average weights (decay {cfg.ema:g})")
    dropped = f" ({measured.dropped:,} characters outside the vocabulary dropped)" if measured.dropped else ""
    facts.append(f"measured on {len(text):,} characters of {measured.source}{dropped}.")
    return char_mamba_report(model, ids, out, text=text, model_name="hiddenstate CharRNN (mamba)",
                             subtitle="; ".join(facts), echo=echo)
