"""Gradient flow over time: how much of a loss at the last step reaches the state k steps back.

By the chain rule the gradient reaching the state ``h_t`` from a loss ``L`` on the last state
``h_T`` is a product of step Jacobians (Pascanu, Mikolov and Bengio 2013, Eq. 5):

.. math:: \\frac{\\partial L}{\\partial h_t} = \\frac{\\partial L}{\\partial h_T}
          \\prod_{s=t+1}^{T} \\frac{\\partial h_s}{\\partial h_{s-1}} .

For a tanh RNN ``dh_s/dh_{s-1} = diag(1 - h_s^2) W_hh``, so ``||dh_T/dh_t|| <= sigma_max(W_hh)^(T-t)``
and the gradient must vanish geometrically when ``sigma_max(W_hh) < 1/gamma`` with ``gamma`` the
largest slope of the nonlinearity (1 for tanh, 1/4 for the logistic sigmoid). A GRU whose update
gate is near one has ``dh_s/dh_{s-1} ≈ diag(z) ≈ I``: the state, and its gradient, are carried
(the "gradient highway"; Cho et al. 2014; Jozefowicz, Zaremba and Sutskever 2015).

This module measures it three ways:

* :func:`hidden_gradient_norms` — ``||dL/dh_t||`` for every ``t`` from the layer's own BPTT
  (:meth:`~hiddenstate.GRU.backward`), with ``L = <v, h_T>``;
* :func:`jacobian_flow` — Frobenius norm and largest singular value of ``dh_T/dh_{T-k}`` for every
  lag ``k``, from the analytic step Jacobians of a :func:`~hiddenstate.probe.trace.trace`
  (:func:`step_jacobians`) or from any stack of Jacobians you provide;
* :func:`spectral_bounds` — ``sigma_max`` of every recurrent weight block against ``1/gamma``.

References
----------
R. Pascanu, T. Mikolov, Y. Bengio, "On the difficulty of training recurrent neural networks",
ICML 2013, PMLR 28(3):1310-1318 (arXiv:1211.5063).
Y. Bengio, P. Simard, P. Frasconi, "Learning long-term dependencies with gradient descent is
difficult", IEEE Trans. Neural Networks 5(2):157-166, 1994.
S. Hochreiter, "Untersuchungen zu dynamischen neuronalen Netzen", diploma thesis, TU München, 1991.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.classic.cells.base import Record
from hiddenstate.core.validation import choice, float_array, index, nonnegative_int, shape_str
from hiddenstate.probe.bounds import spectral_bounds
from hiddenstate.probe.trace import LayerTrace, layer_trace, sequence_layer, trace

__all__ = [
    "GradientNorms",
    "JacobianFlow",
    "backprop_hidden",
    "hidden_gradient_norms",
    "jacobian_flow",
    "jacobians_at",
    "sensitivity",
    "spectral_bounds",
    "step_jacobians",
]

# spectral_bounds lives in hiddenstate.probe.bounds (imported above: part of this module's API)


# --------------------------------------------------------------------------- step Jacobians

def _gather(a, t_idx):
    """a (T, N, ...) at times t_idx (K, N) -> (K, N, ...); negative indices give zeros."""
    n = np.arange(a.shape[1])[None, :]
    return a[np.clip(t_idx, 0, None), n]


def jacobians_at(lt: LayerTrace, t_idx: np.ndarray) -> np.ndarray:
    """Step Jacobians ``d state_t / d state_{t-1}`` of a trace in processing order, at chosen times.

    The per-step math is the cell kind's (:attr:`hiddenstate.classic.cells.base.CellKind.jacobian`);
    this function adds what a ragged, reset batch needs.

    Parameters
    ----------
    lt : LayerTrace
        In processing order (:meth:`~hiddenstate.probe.trace.LayerTrace.in_processing_order`).
    t_idx : ndarray of int, shape (K, N)
        The step of each sequence to take, per row; negative entries give zero matrices.

    Returns
    -------
    ndarray of shape (K, N, S, S), float
        S = H, or 2H for the LSTM state (h, c); identity at padded steps, zero at steps that
        were reset and at ``t_idx < 0``.

    Raises
    ------
    TypeError, ValueError
        ``lt`` not a LayerTrace; ``t_idx`` not integers of shape (K, N), or a step >= T.
    """
    t_idx, T, N = np.asarray(t_idx), *layer_trace(lt).mask.shape
    if t_idx.dtype.kind not in "iu" or t_idx.ndim != 2 or t_idx.shape[1] != N or (t_idx.size and t_idx.max() >= T):
        kind = TypeError if t_idx.dtype.kind not in "iu" else ValueError
        raise kind(f"t_idx must be integers < T={T} of shape (K, N={N}); got {shape_str(t_idx.shape)} {t_idx.dtype}.")
    g = lambda a: None if a is None else _gather(a, t_idx)
    rec = Record(h=g(lt.h), h_prev=g(lt.h_prev), gates={k: g(v) for k, v in lt.gates.items()},
                 preacts={k: g(v) for k, v in lt.preacts.items()}, c=g(lt.c), c_prev=g(lt.c_prev), s=g(lt.s))
    J = lt.cell.jacobian(rec, lt.weights.get("weight_hh"), **lt.options)
    S = J.shape[-1]
    valid = _gather(lt.mask, t_idx) & (t_idx >= 0)
    J = np.where(valid[..., None, None], J, np.eye(S))  # padding carries the state unchanged
    if lt.reset is not None:
        J = np.where(_gather(lt.reset, t_idx)[..., None, None] & valid[..., None, None], 0.0, J)
    J = np.where((t_idx >= 0)[..., None, None], J, 0.0)
    return J


def step_jacobians(lt: LayerTrace) -> np.ndarray:
    """Jacobian of every step with respect to the state it read, in processing order.

    Parameters
    ----------
    lt : LayerTrace
        One layer and direction of a :func:`~hiddenstate.probe.trace.trace`.

    Returns
    -------
    ndarray of shape (T, N, S, S), float
        ``J[t, n] = d state_t / d state_{t-1}`` for sequence ``n`` (column convention:
        ``J[t, n, i, j] = d state_t[i] / d state_{t-1}[j]``). ``S = H``, or ``2H`` for the LSTM,
        whose state is ``(h, c)`` stacked (``h`` first). Identity at padded steps; zero at steps
        that were reset. For the backward direction, time runs in the order that direction read
        the sequence (see :meth:`~hiddenstate.probe.trace.LayerTrace.in_processing_order`).
    """
    p = layer_trace(lt).in_processing_order()
    T, N = p.mask.shape
    t_idx = np.repeat(np.arange(T)[:, None], N, axis=1)
    with np.errstate(under="ignore"):
        return jacobians_at(p, t_idx)


# --------------------------------------------------------------------------- products against lag

@dataclass(frozen=True)
class JacobianFlow:
    """Norms of ``dh_T / dh_{T-k}`` against the lag ``k`` (``T`` = each sequence's last step).

    Attributes
    ----------
    lags : ndarray of int, shape (K+1,)
    frobenius : ndarray of shape (K+1,)
        Mean over sequences of the Frobenius norm of the product (``sqrt(S)`` at lag 0).
    spectral : ndarray of shape (K+1,)
        Mean over sequences of its largest singular value (1 at lag 0).
    per_sequence_frobenius, per_sequence_spectral : ndarray of shape (K+1, N)
        The same per sequence; NaN where the sequence is shorter than the lag.
    block : str
        ``"h"`` or ``"state"`` (LSTM: which block of the ``(h, c)`` product was measured).
    """

    lags: np.ndarray
    frobenius: np.ndarray
    spectral: np.ndarray
    per_sequence_frobenius: np.ndarray
    per_sequence_spectral: np.ndarray
    block: str = "h"

    def __repr__(self) -> str:
        """``JacobianFlow(block 'h', lags 0..60, σ_max 1 -> 0.0031, Frobenius 8 -> 0.0052)``."""
        return (f"JacobianFlow(block {self.block!r}, lags 0..{int(self.lags[-1])}, σ_max {self.spectral[0]:.4g} -> "
                f"{self.spectral[-1]:.4g}, Frobenius {self.frobenius[0]:.4g} -> {self.frobenius[-1]:.4g})")

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import jacobian_flow_html

        return jacobian_flow_html(self)


def _flow(J_of_lag, lens, K, S, block, H, N):
    P = np.broadcast_to(np.eye(S), (N, S, S)).copy()
    fro = np.full((K + 1, N), np.nan)
    spec = np.full((K + 1, N), np.nan)
    for k in range(K + 1):
        if k > 0:
            P = P @ J_of_lag(k)  # (N, S, S): dstate_T / dstate_{T-k}
        B = P[:, :H, :H] if block == "h" else P
        ok = lens >= k
        fro[k] = np.where(ok, np.sqrt((B * B).sum(axis=(1, 2))), np.nan)
        spec[k] = np.where(ok, np.linalg.svd(B, compute_uv=False)[:, 0], np.nan)
    return fro, spec


def _nanmean(a):
    cnt = np.isfinite(a).sum(axis=1)
    tot = np.where(np.isfinite(a), a, 0.0).sum(axis=1)
    out = np.full(a.shape[0], np.nan)
    np.divide(tot, cnt, out=out, where=cnt > 0)
    return out


def jacobian_flow(source, *, max_lag: int | None = None, block: str = "h") -> JacobianFlow:
    """Norm and largest singular value of the Jacobian product ``dh_T/dh_{T-k}`` for ``k = 0..K``.

    Parameters
    ----------
    source : LayerTrace or array_like of shape (T, N, S, S) or (T, S, S)
        A traced layer and direction (its analytic step Jacobians are used), or step Jacobians
        ``J[t] = dh_t/dh_{t-1}`` in processing order (e.g. ``W_hh`` repeated for a linear RNN).
    max_lag : int, optional
        Largest lag ``K``; default ``T`` (down to the initial state).
    block : {"h", "state"}, default "h"
        For an LSTM trace: ``"h"`` measures ``dh_T/dh_{T-k}`` (the ``h`` block of the product of
        full ``(h, c)`` Jacobians, i.e. with the path through ``c`` included); ``"state"`` the
        whole ``(2H, 2H)`` product. Ignored for other cells and for raw arrays.

    Returns
    -------
    JacobianFlow
        Lag ``k`` is measured back from each sequence's last valid step; sequences shorter than
        ``k`` are left out of the mean.

    Raises
    ------
    TypeError, ValueError
        ``max_lag`` not an integer in [0, T] (``2.9`` is not a lag), unknown ``block``, an array
        that is not finite real numbers of a shape above.
    """
    choice("block", block, ("h", "state"))
    if max_lag is not None:
        max_lag = nonnegative_int("max_lag", max_lag)
    with np.errstate(under="ignore"):
        if isinstance(source, LayerTrace):
            p = source.in_processing_order()
            T, N = p.mask.shape
            lens = p.mask.sum(axis=0)
            H = p.hidden_size
            S = p.cell.state_size(H)
            K = T if max_lag is None else max_lag
            if K > T:
                raise ValueError(f"max_lag must be in [0, T={T}] (the trace's steps); got {max_lag}.")
            # J at lag k is the step at index lens - k (the k-th step back from the last valid one)
            t_idx = lens[None, :] - np.arange(1, K + 1)[:, None]  # (K, N)
            Js = jacobians_at(p, t_idx) if K else None

            def J_of_lag(k):
                return Js[k - 1]

            sub = "h" if (p.cell.has_cell and block == "h") else "state"
            fro, spec = _flow(J_of_lag, lens, K, S, sub, H, N)
            blk = block if p.cell.has_cell else "h"
        else:
            J = float_array("source", source, dtype=np.float64)
            if J.ndim == 3:
                J = J[:, None]
            if J.ndim != 4 or J.shape[2] != J.shape[3]:
                raise ValueError(
                    f"source must be a LayerTrace or step Jacobians of shape (T, N, S, S) or (T, S, S); got shape {J.shape}."
                )
            T, N, S, _ = J.shape
            K = T if max_lag is None else max_lag
            if not 0 <= K <= T:
                raise ValueError(f"max_lag must be in [0, T={T}]; got {max_lag}.")
            lens = np.full(N, T)
            fro, spec = _flow(lambda k: J[T - k], lens, K, S, "state", S, N)
            blk = "h"
    return JacobianFlow(lags=np.arange(K + 1), frobenius=_nanmean(fro), spectral=_nanmean(spec),
                        per_sequence_frobenius=fro, per_sequence_spectral=spec, block=blk)


def backprop_hidden(jacobians, dh_last) -> tuple[np.ndarray, np.ndarray]:
    """Backpropagate a gradient on the last state through step Jacobians.

    Parameters
    ----------
    jacobians : array_like of shape (T, N, S, S) or (T, S, S)
        ``J[t] = dh_t/dh_{t-1}`` (``h_{-1}`` is the initial state), e.g. from :func:`step_jacobians`.
    dh_last : array_like of shape (N, S) or (S,)
        ``dL/dh_{T-1}``.

    Returns
    -------
    grads : ndarray of shape (T, N, S)
        ``grads[t] = dL/dh_t`` (row vector ``dh_last @ J[T-1] @ ... @ J[t+1]``).
    d_initial : ndarray of shape (N, S)
        ``dL/dh_{-1}``, the gradient on the initial state.

    Raises
    ------
    TypeError, ValueError
        Arrays that are not finite real numbers of the shapes above.
    """
    J = float_array("jacobians", jacobians, dtype=np.float64)
    squeeze = J.ndim == 3
    if squeeze:
        J = J[:, None]
    if J.ndim != 4 or J.shape[2] != J.shape[3]:
        raise ValueError(f"jacobians must have shape (T, N, S, S) or (T, S, S); got {shape_str(np.shape(jacobians))}.")
    g = float_array("dh_last", dh_last, dtype=np.float64)
    if g.ndim == 1:
        g = np.broadcast_to(g, (J.shape[1], g.shape[0]))
    if J.ndim != 4 or g.shape != (J.shape[1], J.shape[2]):
        raise ValueError(
            f"dh_last must have shape (N, S)=({J.shape[1] if J.ndim == 4 else '?'}, "
            f"{J.shape[-1]}) matching jacobians {J.shape}; got {np.shape(dh_last)}."
        )
    T = J.shape[0]
    out = np.empty((T,) + g.shape)
    with np.errstate(under="ignore"):
        for t in range(T - 1, -1, -1):
            out[t] = g
            g = np.einsum("ns,nsk->nk", g, J[t])
    if squeeze:
        return out[:, 0], g[0]
    return out, g


def sensitivity(layer, x, h0=None, *, max_lag: int | None = None, layer_index: int = -1, direction: int = 0,
                block: str = "h", lengths=None) -> JacobianFlow:
    """:func:`jacobian_flow` of one layer and direction of ``layer`` run on ``x``.

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
    x : ndarray
        Input as for ``layer.forward``.
    h0 : optional
        Initial state as for ``layer.forward``.
    max_lag : int, optional
    layer_index : int, default -1
        Which stacked layer (negative counts from the top).
    direction : int, default 0
    block : {"h", "state"}, default "h"
    lengths : array_like of int, shape (N,), optional

    Returns
    -------
    JacobianFlow

    Raises
    ------
    TypeError, ValueError
        ``layer`` not a sequence layer; ``layer_index`` not an integer in ``[-L, L)`` or
        ``direction`` in ``[-D, D)`` (negative counts from the end, never wraps); the errors of
        :func:`trace` and :func:`jacobian_flow`.
    """
    sequence_layer(layer)
    li = index("layer_index", layer_index, layer.num_layers, what="layers")
    d = index("direction", direction, layer.num_directions, what="directions")
    tr = trace(layer, x, h0, lengths=lengths)
    return jacobian_flow(tr[li, d], max_lag=max_lag, block=block)


# --------------------------------------------------------------------------- BPTT through the layer

@dataclass(frozen=True)
class GradientNorms:
    """``||dL/dh_t||`` for every step, from the layer's own backpropagation through time.

    Attributes
    ----------
    norm : ndarray of shape (L, T)
        Mean over sequences of ``||dL/dh_t||`` for every layer (for layers below the top, the
        gradient that reaches their state through the recurrence).
    per_sequence : ndarray of shape (L, T, N)
    norm_c : ndarray of shape (L, T) or None
        LSTM: the same for the cell state ``c_t``.
    initial : ndarray of shape (L,)
        Mean norm of the gradient on the initial state (``t = -1``).
    """

    norm: np.ndarray
    per_sequence: np.ndarray
    norm_c: np.ndarray | None
    initial: np.ndarray

    def __repr__(self) -> str:
        """``GradientNorms(L=1, T=100, ‖dL/dh‖ at lag 0: 0.5, at lag 99: 1.2e-05)``."""
        L, T = self.norm.shape
        return (f"GradientNorms(L={L}, T={T}, ‖dL/dh‖ at lag 0: {self.norm[-1, -1]:.4g}, at lag {T - 1}: "
                f"{self.norm[-1, 0]:.4g})")

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import gradient_norms_html

        return gradient_norms_html(self)

    @property
    def lags(self) -> np.ndarray:
        """Lag ``T-1-t`` of each step, shape (T,) (0 for the last step)."""
        T = self.norm.shape[1]
        return T - 1 - np.arange(T)

    def curve(self, layer: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """``(lags, norms)`` of one layer with lags increasing (0 = last step), for plotting.

        Parameters
        ----------
        layer : int, default -1
            Which stacked layer (negative counts from the top).

        Returns
        -------
        lags : ndarray of int, shape (T,)
            ``0, 1, ..., T-1``.
        norms : ndarray of shape (T,)
            ``norm[layer]`` at those lags (a copy).
        """
        li = index("layer", layer, self.norm.shape[0], what="layers")
        return self.lags[::-1].copy(), self.norm[li][::-1].copy()


def hidden_gradient_norms(layer, x, h0=None, *, dh_last=None) -> GradientNorms:
    """``||dL/dh_t||`` for every step ``t``, computed by the layer's BPTT with ``L = <v, h_T>``.

    For each ``t`` the layer is re-run from the recorded state after step ``t`` over ``x[t+1:]`` and
    :meth:`~hiddenstate.GRU.backward` returns the gradient on that initial state, which is
    ``dL/dh_t`` (``O(T^2)`` steps in total: meant for diagnostics on sequences of up to a few
    hundred steps).

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
        Unidirectional (gradient flow over time is measured along one direction).
    x : ndarray of shape (T, N, I) ((N, T, I) if batch_first) or (T, I)
    h0 : optional
        Initial state as for ``layer.forward``.
    dh_last : array_like of shape (N, H) or (H,), optional
        ``v = dL/dh_T`` on the top layer's last state. Default: ``1/sqrt(H)`` in every unit (unit
        norm), the same for every sequence.

    Returns
    -------
    GradientNorms

    Raises
    ------
    TypeError, ValueError
        ``layer`` not a sequence layer or bidirectional; ``dh_last`` not finite, or of the wrong shape.
    """
    sequence_layer(layer)
    if layer.num_directions != 1:
        raise ValueError("layer must be unidirectional for gradient flow over time; got bidirectional=True. "
                         "Measure each direction with sensitivity(..., direction=d) instead.")
    tr = trace(layer, x, h0)
    T, N = tr.mask.shape
    L, H = tr.num_layers, layer.hidden_size
    v = np.full((N, H), 1.0 / np.sqrt(H)) if dh_last is None else float_array("dh_last", dh_last, dtype=np.float64)
    if v.shape == (H,):
        v = np.broadcast_to(v, (N, H))
    if v.shape != (N, H):
        raise ValueError(f"dh_last must have shape (N, H)=({N}, {H}) or (H,); got {np.shape(dh_last)}.")
    if T == 0 or N == 0:
        raise ValueError(f"x must have at least one time step and one sequence; got T={T}, N={N}.")
    lstm = tr.layers[0].cell.has_cell  # the state is (h, c)
    xt = tr.layers[0].x  # (T, N, I) time-major input of layer 0
    per = np.zeros((L, T, N))
    per_c = np.zeros((L, T, N)) if lstm else None
    dhn = np.zeros((L, N, H), dtype=layer.dtype)
    dhn[-1] = v
    dcn = np.zeros((L, N, H), dtype=layer.dtype)
    initial = np.zeros(L)

    def norms(a):
        return np.sqrt((a * a).sum(axis=-1))  # (L, N)

    with np.errstate(under="ignore"):
        per[-1, T - 1] = norms(v)
        for t in range(-1, T - 1):
            # the state after step t (t = -1: the initial state each layer read at step 0)
            hs = np.stack([lt.h[t] if t >= 0 else lt.h_prev[0] for lt in tr.layers])  # (L, N, H)
            if lstm:
                cs = np.stack([lt.c[t] if t >= 0 else lt.c_prev[0] for lt in tr.layers])
                state = (hs, cs)
            else:
                state = hs
            chunk = xt[t + 1:]
            if layer.batch_first:
                chunk = chunk.transpose(1, 0, 2)
            _, _, cache = layer.forward(chunk, state)
            _, _, d0 = layer.backward(cache, None, (dhn, dcn) if lstm else dhn)
            dh, dc = d0 if lstm else (d0, None)
            if t >= 0:
                per[:, t] = norms(dh)
                if lstm:
                    per_c[:, t] = norms(dc)
            else:
                initial = norms(dh).mean(axis=1)
    if lstm:
        per_c[-1, T - 1] = 0.0
    return GradientNorms(norm=per.mean(axis=2), per_sequence=per,
                         norm_c=None if per_c is None else per_c.mean(axis=2), initial=initial)


# --------------------------------------------------------------------------- Pascanu's bound
