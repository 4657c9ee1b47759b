"""Where a report may be written: a new file, or a previous hiddenstate report (nothing else is replaced)."""

from __future__ import annotations

import os
import pathlib

from hiddenstate.core.files import names_directory, write_atomically

__all__ = ["check_report_path", "write_report"]

_REPORT_MARK = "<footer>hiddenstate "  # every page of hiddenstate.report.build_report has it
_MAX_REPORT_BYTES = 256 << 20


def check_report_path(out) -> pathlib.Path:
    """Check, before any work, that a report may be written to ``out``.

    Parameters
    ----------
    out : str or os.PathLike
        The HTML file to write. It may be new, or a previous hiddenstate report (replaced); a
        directory (or a path ending in a separator, ``"dir/"``), a file of anything else, or a path
        under a file are refused.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TypeError
        ``out`` is not a path.
    ValueError
        ``out`` is a directory or ends in a path separator, an existing file that is not a hiddenstate
        report, or lies under a file.
    """
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a path; got {type(out).__name__}.")
    text = os.fspath(out)
    path = pathlib.Path(text)
    if names_directory(text):
        raise ValueError(f"out must name an HTML file; got '{text}', which ends in a path separator and so names a "
                         f"directory. Give a file name, e.g. '{path / 'report.html'}'.")
    if path.is_dir():
        raise ValueError(f"out must name an HTML file; got '{path}', which is a directory. Give a file name, "
                         f"e.g. '{path / 'report.html'}'.")
    if path.exists():
        try:
            small = path.is_file() and path.stat().st_size <= _MAX_REPORT_BYTES
            ours = small and _REPORT_MARK in path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            ours = False
        if not ours:
            raise ValueError(f"out must be a new file or a previous hiddenstate report; got '{path}', which exists "
                             "and is something else. Choose another file name (nothing was written).")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"out must lie in a directory; got '{path}', under '{parent}', which is a file.")
            break
    return path


def write_report(out, page: str) -> pathlib.Path:
    """Write an HTML page to ``out`` after :func:`check_report_path`, atomically.

    Parameters
    ----------
    out : str or os.PathLike
        The HTML file: new, or a previous hiddenstate report (replaced; a reader sees the old page
        or the new one, never a mix). Missing parent directories are created.
    page : str
        The HTML text, written as UTF-8.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TypeError, ValueError
        From :func:`check_report_path` (nothing is written).
    OSError
        When the file cannot be written (the previous file, if any, is untouched).
    """
    path = check_report_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, page.encode("utf-8"))
    return path
