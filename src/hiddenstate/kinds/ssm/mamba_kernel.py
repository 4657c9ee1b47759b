"""Mamba's selective state space block (Gu & Dao 2023, Algorithm 2): scan kernels, forward and exact backward side by side.

The block maps a sequence ``u`` (T, N, M) (M = ``d_model``) to a sequence of the same shape
through a state of its own, in the parameter names and layouts of transformers' ``MambaMixer``
(Di = ``expand * d_model`` inner channels, S = ``d_state``, K = ``d_conv``, R = ``dt_rank``)::

    x_t, z_t  = split(in_proj(u_t))                     in_proj.weight (2 Di, M): blocks x, z
    c_t       = sum_k w[:, k] * x_{t-K+1+k} + b_conv      causal depthwise conv, conv1d.weight (Di, 1, K)
    a_t       = silu(c_t)                                 (SiLU: c sigmoid(c))
    r_t, B_t, C_t = split(x_proj(a_t))                    x_proj.weight (R + 2S, Di): blocks dt, B, C
    dt_t      = softplus(dt_proj(r_t))                    dt_proj.weight (Di, R), dt_proj.bias (Di,)
    A         = -exp(A_log)                               A_log (Di, S)
    h_t       = exp(dt_t A) * h_{t-1} + dt_t B_t a_t      state (N, Di, S): per channel d and state s
    y_t       = C_t . h_t + D * a_t                       D (Di,)
    out_t     = out_proj(y_t * silu(z_t))                 out_proj.weight (M, Di)

(the zero-order-hold discretisation of ``A`` and Euler's of ``B``, as the reference kernels
compute it: ``dA = exp(dt A)``, ``dB = dt B``).

Two variants of the mixer families in transformers are the same kernels:

* **RMS norms of dt, B, C** (``FalconMambaMixer``, ``JambaMambaMixer``): with ``norm_eps`` given,
  ``r_t``, ``B_t`` and ``C_t`` are each RMS-normalised over their last axis right after
  ``x_proj`` (so ``r`` before ``dt_proj``), ``v / sqrt(mean(v^2) + eps)``, times
  ``dt_layernorm.weight`` (R,), ``b_layernorm.weight`` (S,), ``c_layernorm.weight`` (S,) when
  ``p`` has them (Jamba), weightless when it has not (FalconMamba).
* **Several heads** (``ZambaMambaMixer``): when ``p`` has ``x_proj_weight`` (H, R + 2S, Dh)
  (Dh = Di / H), the channels split into H heads of Dh consecutive channels, each with its own
  ``x_proj_weight[h]``, ``dt_proj_weight[h]`` (Dh, R), ``dt_proj_bias[h]`` (Dh,) and so its
  own ``r``, ``B``, ``C`` (T, N, H, .); ``A_log`` is (H, Dh, S), ``D`` (H, Dh), and
  ``in_proj``'s rows interleave x and z (row 2i is ``x_i``, row 2i+1 is ``z_i``).

The block has *two* states: the SSM state ``h`` (N, Di, S) and the convolution's state, the
last K - 1 values of ``x`` it has read (N, Di, K-1), oldest first (transformers' cache keeps K,
the oldest of which the next step never reads). Both are inputs (:func:`scan_forward`'s ``h0``, ``conv0``) with exact gradients,
and both final states take a gradient.

The recurrence is diagonal and linear in ``h`` with a decay ``exp(dt A)`` in (0, 1]: it runs
through :mod:`hiddenstate.shared.scan` over the flattened (N, Di*S) state, either as the
per-step loop (``scan="sequential"``) or as the chunked Brent-Kung scan (``"parallel"``); its
adjoint is the same scan backwards in time. Everything else is per step and runs as
whole-sequence matrix products. The readable form, one step of the equations per loop
iteration in array-API functions, is :mod:`hiddenstate.kinds.ssm.reference` (held equal to these kernels by
the tests; it is also the path of torch tensors and CuPy arrays).

Kernel contract (the block's own: it reads its input, not an input projection)
-------------------------------------------------------------------------------
``scan_forward(p, u, h0, conv0, *, lengths=None, reset=None, scan="parallel", norm_eps=None) -> (out, (h_T, conv_T), cache)``
    ``p`` the parameters by name (:data:`PARAMS`), ``u`` (T, N, M), ``h0`` (N, Di, S),
    ``conv0`` (N, Di, K-1); ``lengths`` (N,) of a right-padded batch (padded steps carry both
    states), ``reset`` (T, N) bool (a row restarts both states from ``h0``, ``conv0``). Nothing
    is validated; every array has the dtype of ``u``. ``norm_eps`` switches on the norms of dt, B, C.
``scan_backward(cache, d_out, d_final) -> (grads, d_u, (d_h0, d_conv0))``
    ``d_out`` (T, N, M) or None, ``d_final`` a pair ``(d_h_T, d_conv_T)`` (either part None)
    or None; ``grads`` has the keys of ``p``.
``recorded(cache) -> MambaRecord``
    Every step's states and the selective parameters (``dt``, the decay ``exp(dt A)``, ``B``,
    ``C``, the gate).

References
----------
A. Gu, T. Dao, "Mamba: Linear-time sequence modeling with selective state spaces", arXiv:2312.00752, 2023.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.classic.cells.activations import silu
from hiddenstate.core.functional import sigmoid
from hiddenstate.core.params import MAMBA_NORMS
from hiddenstate.shared import causal_conv
from hiddenstate.shared.scan import recurrence_backward, recurrence_forward
from hiddenstate.state import MambaState

__all__ = ["NORMS", "PARAMS", "SCANS", "MambaRecord", "MambaState", "Selective", "discretize", "linear", "prepare",
           "readout", "recorded", "rms_norm", "rms_norm_backward", "scan_backward", "scan_forward", "silu", "softplus",
           "state_readout"]

#: The evaluation modes of the SSM recurrence (option ``scan``).
SCANS = ("parallel", "sequential")

#: The block's parameters in transformers' ``MambaMixer`` names (the two biases are optional).
PARAMS = ("in_proj.weight", "in_proj.bias", "conv1d.weight", "conv1d.bias", "x_proj.weight", "dt_proj.weight",
          "dt_proj.bias", "A_log", "D", "out_proj.weight", "out_proj.bias")

#: The weights of the norms of dt, B, C in transformers' names (``JambaMambaMixer``; optional).
NORMS = MAMBA_NORMS


class MambaRecord(NamedTuple):
    """Every step of a Mamba block's forward pass (time-major), from :func:`recorded`.

    Attributes
    ----------
    ssm : ndarray of shape (T, N, Di, S)
        The SSM state after each step.
    conv : ndarray of shape (T, N, Di, K-1)
        The convolution's state after each step.
    dt : ndarray of shape (T, N, Di)
        The step size ``softplus(dt_proj(r_t))`` of every channel.
    decay : ndarray of shape (T, N, Di, S)
        ``exp(dt_t A)``: how much of each state entry is kept (the keep gate).
    B, C : ndarray of shape (T, N, S), or (T, N, H, S) for several heads
        The input and output matrices of every step (after their norms, when the block has them).
    x : ndarray of shape (T, N, Di)
        ``a_t = silu(conv(x))``, what the SSM reads.
    gate : ndarray of shape (T, N, Di)
        ``silu(z_t)``, the output gate.
    y : ndarray of shape (T, N, Di)
        ``C_t . h_t + D a_t``, before the gate.
    z : ndarray of shape (T, N, Di)
        The gate's pre-activation (``silu(z) = z sigmoid(z)``).
    """

    ssm: np.ndarray
    conv: np.ndarray
    dt: np.ndarray
    decay: np.ndarray
    B: np.ndarray
    C: np.ndarray
    x: np.ndarray
    gate: np.ndarray
    y: np.ndarray
    z: np.ndarray


def linear(x: np.ndarray, weight: np.ndarray, bias=None) -> np.ndarray:
    """A linear layer ``x @ weight.T + bias`` over the last axis, as one 2-D matrix product.

    (NumPy's ``matmul`` of a (T, N, k) array runs T products of N rows; one (T N, k) product is
    several times faster.)

    Parameters
    ----------
    x : ndarray of shape (..., k)
    weight : ndarray of shape (j, k)
    bias : ndarray of shape (j,), optional

    Returns
    -------
    ndarray of shape (..., j)
    """
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None:
        y += bias
    return y.reshape(x.shape[:-1] + (weight.shape[0],))


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))``: within an ulp, without overflow, faster than ``logaddexp``.

    Parameters
    ----------
    x : ndarray, floating

    Returns
    -------
    ndarray, shape and dtype of ``x``
    """
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """RMS normalisation ``weight * x / sqrt(mean(x^2) + eps)`` over the last axis (Zhang & Sennrich 2019).

    Parameters
    ----------
    x : ndarray of shape (..., M)
    weight : ndarray of shape (M,) or None
        None: no weight (a weightless norm).
    eps : float
        Added to the mean square.

    Returns
    -------
    out : ndarray of shape (..., M)
    inv : ndarray of shape (..., 1)
        ``1 / sqrt(mean(x^2) + eps)``, for :func:`rms_norm_backward`.
    """
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return (x * inv if weight is None else weight * (x * inv)), inv


