"""Work buffers that the scan kernels reuse across calls of one shape, never while anyone holds them.

Why: glibc hands out every block over its mmap threshold (at most 32 MB) as freshly mapped
memory and unmaps it on free, so a kernel that allocates its (T, N, G*H) buffers anew on
every call page-faults them in every time: about half of a GRU (T=50, N=256, H=256) float64
training step was page faults (the project's performance notes, "Re-measured").
:func:`empty` instead returns a buffer of the same shape and dtype that an earlier call
allocated, **if and only if nobody references it any more**.

The rule that keeps this safe: the pool holds one reference to each buffer it made, and a
buffer is free exactly when that is its only reference. Every NumPy view holds a reference
to the array that owns its memory, and so do ``memoryview``, ``torch.from_numpy`` and every
other buffer-protocol consumer, so an output the caller kept, a cache the caller holds (and
every array in it, and every view of those) keeps its buffer out of reuse. Only a raw pointer
(``a.ctypes.data``) escapes the count. Reference counts are read with :func:`sys.getrefcount`,
calibrated once at import; on an interpreter without a GIL (free threading), where those
counts are not exact, the pool is off and :func:`empty` is :func:`numpy.empty`.

Only buffers of at least :data:`MIN_BYTES` are pooled (smaller ones are cheap to allocate);
free buffers over :data:`MAX_IDLE_BYTES` in total are dropped, least recently used first, and
:func:`clear` drops them all.
"""

from __future__ import annotations

import sys
import sysconfig
import threading
import weakref
from collections import OrderedDict

import numpy as np

__all__ = ["BLOCK_BYTES", "MAX_IDLE_BYTES", "MIN_BYTES", "SCRATCH_BYTES", "block_steps", "clear", "derived", "empty",
           "idle_bytes", "scratch", "transposed", "zeros"]

#: Buffers smaller than this (bytes) are plain ``numpy.empty`` arrays, never pooled.
MIN_BYTES = 1 << 18
#: Free (unreferenced) pooled buffers beyond this many bytes in total are released.
MAX_IDLE_BYTES = 1 << 30
#: The largest temporary that :func:`scratch` takes from the pool (larger ones are not kept idle).
SCRATCH_BYTES = 1 << 24
#: Bytes of one (B, N, H) block of per-step factors that the backward kernels compute at a time (cache-sized).
BLOCK_BYTES = 1 << 18
_PER_KEY = 8  # at most this many buffers of one shape and dtype

_lock = threading.Lock()
_pool: OrderedDict = OrderedDict()  # (shape, dtype) -> list of arrays, most recently used key last


def _refs_when_free() -> int:
    """The reference count :func:`_is_free` reads for a buffer that only the pool references."""
    probe = [np.empty(1)]
    return _count(probe, 0)


def _count(bucket: list, i: int) -> int:
    return sys.getrefcount(bucket[i])


_ENABLED = not sysconfig.get_config_var("Py_GIL_DISABLED")
_FREE = _refs_when_free()


