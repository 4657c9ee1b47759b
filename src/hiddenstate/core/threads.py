"""One thread policy for every BLAS the package loads: NumPy's, SciPy's and torch's.

NumPy and SciPy each bring their own OpenBLAS (``libscipy_openblas64_`` and ``libscipy_openblas``
in the wheels installed here), and :func:`threadpoolctl.threadpool_limits` limits only the
libraries loaded when it is called. A limit set before SciPy was imported left SciPy's BLAS at one
thread per CPU, so the fixed-point search of ``hiddenstate inspect`` ran two threads after the CLI
had "limited BLAS to one" (seen with :func:`threadpoolctl.threadpool_info`). :func:`blas_threads`
loads every BLAS the package uses first, then limits them all, and sets torch's intra-op threads
when torch is loaded (a model directory, a transformers model).
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["blas_threads", "follow_policy", "loaded_blas_threads"]

_ACTIVE: list = []  # the thread counts of the blas_threads contexts now open, innermost last


@contextlib.contextmanager
def blas_threads(n: int = 1):
    """Run the body with at most ``n`` threads in every BLAS the package uses (and torch's, if loaded).

    The matrices of a recurrent step are small: BLAS threads cost more than they save and, on a
    busy machine, made ``train`` and ``inspect`` 20-100x slower (measured on 2 cores). The CLI runs
    every command inside ``blas_threads(HIDDENSTATE_NUM_THREADS or 1)`` unless ``OMP_NUM_THREADS``,
    ``OPENBLAS_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set; from Python or a notebook, wrap the
    work in it (the Python API leaves threads to the caller).

    Parameters
    ----------
    n : int, default 1
        Threads for each BLAS library (NumPy's and SciPy's OpenBLAS, torch's intra-op pool).

    Yields
    ------
    None

    Raises
    ------
    TypeError
        ``n`` not an integer.
    ValueError
        ``n`` < 1.

    Examples
    --------
    >>> from hiddenstate.core.threads import blas_threads, loaded_blas_threads
    >>> with blas_threads(1):
    ...     counts = loaded_blas_threads()
    >>> set(counts.values())
    {1}
    """
    from hiddenstate.core.validation import positive_int

    n = positive_int("n", n)
    import scipy.linalg  # noqa: F401  (loads SciPy's own BLAS so that the limit below reaches it)
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    _ACTIVE.append(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            if torch is not None:
                torch.set_num_threads(n)
            yield
    finally:
        _ACTIVE.pop()
        if before is not None:
            torch.set_num_threads(before)


def follow_policy() -> None:
    """Apply the innermost open :func:`blas_threads` limit to torch, just loaded after it opened.

    Called where the package first imports torch (loading a model directory); a no-op outside
    :func:`blas_threads`. torch's pool is left at the limit for the rest of the process.
    """
    if _ACTIVE and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(_ACTIVE[-1])


def loaded_blas_threads() -> dict:
    """The thread count of every BLAS loaded in this process, by file name (threadpoolctl's view).

    Returns
    -------
    dict of str to int
        ``{library file name: threads}``; torch's pool, when torch is loaded, under ``"torch"``.
    """
    from threadpoolctl import threadpool_info

    counts = {d["filepath"].rsplit("/", 1)[-1]: d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"}
    if "torch" in sys.modules:
        counts["torch"] = sys.modules["torch"].get_num_threads()
    return counts