def rms_norm_backward(x, weight, inv, d_out) -> tuple[np.ndarray, np.ndarray]:
    """The exact adjoint of :func:`rms_norm`.

    Parameters
    ----------
    x : ndarray of shape (..., M)
    weight : ndarray of shape (M,) or None
        None: a weightless norm.
    inv : ndarray of shape (..., 1)
        From :func:`rms_norm`.
    d_out : ndarray of shape (..., M)

    Returns
    -------
    d_x : ndarray of shape (..., M)
    d_weight : ndarray of shape (M,), or None for a weightless norm
    """
    xn = x * inv
    if weight is None:
        d_weight, g = None, d_out
    else:
        d_weight = (d_out * xn).reshape(-1, x.shape[-1]).sum(axis=0)
        g = d_out * weight
    d_x = inv * (g - xn * np.mean(g * xn, axis=-1, keepdims=True))
    return d_x, d_weight


def _heads(p):
    """The selective projections per head: ``x_proj`` (H, R + 2S, Dh), ``dt_proj`` (H, Dh, R), its bias (H, Dh).

    ``MambaMixer``'s are one head (views of its arrays); ``ZambaMambaMixer``'s are stored so.
    """
    if "x_proj_weight" in p:
        return p["x_proj_weight"], p["dt_proj_weight"], p["dt_proj_bias"]
    return p["x_proj.weight"][None], p["dt_proj.weight"][None], p["dt_proj.bias"][None]