def _is_free(bucket: list, i: int) -> bool:
    return _count(bucket, i) == _FREE


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, reusing a pooled buffer that nothing references.

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    dtype : numpy.dtype or type
        float32 or float64 (any NumPy dtype works).

    Returns
    -------
    ndarray of the given shape and dtype
        Contents undefined, like :func:`numpy.empty`. The caller may return it (or views of it)
        to users: while any reference to it exists it is never handed out again.
    """
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= s
    if not _ENABLED or nbytes < MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    key = (shape, dtype.str)
    with _lock:
        bucket = _pool.get(key)
        if bucket is not None:
            _pool.move_to_end(key)
            for i in range(len(bucket)):
                if _is_free(bucket, i):
                    return bucket[i]
        a = np.empty(shape, dtype=dtype)
        if bucket is None:
            bucket = _pool[key] = []
        if len(bucket) < _PER_KEY:
            bucket.append(a)
            _trim()
        return a


def zeros(shape, dtype) -> np.ndarray:
    """:func:`empty`, filled with zeros.

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    dtype : numpy.dtype or type
        Its dtype.

    Returns
    -------
    ndarray of the given shape and dtype, all zeros
    """
    a = empty(shape, dtype)
    a.fill(0)
    return a


def scratch(shape, dtype) -> np.ndarray:
    """A buffer for a temporary inside one call: :func:`empty` up to :data:`SCRATCH_BYTES`, else ``numpy.empty``.

    A one-step kernel's (H, H) temporaries, allocated fresh, were page-faulted in at every call
    (most of a 256-unit GRU's step Jacobian); pooled, they are not. Larger ones are not pooled, so
    that the pool does not keep them idle.

    Parameters
    ----------
    shape : tuple of int
        The array's shape.
    dtype : numpy.dtype or type
        Its dtype.

    Returns
    -------
    ndarray of the given shape and dtype, uninitialised
    """
    nbytes = np.dtype(dtype).itemsize * int(np.prod(shape))
    return empty(shape, dtype) if nbytes <= SCRATCH_BYTES else np.empty(shape, dtype)


def transposed(w: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``w.T`` in a :func:`scratch` buffer.

    Parameters
    ----------
    w : ndarray of shape (A, B)

    Returns
    -------
    ndarray of shape (B, A)
        Equal to ``w.T``; the caller must not keep it beyond the call that asked for it if it is
        to be reused (it is reused only once nothing references it).
    """
    out = scratch(w.shape[::-1], w.dtype)
    np.copyto(out, w.T)
    return out


_derived: dict = {}  # id(w) -> (weak reference to w, {key: array derived from w})


def derived(w: np.ndarray, key, make):
    """``make()``, computed once per ``key`` for an array that cannot change, else at every call.

    An array that is read-only and owns its memory cannot change (no view of it writes, and it
    has no base that could), so what a kernel derives from it (a transposed, re-laid-out copy of
    weights) may be kept: :func:`hiddenstate.probe.layermap.layer_map` freezes its weights so, and
    the one-step kernels it calls hundreds of times reuse their layout. Kept arrays are read-only
    and are dropped with ``w``.

    Parameters
    ----------
    w : ndarray
        The array the result is derived from.
    key : hashable
        What was derived (one array can have several).
    make : callable
        ``make() -> ndarray``, the derivation.

    Returns
    -------
    ndarray
        ``make()``'s result; read-only when it is kept.
    """
    if w.flags.writeable or not w.flags.owndata:
        return make()
    ident = id(w)
    entry = _derived.get(ident)
    if entry is None or entry[0]() is not w:
        entry = (weakref.ref(w, lambda _: _derived.pop(ident, None)), {})
        _derived[ident] = entry
    if key not in entry[1]:
        out = make()
        out.flags.writeable = False
        entry[1][key] = out
    return entry[1][key]


def idle_bytes() -> int:
    """Bytes held by pooled buffers that nothing else references (what :func:`clear` would free).

    Returns
    -------
    int
        The total ``nbytes`` of the free pooled buffers.
    """
    with _lock:
        return sum(b[i].nbytes for b in _pool.values() for i in range(len(b)) if _is_free(b, i))


def _trim() -> None:
    """Drop free buffers, least recently used shape first, while they exceed MAX_IDLE_BYTES (lock held)."""
    idle = sum(b[i].nbytes for b in _pool.values() for i in range(len(b)) if _is_free(b, i))
    for key in list(_pool):
        if idle <= MAX_IDLE_BYTES:
            break
        bucket = _pool[key]
        for i in range(len(bucket) - 1, -1, -1):
            if idle > MAX_IDLE_BYTES and _is_free(bucket, i):
                idle -= bucket[i].nbytes
                del bucket[i]
        if not bucket:
            del _pool[key]


def clear() -> None:
    """Release every pooled buffer that nothing references (buffers in use stay with their users).

    Returns
    -------
    None
    """
    with _lock:
        for key in list(_pool):
            bucket = _pool[key]
            bucket[:] = [bucket[i] for i in range(len(bucket)) if not _is_free(bucket, i)]
            if not bucket:
                del _pool[key]


def block_steps(T: int, step_bytes: int) -> int:
    """How many time steps of (N, H) per-step data make one cache-sized block (:data:`BLOCK_BYTES`).

    The backward kernels compute the factors that do not depend on the recurrence one block of
    steps at a time, just before the loop reaches them, so they are read back from the cache
    instead of main memory (measured: half the time of the same passes over all T steps at
    N = H = 256).

    Parameters
    ----------
    T : int
        Time steps.
    step_bytes : int
        Bytes of one step of one factor, ``N * H * itemsize``.

    Returns
    -------
    int
        B in ``[1, max(T, 1)]``.
    """
    return max(1, min(max(T, 1), BLOCK_BYTES // max(step_bytes, 1)))
