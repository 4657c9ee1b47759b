"""Mamba-2's block (Dao & Gu 2024, SSD: a scalar decay per head): scan kernels, forward and exact backward side by side.

The block maps a sequence ``u`` (T, N, M) (M = ``d_model``) to a sequence of the same shape
through a state of its own, in the parameter names and layouts of transformers' ``Mamba2Mixer``
(Di = ``expand * d_model`` inner channels = H heads of P = ``head_dim`` channels, G =
``n_groups`` groups of heads sharing B and C, S = ``d_state``, K = ``d_conv``, Dc = Di + 2 G S
the channels of the convolution)::

    z_t, xBC_t, r_t = split(in_proj(u_t))               in_proj.weight (Di + Dc + H, M): blocks z, xBC, dt
    c_t       = sum_k w[:, k] * xBC_{t-K+1+k} + b_conv  causal depthwise conv, conv1d.weight (Dc, 1, K)
    x_t, B_t, C_t = split(silu(c_t))                    x (H, P), B and C (G, S); head h reads group h // (H/G)
    dt_t      = softplus(r_t + dt_bias)                 dt_bias (H,): one step size per head
    A         = -exp(A_log)                             A_log (H,): one decay rate per head (the "scalar" of SSD)
    h_t       = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T    state (N, H, P, S): a scalar decay per (row, head)
    y_t       = h_t C_t + D x_t                         D (H,)
    g_t       = y_t * silu(z_t)                         the gate before the norm (``norm_before_gate=False``)
    n_t       = norm.weight * g_t / rms_G(g_t)          RMS over each of the G groups of Di/G channels
    out_t     = out_proj(n_t)                           out_proj.weight (M, Di)

with ``rms_G(g) = sqrt(mean(g^2) + eps)`` taken per group (transformers' ``MambaRMSNormGated``).

The variants the hybrid families' Mamba-2 mixers use (Bamba, NemotronH, Zamba2, Falcon-H1,
GraniteMoeHybrid), each a keyword of :func:`scan_forward` whose default is the plain block:

* ``dt_limit=(lo, hi)`` (``time_step_limit``): ``dt_t = clamp(softplus(r_t + dt_bias), lo, hi)``;
  its gradient passes where ``lo <= softplus(.) <= hi`` and is zero outside (as ``torch.clamp``).
* ``mup`` (W,) and ``in_multiplier`` (Falcon-H1's muP ``mup_vector`` built from
  ``ssm_multipliers``, and ``ssm_in_multiplier``): ``zxr_t = (in_proj(in_multiplier * u_t)) * mup``,
  one constant per output of ``in_proj`` (its z, x, B, C and dt blocks).
* ``norm_before_gate=True``: ``n_t = (norm.weight * y_t / rms_G(y_t)) * silu(z_t)`` (the norm
  reads ``y`` and the gate comes after it); no ``norm.weight`` in ``p``: ``n_t = y_t * silu(z_t)``
  (Falcon-H1's ``mamba_rms_norm=False``).
Where Mamba-1's decay ``exp(dt A)`` is a matrix (Di, S) per step, Mamba-2's is one number per
head, which is what lets the reference kernels compute a chunk as a masked matrix product (the
"state space duality" of the paper); here the recurrence is evaluated as a scan. The block has
*two* states: the SSM state ``h`` (N, H, P, S) and the convolution's state, the last K - 1
values of ``xBC`` it has read (N, Dc, K-1), oldest first (transformers' cache keeps K, the
oldest of which the next step never reads). Both are inputs (:func:`scan_forward`'s ``h0``,
``conv0``) with exact gradients, and both final states take a gradient.

The recurrence is linear in ``h`` with a decay in (0, 1]: it runs through
:mod:`hiddenstate.shared.scan` with the decay broadcast over (P, S), either as the per-step loop
(``scan="sequential"``) or as the chunked Brent-Kung scan (``"parallel"``), whose adjoint is the
same scan backwards in time; or (``scan="ssd"``) in SSD's chunked matrix form
(:mod:`hiddenstate.shared.ssd`: within a chunk a masked (Q, Q) matrix ``L o (C B^T)`` applied to
``dt x``, between chunks the state), which forms no per-step state, with its own exact adjoint.
Everything else is per step and runs as whole-sequence matrix products.

Kernel contract
---------------
``scan_forward(p, u, h0, conv0, *, eps, n_groups, scan="parallel", dt_limit=(0, inf), norm_before_gate=False,
mup=None, in_multiplier=1.0) -> (out, (h_T, conv_T), cache)``
    ``p`` the parameters by name (:data:`PARAMS`), ``u`` (T, N, M), ``h0`` (N, H, P, S),
    ``conv0`` (N, Dc, K-1). Nothing is validated; every array has the dtype of ``u``.
``scan_backward(cache, d_out, d_final) -> (grads, d_u, (d_h0, d_conv0))``
    ``d_out`` (T, N, M) or None, ``d_final`` a pair ``(d_h_T, d_conv_T)`` (either part None)
    or None; ``grads`` has the keys of ``p``.
``recorded(cache) -> Mamba2Record``
    Every step's states and the selective parameters.

References
----------
T. Dao, A. Gu, "Transformers are SSMs: Generalized models and efficient algorithms through
structured state space duality", arXiv:2405.21060, 2024.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from hiddenstate.classic.cells.activations import silu
from hiddenstate.core.functional import sigmoid
from hiddenstate.kinds.ssm.mamba_kernel import linear
from hiddenstate.shared import causal_conv
from hiddenstate.shared.scan import recurrence_backward, recurrence_forward
from hiddenstate.shared.ssd import ssd_backward, ssd_forward
from hiddenstate.state import MambaState

__all__ = ["PARAMS", "Mamba2Record", "MambaState", "Selective", "gated_rms_norm", "gated_rms_norm_backward", "prepare",
           "readout", "recorded", "scan_backward", "scan_forward", "ssm_input", "state_readout"]

#: The block's parameters in transformers' ``Mamba2Mixer`` names (the three biases and ``norm.weight`` are optional).
PARAMS = ("in_proj.weight", "in_proj.bias", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D", "norm.weight",
          "out_proj.weight", "out_proj.bias")


class Mamba2Record(NamedTuple):
    """Every step of a Mamba-2 block's forward pass (time-major), from :func:`recorded`.

    Attributes
    ----------
    ssm : ndarray of shape (T, N, H, P, S)
        The SSM state after each step.
    conv : ndarray of shape (T, N, Dc, K-1)
        The convolution's state after each step.
    dt : ndarray of shape (T, N, H)
        The step size ``softplus(r_t + dt_bias)`` of every head.
    decay : ndarray of shape (T, N, H)
        ``exp(dt_t A)``: how much of its state each head keeps (one number per head).
    B, C : ndarray of shape (T, N, G, S)
        The input and output matrices of every group.
    x : ndarray of shape (T, N, H, P)
        What the SSM reads (after the convolution and SiLU).
    y : ndarray of shape (T, N, H, P)
        ``h_t C_t + D x_t``, before the gate.
    gate : ndarray of shape (T, N, Di)
        ``silu(z_t)``.
    z : ndarray of shape (T, N, Di) or None, default None
        The gate's pre-activation ``z_t`` (:func:`recorded` fills it; the output gate's sigmoid
        part ``sigmoid(z)`` is what the inspection tools read).
    """

    ssm: np.ndarray
    conv: np.ndarray
    dt: np.ndarray
    decay: np.ndarray
    B: np.ndarray
    C: np.ndarray
    x: np.ndarray
    y: np.ndarray
    gate: np.ndarray
    z: np.ndarray | None = None


def gated_rms_norm(g: np.ndarray, weight: np.ndarray, eps: float, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``weight * g / sqrt(mean(g^2) + eps)`` with the mean over each of ``n_groups`` equal groups of the last axis.

    Parameters
    ----------
    g : ndarray of shape (..., Di)
        The gated output ``y * silu(z)``.
    weight : ndarray of shape (Di,)
    eps : float
        Added to each group's mean square.
    n_groups : int
        G; Di must be a multiple of it.

    Returns
    -------
    out : ndarray of shape (..., Di)
    inv : ndarray of shape (..., G, 1)
        ``1 / sqrt(mean(g^2) + eps)`` per group, for :func:`gated_rms_norm_backward`.
    """
    gg = g.reshape(g.shape[:-1] + (n_groups, g.shape[-1] // n_groups))  # (..., G, Di/G)
    inv = 1.0 / np.sqrt(np.mean(gg * gg, axis=-1, keepdims=True) + eps)
    return weight * (gg * inv).reshape(g.shape), inv


def gated_rms_norm_backward(g, weight, inv, d_out) -> tuple[np.ndarray, np.ndarray]:
    """The exact adjoint of :func:`gated_rms_norm`.

    Parameters
    ----------
    g : ndarray of shape (..., Di)
    weight : ndarray of shape (Di,)
    inv : ndarray of shape (..., G, 1)
        From :func:`gated_rms_norm`.
    d_out : ndarray of shape (..., Di)

    Returns
    -------
    d_g : ndarray of shape (..., Di)
    d_weight : ndarray of shape (Di,)
    """
    G = inv.shape[-2]
    xn = g.reshape(g.shape[:-1] + (G, g.shape[-1] // G)) * inv  # (..., G, Di/G)
    d_weight = (d_out * xn.reshape(g.shape)).reshape(-1, g.shape[-1]).sum(axis=0)
    dn = (d_out * weight).reshape(xn.shape)
    d_g = inv * (dn - xn * np.mean(dn * xn, axis=-1, keepdims=True))
    return d_g.reshape(g.shape), d_weight


def _sizes(p, n_groups):
    """(H, P, G, S, K, Di, Dc) from the parameters' shapes."""
    H = p["A_log"].shape[0]
    Di = p["out_proj.weight"].shape[1]
    Dc, _, K = p["conv1d.weight"].shape
    S = (Dc - Di) // (2 * n_groups)
    return H, Di // H, n_groups, S, K, Di, Dc


class Selective(NamedTuple):
    """What a Mamba-2 block's SSM reads at every step, from :func:`prepare` (time-major).

    Attributes
    ----------
    z : ndarray of shape (T, N, Di)
        The gate's pre-activation.
    xpad : ndarray of shape (K-1+T, N, Dc)
        The convolution's initial window followed by ``xBC``.
    a, da : ndarray of shape (T, N, Dc)
        ``silu(conv(xBC))`` and its derivative.
    x : ndarray of shape (T, N, H, P)
    Bh, Ch : ndarray of shape (T, N, H, S)
        Every head's B and C (its group's).
    pre, dt : ndarray of shape (T, N, H)
        ``r + dt_bias`` and the (clamped) step size.
    passes : ndarray of bool, shape (T, N, H), or None
        Where the clamp of ``dt`` passes the gradient (None: no clamp).
    A : ndarray of shape (H,)
        ``-exp(A_log)``.
    decay : ndarray of shape (T, N, H)
        ``exp(dt A)``.
    """

    z: np.ndarray
    xpad: np.ndarray
    a: np.ndarray
    da: np.ndarray
    x: np.ndarray
    Bh: np.ndarray
    Ch: np.ndarray
    pre: np.ndarray
    dt: np.ndarray
    passes: np.ndarray | None
    A: np.ndarray
    decay: np.ndarray


def prepare(p: dict, u: np.ndarray, conv0: np.ndarray, *, n_groups: int, dt_limit=(0.0, math.inf), mup=None,
            in_multiplier: float = 1.0) -> Selective:
    """Everything before the SSM recurrence, for all T steps: ``in_proj``, the convolution, SiLU, ``dt`` and the decay.

    Parameters
    ----------
    p, u, conv0, n_groups, dt_limit, mup, in_multiplier
        As in :func:`scan_forward`.

    Returns
    -------
    Selective
        Arrays of ``u``'s dtype, each (T, N, Dc)-sized or smaller per step.
    """
    T, N, _ = u.shape
    H, P, G, S, K, Di, Dc = _sizes(p, n_groups)
    zxr = linear(u if in_multiplier == 1.0 else u * in_multiplier, p["in_proj.weight"], p.get("in_proj.bias"))
    if mup is not None:
        zxr *= mup
    z, xbc, r = zxr[:, :, :Di], zxr[:, :, Di:Di + Dc], zxr[:, :, Di + Dc:]
    c, xpad = causal_conv.conv_forward(xbc, p["conv1d.weight"][:, 0, :], p.get("conv1d.bias"), conv0)  # (T, N, Dc)
    a, da = silu(c)  # (T, N, Dc)
    x = a[:, :, :Di].reshape(T, N, H, P)
    B = a[:, :, Di:Di + G * S].reshape(T, N, G, S)
    C = a[:, :, Di + G * S:].reshape(T, N, G, S)
    Bh, Ch = np.repeat(B, H // G, axis=2), np.repeat(C, H // G, axis=2)  # (T, N, H, S)
    pre = r + p["dt_bias"]  # (T, N, H)
    dt = np.logaddexp(0.0, pre)  # softplus
    lo, hi = dt_limit
    passes = None  # where the clamp passes the gradient (None: everywhere)
    if lo > 0.0 or hi < math.inf:
        passes = (dt >= lo) & (dt <= hi)
        dt = np.clip(dt, lo, hi)
    A = -np.exp(p["A_log"])  # (H,)
    with np.errstate(under="ignore"):  # a decay that underflows to 0 is the right limit
        decay = np.exp(dt * A)  # (T, N, H)
    return Selective(z, xpad, a, da, x, Bh, Ch, pre, dt, passes, A, decay)


def ssm_input(dt: np.ndarray, x: np.ndarray, Bh: np.ndarray, out=None) -> np.ndarray:
    """The recurrence's input ``dt x B^T`` of every step (of the steps given).

    Parameters
    ----------
    dt : ndarray of shape (T, N, H)
    x : ndarray of shape (T, N, H, P)
    Bh : ndarray of shape (T, N, H, S)
    out : ndarray of shape (T, N, H, P, S), optional
        Where to write it (a streamed run's scratch); None: a new array.

    Returns
    -------
    ndarray of shape (T, N, H, P, S)
    """
    return np.multiply((dt[..., None] * x)[..., None], Bh[:, :, :, None, :], out=out)


def state_readout(hs: np.ndarray, Ch: np.ndarray, D: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``y_t = h_t C_t + D x_t`` of every step (of the steps given).

    Parameters
    ----------
    hs : ndarray of shape (T, N, H, P, S)
    Ch : ndarray of shape (T, N, H, S)
    D : ndarray of shape (H,)
    x : ndarray of shape (T, N, H, P)

    Returns
    -------
    ndarray of shape (T, N, H, P)
    """
    return (hs @ Ch[..., None])[..., 0] + D[:, None] * x


def readout(p: dict, y: np.ndarray, z: np.ndarray, *, eps: float, n_groups: int, norm_before_gate: bool = False):
    """The block's output from the SSM's readout: the gate, the gated norm (its variants), ``out_proj``.

    Parameters
    ----------
    p : dict of str to ndarray
        ``norm.weight`` (Di,) (absent: no norm), ``out_proj.weight`` (M, Di), ``out_proj.bias`` (M,).
    y : ndarray of shape (T, N, H, P)
    z : ndarray of shape (T, N, Di)
    eps, n_groups, norm_before_gate
        As in :func:`scan_forward`.

    Returns
    -------
    out : ndarray of shape (T, N, M)
    sz, dsz : ndarray of shape (T, N, Di)
        ``silu(z)`` and its derivative.
    g : ndarray of shape (T, N, Di)
        What the norm reads (``y silu(z)``, or ``y`` with the norm before the gate).
    nrm : ndarray of shape (T, N, Di)
        What ``out_proj`` reads.
    inv : ndarray of shape (T, N, G, 1) or None
        The norm's ``1 / rms`` (None without a norm).
    nb : ndarray of shape (T, N, Di) or None
        The norm's output before the gate (``norm_before_gate``; else None).
    """
    T, N, H, P = y.shape
    sz, dsz = silu(z)
    yf, inv, nb = y.reshape(T, N, H * P), None, None
    if "norm.weight" not in p:  # no norm: the gated output goes to out_proj
        g = nrm = yf * sz
    elif norm_before_gate:  # the norm reads y; the gate multiplies its output
        g = yf
        nb, inv = gated_rms_norm(yf, p["norm.weight"], eps, n_groups)
        nrm = nb * sz
    else:
        g = yf * sz  # (T, N, Di)
        nrm, inv = gated_rms_norm(g, p["norm.weight"], eps, n_groups)
    out = linear(nrm, p["out_proj.weight"], p.get("out_proj.bias"))  # (T, N, M)
    return out, sz, dsz, g, nrm, inv, nb


def scan_forward(p: dict, u: np.ndarray, h0: np.ndarray, conv0: np.ndarray, *, eps: float, n_groups: int,
                 scan: str = "parallel", dt_limit: tuple[float, float] = (0.0, math.inf), norm_before_gate: bool = False,
                 mup: np.ndarray | None = None, in_multiplier: float = 1.0):
    """The Mamba-2 block over all T steps (the equations of the module docstring): the forward kernel.

    Parameters
    ----------
    p : dict of str to ndarray
        The parameters by their ``Mamba2Mixer`` names (:data:`PARAMS`; ``in_proj.bias``,
        ``conv1d.bias``, ``out_proj.bias`` may be absent; without ``norm.weight`` there is no
        norm, ``n_t = y_t * silu(z_t)``).
    u : ndarray of shape (T, N, M)
        The block's input.
    h0 : ndarray of shape (N, H, P, S)
        The initial SSM state.
    conv0 : ndarray of shape (N, Dc, K-1)
        The initial convolution state (the K - 1 ``xBC`` inputs before step 0, oldest first).
    eps : float
        The gated norm's epsilon.
    n_groups : int
        G, the groups of heads that share B and C (and the groups of the norm).
    scan : {"parallel", "sequential", "ssd"}, default "parallel"
        How the SSM recurrence runs: a chunked Brent-Kung scan, the per-step loop, or SSD's
        chunked matrix form.
    dt_limit : pair of float, default (0, inf)
        ``(lo, hi)``: the step size is clamped to ``[lo, hi]`` after the softplus
        (transformers' ``time_step_limit``); (0, inf) clamps nothing.
    norm_before_gate : bool, default False
        The norm reads ``y`` and the gate multiplies its output (Falcon-H1's
        ``mamba_norm_before_gate``) instead of the norm reading ``y * silu(z)``.
    mup : ndarray of shape (Di + Dc + H,), optional
        Constants multiplying ``in_proj``'s output (Falcon-H1's ``mup_vector``); None: ones.
    in_multiplier : float, default 1.0
        Multiplies the input before ``in_proj`` (Falcon-H1's ``ssm_in_multiplier``).

    Returns
    -------
    out : ndarray of shape (T, N, M)
    final : MambaState
        The states after the last step, ``ssm`` (N, H, P, S) and ``conv`` (N, Dc, K-1) (copies
        of ``h0``, ``conv0`` when T = 0).
    cache : tuple
        Opaque; pass it to :func:`scan_backward` and :func:`recorded`.
    """
    T, N, _ = u.shape
    K = p["conv1d.weight"].shape[-1]
    s = prepare(p, u, conv0, n_groups=n_groups, dt_limit=dt_limit, mup=mup, in_multiplier=in_multiplier)
    if scan == "ssd":  # the chunked matrix form: y without forming every state
        hs = None
        y_ssm, h_T, starts = ssd_forward(s.dt * s.A, s.dt[..., None] * s.x, s.Bh, s.Ch, h0)
        y = y_ssm + p["D"][:, None] * s.x  # (T, N, H, P)
    else:
        hs = recurrence_forward(s.decay[..., None, None], ssm_input(s.dt, s.x, s.Bh), h0,
                                parallel=scan == "parallel")  # (T, N, H, P, S)
        y, h_T, starts = state_readout(hs, s.Ch, p["D"], s.x), (hs[-1].copy() if T else h0.copy()), None
    out, sz, dsz, g, nrm, inv, nb = readout(p, y, s.z, eps=eps, n_groups=n_groups, norm_before_gate=norm_before_gate)
    final = MambaState(h_T, causal_conv.final_window(s.xpad, K))
    cache = (p, u, h0, n_groups, s.z, s.xpad, s.a, s.da, s.x, s.Bh, s.Ch, s.pre, s.dt, s.A, s.decay, (hs, starts), y,
             sz, dsz, g, nrm, inv, scan, (s.passes, nb, mup, in_multiplier))
    return out, final, cache


def scan_backward(cache, d_out, d_final):
    """Exact backward pass through :func:`scan_forward` (the backward kernel).

    The output's gradient runs back through the projection, the gated norm and the readout to
    ``dL/dh_t``; the SSM adjoint ``g_t = dL/dh_t + exp(dt_{t+1} A) g_{t+1}`` runs through the same
    scan backwards in time (:func:`hiddenstate.shared.scan.recurrence_backward`); then through
    ``dt``, ``B``, ``C`` (summed over the heads of each group), the convolution and the input
    projection. The variants' adjoints: the clamp of ``dt`` passes its gradient where it did not
    cut; the muP constants and ``in_multiplier`` scale the gradients of ``in_proj``'s output and
    of its input; the norm before the gate is the same norm's adjoint read at ``y``.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.
    d_out : ndarray of shape (T, N, M) or None
        Gradient of the loss with respect to ``out`` (None: zeros).
    d_final : pair of ndarray or None
        Gradients with respect to the final states, ``(d_ssm (N, H, P, S), d_conv (N, Dc, K-1))``,
        either part None.

    Returns
    -------
    grads : dict of str to ndarray
        Same keys and shapes as the parameters.
    d_u : ndarray of shape (T, N, M)
    d_state : MambaState
        Gradients with respect to ``h0`` (N, H, P, S) and ``conv0`` (N, Dc, K-1).
    """
    p, u, h0, G, z, xpad, a, da, x, Bh, Ch, pre, dt, A, decay, (hs, starts), y, sz, dsz, g, nrm, inv, scan, var = cache
    passes, nb, mup, in_multiplier = var
    T, N, M = u.shape
    H, P, G, S, K, Di, Dc = _sizes(p, G)
    d_h_T, d_conv_T = (None, None) if d_final is None else d_final
    d_out = np.zeros((T, N, M), dtype=u.dtype) if d_out is None else d_out
    grads = {}
    grads["out_proj.weight"] = d_out.reshape(-1, M).T @ nrm.reshape(-1, Di)
    if p.get("out_proj.bias") is not None:
        grads["out_proj.bias"] = d_out.reshape(-1, M).sum(axis=0)
    d_n = d_out @ p["out_proj.weight"]  # (T, N, Di)
    yf = y.reshape(T, N, Di)
    if "norm.weight" not in p:
        d_y, d_z = (d_n * sz).reshape(T, N, H, P), d_n * yf * dsz
    elif nb is not None:  # the norm before the gate
        d_z = d_n * nb * dsz
        d_yf, grads["norm.weight"] = gated_rms_norm_backward(yf, p["norm.weight"], inv, d_n * sz)
        d_y = d_yf.reshape(T, N, H, P)
    else:
        d_g, grads["norm.weight"] = gated_rms_norm_backward(g, p["norm.weight"], inv, d_n)
        d_y, d_z = (d_g * sz).reshape(T, N, H, P), d_g * yf * dsz
    grads["D"] = (d_y * x).sum(axis=(0, 1, 3))
    d_x = d_y * p["D"][:, None]  # (T, N, H, P)
    if scan == "ssd":
        d_lin, d_u_ssm, d_Bh, d_Ch, d_h0 = ssd_backward(dt * A, dt[..., None] * x, Bh, Ch, starts, d_y, d_h_T)
    else:
        d_hs = d_y[..., None] * Ch[:, :, :, None, :]  # (T, N, H, P, S)
        d_Ch = (d_y[:, :, :, None, :] @ hs)[:, :, :, 0, :]  # (T, N, H, S): sum_p d_y h
        d_dec, d_b, d_h0 = recurrence_backward(decay[..., None, None], hs, h0, None, None, d_hs, d_h_T,
                                               parallel=scan == "parallel")
        d_lin = d_dec.sum(axis=(3, 4)) * decay  # (T, N, H): dL/d(dt A)
        d_u_ssm = (d_b @ Bh[..., None])[..., 0]  # (T, N, H, P): dL/d(dt x) = sum_s d_b B
        d_Bh = ((dt[..., None] * x)[:, :, :, None, :] @ d_b)[:, :, :, 0, :]  # (T, N, H, S)
    d_dt = d_lin * A
    grads["A_log"] = (d_lin * dt).sum(axis=(0, 1)) * A  # dA/dA_log = A
    d_dt += (d_u_ssm * x).sum(axis=-1)
    d_x += d_u_ssm * dt[..., None]
    if passes is not None:  # the clamp: no gradient where it cut dt
        d_dt *= passes
    d_pre = d_dt * sigmoid(pre)  # (T, N, H)
    grads["dt_bias"] = d_pre.sum(axis=(0, 1))
    d_B = d_Bh.reshape(T, N, G, H // G, S).sum(axis=3)  # the heads of a group share its B
    d_C = d_Ch.reshape(T, N, G, H // G, S).sum(axis=3)
    d_c = np.concatenate([d_x.reshape(T, N, Di), d_B.reshape(T, N, G * S), d_C.reshape(T, N, G * S)], axis=-1) * da
    d_w, d_bias, d_xpad = causal_conv.conv_backward(xpad, p["conv1d.weight"][:, 0, :], d_c, "conv1d.bias" in p)
    if d_bias is not None:
        grads["conv1d.bias"] = d_bias
    grads["conv1d.weight"] = d_w[:, None, :]
    if d_conv_T is not None:
        causal_conv.final_window_backward(d_xpad, K, None, d_conv_T)
    d_zxr = np.concatenate([d_z, d_xpad[K - 1:], d_pre], axis=-1)  # (T, N, Di + Dc + H)
    if mup is not None:
        d_zxr *= mup  # now the gradient of in_proj's own output
    W = d_zxr.shape[-1]
    us = u if in_multiplier == 1.0 else u * in_multiplier
    grads["in_proj.weight"] = d_zxr.reshape(-1, W).T @ us.reshape(-1, M)
    if p.get("in_proj.bias") is not None:
        grads["in_proj.bias"] = d_zxr.reshape(-1, W).sum(axis=0)
    d_u = d_zxr @ p["in_proj.weight"]
    if in_multiplier != 1.0:
        d_u *= in_multiplier
    grads = {k: grads[k] for k in p}
    return grads, d_u, MambaState(d_h0, np.ascontiguousarray(d_xpad[:K - 1].transpose(1, 2, 0)))


def recorded(cache) -> Mamba2Record:
    """Every step's states and selective parameters from a forward cache.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    Mamba2Record
        Time-major arrays (see :class:`Mamba2Record`).
    """
    p, u, h0, G, z, xpad, a, da, x, Bh, Ch, pre, dt, A, decay, (hs, starts), y, sz, dsz, g, nrm, inv, scan, _ = cache
    T, N = u.shape[:2]
    conv = causal_conv.windows(xpad, xpad.shape[0] - T + 1)  # (T, N, Dc, K-1)
    H = A.shape[0]
    if hs is None:  # the SSD form formed no states: the scan gives them
        hs = recurrence_forward(decay[..., None, None], ssm_input(dt, x, Bh), h0)  # (T, N, H, P, S)
    return Mamba2Record(ssm=hs, conv=conv, dt=dt, decay=decay, B=Bh[:, :, ::H // G], C=Ch[:, :, ::H // G], x=x, y=y,
                        gate=sz, z=z)
