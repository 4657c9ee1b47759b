"""The view of MiniMax's lightning attention (``"lightning"``): what every analysis reads of its record.

Lightning attention (:class:`~hiddenstate.kinds.lightning.block.LightningAttention`,
:class:`~hiddenstate.kinds.lightning.block.LightningRecord`): ``S_t = exp(-lambda_h) S_{t-1} + k_t^T v_t``, a
matrix state (N, H, D, D) per head with one constant decay per head (``keep_shape`` (H,)), the
same at every step; ``dS_T/dS_{T-k} = exp(-k lambda_h) I`` on head h (``heads``: each head's
product). Units are the head-channels ``d = h * D + j`` of the readout ``o_t = q_t S_t`` (before
the RMS norm), the output gate ``sigmoid(output_gate(u))``; ``matrix`` the states, for the
effective rank per step. (A padded step of a ragged call carries the state, decay 1 there; the
registry's recomputation never pads.)
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms, head_products
from hiddenstate.kinds.lightning.block import LightningAttention

__all__ = ["KINDS", "lightning_view"]


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


#: The kind's record (registered in :mod:`hiddenstate.kinds`).
KINDS = (Kind("lightning", LightningAttention, lightning_view, lambda rec: {"kv": rec.kv},
              description="matrix state (N, H, D, D), a constant decay exp(-lambda_h) per head",
              analysis="hiddenstate.kinds.lightning.analysis:LIGHTNING", card="hiddenstate.kinds.lightning.card:CARD",
              title="lightning attention"),)