def _per_head(x, w):
    """``x_h @ w_h.T`` for every head: ``x`` (T, N, H, k), ``w`` (H, j, k) -> (T, N, H, j)."""
    T, N, H, k = x.shape
    y = x.reshape(T * N, H, k).transpose(1, 0, 2) @ w.transpose(0, 2, 1)  # (H, T N, j)
    return y.transpose(1, 0, 2).reshape(T, N, H, w.shape[1])


def _head_outer(d, x):
    """``sum_{t,n} d_h^T x_h`` for every head: ``d`` (T, N, H, j), ``x`` (T, N, H, k) -> (H, j, k)."""
    T, N, H, j = d.shape
    return d.reshape(T * N, H, j).transpose(1, 2, 0) @ x.reshape(T * N, H, x.shape[-1]).transpose(1, 0, 2)


class Selective(NamedTuple):
    """What a Mamba block's SSM reads at every step, from :func:`prepare` (time-major).

    Attributes
    ----------
    z : ndarray of shape (T, N, Di)
        The gate's pre-activation.
    xpad : ndarray of shape (K-1+T, N, Di)
        The convolution's initial window followed by ``x`` (:func:`~hiddenstate.shared.causal_conv.conv_forward`).
    a, da : ndarray of shape (T, N, Di)
        ``silu(conv(x))`` and its derivative.
    r : ndarray of shape (T, N, H, R)
        The step sizes' low-rank input (after its norm).
    B, C : ndarray of shape (T, N, H, S)
        The input and output matrices (after their norms); H = 1 without heads.
    pre, dt : ndarray of shape (T, N, Di)
        ``dt_proj(r)`` and ``dt = softplus(pre)``.
    A : ndarray of shape (Di, S)
        ``-exp(A_log)``.
    raw : tuple of ndarray
        ``r``, ``B``, ``C`` before their norms.
    invs : tuple of ndarray or None
        The norms' ``1 / rms`` (None without norms).
    keep : ndarray of bool, shape (T, N, 1), or None
        The valid steps (None: all).
    rm : ndarray of bool, shape (T, N), or None
        The resets at valid steps.
    origin : ndarray of int, shape (T, N), or None
        Where each row's run began (:func:`~hiddenstate.shared.causal_conv.run_origin`).
    """

    z: np.ndarray
    xpad: np.ndarray
    a: np.ndarray
    da: np.ndarray
    r: np.ndarray
    B: np.ndarray
    C: np.ndarray
    pre: np.ndarray
    dt: np.ndarray
    A: np.ndarray
    raw: tuple
    invs: tuple | None
    keep: np.ndarray | None
    rm: np.ndarray | None
    origin: np.ndarray | None


