"""The pretrained checkpoint shipped with the package: the demo's GRU, to look at before training anything.

``hiddenstate.load_pretrained()`` loads it (a :class:`~hiddenstate.train.rundir.Trained`, as
:func:`~hiddenstate.train.rundir.load` returns for a run); ``hiddenstate inspect --pretrained``
and ``hiddenstate sample --pretrained`` use it in place of a run directory. It is the ``demo``
preset (a 256-unit GRU on one-hot characters, float32) trained on the embedded Shakespeare for
1,000 steps from seed 0, with no time limit and one BLAS thread, made by
``scripts/make_pretrained.py`` through :func:`make_pretrained`. Only what inference needs is
kept: the weights, the configuration, the vocabulary and the loss history (not Adam's moments
nor the carried state), so it is about 1 MB and cannot be resumed.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from hiddenstate.core.validation import positive_int
from hiddenstate.train.config import PRESETS
from hiddenstate.train.rundir import Trained, load
from hiddenstate.train.rundir.snapshot import Snapshot

__all__ = ["PRETRAINED", "PRETRAINED_CONFIG", "load_pretrained", "make_pretrained", "pretrained_path"]

#: The shipped checkpoints: name -> directory under the package's ``data/pretrained/``
PRETRAINED = {"demo-gru": "demo-gru"}
#: The configuration of ``demo-gru``: the demo preset without its time limit (so the steps are fixed)
PRETRAINED_CONFIG = {**PRESETS["demo"], "max_minutes": None, "seed": 0, "dtype": "float32"}
#: What the shipped configuration records as its run directory (it was made in a temporary one)
_OUT = "pretrained/demo-gru"


def pretrained_path(name: str = "demo-gru") -> Path:
    """The checkpoint directory of a shipped pretrained model.

    Parameters
    ----------
    name : str, default "demo-gru"
        A key of :data:`PRETRAINED`.

    Returns
    -------
    pathlib.Path
        The directory inside the installed package (read it; do not train into it).

    Raises
    ------
    ValueError
        An unknown ``name``.
    FileNotFoundError
        The package was installed without its data files.
    """
    if not isinstance(name, str) or name not in PRETRAINED:
        raise ValueError(f"name must be one of {', '.join(repr(k) for k in PRETRAINED)}; got {name!r}.")
    path = Path(__file__).resolve().parents[1] / "data" / "pretrained" / PRETRAINED[name]
    if not (path / "meta.json").is_file():
        raise FileNotFoundError(f"the pretrained checkpoint '{path}' is missing: this installation of hiddenstate "
                                "lacks its package data. Reinstall it (pip install --force-reinstall hiddenstate).")
    return path


def load_pretrained(name: str = "demo-gru") -> Trained:
    """Load a pretrained character model shipped with the package.

    Parameters
    ----------
    name : str, default "demo-gru"
        ``"demo-gru"``: the demo preset's GRU (256 units, float32, 63 characters), trained 1,000
        steps on the embedded Shakespeare (validation loss in ``trained.val_loss``, nats/char).

    Returns
    -------
    Trained
        As :func:`hiddenstate.train.load`: ``trained.model`` (a :class:`~hiddenstate.CharRNN`),
        ``trained.vocab``, ``trained.sample(prime, length, ...)``; pass it to
        :func:`hiddenstate.pipelines.app.inspect_checkpoint` for the report.

    Raises
    ------
    ValueError, FileNotFoundError
        As :func:`pretrained_path`, and from :func:`~hiddenstate.train.load` if the files were changed.
    """
    return load(pretrained_path(name))


def make_pretrained(out, *, steps: int = 1000, stop_after: int | None = None, work_dir=None) -> Path:
    """Train ``demo-gru`` and write its slim checkpoint to ``out`` (``scripts/make_pretrained.py``).

    Parameters
    ----------
    out : str or os.PathLike
        The checkpoint directory to write (a previous checkpoint there is replaced).
    steps : int, default 1000
        Optimizer steps of the schedule (the cosine learning rate decays over them).
    stop_after : int, optional
        Stop after this many of them (the same run cut short: its first steps, losses and
        weights are those of the full run's; a test of the shipped checkpoint compares them).
    work_dir : str or os.PathLike, optional
        Where the full training run is written first (default: a temporary directory, removed).

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TypeError, ValueError
        ``steps`` or ``stop_after`` is not a positive integer; and the errors of :func:`hiddenstate.train.train`.

    Notes
    -----
    One BLAS thread (``threadpoolctl``), so that the float32 sums are done in one order: the
    same machine gives the same bytes. ``elapsed_s`` in ``meta.json`` is the one entry that
    differs between runs.
    """
    from threadpoolctl import threadpool_limits

    from hiddenstate.train.loop import train

    steps = positive_int("steps", steps)
    stop = None if stop_after is None else positive_int("stop_after", stop_after)
    with tempfile.TemporaryDirectory(prefix="hiddenstate-pretrained-") as tmp:
        run = Path(tmp if work_dir is None else os.fspath(work_dir)) / "run"
        with threadpool_limits(limits=1, user_api="blas"):
            result = train({**PRETRAINED_CONFIG, "steps": steps, "out": str(run)}, progress=False, verbose=False,
                           callback=None if stop is None else (lambda record: record["step"] >= stop))
        snap = Snapshot.read(result.checkpoint)
        slim = dataclasses.replace(snap, adam={}, carry=None, train={**snap.train, "out": _OUT})
        slim.save(out)
    return Path(out)
