"""Every step's states streamed out of a run, kept steps and heads only: :class:`StateSink`.

A kind's ``stream`` (:attr:`hiddenstate.kinds.Kind.stream`) runs one of its blocks over a whole
sequence without a record: it goes through time in blocks of a few dozen steps, forms every
step's state of a block in a scratch array, reads the block's outputs out of it, and hands the
states to a sink before the scratch is used again. The sink keeps only what was asked: the steps
of :func:`~hiddenstate.interop.families.hooks.kept_steps` (a window and a stride), and along each
state's first axis after (T, N) the indices asked (``heads``: heads of a per-head or matrix state,
channels of a diagonal one or of a convolution window), in the dtype asked. Its arrays are
allocated once, at the first block that keeps a step, at their final size: the memory a streamed
run holds is the kept states plus one block's scratch, whatever T.

The stream contract (for a kind's ``stream``)::

    stream(block, u, sink=None) -> out

``block`` a block of the kind (float64 parameters, ``batch_first``), ``u`` (N, T, M) in the dtype
to compute in (float32 or float64: the parameters are cast to it), ``sink`` a :class:`StateSink`
or None (no states kept: a check run). The initial states are zeros. ``out`` (N, T, M') in
``u``'s dtype is what ``block.forward(u)[0]`` gives, to round-off. The kind calls
``sink.put(start, {name: array})`` for consecutive blocks of steps in time order, ``array``
(L, N, ...) the states after steps ``start`` to ``start + L - 1``, names in the order of the
kind's ``states`` (``{"ssm": ..., "conv": ...}``); it may skip building a block that
:meth:`StateSink.wants` says keeps nothing.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.resources import empty_pages

__all__ = ["StateSink", "pick"]


def pick(heads, size: int, where: str):
    """``heads`` checked against an axis of ``size``: an int64 index array, or None (all).

    Parameters
    ----------
    heads : sequence of int or None
    size : int
        The axis' length.
    where : str
        What the axis is, for the message (``"layer 3's 'ssm' state, shape (8, 64, 64)"``).

    Returns
    -------
    ndarray of int64 or None

    Raises
    ------
    TypeError
        Not a sequence of ints.
    ValueError
        Empty, repeated, or an index outside [0, size).
    """
    if heads is None:
        return None
    try:
        items = list(heads)
    except TypeError:
        raise TypeError(f"heads must be a sequence of indices (ints) or None; got {heads!r:.60}.") from None
    if any(isinstance(h, (bool, np.bool_)) or not isinstance(h, (int, np.integer)) for h in items):
        raise TypeError(f"heads must be a sequence of indices (ints) or None; got {heads!r:.60}.")
    idx = np.asarray(items, dtype=np.int64)
    if idx.size == 0 or idx.min() < 0 or idx.max() >= size or np.unique(idx).size != idx.size:
        raise ValueError(f"heads must be distinct indices in [0, {size}) (the first axis of {where}); got "
                         f"{items[:16]}{' ...' if len(items) > 16 else ''}.")
    return idx


class StateSink:
    """Where a streamed run puts every step's states: the kept steps and heads only, allocated once.

    Parameters
    ----------
    T : int
        Steps of the run.
    N : int
        Sequences.
    keep : slice
        The steps kept (:func:`~hiddenstate.interop.families.hooks.kept_steps`).
    dtype : numpy dtype
        The kept arrays' dtype (float32 or float64).
    heads : dict of str to ndarray of int, optional
        Per state name, the indices kept along its first axis after (T, N) (:func:`pick`);
        a name not in it keeps all.
    names : sequence of str, optional
        The states kept (default every state the run puts); :meth:`put` drops the others.

    Attributes
    ----------
    arrays : dict of str to ndarray
        Per state name, (S, N, ...) with S the kept steps (empty until the first kept step).
    steps : ndarray of int64, shape (S,)
        The kept positions.
    """

    def __init__(self, T: int, N: int, keep: slice, dtype, heads=None, names=None):
        self.T, self.N = int(T), int(N)
        self.steps = np.arange(self.T, dtype=np.int64)[keep]
        self._kept = np.zeros(self.T, dtype=bool)
        self._kept[self.steps] = True
        self._slot = np.cumsum(self._kept) - 1  # where step t goes among the kept ones
        self.dtype = np.dtype(dtype)
        self.heads = dict(heads or {})
        self.names = None if names is None else frozenset(names)
        self.arrays: dict = {}
        self.filled = 0

    def wants(self, start: int, stop: int) -> bool:
        """Whether any of the steps ``start .. stop - 1`` is kept.

        Parameters
        ----------
        start, stop : int

        Returns
        -------
        bool
        """
        return bool(self._kept[max(start, 0):max(stop, 0)].any())

    def put(self, start: int, states: dict) -> None:
        """Keep what is asked of the states after steps ``start .. start + L - 1``.

        Parameters
        ----------
        start : int
            The first step of the block (blocks come in time order).
        states : dict of str to ndarray
            Per state name, (L, N, ...): every step's state of the block.

        Raises
        ------
        ValueError
            A block that does not start where the last one ended, or arrays whose steps or
            sequences are not (L, N).
        """
        L = None
        for name, a in states.items():
            if a.shape[:2] != (a.shape[0], self.N) or (L is not None and a.shape[0] != L):
                raise ValueError(f"states must be (L, N={self.N}, ...) arrays of one L; got {name!r} of shape "
                                 f"{a.shape}.")
            L = a.shape[0]
        if L is None:
            return
        if start != self.filled:
            raise ValueError(f"start must be {self.filled}, where the last block ended; got {start}.")
        self.filled = start + L
        here = np.flatnonzero(self._kept[start:start + L])
        if here.size == 0:
            return
        slots = self._slot[start + here]
        if here[-1] - here[0] + 1 == here.size:  # a run of steps (every step kept): slices, one copy
            here, slots = slice(here[0], here[-1] + 1), slice(slots[0], slots[0] + here.size)
        for name, a in states.items():
            if self.names is not None and name not in self.names:
                continue
            idx = self.heads.get(name)
            part = a[here] if idx is None else (a[here][:, :, idx] if isinstance(here, slice) else a[:, :, idx][here])
            if name not in self.arrays:
                self.arrays[name] = empty_pages((self.steps.size, self.N) + part.shape[2:], self.dtype)
            self.arrays[name][slots] = part

    def nbytes_per_step(self, shapes: dict) -> int:
        """Bytes one kept step takes for states of the given per-step shapes (after (T, N)), one sequence.

        Parameters
        ----------
        shapes : dict of str to tuple of int
            Per state name, its shape after (T, N).

        Returns
        -------
        int
        """
        total = 0
        for name, shape in shapes.items():
            idx = self.heads.get(name)
            size = int(np.prod(shape)) if idx is None else int(np.prod(shape[1:])) * idx.size
            total += size * self.dtype.itemsize
        return total
