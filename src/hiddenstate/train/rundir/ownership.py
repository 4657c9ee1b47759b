"""Who may write into a run directory: what it holds, and the lock of the process training there.

``hiddenstate train --out DIR`` (and ``--resume DIR``) claims DIR before it writes anything:

* :func:`describe` reads what DIR holds and changes nothing: nothing at all (new or empty); a
  run (a checkpoint written by :func:`~hiddenstate.train.train`, read off its ``meta.json``); the
  leftovers of a run killed before its first checkpoint (its lock file, a log, a staging
  directory); or other files, the user's, which a run never writes over;
* :func:`claim` refuses what must not be replaced (a run, unless ``overwrite``; other files,
  always) with one line that says how to resume or to choose another DIR, and otherwise takes
  the lock, :data:`LOCK_FILE`: an ``flock`` held by the training process for as long as it runs
  (the kernel drops it when the process ends, however it ends, so the file a killed process
  leaves behind is stale and simply taken over), holding the holder's pid, host and start time,
  which a second process names when it is refused. Where ``flock`` does not exist the file is
  created with ``O_EXCL`` and a lock whose pid no longer runs on this host is stale.

The names a run writes (:data:`RUN_NAMES`) are the only ones :meth:`RunLock.clear` ever removes;
any other file in DIR is left as it is.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from hiddenstate.train.rundir import CHECKPOINT_DIR, LOG_FILE, PLOT_FILE
from hiddenstate.train.rundir.checkpoint import META_FILE, previous_name, staging_prefix
from hiddenstate.train.rundir.snapshot import KIND

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

__all__ = ["LOCK_FILE", "RUN_NAMES", "RunDir", "RunLock", "check_not_in_use", "checkpoint_step", "claim", "describe"]

#: The lock file of a run directory (present while a process trains there, or left by a killed one).
LOCK_FILE = ".hiddenstate.lock"
_PREVIOUS = previous_name(CHECKPOINT_DIR)
_STAGING = staging_prefix(CHECKPOINT_DIR)
#: What a training run writes into its directory (plus staging directories ``.checkpoint.saving-*``).
RUN_NAMES = (CHECKPOINT_DIR, _PREVIOUS, LOG_FILE, PLOT_FILE, LOCK_FILE)
_MAX_META_BYTES = 64 << 20


def _ours(name: str) -> bool:
    return name in RUN_NAMES or name.startswith(_STAGING)


def _read_meta(directory: Path) -> dict | None:
    """The ``meta`` document of the checkpoint in ``directory`` if hiddenstate.train wrote it."""
    path = directory / META_FILE
    try:
        if not path.is_file() or path.stat().st_size > _MAX_META_BYTES:
            return None
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    meta = record.get("meta") if isinstance(record, dict) else None
    return meta if isinstance(meta, dict) and meta.get("kind") == KIND else None


def checkpoint_step(run_dir) -> int | None:
    """The step of the checkpoint in a run directory (or of the one an interrupted save left).

    Only ``meta.json`` is read (the tensor files are verified when the checkpoint is loaded).

    Parameters
    ----------
    run_dir : str or os.PathLike
        A run directory.

    Returns
    -------
    int or None
        None without a checkpoint of a run.
    """
    for name in (CHECKPOINT_DIR, _PREVIOUS):
        meta = _read_meta(Path(run_dir) / name)
        if meta is not None and isinstance(meta.get("step"), int):
            return meta["step"]
    return None


def _holder_text(info: dict | None) -> str:
    if not info:
        return "another process (its pid is not recorded yet)"
    return (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, since {info.get('started', '?')}"
            f"{', ' + info['command'] if info.get('command') else ''}")


def _read_lock(path: Path) -> dict | None:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


def _pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _lock_holder(path: Path) -> dict | None:
    """The holder of a live lock at ``path`` (a dict, possibly empty), or None when it is free or stale."""
    if not path.is_file():
        return None
    if fcntl is None:  # pragma: no cover - O_EXCL locks: stale when the pid is gone from this host
        info = _read_lock(path) or {}
        stale = info.get("host") == socket.gethostname() and not _pid_alive(info.get("pid"))
        return None if stale else info
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_lock(path) or {}
    finally:
        os.close(fd)  # closing drops a lock taken just to test it
    return None


@dataclass(frozen=True)
class RunDir:
    """What a directory holds, as far as training into it is concerned (see :func:`describe`).

    Attributes
    ----------
    path : pathlib.Path
    kind : {"new", "empty", "run", "unfinished", "other"}
        ``"run"``: a checkpoint of hiddenstate.train; ``"unfinished"``: no checkpoint, but the lock
        file of a run (killed before its first save); ``"other"``: files that are not a run.
    step : int or None
        The checkpoint's step (runs only).
    config : dict or None
        The checkpoint's training configuration (``TrainConfig.to_dict()``; runs only).
    others : tuple of str
        Entries that a run does not write (the user's), sorted.
    holder : dict or None
        The live lock's pid, host and start time when a process trains there now.
    """

    path: Path
    kind: str
    step: int | None = None
    config: dict | None = None
    others: tuple = ()
    holder: dict | None = None


def describe(path) -> RunDir:
    """Read what ``path`` holds without changing anything.

    Parameters
    ----------
    path : str or os.PathLike
        A directory (it need not exist).

    Returns
    -------
    RunDir

    Raises
    ------
    ValueError
        ``path`` exists and is not a directory.
    """
    p = Path(path)
    if not p.exists():
        return RunDir(p, "new")
    if not p.is_dir():
        raise ValueError(f"out must be a directory; got '{p}', which is a file. Choose another path.")
    names = sorted(os.listdir(p))
    holder = _lock_holder(p / LOCK_FILE)
    meta = next((m for m in (_read_meta(p / CHECKPOINT_DIR), _read_meta(p / _PREVIOUS)) if m is not None), None)
    if meta is not None:
        step = meta.get("step") if isinstance(meta.get("step"), int) else None
        config = meta.get("train") if isinstance(meta.get("train"), dict) else None
        return RunDir(p, "run", step, config, tuple(n for n in names if not _ours(n)), holder)
    if not names:
        return RunDir(p, "empty")
    unrecognised = {CHECKPOINT_DIR, _PREVIOUS} & set(names)  # a directory of that name that is no run's
    if LOCK_FILE in names and not unrecognised:
        return RunDir(p, "unfinished", others=tuple(n for n in names if not _ours(n)), holder=holder)
    return RunDir(p, "other", others=tuple(names), holder=holder)


def _in_use(path: Path, holder: dict | None, flag: str) -> str:
    return (f"{flag} '{path}' is in use by another training process ({_holder_text(holder)}); wait for it to "
            f"finish{', or choose another --out' if flag == '--out' else ''}. A killed process holds no lock: "
            "its lock file is taken over.")


def check_not_in_use(path, flag: str = "--out") -> None:
    """Refuse ``path`` when a live process holds its lock (nothing is taken or written).

    Parameters
    ----------
    path : str or os.PathLike
        A run directory.
    flag : str, default "--out"
        How the message names it.

    Raises
    ------
    ValueError
        Naming the holder (pid, host, start time).
    """
    holder = _lock_holder(Path(path) / LOCK_FILE)
    if holder is not None:
        raise ValueError(_in_use(Path(path), holder, flag))


def _count(names) -> str:
    return f"{len(names)} {'entry' if len(names) == 1 else 'entries'}"


def _shown(names) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _refusal(state: RunDir, *, overwrite: bool, resuming: bool) -> str | None:
    """Why training may not write into ``state.path`` (None: it may)."""
    p = state.path
    if state.holder is not None:
        return _in_use(p, state.holder, "--resume" if resuming else "--out")
    if resuming:
        return None
    if state.kind == "run" and not overwrite:
        return (f"--out '{p}' already holds a run (checkpoint at step {state.step}); continue it with "
                f"`hiddenstate train --resume {p}`, replace it with --overwrite, or choose another --out.")
    if state.kind == "other":
        also = " (--overwrite only replaces a previous hiddenstate run, never other files)" if overwrite else ""
        return (f"--out must be a new or empty directory, or a previous run; got '{p}', which holds "
                f"{_count(state.others)} that {'is' if len(state.others) == 1 else 'are'} not a hiddenstate run ({_shown(state.others)}){also}. "
                "Choose another --out.")
    return None


class RunLock:
    """The lock of a run directory, held by the process training there (see :func:`claim`).

    Parameters
    ----------
    path : str or os.PathLike
        The run directory; created (with its parents) by :meth:`acquire` if missing.
    flag : str, default "--out"
        How the messages name the directory (``"--resume"`` for the run being resumed).

    Attributes
    ----------
    path : pathlib.Path
    created : bool
        :meth:`acquire` created the directory (:meth:`release` removes what it created again, if
        it is still empty).
    """

    def __init__(self, path, *, flag: str = "--out"):
        self.path = Path(path)
        self.flag = flag
        self.created = False
        self._made = []  # the directories acquire() created, innermost first
        self._fd = None

    @property
    def file(self) -> Path:
        """The lock file, ``<path>/.hiddenstate.lock``."""
        return self.path / LOCK_FILE

    def acquire(self, command: str = "") -> RunLock:
        """Take the lock (a stale one is taken over) and record this process in it.

        Parameters
        ----------
        command : str, optional
            What the holder does, for the message of a refused second process.

        Returns
        -------
        RunLock
            ``self``.

        Raises
        ------
        ValueError
            Another live process holds the lock: the message names it.
        """
        missing, p = [], self.path
        while not p.exists() and p != p.parent:
            missing.append(p)
            p = p.parent
        self.path.mkdir(parents=True, exist_ok=True)
        self._made, self.created = missing, bool(missing)
        for _ in range(5):
            fd = self._open()
            if fd is not None:
                self._fd = fd
                info = {"pid": os.getpid(), "host": socket.gethostname(),
                        "started": _dt.datetime.now().isoformat(timespec="seconds"), "command": command}
                os.ftruncate(fd, 0)
                os.write(fd, (json.dumps(info) + "\n").encode("utf-8"))
                return self
        raise ValueError(_in_use(self.path, _read_lock(self.file), self.flag))

    def _open(self):
        """An fd holding the lock, None to try again; ValueError when a live process holds it."""
        if fcntl is None:  # pragma: no cover
            try:
                return os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                if _lock_holder(self.file) is not None:
                    raise ValueError(_in_use(self.path, _read_lock(self.file), self.flag)) from None
                with contextlib.suppress(FileNotFoundError):
                    self.file.unlink()
                return None
        fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
        for attempt in range(4):  # another process's describe() may be testing the lock for a moment
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 3:
                    os.close(fd)
                    raise ValueError(_in_use(self.path, _read_lock(self.file), self.flag)) from None
                time.sleep(0.02)
        # the holder before us may have removed the file while we opened it: lock the file that is there
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(self.file))
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return None
        return fd

    def clear(self) -> None:
        """Remove what a previous run wrote (:data:`RUN_NAMES` but the lock); nothing else is touched."""
        for name in os.listdir(self.path):
            entry = self.path / name
            if not _ours(name) or name == LOCK_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def release(self) -> None:
        """Remove the lock file and drop the lock; remove the directory if :meth:`acquire` made it and it is empty."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(self._fd), os.stat(self.file)):
                self.file.unlink()
        os.close(self._fd)
        self._fd = None
        for made in self._made:
            try:
                made.rmdir()  # only succeeds when empty
            except OSError:
                break
        self._made = []

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim(path, *, overwrite: bool = False, resuming: bool = False, command: str = "train") -> tuple[RunLock, RunDir]:
    """Check that training may write into ``path`` and take its lock; nothing is written on refusal.

    Parameters
    ----------
    path : str or os.PathLike
        The run directory (``--out``).
    overwrite : bool, default False
        A previous run there may be replaced (never other files).
    resuming : bool, default False
        ``path`` is the run being resumed: it holds a run by design.
    command : str, default "train"
        Recorded in the lock file.

    Returns
    -------
    lock : RunLock
        Held; release it (or use it as a context manager) when the run ends.
    state : RunDir
        What ``path`` held, read under the lock.

    Raises
    ------
    ValueError
        ``path`` is a file, holds a run (without ``overwrite``) or other files, or another process
        trains there; the message says how to resume or to choose another ``--out``.
    """
    refusal = _refusal(describe(path), overwrite=overwrite, resuming=resuming)
    if refusal:
        raise ValueError(refusal)
    lock = RunLock(path, flag="--resume" if resuming else "--out").acquire(command)
    try:
        state = describe(path)  # again, under the lock (held by us now): it may have changed in between
        state = RunDir(state.path, state.kind, state.step, state.config, state.others)
        refusal = _refusal(state, overwrite=overwrite, resuming=resuming)
        if refusal:
            raise ValueError(refusal)
    except BaseException:
        lock.release()
        raise
    return lock, state
