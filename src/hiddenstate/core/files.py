"""Writing files so that a crash never leaves a half-written one where a good one was.

Shared by checkpoints (:mod:`hiddenstate.train.rundir.checkpoint`) and safetensors files
(:mod:`hiddenstate.interop`): a new file is written and fsynced before anything refers to it,
and a replacement is an ``os.replace`` of a complete temporary file, made durable by fsyncing
the directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["fsync_dir", "names_directory", "open_regular", "output_file", "regular_file", "replaceable",
           "write_atomically", "write_new"]


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
    ValueError
        Something else than a regular file is at ``path`` (a device, FIFO, directory): only a
        regular file is ever replaced (:func:`replaceable`).
    OSError
        The write or the rename failed.
    """
    replaceable(path)
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


def _what(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def regular_file(path, *, name: str = "path", hint: str = "") -> os.stat_result:
    """``os.stat(path)`` of an existing regular file, refusing anything else before it is opened.

    Opening a FIFO blocks until a writer comes (forever, and a first SIGTERM waits with it), and a
    device has no end: only regular files (symbolic links to them included) are read.

    Parameters
    ----------
    path : str, bytes or os.PathLike
    name : str, default "path"
        What the messages call ``path`` (``"--data"``).
    hint : str, optional
        How to fix it, appended to the messages.

    Returns
    -------
    os.stat_result

    Raises
    ------
    TypeError
        ``path`` is not a str, bytes or os.PathLike.
    FileNotFoundError
        Nothing exists at ``path`` (a dangling symbolic link included).
    ValueError
        A directory, FIFO, device or socket, or a loop of symbolic links.
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike); got {type(path).__name__} {path!r}.")
    shown = os.fsdecode(os.fspath(path))
    tail = f" {hint}" if hint else ""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{name} must name an existing file; got '{shown}', which does not exist.{tail}") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"{name} must name a regular file; got '{shown}', a loop of symbolic links.{tail}") from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{name} must name a regular file; got '{shown}', which is {_what(st.st_mode)}.{tail}")
    return st


def open_regular(path, *, name: str = "path", hint: str = ""):
    """Open an existing regular file for binary reading; anything else is refused without blocking.

    :func:`regular_file` first; the file is then opened non-blocking and checked again with
    ``os.fstat`` (a FIFO put in its place meanwhile is refused, not waited on).

    Parameters
    ----------
    path : str, bytes or os.PathLike
    name : str, default "path"
        What the messages call ``path``.
    hint : str, optional
        How to fix it, appended to the messages.

    Returns
    -------
    io.BufferedReader
        Open in ``"rb"`` mode; the caller closes it (``with open_regular(p) as f``).

    Raises
    ------
    TypeError, FileNotFoundError, ValueError
        As :func:`regular_file`.
    """
    regular_file(path, name=name, hint=hint)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{name} must name a regular file; got '{os.fsdecode(os.fspath(path))}', which is "
                             f"{_what(st.st_mode)}.{f' {hint}' if hint else ''}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def replaceable(path, *, name: str = "path") -> bool:
    """Whether ``path`` exists: only a regular file may be replaced (a device, FIFO or directory never).

    Parameters
    ----------
    path : str, bytes or os.PathLike
    name : str, default "path"
        What the messages call ``path``.

    Returns
    -------
    bool
        False when nothing is there (a dangling symbolic link counts as nothing), True for a
        regular file.

    Raises
    ------
    ValueError
        Something else is there (a directory, FIFO, character or block device, socket, a loop of
        symbolic links).
    """
    shown = os.fsdecode(os.fspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"{name} must name a new or a regular file; got '{shown}', a loop of symbolic "
                             "links.") from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{name} must name a new or a regular file; got '{shown}', which is {_what(st.st_mode)}; "
                         "only a regular file is ever replaced.")
    return True


def output_file(path, *, name: str = "path", example: str = "model.onnx") -> Path:
    """A file the caller may write (create, or replace if it is a regular file), by the CLI's rules.

    Parameters
    ----------
    path : str or os.PathLike
        As the user wrote it.
    name : str, default "path"
        What the messages call it.
    example : str, default "model.onnx"
        A file name for the message's example when ``path`` names a directory.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        ``path`` is not a str or os.PathLike (an int, None, ...).
    ValueError
        ``path`` ends in a path separator (``"dir/"`` names a directory), is a directory, or is
        something else than a regular file (a device, FIFO, socket): only regular files are
        replaced.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike; got {type(path).__name__} {path!r}.")
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    out = Path(text)
    if names_directory(text):
        raise ValueError(f"{name} must name a file; got '{text}', which ends in a path separator and so names a "
                         f"directory. Give a file name, e.g. '{out / example}'.")
    replaceable(out, name=name)
    return out