def prepare(p: dict, u: np.ndarray, conv0: np.ndarray, *, lengths=None, reset=None, norm_eps=None) -> Selective:
    """Everything before the SSM recurrence, for all T steps: ``in_proj``, the convolution, SiLU, ``x_proj``, the norms, ``dt``.

    Parameters
    ----------
    p, u, conv0, lengths, reset, norm_eps
        As in :func:`scan_forward`.

    Returns
    -------
    Selective
        Arrays of ``u``'s dtype, each (T, N, Di)-sized or smaller per step.
    """
    T, N, _ = u.shape
    Wx, Wdt, bdt = _heads(p)  # (H, R + 2S, Dh), (H, Dh, R), (H, Dh)
    H, Dh, R = Wdt.shape
    Di, S = H * Dh, p["A_log"].shape[-1]
    xz = linear(u, p["in_proj.weight"], p.get("in_proj.bias"))  # (T, N, 2 Di)
    x, z = (xz[:, :, 0::2], xz[:, :, 1::2]) if "x_proj_weight" in p else (xz[:, :, :Di], xz[:, :, Di:])
    keep = None if lengths is None else (np.arange(T)[:, None] < lengths[None, :])[:, :, None]  # (T, N, 1)
    rm = None if reset is None else (reset if keep is None else reset & keep[:, :, 0])  # (T, N)
    origin = causal_conv.run_origin(rm)  # (T, N): where each row's run began
    c, xpad = causal_conv.conv_forward(x, p["conv1d.weight"][:, 0, :], p.get("conv1d.bias"), conv0, origin)  # (T, N, Di)
    a, da = silu(c)
    dbc = _per_head(a.reshape(T, N, H, Dh), Wx)  # (T, N, H, R + 2S)
    raw = (dbc[..., :R], dbc[..., R:R + S], dbc[..., R + S:])  # r, B, C before their norms
    invs = None
    if norm_eps is not None:
        (r, B, C), invs = zip(*(rms_norm(v, p.get(k), norm_eps) for v, k in zip(raw, NORMS)))
    else:
        r, B, C = raw  # (T, N, H, R), (T, N, H, S), (T, N, H, S)
    pre = (_per_head(r, Wdt) + bdt).reshape(T, N, Di)
    dt = softplus(pre)
    A = -np.exp(p["A_log"].reshape(Di, S))  # (Di, S)
    return Selective(z, xpad, a, da, r, B, C, pre, dt, A, raw, invs, keep, rm, origin)


