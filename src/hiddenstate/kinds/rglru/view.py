"""The view of Griffin's RG-LRU (``"rglru"``): the few arrays every analysis reads of its record.

RG-LRU (:class:`~hiddenstate.kinds.rglru.block.RGLRUBlock`, :class:`~hiddenstate.kinds.rglru.kernel.RGLRURecord`):
``h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t c_t)``, a diagonal recurrence of W channels. The state
``h`` (T, N, W) is its own readout, so a unit is a channel and its activation is ``h_t``; the
keep gate is ``a_t = exp(-8 r_t softplus(Lambda))`` per channel (``keep_shape`` (W,)). At a
document start (``reset``, transformers' ``position_ids == 0``) the block keeps nothing by
definition rather than by its gate (the record's ``a_t`` is 0 there): the keep gate's statistics
and time constants leave those steps out, the lag curve does not (the exact Jacobian
``dh_T/dh_{T-k} = diag(a_T ... a_{T-k+1})``, :func:`~hiddenstate.kinds.base.diagonal_lag_norms`,
is 0 through a reset). The output gate ``gelu_tanh(linear_y(u))`` is not a (0, 1) gate.
"""

from __future__ import annotations

from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms
from hiddenstate.kinds.rglru.block import RGLRUBlock

__all__ = ["KINDS", "rglru_view"]


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


#: The kind's record (registered in :mod:`hiddenstate.kinds`).
KINDS = (Kind("rglru", RGLRUBlock, rglru_view, lambda rec: {"rg": rec.rg, "conv": rec.conv},
              description="RG-LRU state (N, W), a decay a_t per channel; conv window (N, W, K-1)",
              analysis="hiddenstate.kinds.rglru.analysis:RGLRU", card="hiddenstate.kinds.rglru.card:CARD",
              title="RG-LRU"),)
