"""The views of Griffin's RG-LRU (``"rglru"``), MiniMax's lightning attention (``"lightning"``) and LFM2's short convolution (``"shortconv"``).

RG-LRU (:class:`~hiddenstate.kinds.rglru.block.RGLRUBlock`, :class:`~hiddenstate.kinds.rglru.kernel.RGLRURecord`):
``h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t c_t)``, a diagonal recurrence of W channels. The state
``h`` (T, N, W) is its own readout, so a unit is a channel and its activation is ``h_t``; the
keep gate is ``a_t = exp(-8 r_t softplus(Lambda))`` per channel (``keep_shape`` (W,)). At a
document start (``reset``, transformers' ``position_ids == 0``) the block keeps nothing by
definition rather than by its gate (the record's ``a_t`` is 0 there): the keep gate's statistics
and time constants leave those steps out, the lag curve does not (the exact Jacobian
``dh_T/dh_{T-k} = diag(a_T ... a_{T-k+1})``, :func:`~hiddenstate.kinds.base.diagonal_lag_norms`,
is 0 through a reset). The output gate ``gelu_tanh(linear_y(u))`` is not a (0, 1) gate.

Lightning attention (:class:`~hiddenstate.kinds.lightning.block.LightningAttention`,
:class:`~hiddenstate.kinds.lightning.block.LightningRecord`): ``S_t = exp(-lambda_h) S_{t-1} + k_t^T v_t``, a
matrix state (N, H, D, D) per head with one constant decay per head (``keep_shape`` (H,)), the
same at every step; ``dS_T/dS_{T-k} = exp(-k lambda_h) I`` on head h (``heads``: each head's
product). Units are the head-channels ``d = h * D + j`` of the readout ``o_t = q_t S_t`` (before
the RMS norm), the output gate ``sigmoid(output_gate(u))``; ``matrix`` the states, for the
effective rank per step. (A padded step of a ragged call carries the state, decay 1 there; the
registry's recomputation never pads.)

Short convolution (:class:`~hiddenstate.kinds.shortconv.block.ShortConv`,
:class:`~hiddenstate.kinds.shortconv.block.ShortConvRecord`): the state is a window, the last K - 1 values
of ``z_t = B_t x_t`` per channel, shifted by one each step. Nothing in it is kept by a gate, so
the view has **no keep gate** (``keep`` None: no decay statistics, no time constants); its
memory is exactly K - 1 steps: ``dS_T/dS_{T-k}`` is the shift by k, whose spectral norm is 1
for k < K - 1 and 0 from k = K - 1 on, its RMS ``sqrt((K - 1 - k) / (K - 1))`` (whatever the
input). A unit is a channel, its activation ``z_t``, the value entering its window; the output
gate ``C_t`` is linear, not a (0, 1) gate.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms, head_products
from hiddenstate.kinds.lightning.block import LightningAttention
from hiddenstate.kinds.rglru.block import RGLRUBlock
from hiddenstate.kinds.shortconv.block import ShortConv

__all__ = ["KINDS", "lightning_view", "rglru_view", "shift_lag_norms", "shortconv_view"]


def rglru_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of an RG-LRU record.

    Parameters
    ----------
    rec : RGLRURecord
        ``rg`` (T, N, W), ``decay`` (T, N, W) (0 at a reset step).

    Returns
    -------
    RecordView
        ``state`` and ``units`` the channels ``h`` (T, N, W); ``keep`` the decay ``a_t`` at the
        steps where no sequence starts a document (T', N, W) (every step if all are starts);
        ``unit_keep`` the decay at every step; ``lag_norms`` the exact diagonal products,
        resets included; no (0, 1) output gate.
    """
    T, N, W = rec.rg.shape
    starts = (rec.decay == 0).all(axis=-1).any(axis=-1)  # (T,): a reset of some sequence
    keep = rec.decay if starts.all() else rec.decay[~starts]
    return RecordView(state=rec.rg, keep=keep, keep_shape=(W,), keep_name="decay a_t",
                      lag_norms=lambda max_lag: LagNorms(*diagonal_lag_norms(rec.decay, max_lag)),
                      units=rec.rg, unit_keep=rec.decay)