def discretize(dt: np.ndarray, a: np.ndarray, A: np.ndarray, B: np.ndarray, out=None) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence's decay ``exp(dt A)`` and input ``dt B a`` of every step (of the steps given).

    Parameters
    ----------
    dt, a : ndarray of shape (T, N, Di)
    A : ndarray of shape (Di, S)
    B : ndarray of shape (T, N, H, S)
    out : pair of ndarray of shape (T, N, Di, S), optional
        Where to write them (a streamed run's scratch); None: new arrays.

    Returns
    -------
    decay, b : ndarray of shape (T, N, Di, S)
    """
    T, N, Di = dt.shape
    H, S = B.shape[2:]
    decay, b = (None, None) if out is None else out
    decay = np.multiply(dt[..., None], A, out=decay)
    with np.errstate(under="ignore"):  # a decay that underflows to 0 is the right limit
        np.exp(decay, out=decay)
    b = np.multiply((dt * a).reshape(T, N, H, Di // H, 1), B[:, :, :, None, :],
                    out=None if b is None else b.reshape(T, N, H, Di // H, S))
    return decay, b.reshape(T, N, Di, S)


def state_readout(hs: np.ndarray, C: np.ndarray, D: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``y_t = C_t . h_t + D a_t`` of every step (of the steps given).

    Parameters
    ----------
    hs : ndarray of shape (T, N, Di, S)
    C : ndarray of shape (T, N, H, S)
    D : ndarray of shape (Di,) or (H, Dh)
    a : ndarray of shape (T, N, Di)

    Returns
    -------
    ndarray of shape (T, N, Di)
    """
    T, N, Di, S = hs.shape
    H = C.shape[2]
    return (hs.reshape(T, N, H, Di // H, S) @ C[..., None]).reshape(T, N, Di) + D.reshape(Di) * a


def readout(p: dict, y: np.ndarray, z: np.ndarray, keep=None):
    """The block's output from the SSM's readout: ``out_t = out_proj(y_t silu(z_t))`` (0 at padded steps).

    Parameters
    ----------
    p : dict of str to ndarray
        ``out_proj.weight`` (M, Di), ``out_proj.bias`` (M,) when the block has it.
    y, z : ndarray of shape (T, N, Di)
    keep : ndarray of bool, shape (T, N, 1), optional
        The valid steps (None: all).

    Returns
    -------
    out : ndarray of shape (T, N, M)
    sz, dsz : ndarray of shape (T, N, Di)
        ``silu(z)`` and its derivative.
    g : ndarray of shape (T, N, Di)
        ``y silu(z)``.
    """
    sz, dsz = silu(z)
    g = y * sz
    out = linear(g, p["out_proj.weight"], p.get("out_proj.bias"))  # (T, N, M)
    if keep is not None:
        out *= keep
    return out, sz, dsz, g


def scan_forward(p: dict, u: np.ndarray, h0: np.ndarray, conv0: np.ndarray, *, lengths=None, reset=None,
                 scan: str = "parallel", norm_eps=None):
    """The Mamba block over all T steps (the equations of the module docstring): the forward kernel.

    Parameters
    ----------
    p : dict of str to ndarray
        The parameters by their ``MambaMixer`` names (:data:`PARAMS`; ``in_proj.bias``,
        ``conv1d.bias``, ``out_proj.bias`` may be absent), or ``ZambaMambaMixer``'s for several
        heads (``x_proj_weight``, ``dt_proj_weight``, ``dt_proj_bias`` instead of the three
        ``x_proj``/``dt_proj`` entries), and the norms' weights :data:`NORMS` when they have any.
    u : ndarray of shape (T, N, M)
        The block's input.
    h0 : ndarray of shape (N, Di, S)
        The initial SSM state.
    conv0 : ndarray of shape (N, Di, K-1)
        The initial convolution state (the K - 1 inputs before step 0, oldest first).
    lengths : ndarray of int, shape (N,), optional
        Valid steps of each row of a right-padded batch, each in [0, T]: past its length a row's
        output is 0 and its states are carried unchanged (the SSM decay is 1 and its input 0 at
        padded steps; the convolution's final state is the K - 1 inputs before the length).
    reset : ndarray of bool, shape (T, N), optional
        True where row ``n`` starts step ``t`` from ``(h0, conv0)`` instead of its previous states
        (no gradient crosses that boundary; ignored at padded steps).
    scan : {"parallel", "sequential"}, default "parallel"
        How the SSM recurrence runs: a chunked Brent-Kung scan or the per-step loop.
    norm_eps : float, optional
        None: no norms. Else the epsilon of the RMS norms of ``r`` (dt before ``dt_proj``),
        ``B`` and ``C`` (weighted by :data:`NORMS` where ``p`` has them).

    Returns
    -------
    out : ndarray of shape (T, N, M)
    final : MambaState
        The states after each row's last valid step (copies of ``h0``, ``conv0`` when T = 0).
    cache : tuple
        Opaque; pass it to :func:`scan_backward` and :func:`recorded`.
    """
    T, N, _ = u.shape
    s = prepare(p, u, conv0, lengths=lengths, reset=reset, norm_eps=norm_eps)
    Di, S = s.A.shape
    decay, b = discretize(s.dt, s.a, s.A, s.B)  # (T, N, Di, S) each
    hs = recurrence_forward(decay.reshape(T, N, Di * S), b.reshape(T, N, Di * S), h0.reshape(N, Di * S), s.keep,
                            None if s.rm is None else s.rm[:, :, None], parallel=scan == "parallel").reshape(T, N, Di, S)
    y = state_readout(hs, s.C, p["D"], s.a)  # (T, N, Di)
    out, sz, dsz, g = readout(p, y, s.z, s.keep)
    K = p["conv1d.weight"].shape[-1]
    final = MambaState(hs[-1].copy() if T else h0.copy(), causal_conv.final_window(s.xpad, K, lengths, s.origin))
    cache = (p, u, h0, s.z, s.xpad, s.da, s.a, s.r, s.B, s.C, s.pre, s.dt, s.A, decay, hs, y, sz, dsz, g, scan, s.keep,
             lengths, s.rm, s.origin, s.raw, s.invs)
    return out, final, cache


def scan_backward(cache, d_out, d_final):
    """Exact backward pass through :func:`scan_forward` (the backward kernel).

    The output's gradient runs back through the gate and the readout to ``dL/dh_t``; the SSM
    adjoint ``g_t = dL/dh_t + exp(dt_{t+1} A) g_{t+1}`` runs through the same scan backwards
    in time (:func:`hiddenstate.shared.scan.recurrence_backward`); then through the selective
    parameters ``dt``, ``B``, ``C``, the convolution and the input projection.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.
    d_out : ndarray of shape (T, N, M) or None
        Gradient of the loss with respect to ``out`` (None: zeros).
    d_final : pair of ndarray or None
        Gradients with respect to the final states, ``(d_ssm (N, Di, S), d_conv (N, Di, K-1))``,
        either part None.

    Returns
    -------
    grads : dict of str to ndarray
        Same keys and shapes as the parameters.
    d_u : ndarray of shape (T, N, M)
    d_state : MambaState
        Gradients with respect to ``h0`` and ``conv0``.
    """
    (p, u, h0, z, xpad, da, a, r, B, C, pre, dt, A, decay, hs, y, sz, dsz, g, scan, keep, lengths, rm, origin,
     raw, invs) = cache
    T, N, M = u.shape
    Di, S = A.shape
    Wx, Wdt, _ = _heads(p)
    H, Dh = Wdt.shape[:2]
    K = p["conv1d.weight"].shape[-1]
    d_h_T, d_conv_T = (None, None) if d_final is None else d_final
    d_out = np.zeros((T, N, M), dtype=u.dtype) if d_out is None else d_out
    if keep is not None:
        d_out = d_out * keep  # padded outputs are constants (0)
    grads = {}
    grads["out_proj.weight"] = d_out.reshape(-1, M).T @ g.reshape(-1, Di)
    if p.get("out_proj.bias") is not None:
        grads["out_proj.bias"] = d_out.reshape(-1, M).sum(axis=0)
    d_g = d_out @ p["out_proj.weight"]  # (T, N, Di)
    d_y = d_g * sz
    d_z = d_g * y * dsz
    d_hs = (d_y.reshape(T, N, H, Dh, 1) * C[:, :, :, None, :]).reshape(T, N, Di, S)
    d_C = (d_y.reshape(T, N, H, 1, Dh) @ hs.reshape(T, N, H, Dh, S))[..., 0, :]  # (T, N, H, S)
    grads["D"] = (d_y * a).reshape(-1, Di).sum(axis=0).reshape(p["D"].shape)
    d_a = d_y * p["D"].reshape(Di)
    d_dec, d_b, d_h0 = recurrence_backward(decay.reshape(T, N, Di * S), hs.reshape(T, N, Di * S), h0.reshape(N, Di * S),
                                           keep, None if rm is None else rm[:, :, None], d_hs.reshape(T, N, Di * S),
                                           None if d_h_T is None else d_h_T.reshape(N, Di * S), parallel=scan == "parallel")
    d_dec = d_dec.reshape(T, N, Di, S) * decay  # dL/d(dt A)
    d_b = d_b.reshape(T, N, Di, S)
    d_dt = np.einsum("tnds,ds->tnd", d_dec, A)  # (T, N, Di): sum_s d(dt A) A
    grads["A_log"] = ((d_dec * dt[..., None]).reshape(-1, Di, S).sum(axis=0) * A).reshape(p["A_log"].shape)  # A' = A
    d_b = d_b.reshape(T, N, H, Dh, S)
    dbB = (d_b @ B[..., None]).reshape(T, N, Di)  # sum_s d_b B
    d_dt += dbB * a
    d_a += dbB * dt
    d_B = ((dt * a).reshape(T, N, H, 1, Dh) @ d_b)[..., 0, :]  # (T, N, H, S)
    d_pre = (d_dt * sigmoid(pre)).reshape(T, N, H, Dh)
    g_dt, g_bias = _head_outer(d_pre, r), d_pre.reshape(-1, H, Dh).sum(axis=0)  # (H, Dh, R), (H, Dh)
    d_rbc = [_per_head(d_pre, Wdt.transpose(0, 2, 1)), d_B, d_C]  # dL/d(r, B, C) after their norms
    if invs is not None:
        for i, k in enumerate(NORMS):
            d_rbc[i], d_w = rms_norm_backward(raw[i], p.get(k), invs[i], d_rbc[i])
            if k in p:
                grads[k] = d_w
    d_dbc = np.concatenate(d_rbc, axis=-1)  # (T, N, H, R + 2S)
    g_x = _head_outer(d_dbc, a.reshape(T, N, H, Dh))  # (H, R + 2S, Dh)
    if "x_proj_weight" in p:
        grads["x_proj_weight"], grads["dt_proj_weight"], grads["dt_proj_bias"] = g_x, g_dt, g_bias
    else:
        grads["x_proj.weight"], grads["dt_proj.weight"], grads["dt_proj.bias"] = g_x[0], g_dt[0], g_bias[0]
    d_a += _per_head(d_dbc, Wx.transpose(0, 2, 1)).reshape(T, N, Di)
    d_c = d_a * da  # (T, N, Di)
    d_w, d_bias, d_xpad = causal_conv.conv_backward(xpad, p["conv1d.weight"][:, 0, :], d_c, "conv1d.bias" in p, origin)
    if d_bias is not None:
        grads["conv1d.bias"] = d_bias
    grads["conv1d.weight"] = d_w[:, None, :]
    if d_conv_T is not None:
        causal_conv.final_window_backward(d_xpad, K, lengths, d_conv_T, origin)
    if "x_proj_weight" in p:  # x and z interleaved
        d_xz = np.stack([d_xpad[K - 1:], d_z], axis=-1).reshape(T, N, 2 * Di)
    else:
        d_xz = np.concatenate([d_xpad[K - 1:], d_z], axis=-1)  # (T, N, 2 Di)
    grads["in_proj.weight"] = d_xz.reshape(-1, 2 * Di).T @ u.reshape(-1, M)
    if p.get("in_proj.bias") is not None:
        grads["in_proj.bias"] = d_xz.reshape(-1, 2 * Di).sum(axis=0)
    d_u = d_xz @ p["in_proj.weight"]
    grads = {k: grads[k] for k in p}
    d_state = MambaState(d_h0.reshape(N, Di, S), np.ascontiguousarray(d_xpad[:K - 1].transpose(1, 2, 0)))
    return grads, d_u, d_state


def recorded(cache) -> MambaRecord:
    """Every step's states and selective parameters from a forward cache.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    MambaRecord
        Time-major arrays (see :class:`MambaRecord`).
    """
    (p, u, h0, z, xpad, da, a, r, B, C, pre, dt, A, decay, hs, y, sz, dsz, g, scan, keep, lengths, rm, origin,
     _, _) = cache
    T, N = u.shape[:2]
    if "x_proj_weight" not in p:  # one head: (T, N, S)
        B, C = B[:, :, 0], C[:, :, 0]
    conv = causal_conv.windows(xpad, xpad.shape[0] - T + 1, lengths, origin)  # (T, N, Di, K-1)
    return MambaRecord(ssm=hs, conv=conv, dt=dt, decay=decay, B=B, C=C, x=a, gate=sz, y=y, z=z)
