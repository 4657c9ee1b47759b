"""A run directory, and the model it holds: find its checkpoint, load it, sample from it.

``hiddenstate train --out DIR`` writes::

    DIR/checkpoint/    the Snapshot (see hiddenstate.train.rundir.snapshot), saved atomically
    DIR/log.jsonl      one JSON record per step (see hiddenstate.train.history)
    DIR/loss.png       the loss curves

:func:`load` accepts the run directory or its ``checkpoint/`` subdirectory and returns a
:class:`Trained` model; :func:`sample` generates text from either.

Examples
--------
>>> from hiddenstate.train import load, sample
>>> trained = load("runs/gru")                                   # doctest: +SKIP
>>> print(sample(trained, prime="ROMEO:", length=200, seed=1))   # doctest: +SKIP
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import nonnegative_int
from hiddenstate.train.config import TrainConfig
from hiddenstate.train.corpus import Vocabulary
from hiddenstate.train.guards import sampling_memory
from hiddenstate.train.model import CharRNN
from hiddenstate.train.rundir.checkpoint import META_FILE
from hiddenstate.train.rundir.snapshot import Snapshot

__all__ = ["CHECKPOINT_DIR", "LOG_FILE", "PLOT_FILE", "Trained", "load", "resolve_checkpoint", "run_dir_of", "sample",
           "training_text_path"]

#: The names inside a run directory.
CHECKPOINT_DIR = "checkpoint"
LOG_FILE = "log.jsonl"
PLOT_FILE = "loss.png"


def resolve_checkpoint(path, *, name: str = "checkpoint") -> Path:
    """Return the checkpoint directory for ``path``: a checkpoint itself, or a run directory.

    Parameters
    ----------
    path : str or os.PathLike
        A run directory (``--out`` of ``hiddenstate train``) or its ``checkpoint/`` subdirectory.
    name : str, default "checkpoint"
        What the messages call ``path`` (``"--resume"`` for the run being resumed).

    Returns
    -------
    pathlib.Path
        The directory holding ``meta.json`` (or about to, after an interrupted save).

    Raises
    ------
    TypeError
        If ``path`` is not a str or os.PathLike.
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If ``path`` is a file (or a FIFO, device), a loop of symbolic links, or a directory with no
        checkpoint in it.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path; got {type(path).__name__}.")
    p = Path(path)
    if not p.exists():
        if p.is_symlink():  # a loop of links, or a link to nothing
            try:
                os.stat(p)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise ValueError(f"{name} must be a directory; got '{p}', a loop of symbolic links. Give the "
                                     "run directory itself.") from None
        raise FileNotFoundError(f"{name} '{p}' does not exist. Give a run directory written by "
                                "`hiddenstate train` (or its checkpoint/ subdirectory).")
    if not p.is_dir():
        what = "a file" if p.is_file() else "not a directory (a FIFO, device or socket)"
        raise ValueError(f"{name} must be a directory; got '{p}', which is {what}. Give the run "
                         "directory (or its checkpoint/ subdirectory), not a file inside it.")
    if (p / META_FILE).is_file():
        return p
    sub = p / CHECKPOINT_DIR
    if (sub / META_FILE).is_file() or (p / f".{CHECKPOINT_DIR}.previous" / META_FILE).is_file():
        return sub
    what = "checkpoint directory" if name == "checkpoint" else name
    raise ValueError(f"{what} '{p}' holds no checkpoint ({META_FILE} is missing, here and in "
                     f"{CHECKPOINT_DIR}/). Give a run directory written by `hiddenstate train`.")


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory of a checkpoint directory: its parent when it is ``<run>/checkpoint``.

    Parameters
    ----------
    checkpoint : pathlib.Path
        As :func:`resolve_checkpoint` returns it.

    Returns
    -------
    pathlib.Path
    """
    return checkpoint.parent if checkpoint.name == CHECKPOINT_DIR else checkpoint


def training_text_path(config: TrainConfig, run_dir) -> str | None:
    """Where a run's training text (``--data``) is, seen from the current folder.

    Runs record the absolute path. A relative one (recorded by earlier versions) is
    read from the folder the run was trained from when that can be told: a relative ``--out``
    names the run directory from there (``runs/gru`` in ``/home/me/runs/gru``: ``/home/me``).

    Parameters
    ----------
    config : TrainConfig
        The run's configuration.
    run_dir : str or os.PathLike or None
        Where the run directory is now.

    Returns
    -------
    str or None
        The path to read (None: the embedded corpus); the recorded one when nothing better is found.
    """
    data = config.data
    if data is None or run_dir is None or os.path.isabs(data) or os.path.exists(data):
        return data
    out = Path(os.path.normpath(str(config.out)))
    here = Path(os.path.abspath(run_dir))
    if out.is_absolute() or ".." in out.parts:
        return data
    parts = () if str(out) == "." else out.parts
    if parts and here.parts[-len(parts):] != parts:
        return data
    candidate = Path(*here.parts[: len(here.parts) - len(parts)]) / data
    return str(candidate) if candidate.exists() else data


@dataclass
class Trained:
    """A model loaded from a checkpoint (see :func:`load`).

    Attributes
    ----------
    model : CharRNN
        With the saved weights (the moving average when the run had ``ema``).
    vocab : Vocabulary
    config : TrainConfig
        The run's configuration.
    snapshot : Snapshot
        Everything the checkpoint holds (optimizer moments, carried state, history, ...).
    path : pathlib.Path or None
        The checkpoint directory.
    """

    model: CharRNN
    vocab: Vocabulary
    config: TrainConfig
    snapshot: Snapshot = field(repr=False)
    path: Path | None = None

    @property
    def initial_state(self):
        """The tuned initial state of a ``tune_initial_state`` run (None for other runs).

        Returns
        -------
        ndarray of shape (L, 1, H), a pair (LSTM: (h, c); mamba: (ssm, conv)), or None
            One row in the model's format (:mod:`hiddenstate.train.initial_state`), which
            :func:`sample` starts from.
        """
        from hiddenstate.train.initial_state import state_from_arrays

        if self.snapshot.initial_state is None:
            return None
        return state_from_arrays(self.model, self.snapshot.initial_state, name=f"checkpoint '{self.path}' initial_state")

    @property
    def step(self) -> int:
        """Optimizer steps done when the checkpoint was saved."""
        return int(self.snapshot.step)

    @property
    def val_loss(self) -> float | None:
        """The last validation loss in nats/char recorded before the checkpoint (None if none)."""
        return self.snapshot.val_loss

    @property
    def meta(self) -> dict:
        """The checkpoint's ``meta.json`` document (see :data:`hiddenstate.train.rundir.snapshot.META`)."""
        return self.snapshot.to_files()[1]

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The checkpoint's other arrays by name (see :data:`hiddenstate.train.rundir.snapshot.ARRAYS`)."""
        return self.snapshot.to_files()[2]

    @property
    def run_dir(self) -> Path | None:
        """The run directory (``log.jsonl``, ``loss.png``), None without a path."""
        return None if self.path is None else run_dir_of(self.path)

    def sample(self, prime: str | None = None, length: int = 500, *, temperature: float = 1.0,
               seed: int | None = 0, top_k: int | None = None, top_p: float | None = None) -> str:
        """Generate text from this model (:func:`sample` with this source).

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
        top_k : int, optional
            Draw among the k most likely characters only (None: all).
        top_p : float in (0, 1], optional
            Nucleus sampling: the smallest set of likeliest characters reaching this mass (None: all).

        Returns
        -------
        str
            ``prime`` followed by ``length`` generated characters.
        """
        return sample(self, prime=prime, length=length, temperature=temperature, seed=seed, top_k=top_k, top_p=top_p)


