"""Initial hidden states: zeros (Elman 1990), random normal, constant, and learned.

The hidden state is a runtime variable, not a parameter: every sequence starts from an
initial state ``h0`` and the recurrence carries it forward. This module creates ``h0`` with
the right structure. Shapes follow PyTorch: ``(N, H)`` for a cell, ``(L*D, N, H)`` for a
sequence layer of ``L`` layers and ``D`` directions; an LSTM state is an ``(h, c)`` pair.
A *learned* initial state is a parameter of the layer (``learn_h0=True`` on the layers).

:class:`MambaState` is the state of the selective state space blocks (:class:`hiddenstate.Mamba`,
:class:`hiddenstate.Mamba2`), here so that their kernels (:mod:`hiddenstate.kinds.ssm.mamba_kernel`) and
their array-API reference (:mod:`hiddenstate.kinds.ssm.reference`) share it without one importing the other.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import float_dtype, generator, positive_int, real, shape_str

__all__ = ["MambaState", "init_hidden", "initial_state"]


class MambaState(NamedTuple):
    """The two states of a Mamba or Mamba-2 block (Gu & Dao 2023; Dao & Gu 2024).

    Attributes
    ----------
    ssm : ndarray of shape (N, Di, S) (Mamba) or (N, H, P, S) (Mamba-2)
        The selective state space's state ``h``.
    conv : ndarray of shape (N, Di, K-1) (Mamba) or (N, Dc, K-1) (Mamba-2)
        The last K - 1 inputs of the causal convolution, oldest first.
    """

    ssm: np.ndarray
    conv: np.ndarray

_KINDS = ("zeros", "normal", "constant")


def _fits(shape: tuple, dtype: np.dtype) -> None:
    """Refuse a state that cannot fit in memory (the package's size rule), before NumPy tries."""
    check_memory(f"a state of shape {shape_str(shape)} ({dtype})", float(math.prod(shape)) * dtype.itemsize,
                 "Use a smaller batch or hidden size.")


def init_hidden(batch_size: int, hidden_dim: int) -> np.ndarray:
    """Create a new zero hidden state ``h0 = 0`` of shape (B, H) (Elman 1990).

    Parameters
    ----------
    batch_size : int
        B, the number of sequences; a positive Python or NumPy integer.
    hidden_dim : int
        H, the number of hidden units; a positive Python or NumPy integer.

    Returns
    -------
    ndarray of shape (B, H), float64
        A new C-contiguous array of zeros that owns its memory: writing into one result
        never changes another.

    Raises
    ------
    TypeError
        If a size is not an integer (bool and float are rejected).
    ValueError
        If a size is zero or negative, or the array cannot fit in this machine's memory
        (:func:`hiddenstate.core.resources.check_memory`; the message names ``batch_size`` and
        ``hidden_dim`` and their values).

    Notes
    -----
    Zero is the standard choice (Elman 1990, "Finding Structure in Time", context units): with
    ``h0 = 0`` the first step ``h_1 = tanh(x_1 W_xh + h_0 W_hh + b)`` reduces to
    ``tanh(x_1 W_xh + b)``, so the first state depends on the first input only.

    Examples
    --------
    >>> init_hidden(2, 3)
    array([[0., 0., 0.],
           [0., 0., 0.]])
    """
    b = positive_int("batch_size", batch_size)
    h = positive_int("hidden_dim", hidden_dim)
    check_memory(f"init_hidden(batch_size={b}, hidden_dim={h}), a float64 state of shape ({b}, {h}),", 8.0 * b * h,
                 "Use a smaller batch_size or hidden_dim.")
    return np.zeros((b, h), dtype=np.float64)


def initial_state(
    shape,
    kind: str = "zeros",
    *,
    std: float = 0.1,
    value: float = 0.5,
    rng: np.random.Generator | None = None,
    dtype=np.float64,
) -> np.ndarray:
    """Create an initial state of any shape by one of the standard strategies.

    Parameters
    ----------
    shape : tuple of int
        ``(N, H)`` for a cell or ``(L*D, N, H)`` for a layer.
    kind : {"zeros", "normal", "constant"}, default "zeros"
        ``"zeros"``: all zeros (Elman 1990, the default everywhere).
        ``"normal"``: i.i.d. N(0, std**2) drawn from ``rng`` (non-deterministic across seeds;
        the seeds' "random initialization").
        ``"constant"``: every entry equals ``value`` (Elman's simulations start the context
        units at 0.5).
    std : float, default 0.1
        Standard deviation for ``"normal"``.
    value : float, default 0.5
        Fill value for ``"constant"``.
    rng : numpy.random.Generator, optional
        Required for ``"normal"``; never the global ``np.random``.
    dtype : {float64, float32}, default float64

    Returns
    -------
    ndarray of the given shape and dtype

    Raises
    ------
    ValueError
        Unknown ``kind``, non-positive sizes, a negative or non-finite ``std``, a non-finite
        ``value``, or ``"normal"`` without ``rng``; a shape that cannot fit in memory.
    TypeError
        ``rng`` is not a ``numpy.random.Generator``, a size is not an integer, ``shape`` is not a
        tuple, ``std`` or ``value`` is not a number.
    """
    dt = float_dtype("dtype", dtype)
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"shape must be a tuple of positive integers; got {type(shape).__name__} {shape!r}.")
    shape = tuple(positive_int(f"shape[{i}]", s) for i, s in enumerate(shape))
    if kind in _KINDS:
        _fits(shape, dt)
    if kind == "zeros":
        return np.zeros(shape, dtype=dt)
    if kind == "constant":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
            raise TypeError(f"value must be a number; got {type(value).__name__} {value!r}.")
        if not np.isfinite(value):
            raise ValueError(f"value must be finite; got {value}.")
        return np.full(shape, value, dtype=dt)
    if kind == "normal":
        if rng is None:
            raise ValueError(
                "rng must be a numpy.random.Generator for kind='normal'; got None. "
                "Pass rng=np.random.default_rng(seed)."
            )
        generator(rng, required=True)
        std = real("std", std, low=0.0)
        return (std * rng.standard_normal(shape)).astype(dt, copy=False)
    raise ValueError(f"kind must be one of {_KINDS}; got {kind!r}.")  # any other value, of any type
