"""Lightning attention (MiniMax 2025; Qin et al. 2024): linear attention with a per-head exponential decay.

Per head, with queries, keys and values ``q_t, k_t, v_t`` (D each) and a decay ``gamma_t =
exp(g_t)``, the state is a D x D matrix (keys by values)::

    S_t = gamma_t S_{t-1} + k_t^T v_t          state (N, H, D, D)
    o_t = q_t S_t                              (D,)

In MiniMax-Text-01 ``g_t = -lambda_h`` is a fixed slope per head (the ALiBi-like rates of
:func:`slope_rates`, not learned). ``g_t = 0`` at a padded step carries the state. The kernels
take ``g`` per step (T, N, H), so padding needs nothing special, and give no gradient for it.

Two forms of the same recurrence:

* ``"sequential"``: the loop above, one step at a time (what transformers runs when decoding);
* ``"chunked"``: lightning attention's tiling (Qin et al. 2024, Alg. 1; transformers' prefill
  path): time is cut into chunks of C steps; with ``L_i`` the sum of ``g`` over the chunk up
  to step i and ``S`` the state before the chunk, ::

      o_i   = sum_{j <= i} (q_i . k_j) exp(L_i - L_j) v_j   +   exp(L_i) q_i S        intra + inter
      S_end = exp(L_{C-1}) S + sum_j exp(L_{C-1} - L_j) k_j^T v_j

  a masked C x C product inside the chunk and one state per chunk boundary. Every factor is
  ``exp`` of a sum of ``g <= 0`` over a forward span, so it lies in [0, 1].

The exact backward of each form is written out below (the chunked one per chunk, in reverse:
``dA = (dO V^T) * D``, ``dQ = dA K + exp(L) dO S^T``, ``dK = dA^T Q + exp(L_C - L) V dS^T``,
``dV = A^T dO + Kd dS``, ``dS_start = Qd^T dO + exp(L_C) dS``).

Kernel contract
---------------
``attention_forward(q, k, v, g, S0, *, form="chunked", chunk=64) -> (o, S_T, cache)``
``attention_backward(cache, d_o, d_S_T) -> (d_q, d_k, d_v, d_S0)``
``states(cache) -> (T, N, H, D, D)`` every step's state.

References
----------
MiniMax, "MiniMax-01: Scaling foundation models with lightning attention", arXiv:2501.08313, 2025.
Z. Qin et al., "Lightning attention-2: A free lunch for handling unlimited sequence lengths in
large language models", arXiv:2401.04658, 2024.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FORMS", "attention_backward", "attention_forward", "slope_rates", "states"]

#: The two evaluation forms (option ``form``).
FORMS = ("chunked", "sequential")


def slope_rates(num_heads: int, layer_idx: int = 0, num_layers: int = 1) -> np.ndarray:
    """The decay rates ``lambda_h`` of MiniMax's lightning attention (transformers' ``get_slope_rate``).

    ``lambda_h = 2^(-8 (h+1) / H) * (1 - layer_idx / (num_layers - 1 + 1e-5) + 1e-5)``: the
    ALiBi slopes (Press et al. 2022), smaller in deeper layers.

    Parameters
    ----------
    num_heads : int
        H.
    layer_idx : int, default 0
        The layer's index in the model.
    num_layers : int, default 1
        The model's number of layers.

    Returns
    -------
    ndarray of float64, shape (H,)
    """
    base = 1.0 / (2.0 ** (8.0 / num_heads))
    factor = 1.0 - layer_idx / (num_layers - 1 + 1e-5) + 1e-5
    return base ** (np.arange(num_heads) + 1.0) * factor


def _sequential(q, k, v, g, S0):
    T = q.shape[0]
    g = np.broadcast_to(g, q.shape[:3])
    S_all = np.empty((T,) + S0.shape, dtype=q.dtype)  # (T, N, H, D, D)
    o = np.empty_like(v)
    S = S0
    with np.errstate(under="ignore"):
        gam = np.exp(g)[..., None, None]  # (T, N, H, 1, 1)
    for t in range(T):
        S = gam[t] * S + k[t][..., :, None] * v[t][..., None, :]
        S_all[t] = S
        o[t] = (q[t][..., None, :] @ S)[..., 0, :]
    return o, S_all


def _chunk_factors(gc):
    """For ``g`` of one chunk (N, H, C): L (N, H, C), the decay matrix Dm (N, H, C, C), exp(L), exp(L_C - L), exp(L_C)."""
    L = np.cumsum(gc, axis=-1)
    C = gc.shape[-1]
    low = np.tril(np.ones((C, C), dtype=bool))
    with np.errstate(under="ignore"):
        Dm = np.exp(np.where(low, L[..., :, None] - L[..., None, :], -np.inf))
        return L, Dm, np.exp(L), np.exp(L[..., -1:] - L), np.exp(L[..., -1])


def _factors_for(G, s, e, memo):
    """The chunk factors for steps s..e-1: from ``G`` (N, H, T), or once per chunk length when ``G`` is (H,)."""
    if G.ndim == 1:  # the same decay at every step and row: every chunk of a length has the same factors
        n = e - s
        if n not in memo:
            memo[n] = _chunk_factors(np.broadcast_to(G[None, :, None], (1, G.shape[0], n)))
        return memo[n]
    return _chunk_factors(G[:, :, s:e])


def _to_heads(x):
    """(T, N, H, D) -> (N, H, T, D) contiguous."""
    return np.ascontiguousarray(x.transpose(1, 2, 0, 3))


def _chunked(q, k, v, g, S0, chunk):
    T = q.shape[0]
    Q, K, V = _to_heads(q), _to_heads(k), _to_heads(v)  # (N, H, T, D)
    G = g if g.ndim == 1 else np.ascontiguousarray(g.transpose(1, 2, 0))  # (H,) or (N, H, T)
    memo = {}
    O = np.empty_like(V)
    starts = range(0, T, chunk)
    S_in = np.empty((len(starts),) + S0.shape, dtype=q.dtype)  # the state before every chunk
    S = S0
    for c, s in enumerate(starts):
        e = min(s + chunk, T)
        Qc, Kc, Vc = Q[:, :, s:e], K[:, :, s:e], V[:, :, s:e]
        _, Dm, eL, eK, eC = _factors_for(G, s, e, memo)
        S_in[c] = S
        A = (Qc @ Kc.transpose(0, 1, 3, 2)) * Dm  # (N, H, C, C)
        O[:, :, s:e] = A @ Vc + (eL[..., None] * Qc) @ S
        S = eC[..., None, None] * S + (eK[..., None] * Kc).transpose(0, 1, 3, 2) @ Vc
    return O.transpose(2, 0, 1, 3), S, S_in


def attention_forward(q, k, v, g, S0, *, form: str = "chunked", chunk: int = 64):
    """Linear attention with decay over all T steps (the equations of the module docstring).

    Parameters
    ----------
    q, k, v : ndarray of shape (T, N, H, D)
        Queries, keys and values.
    g : ndarray of shape (T, N, H) or (H,)
        ``log gamma_t <= 0`` of every step and head (``-lambda_h``; 0 at a padded step); shape
        (H,): the same at every step and row (the chunked form's decay factors are then formed
        once per chunk length).
    S0 : ndarray of shape (N, H, D, D)
        The state before step 0 (keys by values).
    form : {"chunked", "sequential"}, default "chunked"
    chunk : int, default 64
        C, steps per chunk of the chunked form.

    Returns
    -------
    o : ndarray of shape (T, N, H, D)
    S_T : ndarray of shape (N, H, D, D)
        The state after the last step (a copy of ``S0`` when T = 0).
    cache : tuple
        For :func:`attention_backward` and :func:`states`.
    """
    if form == "sequential":
        o, S_all = _sequential(q, k, v, g, S0)
        S_T = S_all[-1].copy() if q.shape[0] else S0.copy()
        return o, S_T, (form, chunk, q, k, v, g, S0, S_all)
    o, S_T, S_in = _chunked(q, k, v, g, S0, chunk)
    return o, S_T, (form, chunk, q, k, v, g, S0, np.concatenate([S_in, S_T[None]]))


def attention_backward(cache, d_o, d_S_T):
    """The exact adjoint of :func:`attention_forward`, in the form the forward used.

    Parameters
    ----------
    cache : tuple
        From :func:`attention_forward`.
    d_o : ndarray of shape (T, N, H, D) or None
        Gradient with respect to ``o``.
    d_S_T : ndarray of shape (N, H, D, D) or None
        Gradient with respect to the final state.

    Returns
    -------
    d_q, d_k, d_v : ndarray of shape (T, N, H, D)
    d_S0 : ndarray of shape (N, H, D, D)
    """
    form, chunk, q, k, v, g, S0, saved = cache
    T = q.shape[0]
    d_o = np.zeros_like(v) if d_o is None else d_o
    dS = np.zeros_like(S0) if d_S_T is None else np.array(d_S_T, dtype=S0.dtype, copy=True)
    if form == "sequential":
        d_q, d_k, d_v = np.empty_like(q), np.empty_like(k), np.empty_like(v)
        with np.errstate(under="ignore"):
            gam = np.exp(np.broadcast_to(g, q.shape[:3]))[..., None, None]
        for t in range(T - 1, -1, -1):
            dS += q[t][..., :, None] * d_o[t][..., None, :]  # dL/dS_t in full
            d_q[t] = (d_o[t][..., None, :] @ saved[t].swapaxes(-1, -2))[..., 0, :]
            d_k[t] = (dS @ v[t][..., :, None])[..., 0]
            d_v[t] = (k[t][..., None, :] @ dS)[..., 0, :]
            dS *= gam[t]
        return d_q, d_k, d_v, dS
    Q, K, V, dO = _to_heads(q), _to_heads(k), _to_heads(v), _to_heads(d_o)
    G = g if g.ndim == 1 else np.ascontiguousarray(g.transpose(1, 2, 0))
    memo = {}
    dQ, dK, dV = np.empty_like(Q), np.empty_like(K), np.empty_like(V)
    starts = list(range(0, T, chunk))
    for c in range(len(starts) - 1, -1, -1):
        s = starts[c]
        e = min(s + chunk, T)
        Qc, Kc, Vc, dOc = Q[:, :, s:e], K[:, :, s:e], V[:, :, s:e], dO[:, :, s:e]
        _, Dm, eL, eK, eC = _factors_for(G, s, e, memo)
        S = saved[c]
        A = (Qc @ Kc.swapaxes(-1, -2)) * Dm
        dA = (dOc @ Vc.swapaxes(-1, -2)) * Dm  # (N, H, C, C)
        dQ[:, :, s:e] = dA @ Kc + eL[..., None] * (dOc @ S.swapaxes(-1, -2))
        dK[:, :, s:e] = dA.swapaxes(-1, -2) @ Qc + eK[..., None] * (Vc @ dS.swapaxes(-1, -2))
        dV[:, :, s:e] = A.swapaxes(-1, -2) @ dOc + (eK[..., None] * Kc) @ dS
        dS = (eL[..., None] * Qc).swapaxes(-1, -2) @ dOc + eC[..., None, None] * dS
    d_q, d_k, d_v = (x.transpose(2, 0, 1, 3) for x in (dQ, dK, dV))
    return d_q, d_k, d_v, dS


def states(cache) -> np.ndarray:
    """Every step's state ``S_t`` from a forward cache.

    For the chunked form the states inside a chunk are recomputed by the per-step loop from the
    chunk's start; a chunk's last state is the one the chunked form carried.

    Parameters
    ----------
    cache : tuple
        From :func:`attention_forward`.

    Returns
    -------
    ndarray of shape (T, N, H, D, D)
    """
    form, chunk, q, k, v, g, S0, saved = cache
    if form == "sequential":
        return saved
    T = q.shape[0]
    out = np.empty((T,) + S0.shape, dtype=q.dtype)
    for c, s in enumerate(range(0, T, chunk)):
        e = min(s + chunk, T)
        out[s:e] = _sequential(q[s:e], k[s:e], v[s:e], g if g.ndim == 1 else g[s:e], saved[c])[1]
        out[e - 1] = saved[c + 1]  # a chunk's last state as the chunked form computed it (the carried state)
    return out