def load(path) -> Trained:
    """Load a model, its vocabulary and its training state from a checkpoint or run directory.

    Parameters
    ----------
    path : str or os.PathLike
        A run directory (``--out`` of ``hiddenstate train``) or its ``checkpoint/`` subdirectory.

    Returns
    -------
    Trained
        ``model`` (:class:`~hiddenstate.train.model.CharRNN`), ``vocab``, ``config``, ``step``,
        ``snapshot`` (optimizer and carried state, history) and ``path``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it holds no checkpoint, a file is truncated or tampered with, or the checkpoint was not
        written by :func:`~hiddenstate.train.train`.
    """
    ckpt = resolve_checkpoint(path)
    snap = Snapshot.read(ckpt)
    try:
        vocab = Vocabulary.from_json(snap.vocab)
        model_cfg = dict(snap.model)
        model_cfg["dtype"] = np.dtype(model_cfg["dtype"])
        model = CharRNN(**model_cfg, rng=np.random.default_rng(0))
        config = TrainConfig(**snap.train)
    except (KeyError, TypeError) as error:
        raise ValueError(f"checkpoint '{ckpt}' has an incomplete or unknown meta.json ({error}). "
                         "It was written by another version or edited.") from None
    if model.vocab_size != vocab.size:
        raise ValueError(f"checkpoint '{ckpt}' is inconsistent: vocabulary of {vocab.size} characters, model "
                         f"for {model.vocab_size}.")
    model.load_state_dict(snap.weights)
    return Trained(model=model, vocab=vocab, config=config, snapshot=snap, path=ckpt)


def sample(source, prime: str | None = None, length: int = 500, *, temperature: float = 1.0,
           seed: int | None = 0, top_k: int | None = None, top_p: float | None = None) -> str:
    """Generate text from a trained model.

    Parameters
    ----------
    source : str, os.PathLike, Trained or TrainResult
        A checkpoint or run directory, or a loaded/trained model (anything with ``model`` and
        ``vocab``). A tuning run's tuned initial state (``initial_state``) is where generation starts.
    prime : str, optional
        Text to condition on; returned at the start of the result. Default: a newline (or the
        vocabulary's first character if the text had none).
    length : int, default 500
        Characters to generate after the prime (non-negative).
    temperature : float, default 1.0
        Softmax temperature (>= 0; 0 is greedy decoding). See
        :meth:`~hiddenstate.train.model.CharRNN.sample`.
    seed : int or None, default 0
        Seeds the sampler (non-negative): the same seed gives the same text. None: fresh entropy.
    top_k : int, optional
        Draw only among the k most likely characters (positive; None: all).
    top_p : float in (0, 1], optional
        Nucleus sampling: draw only from the smallest set of most likely characters whose
        probability reaches ``top_p`` (None: all). Applied after ``top_k``; see
        :func:`hiddenstate.train.generate.next_distribution`.

    Returns
    -------
    str
        ``prime`` followed by ``length`` generated characters.

    Raises
    ------
    TypeError
        ``prime`` not a str, ``length`` or ``seed`` not an int.
    ValueError
        If ``prime`` is empty or uses characters outside the model's vocabulary, or ``length``,
        ``temperature``, ``seed``, ``top_k`` or ``top_p`` is out of range, or ``length`` characters cannot fit in this
        machine's memory.
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
    if isinstance(length, (int, np.integer)) and not isinstance(length, bool) and length > 0:
        check_memory(f"length {int(length)}", sampling_memory(model, int(length), len(prime)),
                     "Generate fewer characters at a time.")
    rng = np.random.default_rng(None if seed is None else nonnegative_int("seed", seed))
    ids = model.sample(vocab.encode(prime), length, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng,
                       state=getattr(source, "initial_state", None))  # a tuned initial state, if any
    return prime + vocab.decode(ids)
