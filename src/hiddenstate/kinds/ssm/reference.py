"""The reference form of the Mamba block, in array-API functions only: one step of Algorithm 2 forward, its exact adjoint.

:func:`step` is one step of the equations of :mod:`hiddenstate.kinds.ssm.mamba_kernel` on arrays of any
array-API namespace ``xp`` (``xp.matmul``, ``xp.exp``, ``xp.sum``, ``xp.where``, slicing), and
:func:`step_backward` its exact adjoint; :func:`scan` and :func:`scan_backward` loop them over
time with padding (``keep``) and resets exactly as the kernels' whole-sequence products and scans
compute them (the tests hold the two equal to float64 round-off, and differentiate :func:`run`
with torch autograd). It is also the array-API path of :class:`hiddenstate.Mamba`: a torch tensor
or a CuPy array given to ``Mamba.forward`` is computed by :func:`forward` here, in its own library
and on its device, and ``Mamba.backward`` on that call's cache by :func:`backward` (every result,
the parameters' gradients included, an array of the input's library, device and the layer's dtype).

At step t a row reads its initial states ``(h0, conv0)`` where ``reset[t]`` (else the previous
ones); past its length (``keep[t]`` False) its output is 0 and both states are carried unchanged.
The variants of the kernels are here too: ``norm_eps`` (the RMS norms of dt, B, C, weighted by
``p``'s :data:`~hiddenstate.core.params.MAMBA_NORMS` when it has them) and ``ZambaMambaMixer``'s heads
(when ``p`` has ``x_proj_weight``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from hiddenstate.core.params import MAMBA_NORMS as NORMS
from hiddenstate.core.params import check_params
from hiddenstate.core.validation import bool_mask, shape_str
from hiddenstate.core.validation import lengths as check_lengths
from hiddenstate.state import MambaState
from hiddenstate.xp.arrays import converted, float_input, is_foreign, namespace, state_input, to_namespace, to_numpy
from hiddenstate.xp.cells import sigmoid, softplus

__all__ = ["MambaXPCache", "backward", "forward", "run", "scan", "scan_backward", "step", "step_backward"]


def _silu(xp, c):
    """``silu(c)`` and its derivative ``s (1 + c (1 - s))``, ``s = sigmoid(c)``."""
    s = sigmoid(xp, c)
    return c * s, s * (1.0 + c * (1.0 - s))


def _t(xp, w):
    return xp.matrix_transpose(w)


def _heads(p):
    """``x_proj`` (H, R + 2S, Dh), ``dt_proj`` (H, Dh, R) and its bias (H, Dh): one head for ``MambaMixer``'s."""
    if "x_proj_weight" in p:
        return p["x_proj_weight"], p["dt_proj_weight"], p["dt_proj_bias"]
    return p["x_proj.weight"][None, ...], p["dt_proj.weight"][None, ...], p["dt_proj.bias"][None, ...]


def _rms(xp, v, w, eps):
    """RMS norm over the last axis (``w`` None: weightless), and ``1 / rms``."""
    inv = 1.0 / xp.sqrt(xp.mean(v * v, axis=-1, keepdims=True) + eps)
    return (v * inv if w is None else w * (v * inv)), inv


def _rms_backward(xp, v, w, inv, d):
    """The adjoint of :func:`_rms`: ``d_v`` and ``d_w`` (None when weightless)."""
    vn = v * inv
    g = d if w is None else d * w
    d_w = None if w is None else xp.sum(xp.reshape(d * vn, (-1, v.shape[-1])), axis=0)
    return inv * (g - vn * xp.mean(g * vn, axis=-1, keepdims=True)), d_w


