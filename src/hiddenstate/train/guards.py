"""What ends a training run early without losing it or hiding it: signals, divergence, memory.

* :class:`DeferredSignals` holds SIGINT (Ctrl-C) and SIGTERM until the end of the current step:
  :func:`~hiddenstate.train.train` then saves a checkpoint and raises :class:`TrainingInterrupted`
  (a ``KeyboardInterrupt``). A second signal stops at once; the last checkpoint is still whole,
  since a save replaces it atomically.
* :func:`divergence` is the rule that stops a run whose loss is no longer a number or has
  exploded (:class:`TrainingDiverged`, a ``FloatingPointError``, names ``--lr`` and ``--clip``).
* :class:`RunWriteError` is a failed write (a full disk) that names the file and says whether the
  previous checkpoint survived.
* :func:`training_memory` and :func:`sampling_memory` estimate the memory of a run and of a sample
  up front, so a size that cannot fit is refused in one line (:mod:`hiddenstate.core.resources`).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time

from hiddenstate.classic.layers import BY_KIND
from hiddenstate.kinds.ssm.stack import D_CONV, D_STATE, EXPAND

__all__ = ["EXPLODED_NATS", "DeferredSignals", "RunWriteError", "TrainingDiverged", "TrainingInterrupted",
           "divergence", "sampling_memory", "training_memory"]

#: A loss this many nats/char above ln V (a uniform guess) is an exploded run: the model gives the
#: right character e^-20 (2e-9) times the probability a uniform guess gives it. Healthy runs, even at
#: learning rates too high to learn well, stay within a few nats of ln V (measured: lr 0.2, max 7.4).
EXPLODED_NATS = 20.0

_SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # pragma: no cover
        return f"signal {signum}"


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped :func:`~hiddenstate.train.train`; what was saved is in the attributes.

    Parameters
    ----------
    signum : int
        The signal (``signal.SIGINT``, ``signal.SIGTERM``).
    step : int or None
        The step of the checkpoint on disk (None: no checkpoint).
    checkpoint : pathlib.Path
        The checkpoint directory.
    saved : bool
        True: the checkpoint was saved at the end of the step the signal arrived in. False: a
        second signal stopped the run at once (or the signal came before the first step), and
        ``step`` is the checkpoint that was already there.

    Attributes
    ----------
    signum, step, checkpoint, saved
        As given.
    exit_status : int
        ``128 + signum``, the shell's status for a process ended by that signal (130, 143).
    """

    def __init__(self, signum: int, *, step, checkpoint, saved: bool):
        self.signum, self.step, self.checkpoint, self.saved = signum, step, checkpoint, saved
        self.exit_status = 128 + int(signum)
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line: the signal and what the checkpoint on disk holds.

        Returns
        -------
        str
        """
        name = _signal_name(self.signum)
        if self.saved:
            return f"interrupted by {name}: saved the checkpoint of step {self.step} in '{self.checkpoint}'"
        if self.step is None:
            return f"interrupted by {name}: stopped at once; no checkpoint was saved"
        return (f"interrupted by {name}: stopped at once; the checkpoint of step {self.step} in "
                f"'{self.checkpoint}' is intact")


class TrainingDiverged(FloatingPointError):
    """The loss of :func:`~hiddenstate.train.train` became non-finite or exploded.

    Parameters
    ----------
    message : str
        The whole one-line message (what happened, the flags to change, what is on disk).
    step : int
        The step that diverged.
    checkpoint_step : int or None
        The step of the checkpoint on disk, which was saved before the divergence (None: none).

    Attributes
    ----------
    step, checkpoint_step
        As given.
    """

    def __init__(self, message: str, *, step: int, checkpoint_step):
        self.step, self.checkpoint_step = step, checkpoint_step
        super().__init__(message)


class RunWriteError(OSError):
    """Writing a run's file failed (e.g. a full disk): the message names the file and the checkpoint on disk.

    Built as ``RunWriteError(errno, message)``; ``str()`` is the message alone (no ``[Errno 28]``).
    """

    def __str__(self) -> str:
        return str(self.strerror)


def divergence(loss: float, vocab_size: int) -> str | None:
    """Why a loss means the run diverged, or None when it is a loss a run can recover from.

    Parameters
    ----------
    loss : float
        Nats per character.
    vocab_size : int
        V; a uniform guess scores ln V.

    Returns
    -------
    str or None
        ``"became nan"`` (or inf), ``"reached 90756 nats/char (a uniform guess scores 4.14)"``,
        or None.
    """
    if not math.isfinite(loss):
        return f"became {loss}"
    uniform = math.log(max(vocab_size, 2))
    if loss > uniform + EXPLODED_NATS:
        return f"reached {loss:.6g} nats/char (a uniform guess scores {uniform:.2f})"
    return None


class DeferredSignals:
    """A context in which SIGINT and SIGTERM only set :attr:`received`; a second one interrupts at once.

    Installed only in the main thread (elsewhere, or where a signal is ignored, nothing changes);
    the previous handlers come back on exit, except after a signal with ``relay_grace_s`` (a rank of
    a distributed run, which is now exiting): then a signal within the grace of the exit is ignored
    until the process ends, and a later one acts as it did before the context.

    Parameters
    ----------
    relay_grace_s : float, default 0
        A second signal that arrives within this many seconds of the first is taken as the same
        one. A rank of a distributed run uses 10 s: torchrun passes the signal it receives on to
        every worker, so Ctrl-C in a terminal reaches a worker twice (from the terminal and from
        torchrun) and must still save the step in flight.
    watch_parent : int or None, default None
        The pid of the process that started this one (torchrun's agent, or ``hiddenstate train
        --processes K``), as :func:`os.getppid` gave it when the run began: once this process has
        another parent (re-parented: the launcher is gone), it sends itself SIGTERM, so the step in
        flight is saved and the run stops as if the launcher had relayed the signal. Polled every
        :attr:`PARENT_POLL_S` seconds by a daemon thread, stopped on exit. None: no watch.

    Attributes
    ----------
    received : int or None
        The first signal that arrived.
    forced : int or None
        A second signal, which raised ``KeyboardInterrupt`` where the program was.
    """

    #: Seconds between two looks at the parent process (``watch_parent``).
    PARENT_POLL_S = 0.5

    def __init__(self, relay_grace_s: float = 0.0, *, watch_parent: int | None = None):
        self.received = None
        self.forced = None
        self._previous = {}
        self._grace_s, self._first_at, self._exit_at = relay_grace_s, None, 0.0
        self._watch_parent, self._watcher, self._stop_watching = watch_parent, None, threading.Event()

    def _watch(self, parent: int) -> None:
        while not self._stop_watching.wait(self.PARENT_POLL_S):
            if os.getppid() != parent:  # the launcher died and this process was re-parented
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received, self._first_at = signum, time.monotonic()
            return
        if self._grace_s and time.monotonic() - self._first_at < self._grace_s:
            return  # the launcher's relay of the first signal
        self.forced = signum
        raise KeyboardInterrupt

    def __enter__(self) -> DeferredSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # ignored by whoever started us (nohup, a background job): keep it so
                with contextlib.suppress(OSError, ValueError):
                    self._previous[signum] = signal.signal(signum, self._handle)
            if self._watch_parent is not None and signal.SIGTERM in self._previous:
                self._stop_watching.clear()
                self._watcher = threading.Thread(target=self._watch, args=(self._watch_parent,), daemon=True,
                                                 name="hiddenstate-parent-watch")
                self._watcher.start()
        return self

    def _late(self, signum, frame) -> None:
        """After the context, while the rank exits: a relay within the grace is the same signal, ignored."""
        if time.monotonic() - self._exit_at < self._grace_s:
            return
        for sig, handler in self._previous.items():  # a signal after the grace is a new one: as before the run
            signal.signal(sig, handler)
        signal.raise_signal(signum)

    def __exit__(self, *exc) -> None:
        if self._watcher is not None:
            self._stop_watching.set()
            self._watcher.join(timeout=5.0)
            self._watcher = None
        if self.received is not None and self._grace_s and self._previous:
            # A rank that stopped for a signal is now exiting (the other ranks too): torchrun relays the
            # signal again, or sends SIGTERM when the first rank exits; with the default handler back, it
            # killed this rank with -15 before its exit status (4 of 6 runs). Keep ours until exit.
            self._exit_at = time.monotonic()
            for signum in self._previous:
                signal.signal(signum, self._late)
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


def _mamba_params(input_size: int, d_model: int, num_layers: int) -> int:
    M, Di, S, R = d_model, EXPAND * d_model, D_STATE, -(-d_model // 16)
    block = 2 * Di * M + Di * D_CONV + Di + (R + 2 * S) * Di + Di * R + Di + Di * S + Di + M * Di + M
    return M * input_size + num_layers * block + M


def _recurrent_params(cell: str, input_size: int, hidden_size: int, num_layers: int) -> int:
    if cell == "mamba":
        return _mamba_params(input_size, hidden_size, num_layers)
    kind = BY_KIND[cell].kind
    G, H = len(kind.blocks), hidden_size
    total = 0
    for layer in range(num_layers):
        I = input_size if layer == 0 else H
        total += G * H * I + G * H + (G * H * H + G * H if kind.recurrent else 0)
    return total


def training_memory(cfg, vocab_size: int) -> dict:
    """Estimated memory of a training run of ``cfg`` on a text of ``vocab_size`` characters.

    Parameters
    ----------
    cfg : TrainConfig
    vocab_size : int
        V.

    Returns
    -------
    dict
        ``parameters`` (the count), ``bytes`` (the estimate: weights, gradients, Adam's two
        moments, the moving average, the copies a checkpoint makes, plus the activations of one
        step or one validation chunk, whichever is larger).
    """
    V, H, L = vocab_size, cfg.hidden_size, cfg.num_layers
    I = V if cfg.embedding_dim is None else cfg.embedding_dim
    # mamba: its kernels keep about 4 (Di, S) arrays a step per layer (Di = 2H, S = 16): 3G + 6 = 150
    G = 48 if cfg.cell == "mamba" else len(BY_KIND[cfg.cell].kind.blocks)
    n_params = _recurrent_params(cfg.cell, I, H, L) + V * H + V + (0 if cfg.embedding_dim is None else V * I)
    size = 4 if cfg.dtype == "float32" else 8
    copies = 7 + (2 if cfg.ema is not None else 0)  # params, grads, 2 moments, state_dict, bytes, Adam's copy
    per_token = (3 * G + 6) * H * L * size + I * size + V * (size + 24)  # caches, one-hot, logits in float64
    activations = max(cfg.seq_len * cfg.batch_size, 256 * 32) * per_token  # a step, or an evaluation chunk
    return {"parameters": n_params, "bytes": float(n_params) * size * copies + float(activations)}


def sampling_memory(model, length: int, prime_length: int) -> float:
    """Estimated bytes of ``sample`` generating ``length`` characters after a prime.

    Parameters
    ----------
    model : CharRNN
    length : int
        Characters to generate.
    prime_length : int
        Characters of the prime (read in one pass).

    Returns
    -------
    float
        The ids (int64), their code points and the decoded text (up to 4 bytes a character, then
        a copy), and the forward pass over the prime.
    """
    per_char = 8 + 4 + 4 + 4 + 4
    prime = prime_length * (4 * model.hidden_size * model.num_layers * 8 + model.vocab_size * 8)
    return float(length) * per_char + float(prime)
