"""A run's world: one process (:data:`LOCAL`, every method the identity) and the errors of many.

:class:`World` is the interface the trainer and its loop call at the points where a rank of a
distributed run differs from a single process (:mod:`hiddenstate.train.distributed`); the
single-process run gets :data:`LOCAL`, whose methods return what they are given, so it reads and
computes as it always did.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["DEFAULT_TIMEOUT_S", "LOCAL", "LostRank", "PeerFailed", "RendezvousFailed", "World", "alive", "env_int",
           "first_sentence", "one_line", "timeout_s"]

#: Seconds a collective may wait for the other ranks before the run stops (HIDDENSTATE_DIST_TIMEOUT).
DEFAULT_TIMEOUT_S = 60.0
#: The shortest timeout (s): below it the ranks cannot even meet (torch's store times out first).
MIN_TIMEOUT_S = 1.0
#: The longest timeout (s), 30 days: longer overflows torch's timer (1e20 s is not a duration it holds).
MAX_TIMEOUT_S = 30 * 24 * 3600.0

#: The launcher's variables that make a process one rank of a run.
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class LostRank(RuntimeError):
    """A collective failed or timed out: another rank died, hung, or the network failed.

    Every surviving rank raises it (the CLI prints one line each and exits 1); the last checkpoint
    written by rank 0 is intact.
    """


class RendezvousFailed(RuntimeError):
    """The process group could not be formed (an unreachable address, a port in use, a timeout)."""


class PeerFailed(Exception):
    """Another rank refused the run before its first step; that rank reported why.

    Parameters
    ----------
    message : str
    status : int, default 2
        The exit status the CLI gives (2: a user error on the rank that reported it).
    """

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


class World:
    """One process: every method is the identity (the single-process run, unchanged).

    The methods are the points where a rank of a distributed run differs from a single process
    (:class:`~hiddenstate.train.distributed.TorchWorld` documents what each does there).

    Attributes
    ----------
    rank, size, local_rank, local_size : int
        0, 1, 0, 1.
    leader : bool
        True: this process owns the run directory, logs, saves and prints.
    """

    rank, size, local_rank, local_size, leader = 0, 1, 0, 1, True

    def run_device(self, device: str) -> str:
        """The ``--device`` this process trains on.

        Parameters
        ----------
        device : str

        Returns
        -------
        str
            ``device``.
        """
        return device

    def mask_generator(self, rng: np.random.Generator, batch_size: int) -> np.random.Generator:
        """The generator this process draws its dropout masks from.

        Parameters
        ----------
        rng : numpy.random.Generator
        batch_size : int

        Returns
        -------
        numpy.random.Generator
            ``rng`` itself.
        """
        return rng

    def shard(self, chunk):
        """This process's rows of a step's chunk.

        Parameters
        ----------
        chunk : tuple of ndarray of shape (T, N)

        Returns
        -------
        tuple of ndarray of shape (T, N)
            ``chunk``.
        """
        return chunk

    def shard_state(self, state):
        """This process's rows of a carried state.

        Parameters
        ----------
        state : ndarray of shape (L, N, H), a pair, or None

        Returns
        -------
        ndarray of shape (L, N, H), a pair, or None
            ``state``.
        """
        return state

    def gather_state(self, state):
        """Every row's carried state.

        Parameters
        ----------
        state : ndarray of shape (L, N, H), a pair, or None

        Returns
        -------
        ndarray of shape (L, N, H), a pair, or None
            ``state``.
        """
        return state

    def watch(self, probe) -> None:
        """Where the stop agreement comes from (one process: nothing to agree on).

        Parameters
        ----------
        probe : callable or None
            Returns ``(out_of_time, signum)``.
        """

    def local(self, compute, params: dict, groups=None):
        """This process's part of a step: ``compute()``.

        Parameters
        ----------
        compute : callable
            Returns ``(loss, grads, carry)``.
        params : dict of str to ndarray
            The model's parameters (the shapes of the gradients).
        groups : list of list of str, optional
            The order the backward pass finishes the gradients in (unused here).

        Returns
        -------
        tuple
            What ``compute`` returns (its errors propagate).
        """
        return compute()

    def average(self, loss, grads: dict):
        """The loss and gradient of the whole batch.

        Parameters
        ----------
        loss : float
        grads : dict of str to ndarray

        Returns
        -------
        tuple of (float, dict)
            ``(loss, grads)``.
        """
        return loss, grads

    def val_rows(self, n_rows: int) -> slice | None:
        """The validation streams this process reads.

        Parameters
        ----------
        n_rows : int

        Returns
        -------
        None
            All of them.
        """
        return None

    def sum(self, *values: float) -> tuple:
        """``values`` summed over the processes.

        Parameters
        ----------
        *values : float

        Returns
        -------
        tuple of float
            ``values``.
        """
        return values

    def agree(self, out_of_time: bool, stop: bool, signum) -> tuple:
        """The stop decision of every process.

        Parameters
        ----------
        out_of_time, stop : bool
        signum : int or None

        Returns
        -------
        tuple of (bool, bool, int or None)
            The arguments.
        """
        return out_of_time, stop, signum

    def signal(self, agreed, received):
        """The signal that stops the run after this step.

        Parameters
        ----------
        agreed, received : int or None

        Returns
        -------
        int or None
            ``received``: the one this process received, up to now.
        """
        return received

    def check_request(self, request: dict) -> None:
        """Refuse processes started with different flags (one process: nothing to compare).

        Parameters
        ----------
        request : dict
        """

    def share(self, value=None, *, failed: BaseException | None = None):
        """The leader's ``value`` on every process.

        Parameters
        ----------
        value : object, optional
        failed : BaseException, optional
            Raised.

        Returns
        -------
        object
            ``value``.
        """
        if failed is not None:
            raise failed
        return value

    def check_ready(self, error: BaseException | None, *, text_sha256: str, batch_size: int) -> None:
        """Refuse the run unless every process is ready.

        Parameters
        ----------
        error : BaseException or None
            Re-raised.
        text_sha256 : str
        batch_size : int
        """
        if error is not None:
            raise error

    def check_same_weights(self, params: dict) -> None:
        """Refuse weights that differ between processes (one process: nothing to compare).

        Parameters
        ----------
        params : dict of str to ndarray
        """

    def leave(self) -> None:
        """Leave the process group (one process: nothing to leave)."""


#: The world of a process that no launcher started.
LOCAL = World()


def timeout_s() -> float:
    """Seconds a collective may wait (``HIDDENSTATE_DIST_TIMEOUT``, default :data:`DEFAULT_TIMEOUT_S`).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        A value that is not a number of seconds in [:data:`MIN_TIMEOUT_S`, :data:`MAX_TIMEOUT_S`]
        (below, every collective would time out at once, with torch's own pages of log; above,
        torch's timer overflows).
    """
    text = os.environ.get("HIDDENSTATE_DIST_TIMEOUT", "")
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(f"HIDDENSTATE_DIST_TIMEOUT must be a positive number of seconds; got {text!r}.")
    if not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:
        raise ValueError(f"HIDDENSTATE_DIST_TIMEOUT must be a number of seconds in [{MIN_TIMEOUT_S:g}, "
                         f"{MAX_TIMEOUT_S:,.0f}] (one second to 30 days); got {text!r}. Unset it for the default "
                         f"{DEFAULT_TIMEOUT_S:g} s.")
    return value


def env_int(name: str) -> int:
    """A launcher variable as a non-negative integer.

    Parameters
    ----------
    name : str
        ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ...

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Not a non-negative integer.
    """
    text = os.environ.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer (set by torchrun); got {text!r}.") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer (set by torchrun); got {text!r}.")
    return value


def one_line(error: BaseException) -> str:
    """An error's message on one line of at most 300 characters.

    Parameters
    ----------
    error : BaseException

    Returns
    -------
    str
    """
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def first_sentence(error: BaseException) -> str:
    """The start of a backend's message, up to its first sentence (gloo's go on for lines).

    Parameters
    ----------
    error : BaseException

    Returns
    -------
    str
        At most 160 characters.
    """
    text = one_line(error)
    cut = text.find(". ")
    text = text if cut < 0 else text[:cut]
    return text if len(text) <= 160 else text[:157] + "..."


def alive(pid: int) -> bool:
    """Whether process ``pid`` on this machine still runs (a zombie does not).

    Parameters
    ----------
    pid : int

    Returns
    -------
    bool
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
