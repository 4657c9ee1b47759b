"""LSTM: scan kernels (forward and exact BPTT side by side) and :class:`LSTMCell`.

Gate order i, f, g, o (PyTorch). The state is a pair (h, c):
``i = sigmoid(.)``, ``f = sigmoid(.)``, ``g = tanh(.)``, ``o = sigmoid(.)`` of
``W_ih x + b_ih + W_hh h + b_hh``; ``c' = f * c + i * g``; ``h' = o * tanh(c')``
(Hochreiter & Schmidhuber 1997; forget gate of Gers, Schmidhuber & Cummins 2000).
Kernel contract: :mod:`hiddenstate.classic.cells.base` (repeated on :func:`scan_forward` and
:func:`scan_backward`); here ``h0``, ``final``, ``d_final`` and ``d_h0`` are (h, c) pairs.

Speed (``benchmarks/bench_layers.py``): the forward keeps the gates gate-major, one contiguous
(4, N, H) block per step, computed by one batched product ``h @ W_hh^T`` per gate, one ``tanh``
over all four gates (the sigmoid gates' weights are pre-halved) and a few in-place operations
(for small N * H, the sigmoids' scale and shift in two calls over all four gates); the backward
multiplies by factors computed one cache-sized block of steps at a time (for N = 1, one
multiply for the four gate gradients of a step). The large buffers come from
:mod:`hiddenstate.core.workspace`, reused across calls of one shape (never while a caller holds them).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells.base import Cell, CellKind, Record
from hiddenstate.core import workspace as ws
from hiddenstate.core.functional import previous_states

__all__ = ["KIND", "LSTMCell", "jacobian", "recorded", "scan_backward", "scan_forward", "scan_infer"]


# sigmoid(a) = 0.5 * tanh(a / 2) + 0.5 (functional.sigmoid_tanh). The kernel halves the rows of the
# sigmoid gates i, f, o once (exact in binary floating point), so a single tanh over all four gates
# gives g and tanh(a / 2) for the others, which two in-place operations turn into the sigmoid.
_HALF = (0.5, 0.5, 1.0, 0.5)  # gate order i, f, g, o
# N * H up to which the forward's sigmoid runs over all four gates at once. Measured forward time,
# fused / per gate: 0.81 (f32) and 0.92 (f64) at N=1, H=128; 0.93 / 0.99 at N*H = 1024; 0.99 /
# 1.04 at 4096; 1.01 / 1.05 at 8192.
_FUSED_MAX = 1024


def scan_forward(xw, h0, w_hh, b_hh, keep=None, reset=None, *, record=False):
    """LSTM recurrence over all T steps: the forward scan kernel of the LSTM (G = 4, rows i, f, g, o).

    With ``a = xw_t + W_hh h_{t-1} + b_hh`` split into blocks i, f, g, o: ``i, f, o = sigmoid(.)``,
    ``g = tanh(.)``, ``c_t = f * c_{t-1} + i * g``, ``h_t = o * tanh(c_t)`` (Hochreiter &
    Schmidhuber 1997, with the forget gate of Gers, Schmidhuber & Cummins 2000), for
    ``t = 0 .. T-1`` starting from ``(h0, c0)``. This is the kernel contract of
    :mod:`hiddenstate.classic.cells.base`; nothing is validated, every array must have the dtype of
    ``xw``.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 4
        The input projection ``x_t W_ih^T + b_ih`` of every step, column blocks in gate order
        i, f, g, o, computed by the caller in one matrix multiply. Not modified.
    h0 : pair of ndarrays of shape (N, H)
        The initial state ``(h0, c0)``.
    w_hh : ndarray of shape (G*H, H)
        ``weight_hh``, row blocks i, f, g, o.
    b_hh : ndarray of shape (G*H,) or None
        ``bias_hh``, blocks i, f, g, o; None for a layer without bias.
    keep : ndarray of bool, shape (T, N, 1), or None
        False where step ``t`` of column ``n`` is padding: ``h`` and ``c`` are carried unchanged.
        None: every step is valid.
    reset : ndarray of bool, shape (T, N, 1), or None
        True where step ``t`` of column ``n`` starts from ``(h0, c0)`` instead of the previous
        state; no gradient crosses that boundary (it goes to ``d_h0`` instead). None: never.
    record : bool, default False
        Also keep the pre-activations of i, f, g, o in the cache (for :func:`recorded`); the
        gate values are kept in any case.

    Returns
    -------
    hs : ndarray of shape (T, N, H)
        Every step's hidden state ``h`` (at padded steps, the carried state).
    final : pair of ndarrays of shape (N, H)
        ``(h, c)`` after the last step (each column's state at its last valid step); copies of
        ``(h0, c0)`` when T = 0.
    cache : tuple
        Opaque; pass it to :func:`scan_backward` and :func:`recorded`.
    """
    h0, c0 = h0
    T, N, H4 = xw.shape
    H = H4 // 4
    dt = xw.dtype
    half = np.array(_HALF, dtype=dt)[:, None, None]  # (4, 1, 1)
    # A[t] is one contiguous (4, N, H) block per step (gate-major, so every elementwise operand in
    # the loop is contiguous). It starts as the input projection plus b_hh, pre-scaled like the
    # weights, and each step turns it into the gate values in place. It is filled one cache-sized
    # block of steps at a time, just before the loop reads it.
    xw4 = xw.reshape(T, N, 4, H).transpose(0, 2, 1, 3)  # (T, 4, N, H) view
    A = ws.empty((T, 4, N, H), dt)
    b4 = None if b_hh is None else b_hh.reshape(4, 1, H) * half
    B = ws.block_steps(T, 4 * N * H * dt.itemsize)
    w4 = np.multiply(w_hh.reshape(4, H, H).transpose(0, 2, 1), half, order="C")  # (4, H, H): W_hh^T per gate
    C, TC, hprev, cprev, hs = (ws.empty((T, N, H), dt) for _ in range(5))
    cs = C if keep is None else ws.empty((T, N, H), dt)
    gh = np.empty((4, N, H), dtype=dt)
    ig = np.empty((N, H), dtype=dt)
    pre = ws.empty((T, 4, N, H), dt) if record else None  # pre-activations, only when recording
    # Small N*H: the loop's cost is calls, not arithmetic, so the sigmoid's 0.5 * t + 0.5 is two
    # calls over all four gates (g's rows get 1 * t + 0) instead of four calls over i, f and o.
    fused = N * H <= _FUSED_MAX
    if fused:
        scale = np.broadcast_to(half, (4, N, H)).copy()
        shift = np.broadcast_to(np.array([0.5, 0.5, 0.0, 0.5], dtype=dt)[:, None, None], (4, N, H)).copy()
    h, c = h0, c0
    for t in range(T):
        if t % B == 0:
            blk = np.multiply(xw4[t:t + B], half, out=A[t:t + B])
            if b4 is not None:
                blk += b4
        if reset is not None:
            h = np.where(reset[t], h0, h)
            c = np.where(reset[t], c0, c)
        a = A[t]
        a += np.matmul(h, w4, out=gh)  # (4, N, H): one batched product for the four gates
        if pre is not None:
            np.divide(a, half, out=pre[t])  # undo the exact halving
        np.tanh(a, out=a)  # g; and tanh(a / 2) for i, f, o
        if fused:
            a *= scale
            a += shift
        else:
            for s in (a[:2], a[3]):  # i, f, o: sigmoid = 0.5 * tanh(a / 2) + 0.5
                s *= 0.5
                s += 0.5
        i, f, g, o = a
        cn, tc = C[t], TC[t]
        np.multiply(f, c, out=cn)
        cn += np.multiply(i, g, out=ig)
        np.tanh(cn, out=tc)
        if keep is None:
            h = np.multiply(o, tc, out=hs[t])
            c = cn
        else:
            hs[t] = np.where(keep[t], o * tc, h)
            cs[t] = np.where(keep[t], cn, c)
            h, c = hs[t], cs[t]
    previous_states(hs, h0, reset, out=hprev)  # what step t read, in one pass each
    previous_states(cs, c0, reset, out=cprev)
    cache = (A, TC, hprev, cprev, w_hh, h0, c0, keep, reset, C, hs, pre)
    final = (h.copy(), c.copy()) if T else (h0.copy(), c0.copy())
    return hs, final, cache



def scan_infer(xw, h0, w_hh, b_hh, keep=None, reset=None):
    """:func:`scan_forward` for a run that no backward pass follows: the same ``hs`` and ``final``, no cache.

    The same operations in the same order (bit-identical results), but the gates, the cell
    state and ``tanh(c)`` live in per-step buffers that are reused at every step and stay in
    the CPU cache: no (T, 4, N, H) gate buffer, no cell state, ``tanh(c)``, ``h_prev`` or
    ``c_prev`` of every step. ``xw`` is not modified.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 4
        The input projection ``x_t W_ih^T + b_ih`` of every step, blocks i, f, g, o.
    h0 : pair of ndarrays of shape (N, H)
        The initial state ``(h0, c0)``.
    w_hh : ndarray of shape (G*H, H)
        ``weight_hh``, row blocks i, f, g, o.
    b_hh : ndarray of shape (G*H,) or None
        ``bias_hh``; None for a layer without bias.
    keep : ndarray of bool, shape (T, N, 1), or None
        As :func:`scan_forward`.
    reset : ndarray of bool, shape (T, N, 1), or None
        As :func:`scan_forward`.

    Returns
    -------
    hs : ndarray of shape (T, N, H)
        Every step's ``h``, as :func:`scan_forward`'s.
    final : pair of ndarrays of shape (N, H)
        ``(h, c)``, as :func:`scan_forward`'s (new arrays).
    """
    h0, c0 = h0
    T, N, H4 = xw.shape
    H = H4 // 4
    dt = xw.dtype
    half = np.array(_HALF, dtype=dt)[:, None, None]
    xw4 = xw.reshape(T, N, 4, H).transpose(0, 2, 1, 3)  # (T, 4, N, H) view
    b4 = None if b_hh is None else b_hh.reshape(4, 1, H) * half
    w4 = np.multiply(w_hh.reshape(4, H, H).transpose(0, 2, 1), half, order="C")
    hs = ws.empty((T, N, H), dt)
    a = np.empty((4, N, H), dtype=dt)  # this step's gates
    gh = np.empty((4, N, H), dtype=dt)
    ig, tc = np.empty((N, H), dtype=dt), np.empty((N, H), dtype=dt)
    cbuf = np.empty((2, N, H), dtype=dt)  # c_t, alternating, so c_{t-1} is never overwritten while read
    fused = N * H <= _FUSED_MAX
    if fused:
        scale = np.broadcast_to(half, (4, N, H)).copy()
        shift = np.broadcast_to(np.array([0.5, 0.5, 0.0, 0.5], dtype=dt)[:, None, None], (4, N, H)).copy()
    h, c = h0, c0
    for t in range(T):
        if reset is not None:
            h = np.where(reset[t], h0, h)
            c = np.where(reset[t], c0, c)
        np.multiply(xw4[t], half, out=a)
        if b4 is not None:
            a += b4
        a += np.matmul(h, w4, out=gh)
        np.tanh(a, out=a)
        if fused:
            a *= scale
            a += shift
        else:
            for g_s in (a[:2], a[3]):
                g_s *= 0.5
                g_s += 0.5
        i, f, g, o = a
        cn = cbuf[t % 2]
        np.multiply(f, c, out=cn)
        cn += np.multiply(i, g, out=ig)
        np.tanh(cn, out=tc)
        if keep is None:
            h = np.multiply(o, tc, out=hs[t])
            c = cn
        else:
            np.copyto(hs[t], np.where(keep[t], o * tc, h))
            c = np.where(keep[t], cn, c)
            h = hs[t]
    return hs, ((h.copy(), c.copy()) if T else (h0.copy(), c0.copy()))

def scan_backward(cache, d_hs, d_final):
    """Exact backpropagation through time through :func:`scan_forward` (the backward kernel).

    Walks the steps in reverse with the factors that do not depend on the recurrence
    precomputed for all steps; ``dc_{t-1} = dc_t * f`` is the constant error carousel. The
    gradients of ``h`` and ``c`` pass straight through padded steps and are cut at reset
    steps; the weight gradients are one matrix multiply after the time loop (kernel contract of
    :mod:`hiddenstate.classic.cells.base`).

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.
    d_hs : ndarray of shape (T, N, H) or None
        Gradient of the loss with respect to ``hs`` (None: zeros).
    d_final : pair of (ndarray of shape (N, H) or None), or None
        Gradient with respect to ``final = (h, c)``; either part, or the whole pair, may be None
        (zeros).

    Returns
    -------
    d_xw : ndarray of shape (T, N, G*H), G = 4
        Gradient with respect to ``xw``, blocks i, f, g, o (the caller turns it into the
        ``weight_ih``, ``bias_ih`` and input gradients).
    d_w_hh : ndarray of shape (G*H, H)
        Gradient with respect to ``w_hh`` (the array that was passed in, e.g. a DropConnect-masked
        one).
    d_b_hh : ndarray of shape (G*H,)
        Gradient with respect to ``b_hh`` (computed even when ``b_hh`` was None).
    d_h0 : pair of ndarrays of shape (N, H)
        ``(dh0, dc0)``, the gradient with respect to ``(h0, c0)``, including what reached them
        through reset steps.
    """
    dhs = d_hs
    A, TC, hprev, cprev, w_hh, h0, c0, keep, reset, *_ = cache
    T, _, N, H = A.shape
    I, F, G, O = A[:, 0], A[:, 1], A[:, 2], A[:, 3]  # (T, N, H) each
    dh_last, dc_last = (None, None) if d_final is None else d_final
    # the factors that do not depend on the recurrence are computed one cache-sized block of
    # steps at a time, just before the loop reaches them (_factors; workspace.block_steps)
    dt = A.dtype
    B = ws.block_steps(T, N * H * dt.itemsize)
    FAC = np.empty((B, 5, N, H), dtype=dt)  # per step: dc/da_i, dc/da_f, dc/da_g, dh/da_o, dh/dc
    tmp = np.empty((B, N, H), dtype=dt)
    carry_h = np.zeros_like(h0) if dh_last is None else np.array(dh_last, dtype=h0.dtype)
    carry_c = np.zeros_like(c0) if dc_last is None else np.array(dc_last, dtype=c0.dtype)
    dh0 = np.zeros_like(h0)
    dc0 = np.zeros_like(c0)
    if N == 1 and keep is None and reset is None:
        # One row: gate-major (T, 4, 1, H) is the memory of (T, 1, 4H), so the four gate gradients
        # are one multiply of (dc, dc, dc, dh) by the four factors, and the same rows feed the product.
        DA4 = ws.empty((T, 4, N, H), dt)
        DA = DA4.reshape(T, N, 4 * H)
        src = np.empty((4, N, H), dtype=dt)  # rows dc, dc, dc, dh
        for t in range(T - 1, -1, -1):
            k = t % B
            if t == T - 1 or k == B - 1:
                fac = _factors(I, F, G, O, TC, cprev, t - k, t + 1, FAC[:k + 1], tmp[:k + 1])
            if dhs is None:
                src[3] = carry_h
            else:
                np.add(carry_h, dhs[t], out=src[3])
            dc = np.multiply(src[3], fac[k, 4], out=src[0])
            dc += carry_c  # dc_t = carry + dh * dh/dc
            src[1:3] = dc
            np.multiply(src, fac[k, :4], out=DA4[t])
            np.matmul(DA[t], w_hh, out=carry_h)
            np.multiply(dc, F[t], out=carry_c)
    else:
        DA = ws.empty((T, N, 4 * H), dt)  # pre-activation gradients, gate order i, f, g, o
        for t in range(T - 1, -1, -1):
            k = t % B
            if t == T - 1 or k == B - 1:
                fac = _factors(I, F, G, O, TC, cprev, t - k, t + 1, FAC[:k + 1], tmp[:k + 1])
            dh = carry_h if dhs is None else carry_h + dhs[t]
            dc = carry_c
            if keep is not None:
                pass_h = np.where(keep[t], 0.0, dh)
                pass_c = np.where(keep[t], 0.0, dc)
                dh = np.where(keep[t], dh, 0.0)
                dc = np.where(keep[t], dc, 0.0)
            dc = dc + dh * fac[k, 4]
            da = DA[t]
            np.multiply(dc, fac[k, 0], out=da[:, :H])
            np.multiply(dc, fac[k, 1], out=da[:, H:2 * H])
            np.multiply(dc, fac[k, 2], out=da[:, 2 * H:3 * H])
            np.multiply(dh, fac[k, 3], out=da[:, 3 * H:])
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


def _factors(I, F, G, O, TC, cprev, lo, hi, out, tmp):
    """The backward's step factors of steps ``lo .. hi-1``, into ``out`` (hi - lo, 5, N, H).

    Per step, gate-major: ``g i (1 - i)`` (dc_t/da_i), ``c_{t-1} f (1 - f)`` (dc_t/da_f),
    ``i (1 - g^2)`` (dc_t/da_g), ``tanh(c) o (1 - o)`` (dh_t/da_o) and ``o (1 - tanh(c)^2)``
    (dh_t/dc_t through ``h = o tanh(c)``), evaluated in that order without temporaries.
    """
    s = slice(lo, hi)
    i, f, g, o, tc, cp = I[s], F[s], G[s], O[s], TC[s], cprev[s]
    fac_i, fac_f, fac_g, fac_o, fac_c = (out[:, k] for k in range(5))
    np.multiply(tc, tc, out=fac_c)
    np.subtract(1.0, fac_c, out=fac_c)
    fac_c *= o
    np.multiply(g, i, out=fac_i)
    fac_i *= np.subtract(1.0, i, out=tmp)
    np.multiply(cp, f, out=fac_f)
    fac_f *= np.subtract(1.0, f, out=tmp)
    np.multiply(g, g, out=fac_g)
    np.subtract(1.0, fac_g, out=fac_g)
    fac_g *= i
    np.multiply(tc, o, out=fac_o)
    fac_o *= np.subtract(1.0, o, out=tmp)
    return out


def recorded(cache) -> Record:
    """Gates i, f, g, o, cell states and (if recorded) pre-activations from a :func:`scan_forward` cache.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    Record
        ``h`` (T, N, H), ``o * tanh(c)`` of each step (before padding is applied; a new array);
        ``h_prev`` (T, N, H), the state each step read (after resets); ``gates``
        ``{"i", "f", "g", "o"}``, each (T, N, H); ``preacts`` the same keys when the forward
        ran with ``record=True``, else empty; ``c`` and ``c_prev`` (T, N, H), the cell state
        after (before padding) and before each step. Apart from ``h`` the arrays are the cache's
        own (views, not copies).
    """
    A, TC, hprev, cprev, *_, C, hs, pre = cache
    h = A[:, 3] * TC  # o * tanh(c): the state each step produced (``hs`` carries padding)
    gates = {k: A[:, j] for j, k in enumerate("ifgo")}
    preacts = {} if pre is None else {k: pre[:, j] for j, k in enumerate("ifgo")}
    return Record(h=h, h_prev=hprev, gates=gates, preacts=preacts, c=C, c_prev=cprev)


def jacobian(rec: Record, w_hh: np.ndarray) -> np.ndarray:
    """Step Jacobian of ``(h_t, c_t)`` with respect to ``(h_{t-1}, c_{t-1})``.

    Blocks ``[[dh/dh, dh/dc], [dc/dh, dc/dc]]``: ``dc/dc = diag(f)`` is the constant error
    carousel (Hochreiter & Schmidhuber 1997; Gers et al. 2000) and
    ``dh/dc = diag(o (1 - tanh(c)^2) f)``. Padding and resets are not part of the step map and
    are not reflected.

    Parameters
    ----------
    rec : Record
        Arrays of shape (..., H) with any leading axes, e.g. (T, N, H) from :func:`recorded` or
        (N, H) for one step; reads the gates i, f, g, o, ``c`` and ``c_prev``.
    w_hh : ndarray of shape (G*H, H), G = 4
        The recurrent weights the record was computed with, row blocks i, f, g, o.

    Returns
    -------
    ndarray of shape (..., S, S), S = 2H
        ``J[..., i, j] = d s_t[i] / d s_{t-1}[j]`` for the state ``s = (h, c)`` concatenated,
        ``h`` first.
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
    """(-1, 1) for each unit of ``h`` (``o * tanh(c)``), unbounded for ``c``.

    Parameters
    ----------
    hidden_size : int
        H.

    Returns
    -------
    list of (low, high) pairs, length S = 2H
        ``(-1.0, 1.0)`` for the H units of ``h``, then ``(None, None)`` for the H units of ``c``.
    """
    return [(-1.0, 1.0)] * hidden_size + [(None, None)] * hidden_size


#: The long short-term memory cell with a forget gate, declared once.
KIND = CellKind(name="lstm", blocks=("i", "f", "g", "o"), gates=("i", "f", "g", "o"), preacts=("i", "f", "g", "o"),
                sigmoid_gates=("i", "f", "o"), keep_gate="f", has_cell=True, options=(), scan_forward=scan_forward,
                scan_backward=scan_backward, recorded=recorded, jacobian=jacobian, bounds=bounds,
                shares_hs=False)  # the backward reads its own buffers, not hs


class LSTMCell(Cell):
    """Long short-term memory cell (Hochreiter & Schmidhuber 1997), PyTorch parameter layout.

    ``(h', c') = cell(x, (h, c))`` with ``c' = f * c + i * g`` and ``h' = o * tanh(c')``.

    ``i, f, o = sigmoid(.)`` and ``g = tanh(.)`` of ``W_ih x + b_ih + W_hh h + b_hh`` (forget
    gate of Gers, Schmidhuber & Cummins 2000).

    Parameters
    ----------
    input_size : int
        I, features per input vector.
    hidden_size : int
        H, hidden units.
    bias : bool, default True
        Whether ``bias_ih`` and ``bias_hh`` (each (4H,)) exist.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)).

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih`` (4H, I), ``weight_hh`` (4H, H), ``bias_ih`` (4H,), ``bias_hh`` (4H,), rows
        in gate order i, f, g, o (G = 4).
    kind : CellKind
        :data:`KIND` (a class attribute).

    Raises
    ------
    TypeError
        A non-bool ``bias``, a size that is not an integer, a dtype other than
        float32/float64, an ``rng`` that is not a Generator.
    ValueError
        A size that is not positive.

    Notes
    -----
    The state is a pair: ``cell(x)`` starts from (0, 0); ``cell.forward(x, (h, c))`` returns
    ``((h', c'), cache)``; ``cell.backward(cache, (dh', dc'))`` returns ``(grads, dx, (dh, dc))``.
    """

    kind = KIND
