"""LSTM: scan kernels (forward and exact BPTT side by side) and :class:`LSTMCell`.

Gate order i, f, g, o (PyTorch). The state is a pair (h, c):
``i = sigmoid(.)``, ``f = sigmoid(.)``, ``g = tanh(.)``, ``o = sigmoid(.)`` of
``W_ih x + b_ih + W_hh h + b_hh``; ``c' = f * c + i * g``; ``h' = o * tanh(c')``
(Hochreiter & Schmidhuber 1997; forget gate of Gers, Schmidhuber & Cummins 2000).
Kernel contract: see :mod:`hiddenstate.cells.rnn`; here ``h0``, ``final`` and ``d_h0`` are (h, c) pairs.
"""

from __future__ import annotations

import numpy as np

from ..functional import sigmoid
from ._base import Cell

__all__ = ["LSTMCell", "scan_backward", "scan_forward"]

NUM_GATES = 4


def scan_forward(xw, state0, w_hh, b_hh, keep=None, reset=None):
    h0, c0 = state0
    T, N, H4 = xw.shape
    H = H4 // 4
    xg = np.ascontiguousarray(xw.reshape(T, N, 4, H).transpose(2, 0, 1, 3))  # (4, T, N, H)
    if b_hh is not None:
        xg += b_hh.reshape(4, 1, 1, H)
    dt = xw.dtype
    I, F, G, O, C, TC = (np.empty((T, N, H), dtype=dt) for _ in range(6))
    hprev = np.empty_like(I)
    cprev = np.empty_like(I)
    hs = np.empty_like(I)
    cs = C if keep is None else np.empty_like(I)
    w_t = w_hh.T  # (H, 4H)
    h, c = h0, c0
    for t in range(T):
        if reset is not None:
            h = np.where(reset[t], h0, h)
            c = np.where(reset[t], c0, c)
        hprev[t] = h
        cprev[t] = c
        gh = h @ w_t  # (N, 4H): one product for the four gates
        i, f, g, o, cn, tc = I[t], F[t], G[t], O[t], C[t], TC[t]
        sigmoid(np.add(xg[0, t], gh[:, :H], out=i), out=i)
        sigmoid(np.add(xg[1, t], gh[:, H:2 * H], out=f), out=f)
        np.tanh(np.add(xg[2, t], gh[:, 2 * H:3 * H], out=g), out=g)
        sigmoid(np.add(xg[3, t], gh[:, 3 * H:], out=o), out=o)
        np.multiply(f, c, out=cn)
        cn += i * g
        np.tanh(cn, out=tc)
        if keep is None:
            np.multiply(o, tc, out=hs[t])
        else:
            hs[t] = np.where(keep[t], o * tc, h)
            cs[t] = np.where(keep[t], cn, c)
        h, c = hs[t], cs[t]
    cache = (I, F, G, O, TC, hprev, cprev, w_hh, h0, c0, keep, reset)
    final = (h.copy(), c.copy()) if T else (h0.copy(), c0.copy())
    return hs, final, cache


def scan_backward(cache, dhs, d_final):
    I, F, G, O, TC, hprev, cprev, w_hh, h0, c0, keep, reset = cache
    T, N, H = I.shape
    dh_last, dc_last = (None, None) if d_final is None else d_final
    fac_i = I * (1.0 - I)
    fac_f = F * (1.0 - F)
    fac_g = 1.0 - G * G
    fac_o = O * (1.0 - O)
    fac_c = O * (1.0 - TC * TC)  # dh/dc through tanh(c)
    DA = np.empty((T, N, 4 * H), dtype=I.dtype)  # pre-activation gradients, gate order i, f, g, o
    carry_h = np.zeros_like(h0) if dh_last is None else np.array(dh_last, dtype=h0.dtype)
    carry_c = np.zeros_like(c0) if dc_last is None else np.array(dc_last, dtype=c0.dtype)
    dh0 = np.zeros_like(h0)
    dc0 = np.zeros_like(c0)
    for t in range(T - 1, -1, -1):
        dh = carry_h if dhs is None else carry_h + dhs[t]
        dc = carry_c
        if keep is not None:
            pass_h = np.where(keep[t], 0.0, dh)
            pass_c = np.where(keep[t], 0.0, dc)
            dh = np.where(keep[t], dh, 0.0)
            dc = np.where(keep[t], dc, 0.0)
        dc = dc + dh * fac_c[t]
        da = DA[t]
        np.multiply(dc * G[t], fac_i[t], out=da[:, :H])
        np.multiply(dc * cprev[t], fac_f[t], out=da[:, H:2 * H])
        np.multiply(dc * I[t], fac_g[t], out=da[:, 2 * H:3 * H])
        np.multiply(dh * TC[t], fac_o[t], out=da[:, 3 * H:])
        dh_prev = da @ w_hh  # (N, H)
        dc_prev = dc * F[t]
        if keep is not None:
            dh_prev += pass_h
            dc_prev += pass_c
        if reset is not None:
            dh0 += np.where(reset[t], dh_prev, 0.0)
            dc0 += np.where(reset[t], dc_prev, 0.0)
            dh_prev = np.where(reset[t], 0.0, dh_prev)
            dc_prev = np.where(reset[t], 0.0, dc_prev)
        carry_h, carry_c = dh_prev, dc_prev
    dh0 += carry_h
    dc0 += carry_c
    dw_hh = DA.reshape(-1, 4 * H).T @ hprev.reshape(-1, H)
    db_hh = DA.sum(axis=1).sum(axis=0)
    return DA, dw_hh, db_hh, (dh0, dc0)


class LSTMCell(Cell):
    """Long short-term memory cell (Hochreiter & Schmidhuber 1997), PyTorch parameter layout.

    ``(h', c') = cell(x, (h, c))`` with ``c' = f * c + i * g`` and ``h' = o * tanh(c')``.

    Parameters
    ----------
    input_size : int
        I.
    hidden_size : int
        H.
    bias : bool, default True
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)).

    Attributes
    ----------
    params : dict
        ``weight_ih`` (4H, I), ``weight_hh`` (4H, H), ``bias_ih`` (4H,), ``bias_hh`` (4H,), rows
        in gate order i, f, g, o.

    Notes
    -----
    The state is a pair: ``cell(x)`` starts from (0, 0); ``cell.forward(x, (h, c))`` returns
    ``((h', c'), cache)``; ``cell.backward(cache, (dh', dc'))`` returns ``(grads, dx, (dh, dc))``.
    """

    num_gates = NUM_GATES
    is_lstm = True
    _kernel = staticmethod(scan_forward), staticmethod(scan_backward)
