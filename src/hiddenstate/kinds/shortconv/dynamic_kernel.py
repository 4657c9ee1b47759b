"""Inkling 2's dynamic short convolution: input-dependent taps, forward and the exact backward.

In the layouts of transformers' ``Inkling2DynamicShortConvolution`` (C = ``hidden_size``, the
convolved channels, H heads of ``Dh = C / H`` channels each, channel ``c = h Dh + i``; K taps; M
the width of the dynamic input)::

    P_t      = reshape(weight_proj(d_t), (H, K))                weight_proj.weight (H K, M)
    w_t[c,j] = static_weight[j, c] + P_t[h(c), j]               static_weight (K, C); j = 0 the current token
    y_t[c]   = s (x_t[c] + sum_{j=0}^{K-1} w_t[c,j] x_{t-j}[c])  s = 1 / sqrt(2 K + 1) by default

a causal depthwise convolution whose taps are the static taps plus per-token, per-head taps
projected from a second input ``d`` (the layer's input, where ``x`` is its key or value
projection), and a residual. The state is the window of the last K - 1 inputs ``x``, oldest first,
(N, C, K-1), as transformers' conv cache holds it (after its oldest, unread slot); the taps carry
nothing across steps, so the whole sequence is one vectorised pass.

Kernel contract (batch-first arrays)
------------------------------------
``forward(static, proj, x, d, window0, num_heads, scale) -> (y, window_T, cache)``
``backward(cache, d_y, d_window_T) -> (grads, d_x, d_d, d_window0)``, ``grads`` by parameter name.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PARAMS", "backward", "forward"]

#: The parameters in transformers' ``Inkling2DynamicShortConvolution`` names.
PARAMS = ("static_weight", "weight_proj.weight")


def _lagged(xp: np.ndarray, T: int, K: int) -> np.ndarray:
    """``win[n, t, c, j] = x_{t-j}[n, c]`` from the padded sequence ``xp`` (N, K-1+T, C): (N, T, C, K)."""
    return np.stack([xp[:, K - 1 - j:K - 1 - j + T] for j in range(K)], axis=-1)


def forward(static: np.ndarray, proj: np.ndarray, x: np.ndarray, d: np.ndarray, window0: np.ndarray,
            num_heads: int, scale: float):
    """The dynamic short convolution over all T steps (the equations of the module docstring).

    Parameters
    ----------
    static : ndarray of shape (K, C)
        ``static_weight``: row j the taps of lag j.
    proj : ndarray of shape (H*K, M)
        ``weight_proj.weight``.
    x : ndarray of shape (N, T, C)
        The convolved input.
    d : ndarray of shape (N, T, M)
        The input the dynamic taps are projected from.
    window0 : ndarray of shape (N, C, K-1)
        The last K - 1 inputs before step 0, oldest first.
    num_heads : int
        H, the heads the dynamic taps are shared within.
    scale : float
        s, the output's factor.

    Returns
    -------
    y : ndarray of shape (N, T, C)
    window_T : ndarray of shape (N, C, K-1)
        The last K - 1 inputs after step T - 1 (a copy).
    cache : tuple
        What :func:`backward` reads.
    """
    N, T, C = x.shape
    K = static.shape[0]
    xp = np.concatenate([window0.transpose(0, 2, 1), x], axis=1)  # (N, K-1+T, C)
    win = _lagged(xp, T, K)
    P = (d.reshape(N * T, -1) @ proj.T).reshape(N, T, num_heads, 1, K)
    taps = (static.T.reshape(num_heads, C // num_heads, K) + P).reshape(N, T, C, K)
    y = scale * (x + np.einsum("ntck,ntck->ntc", win, taps))
    window_T = xp[:, T:].transpose(0, 2, 1).copy()
    return y, window_T, (static, proj, d, win, taps, num_heads, scale, K)


def backward(cache, d_y: np.ndarray, d_window_T=None):
    """The exact gradients of :func:`forward`.

    Parameters
    ----------
    cache : tuple
        From :func:`forward`.
    d_y : ndarray of shape (N, T, C)
        The gradient of the output.
    d_window_T : ndarray of shape (N, C, K-1), optional
        The gradient of the final window.

    Returns
    -------
    grads : dict of str to ndarray
        ``static_weight`` (K, C) and ``weight_proj.weight`` (H*K, M).
    d_x : ndarray of shape (N, T, C)
    d_d : ndarray of shape (N, T, M)
    d_window0 : ndarray of shape (N, C, K-1)
    """
    static, proj, d, win, taps, H, scale, K = cache
    N, T, C = d_y.shape
    g = scale * d_y
    d_taps = g[..., None] * win  # (N, T, C, K)
    d_static = d_taps.sum(axis=(0, 1)).T
    d_P = d_taps.reshape(N, T, H, C // H, K).sum(axis=3).reshape(N * T, H * K)
    d_proj = d_P.T @ d.reshape(N * T, -1)
    d_d = (d_P @ proj).reshape(d.shape)
    d_win = g[..., None] * taps
    d_xp = np.zeros((N, K - 1 + T, C), dtype=d_y.dtype)
    for j in range(K):
        d_xp[:, K - 1 - j:K - 1 - j + T] += d_win[..., j]
    if d_window_T is not None and K > 1:
        d_xp[:, T:] += d_window_T.transpose(0, 2, 1)
    d_x = g + d_xp[:, K - 1:]
    return ({"static_weight": d_static, "weight_proj.weight": d_proj}, d_x, d_d,
            d_xp[:, :K - 1].transpose(0, 2, 1).copy())