def step(xp, p: dict, u, ssm, conv, *, saved=False, norm_eps=None):
    """One step of the Mamba block: the input ``u_t`` (N, M) and the states -> the output and the new states.

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters by their ``MambaMixer`` names (biases optional).
    u : array of shape (N, M)
        This step's input.
    ssm : array of shape (N, Di, S)
        The SSM state before the step.
    conv : array of shape (N, Di, K-1)
        The convolution's state before the step (the last K - 1 values of ``x``, oldest first).
    saved : bool, default False
        Also return what :func:`step_backward` needs.
    norm_eps : float, optional
        The epsilon of the RMS norms of dt, B, C; None: no norms.

    Returns
    -------
    out : array of shape (N, M)
    ssm : array of shape (N, Di, S)
    conv : array of shape (N, Di, K-1)
    kept : tuple
        Only with ``saved=True``: the step's values for :func:`step_backward`.
    """
    Wx, Wdt, bdt = _heads(p)
    H, Dh, R = Wdt.shape
    N, Di, S = u.shape[0], H * Dh, p["A_log"].shape[-1]
    xz = xp.matmul(u, _t(xp, p["in_proj.weight"]))  # (N, 2 Di)
    if p.get("in_proj.bias") is not None:
        xz = xz + p["in_proj.bias"]
    x, z = (xz[:, 0::2], xz[:, 1::2]) if "x_proj_weight" in p else (xz[:, :Di], xz[:, Di:])
    window = xp.concat([conv, x[:, :, None]], axis=2)  # (N, Di, K): the K inputs the convolution reads
    c = xp.sum(window * p["conv1d.weight"][:, 0, :], axis=2)  # (N, Di)
    if p.get("conv1d.bias") is not None:
        c = c + p["conv1d.bias"]
    a, da = _silu(xp, c)
    dbc = xp.matmul(xp.reshape(a, (N, H, 1, Dh)), _t(xp, Wx))[:, :, 0, :]  # (N, H, R + 2S)
    raw = (dbc[..., :R], dbc[..., R:R + S], dbc[..., R + S:])
    invs = None
    if norm_eps is not None:
        (r, B, C), invs = zip(*(_rms(xp, v, p.get(k), norm_eps) for v, k in zip(raw, NORMS)))
    else:
        r, B, C = raw  # (N, H, R), (N, H, S), (N, H, S)
    pre = xp.reshape(xp.matmul(r[:, :, None, :], _t(xp, Wdt))[:, :, 0, :] + bdt, (N, Di))
    dt = softplus(xp, pre)
    A = -xp.exp(xp.reshape(p["A_log"], (Di, S)))  # (Di, S)
    decay = xp.exp(dt[:, :, None] * A)  # (N, Di, S)
    new = decay * ssm + xp.reshape(xp.reshape(dt * a, (N, H, Dh, 1)) * B[:, :, None, :], (N, Di, S))
    y = xp.reshape(xp.sum(xp.reshape(new, (N, H, Dh, S)) * C[:, :, None, :], axis=3), (N, Di))
    y = y + xp.reshape(p["D"], (Di,)) * a  # (N, Di)
    sz, dsz = _silu(xp, z)
    g = y * sz
    out = xp.matmul(g, _t(xp, p["out_proj.weight"]))  # (N, M)
    if p.get("out_proj.bias") is not None:
        out = out + p["out_proj.bias"]
    if not saved:
        return out, new, window[:, :, 1:]
    return out, new, window[:, :, 1:], (u, ssm, window, da, a, r, B, C, pre, dt, A, decay, new, y, sz, dsz, g,
                                        raw, invs)


def _add(grads, key, value):
    grads[key] = value if grads.get(key) is None else grads[key] + value


