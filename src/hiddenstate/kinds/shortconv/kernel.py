"""LFM2's gated short convolution (Liquid AI 2025): forward, one decoding step and the exact backward.

In the parameter names and layouts of transformers' ``Lfm2ShortConv`` (M = ``hidden_size``,
K = ``conv_L_cache``; every bias present only with ``conv_bias``)::

    B_t, C_t, x_t = split(in_proj(u_t))               in_proj.weight (3 M, M): blocks B, C, x
    z_t  = B_t * x_t                                   the input gate
    c_t  = sum_k w[:, k] z_{t-K+1+k} + b               conv.weight (M, 1, K), causal and depthwise
    out_t = out_proj(C_t * c_t)                        out_proj.weight (M, M); the output gate C

(the double gating of Hyena (Poli et al. 2023) with a short convolution). The state is the
convolution's window: the last K - 1 values of ``z``, oldest first, (N, M, K-1)
(transformers' cache keeps K, the oldest of which the next step never reads). Nothing else
carries across steps, so the whole sequence is one vectorised pass
(:mod:`hiddenstate.shared.causal_conv`); :func:`step` is the per-token form (the decoding step),
held equal to it by the tests.

Kernel contract
---------------
``forward(p, u, conv0, *, lengths=None) -> (out, conv_T, cache)``
``backward(cache, d_out, d_conv_T) -> (grads, d_u, d_conv0)``
``step(p, u_t, window) -> (out_t, window')``: one token.

References
----------
Liquid AI, "LFM2 technical report", arXiv:2511.23404, 2025.
M. Poli et al., "Hyena hierarchy: Towards larger convolutional language models", ICML 2023.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.shared import causal_conv

__all__ = ["PARAMS", "backward", "forward", "step", "windows"]

#: The layer's parameters in transformers' ``Lfm2ShortConv`` names (the biases only with ``conv_bias``).
PARAMS = ("conv.weight", "conv.bias", "in_proj.weight", "in_proj.bias", "out_proj.weight", "out_proj.bias")


def _linear(x, w, b):
    y = x.reshape(-1, x.shape[-1]) @ w.T
    if b is not None:
        y += b
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def forward(p: dict, u: np.ndarray, conv0: np.ndarray, *, lengths=None):
    """The gated short convolution over all T steps (the equations of the module docstring).

    Parameters
    ----------
    p : dict of str to ndarray
        :data:`PARAMS` by name (the biases may be absent).
    u : ndarray of shape (T, N, M)
        The input.
    conv0 : ndarray of shape (N, M, K-1)
        The window before step 0 (the last K - 1 values of ``B * x``), oldest first.
    lengths : ndarray of int, shape (N,), optional
        Valid steps per row of a right-padded batch: outputs past a row's length are 0 and its
        final window is the one after its last valid step.

    Returns
    -------
    out : ndarray of shape (T, N, M)
    conv_T : ndarray of shape (N, M, K-1)
        The final window.
    cache : tuple
        For :func:`backward` and :func:`windows`.
    """
    T, N, M = u.shape
    K = p["conv.weight"].shape[-1]
    bcx = _linear(u, p["in_proj.weight"], p.get("in_proj.bias"))  # (T, N, 3 M)
    B, C, x = bcx[..., :M], bcx[..., M:2 * M], bcx[..., 2 * M:]
    z = B * x
    c, zpad = causal_conv.conv_forward(z, p["conv.weight"][:, 0, :], p.get("conv.bias"), conv0)
    y = C * c
    out = _linear(y, p["out_proj.weight"], p.get("out_proj.bias"))
    keep = None if lengths is None else (np.arange(T)[:, None] < lengths[None, :])[:, :, None]
    if keep is not None:
        out *= keep
    return out, causal_conv.final_window(zpad, K, lengths), (p, u, B, C, x, zpad, c, y, keep, lengths)


def backward(cache, d_out, d_conv_T):
    """The exact adjoint of :func:`forward`.

    Parameters
    ----------
    cache : tuple
        From :func:`forward`.
    d_out : ndarray of shape (T, N, M) or None
        Gradient with respect to the output.
    d_conv_T : ndarray of shape (N, M, K-1) or None
        Gradient with respect to the final window.

    Returns
    -------
    grads : dict of str to ndarray
        Same keys and shapes as ``p``.
    d_u : ndarray of shape (T, N, M)
    d_conv0 : ndarray of shape (N, M, K-1)
    """
    p, u, B, C, x, zpad, c, y, keep, lengths = cache
    T, N, M = u.shape
    K = p["conv.weight"].shape[-1]
    d_out = np.zeros((T, N, M), dtype=u.dtype) if d_out is None else d_out
    if keep is not None:
        d_out = d_out * keep
    flat = d_out.reshape(-1, M)
    grads = {"out_proj.weight": flat.T @ y.reshape(-1, M)}
    if "out_proj.bias" in p:
        grads["out_proj.bias"] = flat.sum(axis=0)
    d_y = (flat @ p["out_proj.weight"]).reshape(T, N, M)
    d_c = d_y * C
    d_w, d_b, d_zpad = causal_conv.conv_backward(zpad, p["conv.weight"][:, 0, :], d_c, "conv.bias" in p)
    grads["conv.weight"] = d_w[:, None, :]
    if d_b is not None:
        grads["conv.bias"] = d_b
    if d_conv_T is not None:
        causal_conv.final_window_backward(d_zpad, K, lengths, d_conv_T)
    d_z = d_zpad[K - 1:]
    d_bcx = np.concatenate([d_z * x, d_y * c, d_z * B], axis=-1).reshape(-1, 3 * M)  # blocks B, C, x
    grads["in_proj.weight"] = d_bcx.T @ u.reshape(-1, M)
    if "in_proj.bias" in p:
        grads["in_proj.bias"] = d_bcx.sum(axis=0)
    d_u = (d_bcx @ p["in_proj.weight"]).reshape(T, N, M)
    return {k: grads[k] for k in p}, d_u, np.ascontiguousarray(d_zpad[:K - 1].transpose(1, 2, 0))


def step(p: dict, u_t: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One token of the gated short convolution (the decoding step): the readable reference.

    Parameters
    ----------
    p : dict of str to ndarray
        :data:`PARAMS` by name.
    u_t : ndarray of shape (N, M)
        The token's input.
    window : ndarray of shape (N, M, K-1)
        The last K - 1 values of ``B * x``, oldest first.

    Returns
    -------
    out_t : ndarray of shape (N, M)
    window : ndarray of shape (N, M, K-1)
        The window after this token.
    """
    M = u_t.shape[-1]
    bcx = u_t @ p["in_proj.weight"].T
    if "in_proj.bias" in p:
        bcx = bcx + p["in_proj.bias"]
    B, C, x = bcx[:, :M], bcx[:, M:2 * M], bcx[:, 2 * M:]
    full = np.concatenate([window, (B * x)[:, :, None]], axis=-1)  # (N, M, K)
    c = (full * p["conv.weight"][:, 0, :]).sum(axis=-1)
    if "conv.bias" in p:
        c = c + p["conv.bias"]
    out = (C * c) @ p["out_proj.weight"].T
    if "out_proj.bias" in p:
        out = out + p["out_proj.bias"]
    return out, full[:, :, 1:].copy()


def windows(cache) -> np.ndarray:
    """Every step's window from a forward cache (past a row's length: its final window).

    Parameters
    ----------
    cache : tuple
        From :func:`forward`.

    Returns
    -------
    ndarray of shape (T, N, M, K-1)
    """
    p, zpad, lengths = cache[0], cache[5], cache[9]
    return causal_conv.windows(zpad, p["conv.weight"].shape[-1], lengths)
