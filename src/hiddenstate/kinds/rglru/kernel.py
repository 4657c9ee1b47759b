"""Griffin's RG-LRU and its recurrent block (De et al. 2024): scan kernels, forward and exact backward side by side.

The recurrent block maps ``u`` (T, N, M) (M = ``hidden_size``) to a sequence of the same shape,
in the parameter names and layouts of transformers' ``RecurrentGemmaRecurrentBlock`` (W =
``lru_width`` channels in Hh = ``num_attention_heads`` blocks of Bw = W / Hh, K =
``conv1d_width``)::

    y_t  = gelu_tanh(linear_y(u_t))                        linear_y.weight (W, M), .bias (W,)
    x_t  = linear_x(u_t)                                   linear_x.weight (W, M), .bias (W,)
    c_t  = sum_k w[:, k] x_{t-K+1+k} + b_conv              conv_1d.weight (W, 1, K), .bias (W,)
    i_t  = sigmoid(c_t W_i + b_i)    per head block        rg_lru.input_gate_weight (Hh, Bw, Bw), _bias (Hh, Bw)
    r_t  = sigmoid(c_t W_a + b_a)    per head block        rg_lru.recurrent_gate_weight, _bias
    log a_t = -8 r_t softplus(Lambda)                      rg_lru.recurrent_param (W,)    (Griffin eq. 4, c = 8)
    h_t  = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t c_t)         state (N, W)                   (eqs. 1-4)
    out_t = linear_out(h_t y_t)                            linear_out.weight (M, W), .bias (M,)

``1 - a_t^2`` is computed as ``-expm1(2 log a_t)`` (transformers: ``1 - exp(2 log a_t)``) and
the derivative of the square root is bounded as Griffin's and transformers' ``SqrtBoundDerivative`` bounds it: ``1 / sqrt(max(4 x, 1e-6))``
(it differs from ``1 / (2 sqrt(x))`` only where ``1 - a^2 < 2.5e-7``). A *reset* step (a
document boundary, transformers' ``position_ids == 0``) starts the recurrence from zero:
``a_t = 0`` and the input is not scaled (``h_t = i_t c_t``); the convolution reads across it,
as transformers' does.

The block has two states: the RG-LRU's ``h`` (N, W) and the convolution's window (N, W, K-1),
the last K - 1 values of ``x`` oldest first (:mod:`hiddenstate.shared.causal_conv`). The
recurrence is diagonal with ``a_t`` in (0, 1]: it runs through :mod:`hiddenstate.shared.scan`,
as the per-step loop (``scan="sequential"``) or the chunked Brent-Kung scan (``"parallel"``),
and its adjoint is the same scan backwards in time.

Kernel contract
---------------
``block_forward(p, u, h0, conv0, *, lengths=None, reset=None, scan="parallel") -> (out, RGLRUState, cache)``
``block_backward(cache, d_out, d_final) -> (grads, d_u, RGLRUState of d_h0, d_conv0)``
``rglru_forward(p, x, h0, *, keep=None, reset=None, scan="parallel") -> (hs, cache)``: the RG-LRU alone
``rglru_backward(cache, d_hs, d_h_T) -> (grads, d_x, d_h0)``
``recorded(cache) -> RGLRURecord``: every step's states and gates.

References
----------
S. De et al., "Griffin: Mixing gated linear recurrences with local attention for efficient
language models", arXiv:2402.19427, 2024.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.classic.cells.activations import gelu_tanh, logistic
from hiddenstate.shared import causal_conv
from hiddenstate.shared.scan import recurrence_backward, recurrence_forward

__all__ = ["BLOCK_PARAMS", "LRU_PARAMS", "MAX_SQRT_GRADIENT", "SCANS", "RGLRURecord", "RGLRUState", "block_backward",
           "block_forward", "recorded", "rglru_backward", "rglru_forward"]

#: The evaluation modes of the recurrence (option ``scan``).
SCANS = ("parallel", "sequential")

#: The RG-LRU's parameters in transformers' ``RecurrentGemmaRglru`` names.
LRU_PARAMS = ("recurrent_param", "input_gate_weight", "input_gate_bias", "recurrent_gate_weight",
              "recurrent_gate_bias")

#: The block's parameters in transformers' ``RecurrentGemmaRecurrentBlock`` names.
BLOCK_PARAMS = ("linear_y.weight", "linear_y.bias", "linear_x.weight", "linear_x.bias", "linear_out.weight",
                "linear_out.bias", "conv_1d.weight", "conv_1d.bias") + tuple("rg_lru." + k for k in LRU_PARAMS)

#: The bound on the square root's derivative (Griffin's ``_MAX_SQRT_GRADIENT``).
MAX_SQRT_GRADIENT = 1000.0

_C = 8.0  # Griffin's constant c in log a = -c r softplus(Lambda)


class RGLRUState(NamedTuple):
    """The two states of a recurrent block.

    Attributes
    ----------
    rg : ndarray of shape (N, W)
        The RG-LRU's state ``h``.
    conv : ndarray of shape (N, W, K-1)
        The last K - 1 inputs of the convolution, oldest first.
    """

    rg: np.ndarray
    conv: np.ndarray


class RGLRURecord(NamedTuple):
    """Every step of a recurrent block (time-major), from :func:`recorded`.

    Attributes
    ----------
    rg : ndarray of shape (T, N, W)
        The RG-LRU state after each step.
    conv : ndarray of shape (T, N, W, K-1)
        The convolution's window after each step.
    decay : ndarray of shape (T, N, W)
        ``a_t`` (0 at a reset step): how much of the state is kept (the keep gate).
    input_gate : ndarray of shape (T, N, W)
        ``i_t``.
    recurrent_gate : ndarray of shape (T, N, W)
        ``r_t``.
    x : ndarray of shape (T, N, W)
        ``c_t``, the convolution's output, what the RG-LRU reads.
    gate : ndarray of shape (T, N, W)
        ``gelu_tanh(linear_y(u_t))``, the output gate.
    """

    rg: np.ndarray
    conv: np.ndarray
    decay: np.ndarray
    input_gate: np.ndarray
    recurrent_gate: np.ndarray
    x: np.ndarray
    gate: np.ndarray


def _heads(x, Hh):
    """(T, N, W) -> (T, N, Hh, Bw)."""
    return x.reshape(x.shape[:-1] + (Hh, x.shape[-1] // Hh))


def _per_head(xh, w):
    """``xh (T, N, Hh, Bw) @ w (Hh, Bw, J)`` per head, as one batched product: (T, N, Hh, J)."""
    T, N, Hh, Bw = xh.shape
    y = np.matmul(xh.reshape(T * N, Hh, Bw).transpose(1, 0, 2), w)  # (Hh, T N, J)
    return y.transpose(1, 0, 2).reshape(T, N, Hh, w.shape[-1])


def _linear(x, w, b=None):
    """``x @ w.T + b`` over the last axis, as one 2-D product."""
    y = x.reshape(-1, x.shape[-1]) @ w.T
    if b is not None:
        y += b
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def rglru_forward(p: dict, x: np.ndarray, h0: np.ndarray, *, keep=None, reset=None, scan: str = "parallel"):
    """The RG-LRU over all T steps (Griffin eqs. 1-4): the forward kernel of ``RecurrentGemmaRglru``.

    Parameters
    ----------
    p : dict of str to ndarray
        :data:`LRU_PARAMS` by name: ``recurrent_param`` (W,), ``input_gate_weight`` and
        ``recurrent_gate_weight`` (Hh, Bw, Bw), ``input_gate_bias`` and ``recurrent_gate_bias`` (Hh, Bw).
    x : ndarray of shape (T, N, W)
        The input (the convolution's output in the block).
    h0 : ndarray of shape (N, W)
        The initial state.
    keep : ndarray of bool, shape (T, N, 1), optional
        False at padded steps (the state is carried).
    reset : ndarray of bool, shape (T, N), optional
        True at a document's first step: ``a_t = 0`` and the input is not scaled.
    scan : {"parallel", "sequential"}, default "parallel"

    Returns
    -------
    hs : ndarray of shape (T, N, W)
        Every state.
    cache : tuple
        For :func:`rglru_backward`.
    """
    T, N, W = x.shape
    Hh = p["input_gate_weight"].shape[0]
    xh = _heads(x, Hh)  # (T, N, Hh, Bw)
    Bw = W // Hh
    pre = _per_head(xh, np.concatenate([p["input_gate_weight"], p["recurrent_gate_weight"]], axis=-1))  # (T, N, Hh, 2 Bw)
    pre += np.concatenate([p["input_gate_bias"], p["recurrent_gate_bias"]], axis=-1)
    logistic(pre, out=pre)
    ig, rgt = pre[..., :Bw].reshape(T, N, W), pre[..., Bw:].reshape(T, N, W)
    sp = np.logaddexp(0.0, p["recurrent_param"])  # softplus(Lambda), (W,)
    log_a = -_C * rgt * sp
    with np.errstate(under="ignore"):
        a = np.exp(log_a)
        one_minus = -np.expm1(2.0 * log_a)  # 1 - a^2, to full relative precision near a = 1
    mult = np.sqrt(one_minus)
    gx = x * ig
    a_eff = a
    if reset is not None:
        mult[reset] = 1.0
        a_eff = a.copy()
        a_eff[reset] = 0.0
    b = gx * mult
    hs = recurrence_forward(a_eff, b, h0, keep, None, parallel=scan == "parallel")
    cache = (p, x, xh, h0, ig, rgt, sp, a, a_eff, one_minus, mult, gx, hs, keep, reset, scan)
    return hs, cache


def rglru_backward(cache, d_hs, d_h_T):
    """Exact backward pass through :func:`rglru_forward`.

    Parameters
    ----------
    cache : tuple
        From :func:`rglru_forward`.
    d_hs : ndarray of shape (T, N, W) or None
        Gradient with respect to every state.
    d_h_T : ndarray of shape (N, W) or None
        Gradient with respect to the final state.

    Returns
    -------
    grads : dict of str to ndarray
        Same keys and shapes as ``p``.
    d_x : ndarray of shape (T, N, W)
    d_h0 : ndarray of shape (N, W)
    """
    p, x, xh, h0, ig, rgt, sp, a, a_eff, one_minus, mult, gx, hs, keep, reset, scan = cache
    T, N, W = x.shape
    Hh = p["input_gate_weight"].shape[0]
    d_a, d_b, d_h0 = recurrence_backward(a_eff, hs, h0, keep, None, d_hs, d_h_T, parallel=scan == "parallel")
    d_gx = d_b * mult
    d_mult = d_b * gx
    if reset is not None:
        d_a[reset] = 0.0
        d_mult[reset] = 0.0
    # mult = sqrt(1 - exp(2 log a)), with the derivative of sqrt bounded as Griffin bounds it
    d_one_minus = d_mult / np.sqrt(np.maximum(4.0 * one_minus, 1.0 / MAX_SQRT_GRADIENT ** 2))
    d_log_a = d_a * a - 2.0 * d_one_minus * (1.0 - one_minus)
    d_r = d_log_a * (-_C * sp)
    grads = {"recurrent_param": -_C * (d_log_a * rgt).reshape(-1, W).sum(axis=0) * logistic(p["recurrent_param"])}
    d_x = d_gx * ig
    d_pre_i = _heads(d_gx * x * ig * (1.0 - ig), Hh)  # (T, N, Hh, Bw)
    d_pre_r = _heads(d_r * rgt * (1.0 - rgt), Hh)
    Bw = W // Hh
    d_pre = np.concatenate([d_pre_i, d_pre_r], axis=-1).reshape(T * N, Hh, 2 * Bw).transpose(1, 0, 2)  # (Hh, T N, 2 Bw)
    d_w = np.matmul(xh.reshape(T * N, Hh, Bw).transpose(1, 2, 0), d_pre)  # (Hh, Bw, 2 Bw)
    d_bias = d_pre.sum(axis=1)  # (Hh, 2 Bw)
    grads["input_gate_weight"], grads["recurrent_gate_weight"] = d_w[..., :Bw], d_w[..., Bw:]
    grads["input_gate_bias"], grads["recurrent_gate_bias"] = d_bias[:, :Bw], d_bias[:, Bw:]
    wcat = np.concatenate([p["input_gate_weight"], p["recurrent_gate_weight"]], axis=-1)  # (Hh, Bw, 2 Bw)
    d_x += np.matmul(d_pre, wcat.transpose(0, 2, 1)).transpose(1, 0, 2).reshape(T, N, W)
    return {k: grads[k] for k in p}, d_x, d_h0


def block_forward(p: dict, u: np.ndarray, h0: np.ndarray, conv0: np.ndarray, *, lengths=None, reset=None,
                  scan: str = "parallel"):
    """The recurrent block over all T steps (the equations of the module docstring): the forward kernel.

    Parameters
    ----------
    p : dict of str to ndarray
        :data:`BLOCK_PARAMS` by name (every bias is required, as in transformers).
    u : ndarray of shape (T, N, M)
        The block's input.
    h0 : ndarray of shape (N, W)
        The initial RG-LRU state.
    conv0 : ndarray of shape (N, W, K-1)
        The initial convolution window, oldest first.
    lengths : ndarray of int, shape (N,), optional
        Valid steps per row of a right-padded batch: past its length a row's output is 0 and both
        states are carried.
    reset : ndarray of bool, shape (T, N), optional
        Document starts (transformers' ``position_ids == 0``): the RG-LRU restarts from zero there
        (the convolution reads across, as transformers' does).
    scan : {"parallel", "sequential"}, default "parallel"

    Returns
    -------
    out : ndarray of shape (T, N, M)
    final : RGLRUState
        The states after each row's last valid step.
    cache : tuple
        For :func:`block_backward` and :func:`recorded`.
    """
    T, N, M = u.shape
    K = p["conv_1d.weight"].shape[-1]
    gy, dgy = gelu_tanh(_linear(u, p["linear_y.weight"], p["linear_y.bias"]))  # (T, N, W)
    x = _linear(u, p["linear_x.weight"], p["linear_x.bias"])
    c, xpad = causal_conv.conv_forward(x, p["conv_1d.weight"][:, 0, :], p["conv_1d.bias"], conv0)
    keep = None if lengths is None else (np.arange(T)[:, None] < lengths[None, :])[:, :, None]  # (T, N, 1)
    lp = {k: p["rg_lru." + k] for k in LRU_PARAMS}
    hs, lc = rglru_forward(lp, c, h0, keep=keep, reset=reset, scan=scan)
    hy = hs * gy
    out = _linear(hy, p["linear_out.weight"], p["linear_out.bias"])
    if keep is not None:
        out *= keep
    final = RGLRUState(hs[-1].copy() if T else h0.copy(), causal_conv.final_window(xpad, K, lengths))
    cache = (p, u, gy, dgy, xpad, hs, hy, lc, keep, lengths)
    return out, final, cache


def block_backward(cache, d_out, d_final):
    """Exact backward pass through :func:`block_forward` (the backward kernel).

    Parameters
    ----------
    cache : tuple
        From :func:`block_forward`.
    d_out : ndarray of shape (T, N, M) or None
        Gradient with respect to ``out`` (None: zeros).
    d_final : pair of ndarray or None
        ``(d_rg (N, W), d_conv (N, W, K-1))``, either part None.

    Returns
    -------
    grads : dict of str to ndarray
        Same keys and shapes as the parameters.
    d_u : ndarray of shape (T, N, M)
    d_state : RGLRUState
        Gradients with respect to ``h0`` and ``conv0``.
    """
    p, u, gy, dgy, xpad, hs, hy, lc, keep, lengths = cache
    T, N, M = u.shape
    W = hs.shape[-1]
    K = p["conv_1d.weight"].shape[-1]
    d_h_T, d_conv_T = (None, None) if d_final is None else d_final
    d_out = np.zeros((T, N, M), dtype=u.dtype) if d_out is None else d_out
    if keep is not None:
        d_out = d_out * keep
    grads = {"linear_out.weight": d_out.reshape(-1, M).T @ hy.reshape(-1, W),
             "linear_out.bias": d_out.reshape(-1, M).sum(axis=0)}
    d_hy = (d_out.reshape(-1, M) @ p["linear_out.weight"]).reshape(T, N, W)
    d_ypre = d_hy * hs * dgy
    lg, d_c, d_h0 = rglru_backward(lc, d_hy * gy, d_h_T)
    grads.update({"rg_lru." + k: v for k, v in lg.items()})
    w = p["conv_1d.weight"][:, 0, :]
    d_w, grads["conv_1d.bias"], d_xpad = causal_conv.conv_backward(xpad, w, d_c, True)
    grads["conv_1d.weight"] = d_w[:, None, :]
    if d_conv_T is not None:
        causal_conv.final_window_backward(d_xpad, K, lengths, d_conv_T)
    d_x = d_xpad[K - 1:]
    uf = u.reshape(-1, M)
    grads["linear_x.weight"] = d_x.reshape(-1, W).T @ uf
    grads["linear_x.bias"] = d_x.reshape(-1, W).sum(axis=0)
    grads["linear_y.weight"] = d_ypre.reshape(-1, W).T @ uf
    grads["linear_y.bias"] = d_ypre.reshape(-1, W).sum(axis=0)
    d_u = (d_x.reshape(-1, W) @ p["linear_x.weight"] + d_ypre.reshape(-1, W) @ p["linear_y.weight"]).reshape(T, N, M)
    d_state = RGLRUState(d_h0, np.ascontiguousarray(d_xpad[:K - 1].transpose(1, 2, 0)))
    return {k: grads[k] for k in p}, d_u, d_state


def recorded(cache) -> RGLRURecord:
    """Every step's states and gates from a :func:`block_forward` cache.

    Parameters
    ----------
    cache : tuple
        From :func:`block_forward`.

    Returns
    -------
    RGLRURecord
        Time-major arrays.
    """
    p, u, gy, dgy, xpad, hs, hy, lc, keep, lengths = cache
    K = p["conv_1d.weight"].shape[-1]
    _, x, _, _, ig, rgt, _, _, a_eff, _, _, _, _, _, _, _ = lc
    return RGLRURecord(rg=hs, conv=causal_conv.windows(xpad, K, lengths), decay=a_eff, input_gate=ig,
                       recurrent_gate=rgt, x=x, gate=gy)