def step_backward(xp, p: dict, kept: tuple, d_out, d_ssm, d_conv, grads: dict):
    """The exact adjoint of one :func:`step`: gradients of its inputs, its parameter gradients added to ``grads``.

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters :func:`step` used.
    kept : tuple
        From ``step(..., saved=True)``.
    d_out : array of shape (N, M)
        Gradient with respect to the step's output.
    d_ssm : array of shape (N, Di, S)
        Gradient with respect to the new SSM state.
    d_conv : array of shape (N, Di, K-1)
        Gradient with respect to the new convolution state.
    grads : dict of str to array
        Accumulates this step's share of every parameter's gradient (updated in place).

    Returns
    -------
    d_u : array of shape (N, M)
    d_ssm : array of shape (N, Di, S)
        Gradient with respect to the SSM state before the step.
    d_conv : array of shape (N, Di, K-1)
        Gradient with respect to the convolution state before the step.
    """
    u, ssm, window, da, a, r, B, C, pre, dt, A, decay, new, y, sz, dsz, g, raw, invs = kept
    Wx, Wdt, _ = _heads(p)
    H, Dh, R = Wdt.shape
    N, Di, S = u.shape[0], H * Dh, A.shape[1]
    if p.get("out_proj.bias") is not None:
        _add(grads, "out_proj.bias", xp.sum(d_out, axis=0))
    _add(grads, "out_proj.weight", xp.matmul(_t(xp, d_out), g))
    d_g = xp.matmul(d_out, p["out_proj.weight"])  # (N, Di)
    d_y, d_z = d_g * sz, d_g * y * dsz
    d_yh = xp.reshape(d_y, (N, H, Dh, 1))
    d_new = d_ssm + xp.reshape(d_yh * C[:, :, None, :], (N, Di, S))  # the readout's share and the future's
    d_newh = xp.reshape(d_new, (N, H, Dh, S))
    d_C = xp.sum(d_yh * xp.reshape(new, (N, H, Dh, S)), axis=2)  # (N, H, S)
    _add(grads, "D", xp.reshape(xp.sum(d_y * a, axis=0), p["D"].shape))
    d_a = d_y * xp.reshape(p["D"], (Di,))
    d_dta = d_new * ssm * decay  # dL/d(dt A), (N, Di, S)
    d_dt = xp.sum(d_dta * A, axis=2)  # (N, Di)
    _add(grads, "A_log", xp.reshape(xp.sum(d_dta * dt[:, :, None], axis=0) * A, p["A_log"].shape))  # A' = A
    dbB = xp.reshape(xp.sum(d_newh * B[:, :, None, :], axis=3), (N, Di))  # the input term dt a B
    d_dt = d_dt + dbB * a
    d_a = d_a + dbB * dt
    d_B = xp.sum(d_newh * xp.reshape(dt * a, (N, H, Dh, 1)), axis=2)  # (N, H, S)
    d_pre = xp.reshape(d_dt * sigmoid(xp, pre), (N, H, Dh))  # softplus' = sigmoid
    g_dt, g_bias = xp.sum(d_pre[..., None] * r[:, :, None, :], axis=0), xp.sum(d_pre, axis=0)  # (H, Dh, R), (H, Dh)
    d_rbc = [xp.matmul(d_pre[:, :, None, :], Wdt)[:, :, 0, :], d_B, d_C]  # dL/d(r, B, C) after their norms
    for i, k in enumerate(NORMS if invs is not None else ()):
        d_rbc[i], d_w = _rms_backward(xp, raw[i], p.get(k), invs[i], d_rbc[i])
        if k in p:
            _add(grads, k, d_w)
    d_dbc = xp.concat(d_rbc, axis=2)  # (N, H, R + 2S)
    g_x = xp.sum(d_dbc[..., None] * xp.reshape(a, (N, H, 1, Dh)), axis=0)  # (H, R + 2S, Dh)
    if "x_proj_weight" in p:
        for k, v in zip(("x_proj_weight", "dt_proj_weight", "dt_proj_bias"), (g_x, g_dt, g_bias)):
            _add(grads, k, v)
    else:
        for k, v in zip(("x_proj.weight", "dt_proj.weight", "dt_proj.bias"), (g_x, g_dt, g_bias)):
            _add(grads, k, v[0, ...])
    d_c = (d_a + xp.reshape(xp.matmul(d_dbc[:, :, None, :], Wx)[:, :, 0, :], (N, Di))) * da  # (N, Di)
    if p.get("conv1d.bias") is not None:
        _add(grads, "conv1d.bias", xp.sum(d_c, axis=0))
    _add(grads, "conv1d.weight", xp.sum(d_c[:, :, None] * window, axis=0)[:, None, :])
    zero = xp.zeros_like(window[:, :, :1])
    d_window = d_c[:, :, None] * p["conv1d.weight"][:, 0, :] + xp.concat([zero, d_conv], axis=2)  # (N, Di, K)
    if "x_proj_weight" in p:  # x and z interleaved
        d_xz = xp.reshape(xp.stack([d_window[:, :, -1], d_z], axis=2), (N, 2 * Di))
    else:
        d_xz = xp.concat([d_window[:, :, -1], d_z], axis=1)  # (N, 2 Di)
    _add(grads, "in_proj.weight", xp.matmul(_t(xp, d_xz), u))
    if p.get("in_proj.bias") is not None:
        _add(grads, "in_proj.bias", xp.sum(d_xz, axis=0))
    return xp.matmul(d_xz, p["in_proj.weight"]), d_new * decay, d_window[:, :, :-1]


