"""LSTM: scan kernels (forward and exact BPTT side by side) and :class:`LSTMCell`.

Gate order i, f, g, o (PyTorch). The state is a pair (h, c):
``i = sigmoid(.)``, ``f = sigmoid(.)``, ``g = tanh(.)``, ``o = sigmoid(.)`` of
``W_ih x + b_ih + W_hh h + b_hh``; ``c' = f * c + i * g``; ``h' = o * tanh(c')``
(Hochreiter & Schmidhuber 1997; forget gate of Gers, Schmidhuber & Cummins 2000).
Kernel contract: :mod:`hiddenstate.cells.base`; here ``h0``, ``final`` and ``d_h0`` are (h, c) pairs.

Speed (``benchmarks/bench_layers.py``): the forward keeps the gates gate-major, one contiguous
(4, N, H) block per step, computed by one batched product ``h @ W_hh^T`` per gate, one ``tanh``
over all four gates (the sigmoid gates' weights are pre-halved) and a few in-place operations;
the backward multiplies by factors precomputed for all steps at once.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.cells.base import Cell, CellKind, Record

__all__ = ["KIND", "LSTMCell", "jacobian", "recorded", "scan_backward", "scan_forward"]


# sigmoid(a) = 0.5 * tanh(a / 2) + 0.5 (functional.sigmoid). The kernel halves the rows of the
# sigmoid gates i, f, o once (exact in binary floating point), so a single tanh over all four gates
# gives g and tanh(a / 2) for the others, which two in-place operations turn into the sigmoid.
_HALF = (0.5, 0.5, 1.0, 0.5)  # gate order i, f, g, o


def scan_forward(xw, h0, w_hh, b_hh, keep=None, reset=None, *, record=False):
    """LSTM recurrence over all T steps; ``h0`` is the pair ``(h0, c0)`` (contract: :mod:`hiddenstate.cells.base`)."""
    h0, c0 = h0
    T, N, H4 = xw.shape
    H = H4 // 4
    dt = xw.dtype
    half = np.array(_HALF, dtype=dt)[:, None, None]  # (4, 1, 1)
    # A[t] is one contiguous (4, N, H) block per step (gate-major, so every elementwise operand in
    # the loop is contiguous). It starts as the input projection plus b_hh, pre-scaled like the
    # weights, and each step turns it into the gate values in place. (order="C": without it the
    # product would keep the memory order of the transposed view, i.e. not gate-major.)
    A = np.multiply(xw.reshape(T, N, 4, H).transpose(0, 2, 1, 3), half, order="C")  # (T, 4, N, H)
    if b_hh is not None:
        A += b_hh.reshape(4, 1, H) * half
    w4 = np.multiply(w_hh.reshape(4, H, H).transpose(0, 2, 1), half, order="C")  # (4, H, H): W_hh^T per gate
    C, TC, hprev, cprev, hs = (np.empty((T, N, H), dtype=dt) for _ in range(5))
    cs = C if keep is None else np.empty_like(C)
    gh = np.empty((4, N, H), dtype=dt)
    ig = np.empty((N, H), dtype=dt)
    pre = np.empty((T, 4, N, H), dtype=dt) if record else None  # pre-activations, only when recording
    h, c = h0, c0
    for t in range(T):
        if reset is not None:
            h = np.where(reset[t], h0, h)
            c = np.where(reset[t], c0, c)
        hprev[t] = h
        cprev[t] = c
        a = A[t]
        a += np.matmul(h, w4, out=gh)  # (4, N, H): one batched product for the four gates
        if pre is not None:
            np.divide(a, half, out=pre[t])  # undo the exact halving
        np.tanh(a, out=a)  # g; and tanh(a / 2) for i, f, o
        for s in (a[:2], a[3]):  # i, f, o: sigmoid = 0.5 * tanh(a / 2) + 0.5
            s *= 0.5
            s += 0.5
        i, f, g, o = a
        cn, tc = C[t], TC[t]
        np.multiply(f, c, out=cn)
        cn += np.multiply(i, g, out=ig)
        np.tanh(cn, out=tc)
        if keep is None:
            np.multiply(o, tc, out=hs[t])
        else:
            hs[t] = np.where(keep[t], o * tc, h)
            cs[t] = np.where(keep[t], cn, c)
        h, c = hs[t], cs[t]
    cache = (A, TC, hprev, cprev, w_hh, h0, c0, keep, reset, C, hs, pre)
    final = (h.copy(), c.copy()) if T else (h0.copy(), c0.copy())
    return hs, final, cache


def scan_backward(cache, d_hs, d_final):
    """Exact BPTT through :func:`scan_forward`; ``d_final`` and ``d_h0`` are pairs (contract: :mod:`hiddenstate.cells.base`)."""
    dhs = d_hs
    A, TC, hprev, cprev, w_hh, h0, c0, keep, reset, *_ = cache
    T, _, N, H = A.shape
    I, F, G, O = A[:, 0], A[:, 1], A[:, 2], A[:, 3]  # (T, N, H) each
    dh_last, dc_last = (None, None) if d_final is None else d_final
    # every factor that does not depend on the recurrence, for all steps at once
    fac_c = O * (1.0 - TC * TC)  # dh_t/dc_t through h = o * tanh(c)
    fac_i = G * I * (1.0 - I)  # dc_t/da_i
    fac_f = cprev * F * (1.0 - F)  # dc_t/da_f
    fac_g = I * (1.0 - G * G)  # dc_t/da_g
    fac_o = TC * O * (1.0 - O)  # dh_t/da_o
    DA = np.empty((T, N, 4 * H), dtype=A.dtype)  # pre-activation gradients, gate order i, f, g, o
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
        np.multiply(dc, fac_i[t], out=da[:, :H])
        np.multiply(dc, fac_f[t], out=da[:, H:2 * H])
        np.multiply(dc, fac_g[t], out=da[:, 2 * H:3 * H])
        np.multiply(dh, fac_o[t], out=da[:, 3 * H:])
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


def recorded(cache) -> Record:
    """Gates i, f, g, o, cell states and (if recorded) pre-activations from a :func:`scan_forward` cache."""
    A, TC, hprev, cprev, *_, C, hs, pre = cache
    h = A[:, 3] * TC  # o * tanh(c): the state each step produced (``hs`` carries padding)
    gates = {k: A[:, j] for j, k in enumerate("ifgo")}
    preacts = {} if pre is None else {k: pre[:, j] for j, k in enumerate("ifgo")}
    return Record(h=h, h_prev=hprev, gates=gates, preacts=preacts, c=C, c_prev=cprev)


def jacobian(rec: Record, w_hh: np.ndarray) -> np.ndarray:
    """Jacobian of ``(h_t, c_t)`` with respect to ``(h_{t-1}, c_{t-1})`` for record arrays (..., H).

    Returns (..., 2H, 2H) with blocks ``[[dh/dh, dh/dc], [dc/dh, dc/dc]]``: ``dc/dc = diag(f)`` is
    the constant error carousel (Hochreiter & Schmidhuber 1997; Gers et al. 2000) and
    ``dh/dc = diag(o (1 - tanh(c)^2) f)``.
    """
    g = rec.gates
    i, f, gg, o = g["i"], g["f"], g["g"], g["o"]
    cp, c = rec.c_prev, rec.c
    H = i.shape[-1]
    tc = np.tanh(c)
    Wi, Wf, Wg, Wo = (w_hh[k * H:(k + 1) * H] for k in range(4))
    dc_dh = ((cp * f * (1.0 - f))[..., :, None] * Wf + (gg * i * (1.0 - i))[..., :, None] * Wi
             + (i * (1.0 - gg * gg))[..., :, None] * Wg)
    do_dh = (o * (1.0 - o))[..., :, None] * Wo
    k_c = o * (1.0 - tc * tc)
    dh_dh = tc[..., :, None] * do_dh + k_c[..., :, None] * dc_dh
    eye = np.eye(H)
    dh_dc = eye * (k_c * f)[..., None, :]
    dc_dc = eye * f[..., None, :]
    return np.concatenate([np.concatenate([dh_dh, dh_dc], axis=-1), np.concatenate([dc_dh, dc_dc], axis=-1)], axis=-2)


def bounds(hidden_size: int) -> list:
    """(-1, 1) for each unit of ``h`` (``o * tanh(c)``), unbounded for ``c``."""
    return [(-1.0, 1.0)] * hidden_size + [(None, None)] * hidden_size


#: The long short-term memory cell with a forget gate, declared once.
KIND = CellKind(name="lstm", blocks=("i", "f", "g", "o"), gates=("i", "f", "g", "o"), preacts=("i", "f", "g", "o"),
                sigmoid_gates=("i", "f", "o"), keep_gate="f", has_cell=True, options=(), scan_forward=scan_forward,
                scan_backward=scan_backward, recorded=recorded, jacobian=jacobian, bounds=bounds)


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

    kind = KIND
