"""The depthwise causal convolution of Griffin's recurrent block and LFM2's short convolution, forward and exact backward.

Every channel ``c`` of a sequence ``x`` (T, N, C) is convolved with its own K taps (torch's
``nn.Conv1d(C, C, K, groups=C, padding=K-1)`` cut to the first T outputs)::

    y_t = sum_k w[c, k] * x_{t-K+1+k} + bias[c]        x_{-K+1} .. x_{-1} = conv0 (oldest first)

The state of the convolution is its window: the last K - 1 inputs it has read, ``conv0``
(N, C, K-1) before step 0 and the final window after the last (valid) step. Both are arrays
with exact gradients. The kernels work on ``xpad`` (K-1+T, N, C), the window before step 0
followed by the inputs, so tap ``k`` of step ``t`` reads ``xpad[t + k]``.

With resets (Mamba's ``reset``) a row restarts its window from ``conv0``: ``origin`` (T, N)
(:func:`run_origin`) is the step each row's current run began at, and a tap that reaches
before it reads ``conv0`` again (every function here takes it; None: no restarts).

References
----------
S. De et al., "Griffin: Mixing gated linear recurrences with local attention for efficient
language models", arXiv:2402.19427, 2024 (Sec. 2.4, the temporal convolution of the recurrent block).
"""

from __future__ import annotations

import numpy as np

__all__ = ["conv_backward", "conv_forward", "final_window", "final_window_backward", "run_origin", "windows"]


def run_origin(reset):
    """The step each row's current run began at: the last ``t' <= t`` with ``reset[t', n]`` (0 if none).

    Parameters
    ----------
    reset : ndarray of bool, shape (T, N), or None

    Returns
    -------
    ndarray of int, shape (T, N), or None (for ``reset`` None)
    """
    if reset is None:
        return None
    return np.maximum.accumulate(np.where(reset, np.arange(reset.shape[0])[:, None], 0), axis=0)


def _tap(t, k, K, origin):
    """Where in ``xpad`` tap ``k`` of step ``t`` reads, for a run that began at ``origin``.

    Tap ``k`` reads the input of step ``t + k - (K-1)``; before the step its run began at, that is
    ``conv0``'s entry ``t + k - origin`` (a row restarted from its initial window reads it again).
    """
    i = t + k
    return np.where(i - (K - 1) >= origin, i, i - origin)


def _taps(xpad, k, K, origin):
    """What tap ``k`` reads at every step, (T, N, C)."""
    T = xpad.shape[0] - (K - 1)
    if origin is None:
        return xpad[k:k + T]
    return xpad[_tap(np.arange(T)[:, None], k, K, origin), np.arange(xpad.shape[1])[None, :]]


def conv_forward(x: np.ndarray, w: np.ndarray, bias, conv0: np.ndarray, origin=None) -> tuple[np.ndarray, np.ndarray]:
    """The causal depthwise convolution over all T steps.

    Parameters
    ----------
    x : ndarray of shape (T, N, C)
        The inputs.
    w : ndarray of shape (C, K)
        The taps of every channel (torch's ``conv.weight[:, 0, :]``), oldest input first.
    bias : ndarray of shape (C,) or None
    conv0 : ndarray of shape (N, C, K-1)
        The window before step 0, oldest first.
    origin : ndarray of int, shape (T, N), optional
        Where each row's run began (:func:`run_origin`); None: no restarts.

    Returns
    -------
    y : ndarray of shape (T, N, C)
    xpad : ndarray of shape (K-1+T, N, C)
        The window before step 0 followed by ``x`` (for the backward pass and the states).
    """
    K = w.shape[1]
    xpad = np.concatenate([conv0.transpose(2, 0, 1), x], axis=0)  # (K-1+T, N, C)
    y = np.zeros_like(x) if bias is None else np.broadcast_to(bias, x.shape).copy()
    for k in range(K):
        y += w[:, k] * _taps(xpad, k, K, origin)
    return y, xpad


def conv_backward(xpad: np.ndarray, w: np.ndarray, d_y: np.ndarray, bias: bool,
                  origin=None) -> tuple[np.ndarray, object, np.ndarray]:
    """The exact adjoint of :func:`conv_forward`.

    Parameters
    ----------
    xpad : ndarray of shape (K-1+T, N, C)
        From :func:`conv_forward`.
    w : ndarray of shape (C, K)
        The taps.
    d_y : ndarray of shape (T, N, C)
        Gradient with respect to the output.
    bias : bool
        Whether the forward had a bias.
    origin : ndarray of int, shape (T, N), optional
        As in :func:`conv_forward`.

    Returns
    -------
    d_w : ndarray of shape (C, K)
    d_bias : ndarray of shape (C,) or None
    d_xpad : ndarray of shape (K-1+T, N, C)
        Gradient with respect to ``xpad``: ``d_xpad[K-1:]`` is the inputs', ``d_xpad[:K-1]``
        the initial window's (time-major; transpose to (N, C, K-1)).
    """
    T, N, C = d_y.shape
    K = w.shape[1]
    d_w = np.empty_like(w)
    d_xpad = np.zeros_like(xpad)
    flat = d_y.reshape(-1, C)
    for k in range(K):
        d_w[:, k] = np.einsum("mc,mc->c", flat, _taps(xpad, k, K, origin).reshape(-1, C))
        if origin is None:
            d_xpad[k:k + T] += w[:, k] * d_y
        else:  # a restarted row's taps read conv0 again: accumulate
            idx = _tap(np.arange(T)[:, None], k, K, origin)  # (T, N)
            np.add.at(d_xpad, (idx, np.broadcast_to(np.arange(N)[None, :], idx.shape)), w[:, k] * d_y)
    return d_w, (flat.sum(axis=0) if bias else None), d_xpad