def scan(xp, p: dict, u, ssm0, conv0, keep=None, reset=None, *, norm_eps=None):
    """:func:`step` over all T steps, with padding and resets.

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters.
    u : array of shape (T, N, M)
    ssm0 : array of shape (N, Di, S)
        The initial SSM state.
    conv0 : array of shape (N, Di, K-1)
        The initial convolution state.
    keep : bool array of shape (T, N), optional
        False on padded steps: the output is 0 there and both states are carried.
    reset : bool array of shape (T, N), optional
        True where a row starts the step from ``(ssm0, conv0)`` (ignored where ``keep`` is False).
    norm_eps : float, optional
        As :func:`step`.

    Returns
    -------
    out : array of shape (T, N, M)
    ssm : array of shape (N, Di, S)
        The final SSM state (each row's at its last valid step).
    conv : array of shape (N, Di, K-1)
        The final convolution state.
    saved : list of tuple
        What each step keeps for :func:`scan_backward`.
    """
    if reset is not None and keep is not None:
        reset = xp.logical_and(reset, keep)
    ssm, conv, outs, saved = ssm0, conv0, [], []
    for t in range(u.shape[0]):
        if reset is not None:
            r = reset[t][:, None, None]
            ssm, conv = xp.where(r, ssm0, ssm), xp.where(r, conv0, conv)
        o, new, new_conv, kept = step(xp, p, u[t], ssm, conv, saved=True, norm_eps=norm_eps)
        if keep is not None:
            k = keep[t][:, None, None]
            o = xp.where(keep[t][:, None], o, xp.zeros_like(o))
            new, new_conv = xp.where(k, new, ssm), xp.where(k, new_conv, conv)
        outs.append(o)
        saved.append(kept)
        ssm, conv = new, new_conv
    M = p["out_proj.weight"].shape[0]
    out = xp.stack(outs, axis=0) if outs else xp.zeros((0, u.shape[1], M), dtype=u.dtype, device=_device(u))
    return out, ssm, conv, saved


def run(xp, p: dict, u, ssm, conv, keep=None, reset=None, *, norm_eps=None):
    """:func:`step` over all T steps (:func:`scan` without what the backward pass keeps).

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters.
    u : array of shape (T, N, M)
    ssm : array of shape (N, Di, S)
    conv : array of shape (N, Di, K-1)
    keep, reset : bool arrays of shape (T, N), optional
        As :func:`scan`.
    norm_eps : float, optional
        As :func:`step`.

    Returns
    -------
    out : array of shape (T, N, M)
    ssm : array of shape (N, Di, S)
        The final SSM state.
    conv : array of shape (N, Di, K-1)
        The final convolution state.
    """
    return scan(xp, p, u, ssm, conv, keep, reset, norm_eps=norm_eps)[:3]


def _device(a):
    import array_api_compat

    return array_api_compat.device(a)


