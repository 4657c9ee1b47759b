"""Writing files so that a crash never leaves a half-written one where a good one was.

Shared by checkpoints (:mod:`hiddenstate.train.rundir.checkpoint`) and safetensors files
(:mod:`hiddenstate.interop`): a new file is written and fsynced before anything refers to it,
and a replacement is an ``os.replace`` of a complete temporary file, made durable by fsyncing
the directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["fsync_dir", "names_directory", "write_atomically", "write_new"]


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist), write ``data`` and fsync it before returning.

    Parameters
    ----------
    path : pathlib.Path
    data : bytes

    Raises
    ------
    FileExistsError
        ``path`` exists (nothing is overwritten).
    OSError
        The write failed (e.g. a full disk).
    """
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a rename inside directory ``path`` durable (POSIX; a no-op where directories cannot be opened).

    Parameters
    ----------
    path : pathlib.Path
    """
    if os.name != "posix":
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` by a file holding ``data``: a reader sees the old file or the new one, never a mix.

    ``data`` goes to a fresh temporary file next to ``path`` (:func:`write_new`), which is then
    moved over ``path`` with ``os.replace``; on any error the temporary file is removed and the
    old ``path`` is untouched.

    Parameters
    ----------
    path : pathlib.Path
    data : bytes

    Raises
    ------
    OSError
        The write or the rename failed.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        write_new(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def names_directory(path) -> bool:
    """Whether a path's text ends in a separator (``"runs/"``): it names a directory, whatever exists there.

    Parameters
    ----------
    path : str, bytes or os.PathLike
        The path as the user wrote it (``pathlib.Path`` drops a trailing separator, so pass the
        text before converting).

    Returns
    -------
    bool
    """
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return text.endswith(tuple(s for s in (os.sep, os.altsep) if s))
