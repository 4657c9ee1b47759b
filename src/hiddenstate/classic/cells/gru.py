"""GRU: scan kernels (forward and exact BPTT side by side) and :class:`GRUCell`.

Gate order r, z, n (PyTorch). Two forms of the candidate:

* ``reset_after=False`` (default; Cho et al. 2014, Eq. 8, and Keras ``reset_after=False``):
  ``n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)``: the reset gate scales the previous state
  *before* the recurrent product, so each step needs a second (N, H) x (H, H) product.
* ``reset_after=True`` (PyTorch, cuDNN, Keras default): ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``:
  one (N, H) x (H, 3H) product per step serves all three gates.

Both end in ``h_t = z * h_{t-1} + (1 - z) * n`` (Cho et al. 2014, Eq. 7;
:func:`hiddenstate.classic.textbook.hidden_state_update`). Kernel contract: :mod:`hiddenstate.classic.cells.base`
(repeated on :func:`scan_forward` and :func:`scan_backward`).

Speed (``benchmarks/bench_layers.py``): the forward keeps the gates gate-major, one contiguous
(3, N, H) block per step, computed by one batched product ``h @ W_hh^T`` per gate (r and z only
for the Cho form, whose candidate needs ``r * h`` first) and a ``tanh``-form sigmoid with
pre-halved weights (one (1, H) x (H, G*H) product when N = 1); the backward multiplies by factors
computed one cache-sized block of steps at a time and computes the weight gradients with one
product after the time loop. The large buffers come from :mod:`hiddenstate.core.workspace`, reused
across calls of one shape (never while a caller holds them): fresh ones cost page faults.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells.base import Cell, CellKind, Record
from hiddenstate.core import workspace as ws
from hiddenstate.core.functional import previous_states
from hiddenstate.core.validation import boolean

__all__ = ["KIND", "GRUCell", "jacobian", "recorded", "scan_backward", "scan_forward", "scan_infer"]


def _gate_weights(w_hh, half, G, N):
    """``W_hh^T`` of the first G gates, rows r, z pre-halved: (G, H, H), or (H, G*H) for N = 1 (one product).

    In pooled buffers (:func:`hiddenstate.core.workspace.scratch`): page-faulted in fresh at every
    call, these copies were 3.4 of the 3.5 ms of one step of a 256-unit GRU (``layer_map``).
    """
    H = w_hh.shape[1]
    w3 = w_hh[:G * H].reshape(G, H, H)  # (G, H_out, H_in)
    if N == 1:  # (H_in, G, H_out) in one pass
        out = ws.scratch((H, G, H), w_hh.dtype)
        return np.multiply(w3.transpose(2, 0, 1), half[:G, 0], out=out).reshape(H, G * H)
    return np.multiply(w3.transpose(0, 2, 1), half[:G], out=ws.scratch((G, H, H), w_hh.dtype))


def scan_forward(xw, h0, w_hh, b_hh, keep=None, reset=None, *, record=False, reset_after=False):
    """GRU recurrence over all T steps: the forward scan kernel of the GRU (G = 3, rows r, z, n).

    ``r = sigmoid(xw_r + W_hr h + b_hr)``, ``z = sigmoid(xw_z + W_hz h + b_hz)``,
    ``n = tanh(xw_n + W_hn (r * h) + b_hn)`` (Cho form) or ``n = tanh(xw_n + r * (W_hn h + b_hn))``
    (``reset_after``), ``h_t = z * h_{t-1} + (1 - z) * n`` (Cho et al. 2014, Eqs. 5-8), for
    ``t = 0 .. T-1`` starting from ``h0``. This is the kernel contract of
    :mod:`hiddenstate.classic.cells.base`; nothing is validated, every array must have the dtype of
    ``xw``.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 3
        The input projection ``x_t W_ih^T + b_ih`` of every step, column blocks in gate order
        r, z, n, computed by the caller in one matrix multiply. Not modified.
    h0 : ndarray of shape (N, H)
        The initial state.
    w_hh : ndarray of shape (G*H, H)
        ``weight_hh``, row blocks r, z, n.
    b_hh : ndarray of shape (G*H,) or None
        ``bias_hh``, blocks r, z, n; None for a layer without bias.
    keep : ndarray of bool, shape (T, N, 1), or None
        False where step ``t`` of column ``n`` is padding: the state is carried unchanged
        (``hs[t] = hs[t-1]``). None: every step is valid.
    reset : ndarray of bool, shape (T, N, 1), or None
        True where step ``t`` of column ``n`` starts from ``h0`` instead of the previous state;
        no gradient crosses that boundary (it goes to ``d_h0`` instead). None: never.
    record : bool, default False
        Also keep the pre-activations of r, z and n in the cache (for :func:`recorded`); the gate
        values are kept in any case.
    reset_after : bool, default False
        Where the reset gate acts: False, on ``h`` before the product with ``W_hn`` (the paper's
        Eq. 8); True, on ``W_hn h + b_hn`` (PyTorch, cuDNN).

    Returns
    -------
    hs : ndarray of shape (T, N, H)
        Every step's state (at padded steps, the carried state).
    final : ndarray of shape (N, H)
        The state after the last step (each column's state at its last valid step); a copy of
        ``h0`` when T = 0.
    cache : tuple
        Opaque; pass it to :func:`scan_backward` and :func:`recorded`.
    """
    T, N, H3 = xw.shape
    H = H3 // 3
    dt = xw.dtype
    # A[t] is one contiguous (3, N, H) block per step (gate-major r, z, n, so every elementwise
    # operand in the loop is contiguous). It starts as the input projection plus the folded biases
    # and each step turns it into the gate values in place. The r and z rows are pre-halved (exact
    # in binary floating point): sigmoid(a) = 0.5 * tanh(a / 2) + 0.5 then costs one tanh and two
    # in-place operations.
    half = np.array([0.5, 0.5, 1.0], dtype=dt)[:, None, None]  # (3, 1, 1)
    # It is filled one cache-sized block of steps at a time, just before the loop reads it.
    xw4 = xw.reshape(T, N, 3, H).transpose(0, 2, 1, 3)  # (T, 3, N, H) view
    A = ws.empty((T, 3, N, H), dt)
    b_rz = None if b_hh is None else b_hh[:2 * H].reshape(2, 1, H) * 0.5
    b_in = b_hh[2 * H:] if (b_hh is not None and not reset_after) else None
    B = ws.block_steps(T, 3 * N * H * dt.itemsize)
    b_hn = b_hh[2 * H:] if (b_hh is not None and reset_after) else None
    G = 3 if reset_after else 2  # gates served by the one batched product with h
    w_g = ws.derived(w_hh, ("gru", G, N == 1), lambda: _gate_weights(w_hh, half, G, N))  # (G, H, H) or (H, G*H)
    w_n_t = ws.derived(w_hh, "gru_n", lambda: ws.transposed(w_hh[2 * H:]))  # (H, H)
    S = ws.empty((T, N, H), dt)  # reset_after: W_hn h + b_hn; else r * h (the input of W_hn)
    hprev = ws.empty((T, N, H), dt)
    hnew = ws.empty((T, N, H), dt)
    hs = hnew if keep is None else ws.empty((T, N, H), dt)
    gh = np.empty((G, N, H), dtype=dt)
    gh_out = gh.reshape(1, G * H) if N == 1 else gh
    rs = np.empty((N, H), dtype=dt)
    d = np.empty((N, H), dtype=dt)
    pre = ws.empty((T, 3, N, H), dt) if record else None  # pre-activations, only when recording
    h = h0
    for t in range(T):
        if t % B == 0:
            blk = np.multiply(xw4[t:t + B], half, out=A[t:t + B])
            if b_rz is not None:
                blk[:, :2] += b_rz
            if b_in is not None:
                blk[:, 2] += b_in
        if reset is not None:
            h = np.where(reset[t], h0, h)
        np.matmul(h, w_g, out=gh_out)  # (G, N, H): W_hr h / 2, W_hz h / 2 (and W_hn h) in one product
        rz, n, s = A[t, :2], A[t, 2], S[t]
        rz += gh[:2]
        if pre is not None:
            np.multiply(rz, 2.0, out=pre[t, :2])  # undo the exact halving
        np.tanh(rz, out=rz)  # r and z: sigmoid = 0.5 * tanh(a / 2) + 0.5
        rz *= 0.5
        rz += 0.5
        r, z = rz
        if reset_after:
            if b_hn is not None:
                np.add(gh[2], b_hn, out=s)
            else:
                s[...] = gh[2]
            n += np.multiply(r, s, out=rs)
        else:
            np.multiply(r, h, out=s)
            n += np.matmul(s, w_n_t, out=rs)
        if pre is not None:
            pre[t, 2] = n
        np.tanh(n, out=n)
        np.subtract(h, n, out=d)  # gru_blend(z, h, n), without its temporary: n + z * (h - n)
        d *= z
        a = np.add(n, d, out=hnew[t])
        if keep is not None:
            hs[t] = np.where(keep[t], a, h)
        h = hs[t]
    previous_states(hs, h0, reset, out=hprev)  # hprev[t]: what step t read, in one pass
    cache = (A, S, hprev, w_hh, h0, keep, reset, reset_after, hnew, pre)
    return hs, h.copy() if T else h0.copy(), cache



def scan_infer(xw, h0, w_hh, b_hh, keep=None, reset=None, *, reset_after=False):
    """:func:`scan_forward` for a run that no backward pass follows: the same ``hs`` and ``final``, no cache.

    The same operations in the same order (bit-identical results), but every per-step value
    lives in one (3, N, H) block that is reused at every step and stays in the CPU cache: no
    (T, 3, N, H) gate buffer, no ``s`` and ``h_prev`` of every step, no copy of the input
    projection (its gate columns are read in place). ``xw`` is not modified.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 3
        The input projection ``x_t W_ih^T + b_ih`` of every step, blocks r, z, n.
    h0 : ndarray of shape (N, H)
        The initial state.
    w_hh : ndarray of shape (G*H, H)
        ``weight_hh``, row blocks r, z, n.
    b_hh : ndarray of shape (G*H,) or None
        ``bias_hh``; None for a layer without bias.
    keep : ndarray of bool, shape (T, N, 1), or None
        As :func:`scan_forward`.
    reset : ndarray of bool, shape (T, N, 1), or None
        As :func:`scan_forward`.
    reset_after : bool, default False
        As :func:`scan_forward`.

    Returns
    -------
    hs : ndarray of shape (T, N, H)
        Every step's state, as :func:`scan_forward`'s.
    final : ndarray of shape (N, H)
        As :func:`scan_forward`'s (a new array).
    """
    T, N, H3 = xw.shape
    H = H3 // 3
    dt = xw.dtype
    half = np.array([0.5, 0.5, 1.0], dtype=dt)[:, None, None]
    xw4 = xw.reshape(T, N, 3, H).transpose(0, 2, 1, 3)  # (T, 3, N, H) view
    b_rz = None if b_hh is None else b_hh[:2 * H].reshape(2, 1, H) * 0.5
    b_in = b_hh[2 * H:] if (b_hh is not None and not reset_after) else None
    b_hn = b_hh[2 * H:] if (b_hh is not None and reset_after) else None
    G = 3 if reset_after else 2
    w_g = ws.derived(w_hh, ("gru", G, N == 1), lambda: _gate_weights(w_hh, half, G, N))
    w_n_t = None if reset_after else ws.derived(w_hh, "gru_n", lambda: ws.transposed(w_hh[2 * H:]))
    hs = ws.empty((T, N, H), dt)
    a = np.empty((3, N, H), dtype=dt)  # this step's r, z, n
    gh = np.empty((G, N, H), dtype=dt)
    gh_out = gh.reshape(1, G * H) if N == 1 else gh
    s, rs, d = (np.empty((N, H), dtype=dt) for _ in range(3))
    hn = np.empty((N, H), dtype=dt) if keep is not None else None
    h = h0
    for t in range(T):
        if reset is not None:
            h = np.where(reset[t], h0, h)
        xt = xw4[t]
        np.matmul(h, w_g, out=gh_out)
        rz = np.multiply(xt[:2], 0.5, out=a[:2])
        if b_rz is not None:
            rz += b_rz
        rz += gh[:2]
        np.tanh(rz, out=rz)  # sigmoid = 0.5 * tanh(a / 2) + 0.5, as scan_forward
        rz *= 0.5
        rz += 0.5
        r, z = rz
        n = a[2]
        if reset_after:
            if b_hn is not None:
                np.add(gh[2], b_hn, out=s)
            else:
                s[...] = gh[2]
            np.add(xt[2], np.multiply(r, s, out=rs), out=n)
        else:
            if b_in is not None:
                np.add(xt[2], b_in, out=n)
            else:
                n[...] = xt[2]
            np.multiply(r, h, out=s)
            n += np.matmul(s, w_n_t, out=rs)
        np.tanh(n, out=n)
        np.subtract(h, n, out=d)
        d *= z
        if keep is None:
            h = np.add(n, d, out=hs[t])
        else:
            np.copyto(hs[t], np.where(keep[t], np.add(n, d, out=hn), h))
            h = hs[t]
    return hs, h.copy() if T else h0.copy()

def scan_backward(cache, d_hs, d_final):
    """Exact backpropagation through time through :func:`scan_forward` (the backward kernel).

    Walks the steps in reverse with the factors that do not depend on the recurrence
    precomputed for all steps, passes the state gradient straight through padded steps and cuts
    it at reset steps; the weight gradients are one matrix multiply after the time loop (kernel
    contract of :mod:`hiddenstate.classic.cells.base`).

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.
    d_hs : ndarray of shape (T, N, H) or None
        Gradient of the loss with respect to ``hs`` (None: zeros).
    d_final : ndarray of shape (N, H) or None
        Gradient with respect to ``final`` (None: zeros).

    Returns
    -------
    d_xw : ndarray of shape (T, N, G*H), G = 3
        Gradient with respect to ``xw``, blocks r, z, n (the caller turns it into the
        ``weight_ih``, ``bias_ih`` and input gradients).
    d_w_hh : ndarray of shape (G*H, H)
        Gradient with respect to ``w_hh`` (the array that was passed in, e.g. a DropConnect-masked
        one).
    d_b_hh : ndarray of shape (G*H,)
        Gradient with respect to ``b_hh`` (computed even when ``b_hh`` was None).
    d_h0 : ndarray of shape (N, H)
        Gradient with respect to ``h0``, including what reached it through reset steps.
    """
    dhs = d_hs
    A, S, hprev, w_hh, h0, keep, reset, reset_after, _, _ = cache
    T, N, H = S.shape
    R, Z, Nc = A[:, 0], A[:, 1], A[:, 2]  # (T, N, H) each
    # the factors that do not depend on the recurrence are computed one cache-sized block of
    # steps at a time, just before the loop reaches them (_factors; workspace.block_steps)
    dt = S.dtype
    if reset_after:
        DGH = ws.empty((T, N, 3 * H), dt)  # gradient w.r.t. W_hh h (+ b_hh)
        w_all = w_hh
    else:
        DGH = ws.empty((T, N, 2 * H), dt)
        w_all = w_hh[: 2 * H]
        w_n = w_hh[2 * H:]
    DAN = ws.empty((T, N, H), dt)  # gradient w.r.t. a_n
    carry = np.zeros_like(h0) if d_final is None else np.array(d_final, dtype=h0.dtype)
    dh0 = np.zeros_like(h0)
    B = ws.block_steps(T, N * H * dt.itemsize)
    fbuf = np.empty((3, B, N, H), dtype=dt)
    for t in range(T - 1, -1, -1):
        k = t % B
        if t == T - 1 or k == B - 1:  # the factors of the block of steps [t - k, t]
            lo = t - k
            fac_n, fac_z, fac_r = _factors(R[lo:t + 1], Z[lo:t + 1], Nc[lo:t + 1], hprev[lo:t + 1],
                                           S[lo:t + 1] if reset_after else None, fbuf[:, :k + 1])
        dh = carry if dhs is None else carry + dhs[t]
        if keep is not None:
            dpass = np.where(keep[t], 0.0, dh)
            dh = np.where(keep[t], dh, 0.0)
        dan = np.multiply(dh, fac_n[k], out=DAN[t])
        dg = DGH[t]
        np.multiply(dh, fac_z[k], out=dg[:, H:2 * H])
        if reset_after:
            np.multiply(dan, fac_r[k], out=dg[:, :H])
            np.multiply(dan, R[t], out=dg[:, 2 * H:])
            dh_prev = dg @ w_all
        else:
            drh = dan @ w_n  # (N, H): gradient w.r.t. r * h
            np.multiply(drh, fac_r[k], out=dg[:, :H])
            dh_prev = dg @ w_all
            drh *= R[t]
            dh_prev += drh
        dh *= Z[t]
        dh_prev += dh
        if keep is not None:
            dh_prev += dpass
        if reset is not None:
            dh0 += np.where(reset[t], dh_prev, 0.0)
            dh_prev = np.where(reset[t], 0.0, dh_prev)
        carry = dh_prev
    dh0 += carry
    hp2 = hprev.reshape(-1, H)
    if reset_after:
        dxw = ws.empty((T, N, 3 * H), dt)
        dxw[:, :, :2 * H] = DGH[:, :, :2 * H]
        dxw[:, :, 2 * H:] = DAN
        dw_hh = DGH.reshape(-1, 3 * H).T @ hp2
        db_hh = DGH.sum(axis=1).sum(axis=0)
    else:
        dxw = np.concatenate([DGH, DAN], axis=2, out=ws.empty((T, N, 3 * H), dt))
        dw_hh = np.concatenate([DGH.reshape(-1, 2 * H).T @ hp2, DAN.reshape(-1, H).T @ S.reshape(-1, H)], axis=0)
        db_hh = dxw.sum(axis=1).sum(axis=0)
    return dxw, dw_hh, db_hh, dh0


def _factors(R, Z, Nc, hprev, S, out):
    """The backward's step factors that do not depend on the recurrence, for a block of steps.

    ``(1 - z)(1 - n^2)`` (dh_t/da_n), ``(h - n) z (1 - z)`` (dh_t/da_z) and ``s r (1 - r)``
    (reset_after) or ``h r (1 - r)`` (Cho form), evaluated in that order without temporaries,
    into ``out`` (3, B, N, H).
    """
    fac_n, fac_z, fac_r = out
    omz = np.subtract(1.0, Z, out=fac_r)  # 1 - z, in fac_r's memory until fac_r is computed
    np.multiply(Nc, Nc, out=fac_n)
    np.subtract(1.0, fac_n, out=fac_n)
    fac_n *= omz
    np.subtract(hprev, Nc, out=fac_z)
    fac_z *= Z
    fac_z *= omz
    np.subtract(1.0, R, out=fac_r)
    fac_r *= R
    fac_r *= hprev if S is None else S
    return fac_n, fac_z, fac_r


def recorded(cache) -> Record:
    """Gates r, z, candidate n, ``s`` and (if recorded) pre-activations from a :func:`scan_forward` cache.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    Record
        ``h`` (T, N, H), the state each step produced (before padding is applied); ``h_prev``
        (T, N, H), the state each step read (after resets); ``gates`` ``{"r", "z", "n"}``, each
        (T, N, H); ``preacts`` the same keys when the forward ran with ``record=True``, else
        empty; ``s`` (T, N, H), ``W_hn h + b_hn`` (``reset_after=True``) or ``r * h`` (Cho form).
        The arrays are the cache's own (views, not copies).
    """
    A, S, hprev, *_, hnew, pre = cache
    gates = {"r": A[:, 0], "z": A[:, 1], "n": A[:, 2]}
    preacts = {} if pre is None else {"r": pre[:, 0], "z": pre[:, 1], "n": pre[:, 2]}
    return Record(h=hnew, h_prev=hprev, gates=gates, preacts=preacts, s=S)


def jacobian(rec: Record, w_hh: np.ndarray, *, reset_after: bool = False) -> np.ndarray:
    """Step Jacobian ``dh_t/dh_{t-1}`` of the GRU map ``h_t = z h_{t-1} + (1 - z) n``.

    ``diag(z) + diag((1 - z)(1 - n^2)) dA_n/dh + diag((h_{t-1} - n) z (1 - z)) W_hz``, where
    ``A_n`` is the candidate's argument, which depends on ``h`` through ``r`` and, in the Cho
    form, through ``r * h`` (Cho et al. 2014, Eqs. 5-8). The first term is the carried part, the
    "gradient highway". Padding and resets are not part of the step map and are not reflected.

    Parameters
    ----------
    rec : Record
        Arrays of shape (..., H) with any leading axes, e.g. (T, N, H) from :func:`recorded` or
        (N, H) for one step; reads the gates r, z, n, ``h_prev`` and ``s``.
    w_hh : ndarray of shape (G*H, H), G = 3
        The recurrent weights the record was computed with, row blocks r, z, n.
    reset_after : bool, default False
        The form of the candidate the record was computed with.

    Returns
    -------
    ndarray of shape (..., H, H)
        ``J[..., i, j] = d h_t[i] / d h_{t-1}[j]``.
    """
    g = rec.gates
    r, z, n, hp, s = g["r"], g["z"], g["n"], rec.h_prev, rec.s
    H = z.shape[-1]
    W_r, W_z, W_n = w_hh[:H], w_hh[H:2 * H], w_hh[2 * H:]
    dr, dz, dn = r * (1.0 - r), z * (1.0 - z), 1.0 - n * n
    # the same products in the same order as J = (1-z) dn M + (h-n) dz W_z + diag(z), written into
    # scratch buffers: fresh (H, H) temporaries page-faulted in at every call were most of the cost
    # of one Jacobian (the fixed-point search asks for hundreds)
    shape = np.broadcast_shapes(r.shape, z.shape, n.shape, hp.shape) + (H,)
    dt = np.result_type(z, w_hh)
    Jz = np.multiply(dz[..., :, None], W_z, out=ws.scratch(shape, dt))
    M = ws.scratch(shape, dt)
    if reset_after:
        np.multiply(r[..., :, None], W_n, out=M)
        M += np.multiply((s * dr)[..., :, None], W_r, out=ws.scratch(shape, dt))
    else:
        np.multiply(W_n, r[..., None, :], out=M)
        M += W_n @ np.multiply((hp * dr)[..., :, None], W_r, out=ws.scratch(shape, dt))
    M *= dn[..., :, None]
    J = np.multiply((1.0 - z)[..., :, None], M, out=np.empty(shape, dt) if dt == np.float64 else M)
    Jz *= (hp - n)[..., :, None]
    J += Jz
    J = J if dt == np.float64 else J.astype(np.float64)  # float64, as J + np.eye(H) * z always was
    J.reshape(*shape[:-2], H * H)[..., ::H + 1] += z  # + diag(z): the carried part
    return J


def bounds(hidden_size: int, *, reset_after: bool = False) -> list:
    """(-1, 1) per unit: a GRU state is a convex combination of its previous state and a tanh candidate.

    Parameters
    ----------
    hidden_size : int
        H.
    reset_after : bool, default False
        Accepted for a uniform signature; the box is the same for both forms.

    Returns
    -------
    list of (low, high) pairs, length H
        ``(-1.0, 1.0)`` for every unit.
    """
    return [(-1.0, 1.0)] * hidden_size


#: The gated recurrent unit (Cho et al. 2014; both places of the reset gate), declared once.
KIND = CellKind(name="gru", blocks=("r", "z", "n"), gates=("r", "z", "n"), preacts=("r", "z", "n"),
                sigmoid_gates=("r", "z"), keep_gate="z", has_cell=False, options=("reset_after",),
                scan_forward=scan_forward, scan_backward=scan_backward, recorded=recorded, jacobian=jacobian,
                bounds=bounds, shares_hs=False)  # the backward reads its own buffers, not hs


class GRUCell(Cell):
    """Gated recurrent unit cell (Cho et al. 2014), PyTorch parameter layout.

    ``r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)``, ``z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)``,
    ``n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)`` (``reset_after=False``, the paper) or
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` (``reset_after=True``, ``torch.nn.GRUCell``),
    ``h' = z * h + (1 - z) * n``.

    Parameters
    ----------
    input_size : int
        I, features per input vector.
    hidden_size : int
        H, hidden units.
    bias : bool, default True
        Whether ``bias_ih`` and ``bias_hh`` (each (3H,)) exist.
    reset_after : bool, default False
        Where the reset gate acts: False, the paper's form (Cho et al. 2014, Eq. 8); True,
        PyTorch's; see :mod:`hiddenstate.classic.cells.gru`.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)).

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih`` (3H, I), ``weight_hh`` (3H, H), ``bias_ih`` (3H,), ``bias_hh`` (3H,), rows in
        gate order r, z, n (G = 3).
    kind : CellKind
        :data:`KIND` (a class attribute).

    Raises
    ------
    TypeError
        A non-bool ``reset_after`` or ``bias``, a size that is not an integer, a dtype other
        than float32/float64, an ``rng`` that is not a Generator.
    ValueError
        A size that is not positive.

    Notes
    -----
    ``h = cell(x, h)`` with ``x`` (N, I) or (I,), ``h`` (N, H) or (H,) (None: zeros);
    ``h, cache = cell.forward(x, h)``; ``grads, dx, dh = cell.backward(cache, dh_out)``. With
    ``reset_after=True`` equivalent to ``torch.nn.GRUCell`` with the same weights.
    """

    kind = KIND

    def __init__(self, input_size, hidden_size, *, bias=True, reset_after=False, dtype=np.float64, rng=None):
        self.reset_after = boolean("reset_after", reset_after)
        super().__init__(input_size, hidden_size, bias=bias, dtype=dtype, rng=rng)