def scan_backward(xp, p: dict, saved: list, ssm0, conv0, keep=None, reset=None, d_out=None, d_final=None):
    """Exact BPTT through :func:`scan`: the steps in reverse, each step's adjoint.

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters :func:`scan` used.
    saved : list
        From :func:`scan`.
    ssm0, conv0 : arrays of shape (N, Di, S) and (N, Di, K-1)
        The initial states :func:`scan` started from.
    keep, reset : bool arrays of shape (T, N), optional
        As :func:`scan`.
    d_out : array of shape (T, N, M), optional
        Gradient with respect to ``out`` (None: zeros).
    d_final : pair of (array or None), optional
        Gradients with respect to the final SSM and convolution states.

    Returns
    -------
    grads : dict of str to array
        Same keys and shapes as ``p``.
    d_u : array of shape (T, N, M)
    d_state : MambaState
        Gradients with respect to ``ssm0`` and ``conv0``, including what reached them through resets.
    """
    if reset is not None and keep is not None:
        reset = xp.logical_and(reset, keep)
    zeros = (xp.zeros_like(ssm0), xp.zeros_like(conv0))
    carry = zeros if d_final is None else tuple(z if d is None else d for z, d in zip(zeros, d_final))
    d0, d_u, grads = zeros, [], {}
    N, M = ssm0.shape[0], p["out_proj.weight"].shape[0]
    for t in range(len(saved) - 1, -1, -1):
        d_o = xp.zeros((N, M), dtype=ssm0.dtype, device=_device(ssm0)) if d_out is None else d_out[t]
        d = carry
        if keep is not None:  # a padded step's output is the constant 0; it passes the states' gradient through
            k = keep[t][:, None, None]
            d_o = xp.where(keep[t][:, None], d_o, xp.zeros_like(d_o))
            passed = tuple(xp.where(k, xp.zeros_like(a), a) for a in d)
            d = tuple(xp.where(k, a, xp.zeros_like(a)) for a in d)
        du_t, *d_prev = step_backward(xp, p, saved[t], d_o, d[0], d[1], grads)
        d_u.append(du_t)
        if keep is not None:
            d_prev = [a + b for a, b in zip(d_prev, passed)]
        if reset is not None:  # a reset step read the initial states: its gradient goes there, none further back
            r = reset[t][:, None, None]
            d0 = tuple(a + xp.where(r, b, xp.zeros_like(b)) for a, b in zip(d0, d_prev))
            d_prev = [xp.where(r, xp.zeros_like(b), b) for b in d_prev]
        carry = tuple(d_prev)
    d0 = tuple(a + b for a, b in zip(d0, carry))
    grads = {k: grads[k] if grads.get(k) is not None else xp.zeros_like(v) for k, v in p.items()}
    d_u = xp.stack(d_u[::-1], axis=0) if d_u else xp.zeros((0, N, M), dtype=ssm0.dtype, device=_device(ssm0))
    return grads, d_u, MambaState(*d0)


@dataclass(frozen=True)
class MambaXPCache:
    """What :func:`backward` needs from one array-API :func:`forward` of a :class:`hiddenstate.Mamba` (opaque).

    Attributes
    ----------
    xp : module
        The namespace of the run.
    device : object
        Its device.
    p : dict of str to array
        The parameters used (in ``xp``).
    saved : list
        Every step's values (:func:`scan`).
    state0 : tuple of arrays
        The initial SSM (N, Di, S) and convolution (N, Di, K-1) states.
    keep, reset : bool arrays of shape (T, N), or None
        The padding and the restarts.
    shape : tuple of int
        ``(T, N, M)``, time-major.
    batch_first : bool
        The layout of the call's input and output.
    owner : weakref.ref
        The block that made the cache.
    """

    xp: object
    device: object
    p: dict
    saved: list
    state0: tuple
    keep: object
    reset: object
    shape: tuple
    batch_first: bool
    owner: weakref.ref


def _host(value):
    """A mask or lengths of any library as host data (they are small; checked on the host)."""
    return to_numpy(value) if is_foreign(value) else value