def lightning_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of a lightning attention record.

    Parameters
    ----------
    rec : LightningRecord
        ``kv`` (T, N, H, D, D), ``q`` (T, N, H, D), ``decay`` (H,), ``gate`` (T, N, H D).

    Returns
    -------
    RecordView
        ``state`` (T, N, H*D*D), ``matrix`` the states, ``keep`` the head decays broadcast to
        (T, N, H), ``units`` ``o_t = q_t S_t`` per head-channel (T, N, H*D), ``unit_keep`` their
        head's decay, ``out_gate`` ``sigmoid(output_gate(u))``; ``lag_norms`` with each head's
        product of decays.
    """
    T, N, H, D, Dv = rec.kv.shape
    decay = np.broadcast_to(np.asarray(rec.decay, dtype=np.float64), (T, N, H))

    def lag_norms(max_lag):  # every head holds D*Dv entries with the same decay
        return LagNorms(*diagonal_lag_norms(decay[..., None], max_lag), heads=head_products(decay, max_lag))

    o = np.einsum("tnhd,tnhde->tnhe", rec.q, rec.kv)
    return RecordView(state=rec.kv.reshape(T, N, H * D * Dv), keep=decay, keep_shape=(H,),
                      keep_name="head decay exp(-lambda_h)", lag_norms=lag_norms, units=o.reshape(T, N, H * Dv),
                      unit_keep=np.repeat(decay, Dv, axis=-1), out_gate=rec.gate, matrix=rec.kv,
                      out_gate_name="sigmoid(output_gate(u))")


def shift_lag_norms(T: int, window: int, max_lag: int) -> LagNorms:
    """The norms of ``dS_T/dS_{T-k}`` of a shift register of ``window`` slots (a short convolution's window).

    Each step drops the oldest slot and appends the new value, which does not depend on the
    window: ``dS_T/dS_{T-k}`` is the shift by k, one 1 per surviving slot.

    Parameters
    ----------
    T : int
        Steps.
    window : int
        K - 1, the slots per channel.
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    LagNorms
        ``spectral`` 1 for k < ``window`` and 0 after; ``rms`` ``sqrt((window - k) / window)``
        (0 after); k = 0 .. min(max_lag, T). An empty window (K = 1) has both 0 but at k = 0.
    """
    K = min(positive_int("max_lag", max_lag), T) + 1
    k = np.arange(K)
    if window == 0:
        return LagNorms((k == 0).astype(float), (k == 0).astype(float))
    return LagNorms((k < window).astype(float), np.sqrt(np.clip(window - k, 0, None) / window))


def shortconv_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of a short convolution record.

    Parameters
    ----------
    rec : ShortConvRecord
        ``conv`` (T, N, M, K-1), ``B``, ``x`` (T, N, M).

    Returns
    -------
    RecordView
        ``state`` (T, N, M*(K-1)); ``keep`` and ``unit_keep`` None (no keep gate); ``lag_norms``
        :func:`shift_lag_norms`; ``units`` ``z = B * x`` (T, N, M); no (0, 1) output gate.
    """
    T, N, M, W = rec.conv.shape
    return RecordView(state=rec.conv.reshape(T, N, M * W), keep=None, keep_shape=(), keep_name="",
                      lag_norms=lambda max_lag: shift_lag_norms(T, W, max_lag), units=rec.B * rec.x, unit_keep=None)


#: The three kinds.
KINDS = (Kind("rglru", RGLRUBlock, rglru_view, lambda rec: {"rg": rec.rg, "conv": rec.conv},
              description="RG-LRU state (N, W), a decay a_t per channel; conv window (N, W, K-1)"),
         Kind("lightning", LightningAttention, lightning_view, lambda rec: {"kv": rec.kv},
              description="matrix state (N, H, D, D), a constant decay exp(-lambda_h) per head"),
         Kind("shortconv", ShortConv, shortconv_view, lambda rec: {"conv": rec.conv},
              description="conv window (N, M, K-1): a memory of exactly K-1 steps, no keep gate"))
