"""The mLSTM kind (xLSTM, Beck et al. 2024): ``"mlstm"``, a matrix memory per head with a forget gate per head.

One step of :class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer` per row and head (:mod:`hiddenstate.kinds.mlstm.kernel`),
in the unstabilised terms ``C~_t = C_t exp(m_t)``, ``n~_t = n_t exp(m_t)``::

    C~_t = sigmoid(f_t) C~_{t-1} + exp(i_t) k_t v_t^T          n~_t = sigmoid(f_t) n~_{t-1} + exp(i_t) k_t

with ``f_t``, ``i_t`` the gates' (soft-capped) pre-activations. The stored state (transformers'
``xLSTMCache.rnn_state[layer]``) is ``(C, n, m)``: the memory scaled by ``exp(-m_t)``, the
stabiliser ``m_t`` the largest log weight so far. What the analyses read
(:class:`~hiddenstate.kinds.base.RecordView`):

* ``state``: the stored ``C_t`` (H*Dk*Dv entries) and ``n_t`` (H*Dk) of every head, flattened;
  ``matrix`` the (H, Dk, Dv) memories themselves, for the effective rank per step (the rank
  does not depend on the scale ``exp(m_t)``);
* ``keep``: the forget gate ``sigmoid(f_t) = exp(log sigmoid f_t)`` per head (``keep_shape``
  (H,)), what of the memory survives a step;
* ``lag_norms``: ``dC~_T/dC~_{T-k}`` is each head's product of its last k forget gates times
  the identity (the gates do not depend on the state), so the lag norms are those of a
  per-head diagonal recurrence, each head's product kept as ``heads``. The *stored* state's
  Jacobian is that product times ``exp(m_{T-k} - m_T)``, the stabiliser's change of scale,
  which the readout ``h`` divides out (up to ``eps``): the product of the forget gates is what
  the memory keeps (tests/test_families_recurrent.py holds it to the kernel's BPTT);
* ``units``: a head-channel ``d = h * Dv + j`` of the readout ``h_t = C_t^T q~_t / max(|n_t .
  q~_t|, exp(-m_t))`` before the per-head layer norm, its keep gate its head's forget gate;
  ``out_gate`` the output gate ``sigmoid(o_t)`` of the same channel.

The record (:class:`MLSTMRecord`) comes from one forward pass of the layer (:func:`mlstm_run`):
its per-step states and the gates and readout it computed.

References
----------
M. Beck et al., "xLSTM: Extended Long Short-Term Memory", NeurIPS 2024, arXiv:2405.04517
(Sec. 2.3, eqs. 19-27).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.core.functional import sigmoid
from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms, head_products
from hiddenstate.kinds.mlstm.block import MLSTMLayer

__all__ = ["KINDS", "MLSTMRecord", "mlstm_run", "mlstm_states", "mlstm_view"]


class MLSTMRecord(NamedTuple):
    """Every step of one :class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer` call, time-major (T steps, N sequences).

    Attributes
    ----------
    C : ndarray of shape (T, N, H, Dk, Dv)
        The stored (stabilised) matrix memory after every step.
    n : ndarray of shape (T, N, H, Dk)
        The stored normaliser.
    m : ndarray of shape (T, N, H, 1)
        The stabiliser.
    forget : ndarray of shape (T, N, H)
        The forget gate ``sigmoid(f_t)`` of every head.
    igate : ndarray of shape (T, N, H)
        The input gate's log ``i_t`` (its pre-activation after the soft cap; the gate is ``exp(i_t)``).
    h : ndarray of shape (T, N, H, Dv)
        The readout before the per-head layer norm.
    ogate : ndarray of shape (T, N, V)
        The output gate ``sigmoid(o_t)``, V = H Dv.
    """

    C: np.ndarray
    n: np.ndarray
    m: np.ndarray
    forget: np.ndarray
    igate: np.ndarray
    h: np.ndarray
    ogate: np.ndarray


def mlstm_run(block: MLSTMLayer, u, **forward):
    """The mLSTM kind's :attr:`~hiddenstate.kinds.base.Kind.run`: the layer on ``u``, every step recorded.

    Parameters
    ----------
    block : MLSTMLayer
        ``batch_first=True`` (what the registry's ``to_block`` builds).
    u : ndarray of shape (N, T, M)
    **forward
        More keywords of the layer's ``forward`` (none of the registered families gives any).

    Returns
    -------
    out : ndarray of shape (N, T, M)
    record : MLSTMRecord
        Time-major.

    Raises
    ------
    ValueError
        When the per-step states cannot fit in memory (from the layer).
    """
    out, _, cache, states = block.forward(u, record=True, **forward)
    kc = cache.kernel[5]  # the kernel's cache: (q, k, v, i, f, ..., h, scan)
    i, f, h = kc[3], kc[4], kc[21]
    return out, MLSTMRecord(states.C, states.n, states.m, sigmoid(f), i.copy(), h, cache.kernel[9])


def mlstm_view(rec: MLSTMRecord) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of an mLSTM record (module docstring).

    Parameters
    ----------
    rec : MLSTMRecord

    Returns
    -------
    RecordView
        ``state`` (T, N, H*Dk*Dv + H*Dk), ``keep`` the forget gates (T, N, H), ``units`` the
        readout per head-channel (T, N, H*Dv), ``unit_keep`` its head's forget gate, ``out_gate``
        ``sigmoid(o)``, ``matrix`` C, ``lag_norms`` with each head's product of forget gates.
    """
    T, N, H, Dk, Dv = rec.C.shape

    def lag_norms(max_lag):  # every head's Dk*Dv + Dk entries share its forget gate
        return LagNorms(*diagonal_lag_norms(rec.forget[..., None], max_lag), heads=head_products(rec.forget, max_lag))

    return RecordView(
        state=np.concatenate([rec.C.reshape(T, N, -1), rec.n.reshape(T, N, -1)], axis=-1), keep=rec.forget,
        keep_shape=(H,), keep_name="forget gate", lag_norms=lag_norms, units=rec.h.reshape(T, N, H * Dv),
        unit_keep=np.repeat(rec.forget, Dv, axis=-1), out_gate=rec.ogate, matrix=rec.C, out_gate_name="sigmoid(o)")


def mlstm_states(rec: MLSTMRecord) -> dict:
    """An mLSTM record's states by name, in the order of :class:`~hiddenstate.kinds.mlstm.kernel.MLSTMState`.

    Parameters
    ----------
    rec : MLSTMRecord

    Returns
    -------
    dict of str to ndarray
        ``{"C": (T, N, H, Dk, Dv), "n": (T, N, H, Dk), "m": (T, N, H, 1)}``.
    """
    return {"C": rec.C, "n": rec.n, "m": rec.m}


#: The mLSTM kind.
KINDS = (Kind("mlstm", MLSTMLayer, mlstm_view, mlstm_states, run=mlstm_run,
              description="matrix memory (N, H, Dk, Dv) with normaliser and stabiliser, a forget gate sigmoid(f) "
                          "per head, exponential input gate",
              analysis="hiddenstate.kinds.mlstm.analysis:MLSTM", card="hiddenstate.kinds.mlstm.card:CARD",
              title="mLSTM"),)