def _final_index(lengths, T: int, K: int, N: int, origin=None):
    """Index of the final window (K-1, N) in ``xpad``: what each row's last valid step's window ends with."""
    if lengths is None and origin is None:
        return slice(T, T + K - 1)
    if origin is None:
        return lengths[None, :] + np.arange(K - 1)[:, None], np.arange(N)[None, :]
    last = np.full(N, T - 1) if lengths is None else lengths - 1  # (N,): each row's last valid step (-1: none)
    org = np.where(last >= 0, origin[np.maximum(last, 0), np.arange(N)], 0)
    return _tap(last[None, :], np.arange(1, K)[:, None], K, org[None, :]), np.arange(N)[None, :]


def final_window(xpad: np.ndarray, K: int, lengths=None, origin=None) -> np.ndarray:
    """The convolution's state after each row's last valid step.

    Parameters
    ----------
    xpad : ndarray of shape (K-1+T, N, C)
        From :func:`conv_forward`.
    K : int
        The number of taps.
    lengths : ndarray of int, shape (N,), optional
        Valid steps per row, each in [0, T] (None: all T).
    origin : ndarray of int, shape (T, N), optional
        Where each row's run began (:func:`run_origin`).

    Returns
    -------
    ndarray of shape (N, C, K-1)
        The last K - 1 inputs before each row's length, oldest first (a length-0 row: ``conv0``).
    """
    T = xpad.shape[0] - (K - 1)
    return np.ascontiguousarray(xpad[_final_index(lengths, T, K, xpad.shape[1], origin)].transpose(1, 2, 0))


def final_window_backward(d_xpad: np.ndarray, K: int, lengths, d_window: np.ndarray, origin=None) -> None:
    """Add the final window's gradient into ``d_xpad`` in place (the adjoint of :func:`final_window`).

    Parameters
    ----------
    d_xpad : ndarray of shape (K-1+T, N, C)
        Gradient with respect to ``xpad``; updated in place.
    K : int
        The number of taps.
    lengths : ndarray of int, shape (N,), or None
        As in :func:`final_window`.
    d_window : ndarray of shape (N, C, K-1)
        Gradient with respect to the final window.
    origin : ndarray of int, shape (T, N), optional
        As in :func:`final_window`.
    """
    T = d_xpad.shape[0] - (K - 1)
    d_xpad[_final_index(lengths, T, K, d_xpad.shape[1], origin)] += d_window.transpose(2, 0, 1)  # each (row, slot) once


def windows(xpad: np.ndarray, K: int, lengths=None, origin=None) -> np.ndarray:
    """The convolution's state after every step (past a row's length: its final window, carried).

    Parameters
    ----------
    xpad : ndarray of shape (K-1+T, N, C)
        From :func:`conv_forward`.
    K : int
        The number of taps.
    lengths : ndarray of int, shape (N,), optional
        Valid steps per row.
    origin : ndarray of int, shape (T, N), optional
        Where each row's run began (:func:`run_origin`).

    Returns
    -------
    ndarray of shape (T, N, C, K-1)
        ``[t, n, :, j] = xpad[t + 1 + j, n]``: the K - 1 inputs up to and including step t.
    """
    T = xpad.shape[0] - (K - 1)
    if origin is None:
        idx = np.arange(T)[:, None] + 1 + np.arange(K - 1)[None, :]  # (T, K-1)
        out = xpad[idx].transpose(0, 2, 3, 1)  # (T, N, C, K-1)
    else:
        N = xpad.shape[1]
        idx = _tap(np.arange(T)[:, None, None], np.arange(1, K)[None, :, None], K, origin[:, None, :])  # (T, K-1, N)
        out = xpad[np.broadcast_to(idx, (T, K - 1, N)), np.arange(N)[None, None, :]].transpose(0, 2, 3, 1)
    if lengths is not None and T:
        keep = np.arange(T)[:, None] < lengths[None, :]  # (T, N)
        out = np.where(keep[:, :, None, None], out, final_window(xpad, K, lengths, origin)[None])
    return np.ascontiguousarray(out)
