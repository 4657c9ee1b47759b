"""The GEMM floor of a hiddenstate layer: the same matrix products its kernels issue, alone, in NumPy.

``floor_jobs(kind, size, dtype)`` returns two zero-argument callables that run exactly the
products one ``forward`` (and one ``forward`` + ``backward``) of our RNN / GRU / GRU-cho / LSTM
layer issues, with the same shapes, operand layouts and call pattern (one batched product per
step where the kernel makes one), into preallocated outputs: no elementwise work, no
allocation. ``ours / floor`` says how far the layer is above what its matrix products cost
(performance notes section 7.8: the floor is the in-process reference to compare against).
"""

from __future__ import annotations

import numpy as np

__all__ = ["floor_jobs"]


def floor_jobs(kind, size, dtype, seed=0):
    """``(fwd, fwd_bwd)``: callables that run the matrix products of one layer call.

    Parameters
    ----------
    kind : {"RNN", "GRU", "GRU-cho", "LSTM"}
        The layer (``GRU``: ``reset_after=True``; ``GRU-cho``: ``reset_after=False``).
    size : tuple of int
        ``(T, N, I, H)``.
    dtype : numpy dtype
        float32 or float64.
    seed : int, default 0
        Seeds the operands (their values do not change the time).

    Returns
    -------
    fwd, fwd_bwd : callable
        No arguments; each runs the products and returns None.
    """
    T, N, I, H = size
    G = {"RNN": 1, "GRU": 3, "GRU-cho": 3, "LSTM": 4}[kind]
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.standard_normal(shape).astype(dtype)
    X, w_ih = r(T * N, I), r(G * H, I)
    xw = np.empty((T * N, G * H), dtype=dtype)
    h = r(N, H)
    if kind == "RNN":
        w_steps = [r(H, H)]  # one (N, H) x (H, H) product per step
    elif kind == "GRU":
        w_steps = [r(3, H, H)]  # one batched product for r, z, n
    elif kind == "GRU-cho":
        w_steps = [r(2, H, H), r(H, H)]  # r and z batched, then W_hn (r * h)
    else:
        w_steps = [r(4, H, H)]
    outs = [np.empty((w.shape[0], N, H) if w.ndim == 3 else (N, H), dtype=dtype) for w in w_steps]
    # backward: per step the state gradient through W_hh (GRU-cho: through W_hn, then r/z)
    if kind == "GRU-cho":
        b_ops = [(r(N, H), r(H, H)), (r(N, 2 * H), r(2 * H, H))]
    else:
        b_ops = [(r(N, G * H), r(G * H, H))]
    b_outs = [np.empty((N, H), dtype=dtype) for _ in b_ops]
    D = r(T * N, G * H)  # d_xw
    Hp = r(T * N, H)
    dw_hh = np.empty((G * H, H), dtype=dtype)
    dw_ih = np.empty((G * H, I), dtype=dtype)
    dx = np.empty((T * N, I), dtype=dtype)

    def fwd():
        np.matmul(X, w_ih.T, out=xw)
        for _ in range(T):
            for w, o in zip(w_steps, outs):
                np.matmul(h, w, out=o)

    def fwd_bwd():
        fwd()
        for _ in range(T):
            for (a, w), o in zip(b_ops, b_outs):
                np.matmul(a, w, out=o)
        if kind == "GRU-cho":  # dW for r, z from h_prev; for n from r * h
            np.matmul(D[:, :2 * H].T, Hp, out=dw_hh[:2 * H])
            np.matmul(D[:, 2 * H:].T, Hp, out=dw_hh[2 * H:])
        else:
            np.matmul(D.T, Hp, out=dw_hh)
        np.matmul(D.T, X, out=dw_ih)
        np.matmul(D, w_ih, out=dx)

    return fwd, fwd_bwd
