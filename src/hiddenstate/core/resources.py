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
import os

__all__ = ["check_memory", "format_bytes", "memory_limit"]

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
