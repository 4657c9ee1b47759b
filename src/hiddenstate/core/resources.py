"""How much memory this process may use, and the rule that refuses a size that cannot fit.

A request far beyond the machine (``hiddenstate sample --length 1000000000000``, ``train
--hidden-size 1000000000``) is refused up front with one clear message instead of ending, after
a while, in a ``MemoryError``. The estimate is compared with the memory the process may use at
all (the physical memory, or a smaller cgroup limit), not with what happens to be free: only a
request that cannot fit is refused.

Examples
--------
>>> format_bytes(3 * 2**30)
'3.0 GiB'
>>> check_memory("a test", 1024, "Ask for less.")  # fits anywhere: returns the size
1024
"""

from __future__ import annotations

import contextlib
import math
import os
import re

__all__ = ["check_memory", "format_bytes", "memory_limit", "parse_bytes", "traced_peak"]

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_limit() -> int | None:
    """Bytes of memory this process may use: the physical memory, or a smaller cgroup limit.

    Returns
    -------
    int or None
        None where the platform tells neither.
    """
    limits = []
    with contextlib.suppress(AttributeError, ValueError, OSError):  # not POSIX
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for path in _CGROUP_LIMITS:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit():  # "max": no limit
            limits.append(int(text))
    limits = [n for n in limits if n > 0]
    return min(limits) if limits else None


def format_bytes(n: float) -> str:
    """A byte count for people: ``'3.0 GiB'``, ``'512 bytes'``, ``'8.7e+24 bytes'``.

    Parameters
    ----------
    n : float
        A number of bytes, >= 0.

    Returns
    -------
    str
    """
    value = float(n)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    if unit == "bytes":
        return f"{int(n)} bytes"
    if value >= 1024:  # beyond EiB
        return f"{float(n):.1e} bytes"
    return f"{value:.1f} {unit}"


def check_memory(what: str, nbytes: float, hint: str, *, limit: int | None = None) -> float:
    """Refuse ``what`` when its estimated memory ``nbytes`` exceeds what this process may use.

    Parameters
    ----------
    what : str
        The request, as the message starts: ``"--length 1000000000000"``.
    nbytes : float
        Its estimated memory in bytes.
    hint : str
        How to fix it, appended to the message.
    limit : int, optional
        The limit in bytes (default :func:`memory_limit`); without one nothing is refused.

    Returns
    -------
    float
        ``nbytes``.

    Raises
    ------
    ValueError
        ``"<what> needs about <estimate> of memory; this machine allows <limit>. <hint>"``.
    """
    limit = memory_limit() if limit is None else limit
    if limit is not None and nbytes > limit:
        raise ValueError(f"{what} needs about {format_bytes(nbytes)} of memory; this machine allows "
                         f"{format_bytes(limit)}. {hint}")
    return nbytes


_SCALE = {"": 1, "K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12,
          "KI": 2 ** 10, "MI": 2 ** 20, "GI": 2 ** 30, "TI": 2 ** 40}


def parse_bytes(text: str, *, name: str = "max_bytes") -> int:
    """A byte count written for people: ``"8G"`` (10**9), ``"8Gi"`` / ``"8GiB"`` (2**30), ``"512M"``, ``"1e9"``.

    Parameters
    ----------
    text : str
        A number >= 0, optionally followed by K, M, G or T (powers of 1000) or Ki, Mi, Gi or Ti
        (powers of 1024), with an optional trailing B, in any case.
    name : str, default "max_bytes"
        What the message calls the value (a command line's flag, ``"--max-bytes"``).

    Returns
    -------
    int
        The bytes, rounded down.

    Raises
    ------
    ValueError
        Not a finite number >= 0 with one of those units, in one line naming ``name``.

    Examples
    --------
    >>> parse_bytes("8G"), parse_bytes("1.5Ki"), parse_bytes("4GiB")
    (8000000000, 1536, 4294967296)
    """
    found = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTkmgt][iI]?)?[bB]?\s*", str(text))
    value = None
    if found:
        with contextlib.suppress(ValueError):
            value = float(found.group(1)) * _SCALE[(found.group(2) or "").upper()]
    if value is None or not math.isfinite(value):
        raise ValueError(f"{name} must be a number of bytes >= 0, optionally with a unit K, M, G, T (powers of 1000) or "
                         f"Ki, Mi, Gi, Ti (powers of 1024), such as 8G or 512Mi; got {str(text)!r:.60}.")
    return int(value)


def traced_peak(fn, *args, **kwargs) -> tuple:
    """``fn(*args, **kwargs)`` and the most bytes allocated at once while it ran, beyond those held before.

    Measured with :mod:`tracemalloc` (NumPy's arrays are traced). A trace already under way (a
    caller measuring its own peak) is not disturbed: its peak is reset for the measurement and
    raised back afterwards by an allocation of the missing bytes that is never written (so it
    takes no memory) and freed at once.

    Parameters
    ----------
    fn : callable
    *args, **kwargs
        Its arguments.

    Returns
    -------
    tuple
        ``(fn's result, peak bytes)``.
    """
    import tracemalloc

    import numpy as np

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    before, peak_before = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    try:
        out = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
        else:
            now = tracemalloc.get_traced_memory()[0]
            if peak_before > now:
                np.empty(peak_before - now, dtype=np.uint8)  # the caller's peak, raised back
    return out, max(peak - before, 0)


def empty_pages(shape, dtype):
    """``np.empty(shape, dtype)`` without NumPy's advice to back it with transparent huge pages.

    NumPy advises the kernel to back large arrays with 2 MiB pages (``madvise(MADV_HUGEPAGE)``);
    where the kernel compacts memory to find them on the first write (``defrag`` set to
    ``madvise``, as here), writing a fresh GiB took 0.15 to 1.0 s from one process to the next,
    against a steady 0.33 s with ordinary pages (measured on this project's 2-core machine).
    Arrays filled once and kept, like a streamed run's states, are allocated here. Where NumPy
    has no such switch, this is ``np.empty``.

    Parameters
    ----------
    shape : tuple of int
    dtype : numpy dtype

    Returns
    -------
    ndarray
        Uninitialised, C-contiguous.
    """
    import numpy as np

    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # NumPy < 2 keeps it under numpy.core; without it, NumPy's default
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return np.empty(shape, dtype=dtype)
    before = _set_madvise_hugepage(False)
    try:
        return np.empty(shape, dtype=dtype)
    finally:
        _set_madvise_hugepage(before)