def forward(net, u, state=None, *, lengths=None, reset=None):
    """:meth:`Mamba.forward <hiddenstate.kinds.ssm.mamba.Mamba.forward>` on an array-API input (torch, CuPy, ...).

    Parameters
    ----------
    net : Mamba
        The block (its parameters are NumPy arrays, converted once per change).
    u : array of shape (T, N, M), or (N, T, M) if ``net.batch_first``
        The computation runs in its namespace, on its device, in ``net.dtype``.
    state : pair (ssm (N, Di, S), conv (N, Di, K-1)), optional
        The initial states, of ``u``'s library and device (or host data, copied over); None: zeros.
    lengths : array_like of int, shape (N,), optional
        Valid steps of each row of a right-padded batch, each in [0, T].
    reset : bool array, shape (T, N) ((N, T) if ``batch_first``), optional
        Restart mask (of any library; checked on the host).

    Returns
    -------
    out : array shaped like ``u``
    state_n : MambaState
        The final SSM and convolution states, arrays of ``u``'s library.
    cache : MambaXPCache

    Raises
    ------
    TypeError, ValueError
        As the NumPy path: shapes, dtypes, NaN/Inf, lengths, reset; a state of another library or device.
    """
    xp, dev = namespace(u)
    x = float_input("u", u, xp, dev, net.dtype)
    legend = "(N, T, M)" if net.batch_first else "(T, N, M)"
    if x.ndim != 3 or x.shape[2] != net.d_model:
        raise ValueError(f"u must have shape {legend} with M={net.d_model}; got {shape_str(tuple(x.shape))}.")
    if net.batch_first:
        x = xp.permute_dims(x, (1, 0, 2))
    T, N, M = x.shape
    shapes = (((N, net.d_inner, net.d_state), "(N, Di, S)"), ((N, net.d_inner, net.d_conv - 1), "(N, Di, K-1)"))
    if state is None:
        s = tuple(xp.zeros(w, dtype=x.dtype, device=dev) for w, _ in shapes)
    elif isinstance(state, tuple) and len(state) == 2:
        s = tuple(state_input(f"state.{n}", v, w, leg, xp, dev, net.dtype)
                  for n, v, (w, leg) in zip(("ssm", "conv"), state, shapes))
    else:
        raise TypeError(f"state must be a pair (ssm, conv) (a MambaState); got {type(state).__name__}.")
    keep = r = None
    if lengths is not None:
        lens = check_lengths(_host(lengths), T, N)
        if (lens < T).any():
            keep = to_namespace(np.arange(T)[:, None] < lens[None, :], xp, dev)
    if reset is not None:
        m = bool_mask("reset", _host(reset), (N, T) if net.batch_first else (T, N))
        m = m.T if net.batch_first else m
        r = to_namespace(m, xp, dev) if m.any() else None
    check_params(net.params, net.shapes(), net.dtype, "Mamba")
    p = converted(net, xp, dev)
    out, ssm, conv, saved = scan(xp, p, x, *s, keep, r, norm_eps=None if net.bcdt_norm is None else net.norm_eps)
    cache = MambaXPCache(xp=xp, device=dev, p=p, saved=saved, state0=s, keep=keep, reset=r, shape=(T, N, M),
                         batch_first=net.batch_first, owner=weakref.ref(net))
    return (xp.permute_dims(out, (1, 0, 2)) if net.batch_first else out), MambaState(ssm, conv), cache


def backward(net, cache: MambaXPCache, d_out=None, d_state_n=None):
    """:meth:`Mamba.backward <hiddenstate.kinds.ssm.mamba.Mamba.backward>` through a :class:`MambaXPCache`.

    Parameters
    ----------
    net : Mamba
        The block whose :func:`forward` made ``cache``.
    cache : MambaXPCache
        From :func:`forward`.
    d_out : array shaped like that call's output, or None
        Of the forward's library and device (or host data, copied over).
    d_state_n : pair (d_ssm (N, Di, S), d_conv (N, Di, K-1)), optional
        Gradients with respect to the final states (either part None).

    Returns
    -------
    grads : dict of str to array
        Same keys and shapes as ``net.params``, in the forward's namespace and on its device.
    d_u : array shaped like the input
    d_state : MambaState
        ``d_h0`` (N, Di, S) and ``d_conv0`` (N, Di, K-1).

    Raises
    ------
    TypeError, ValueError
        A cache of another block; a gradient of another shape, library or device, or with NaN/Inf.
    """
    made_by = cache.owner()
    if made_by is not net:
        raise ValueError("cache must come from this layer's forward; got the cache of "
                         f"{'a layer that no longer exists' if made_by is None else 'another Mamba layer'}.")
    xp, dev = cache.xp, cache.device
    T, N, M = cache.shape
    if d_out is not None:
        want, legend = ((N, T, M), "(N, T, M)") if cache.batch_first else ((T, N, M), "(T, N, M)")
        d_out = state_input("d_out", d_out, want, legend, xp, dev, net.dtype)
        d_out = xp.permute_dims(d_out, (1, 0, 2)) if cache.batch_first else d_out
    d_final = None
    if d_state_n is not None:
        if not (isinstance(d_state_n, tuple) and len(d_state_n) == 2):
            raise TypeError(f"d_state_n must be a pair (d_ssm, d_conv); got {type(d_state_n).__name__}.")
        legends = ("(N, Di, S)", "(N, Di, K-1)")
        d_final = tuple(None if v is None else state_input(f"d_state_n.{n}", v, tuple(s0.shape), leg, xp, dev, net.dtype)
                        for n, v, s0, leg in zip(("ssm", "conv"), d_state_n, cache.state0, legends))
    grads, d_u, d_state = scan_backward(xp, cache.p, cache.saved, *cache.state0, cache.keep, cache.reset, d_out, d_final)
    return grads, (xp.permute_dims(d_u, (1, 0, 2)) if cache.batch_first else d_u), d_state
