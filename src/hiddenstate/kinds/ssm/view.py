"""The Mamba kinds' views: ``"mamba"`` (a keep gate per state entry) and ``"mamba2"`` (per head).

Mamba (:class:`~hiddenstate.Mamba`, :class:`~hiddenstate.kinds.ssm.mamba_kernel.MambaRecord`): the state
``h`` (T, N, Di, S) flattened to Di*S entries; the keep gate is the decay ``exp(dt A)`` of every
state entry (``keep_shape`` (Di, S)); the step Jacobian is that diagonal, so the lag norms are
:func:`~hiddenstate.kinds.base.diagonal_lag_norms`; a unit is a channel, its activation its
readout ``y`` before the gate, its keep gate the mean decay of its S entries, its output gate
``sigmoid(z)``.

Mamba-2 (:class:`~hiddenstate.Mamba2`, :class:`~hiddenstate.kinds.ssm.mamba2_kernel.Mamba2Record`): the state
(T, N, H, P, S) flattened; one decay ``exp(dt A_h)`` per head (``keep_shape`` (H,)) that
multiplies the head's P*S entries, so the Jacobian is the diagonal that repeats it, with each
head's product of decays as ``LagNorms.heads``; a unit is a head-channel ``d = h * P + p``, its
activation ``y`` before the gate and the gated norm, its keep gate its head's decay.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.functional import sigmoid
from hiddenstate.kinds.agreement import readout_share
from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms, head_products
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba2 import Mamba2

__all__ = ["KINDS", "mamba2_view", "mamba_view", "ssm_share", "ssm_states"]


def mamba_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of a Mamba record.

    Parameters
    ----------
    rec : MambaRecord
        ``ssm`` (T, N, Di, S), ``decay`` (T, N, Di, S), ``y``, ``z`` (T, N, Di).

    Returns
    -------
    RecordView
        ``state`` (T, N, Di*S), ``keep`` the decay per state entry (T, N, Di*S), ``units`` the
        channels' ``y`` (T, N, Di), ``unit_keep`` their mean decay, ``out_gate`` ``sigmoid(z)``.
    """
    T, N, Di, S = rec.ssm.shape
    return RecordView(
        state=rec.ssm.reshape(T, N, Di * S), keep=rec.decay.reshape(T, N, Di * S), keep_shape=(Di, S), keep_name="decay",
        lag_norms=lambda max_lag: LagNorms(*diagonal_lag_norms(rec.decay, max_lag)),
        units=rec.y, unit_keep=rec.decay.mean(axis=-1), out_gate=sigmoid(rec.z))


def mamba2_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of a Mamba-2 record.

    Parameters
    ----------
    rec : Mamba2Record
        ``ssm`` (T, N, H, P, S), ``decay`` (T, N, H), ``y`` (T, N, H, P), ``z`` (T, N, Di) or None.

    Returns
    -------
    RecordView
        ``state`` (T, N, H*P*S), ``keep`` the head decays (T, N, H), ``units`` the head-channels'
        ``y`` (T, N, H*P), ``unit_keep`` their head's decay, ``out_gate`` ``sigmoid(z)`` (None
        without z); ``lag_norms`` with each head's product of decays.
    """
    T, N, H, P, S = rec.ssm.shape

    def lag_norms(max_lag):  # every head holds P*S equal entries
        return LagNorms(*diagonal_lag_norms(rec.decay[..., None], max_lag), heads=head_products(rec.decay, max_lag))

    return RecordView(
        state=rec.ssm.reshape(T, N, H * P * S), keep=rec.decay, keep_shape=(H,), keep_name="head decay", lag_norms=lag_norms,
        units=rec.y.reshape(T, N, H * P), unit_keep=np.repeat(rec.decay, P, axis=-1),
        out_gate=None if rec.z is None else sigmoid(rec.z))


def ssm_states(rec) -> dict:
    """A Mamba or Mamba-2 record's states by name: ``{"ssm": (T, N, ...), "conv": (T, N, Dc, K-1)}``.

    Parameters
    ----------
    rec : MambaRecord or Mamba2Record

    Returns
    -------
    dict of str to ndarray
    """
    return {"ssm": rec.ssm, "conv": rec.conv}


def ssm_share(block, rec) -> float:
    """The state's share of a Mamba or Mamba-2 readout: ``var(y - D x) / var(y)``, ``y = C h + D x`` before the gate.

    Parameters
    ----------
    block : Mamba or Mamba2
        Its ``D``: (Di,), (H, Dh) with heads, or Mamba-2's (H,).
    rec : MambaRecord or Mamba2Record
        Its ``y`` and ``x``: (T, N, Di) or (T, N, H, P), float64.

    Returns
    -------
    float
        :func:`hiddenstate.kinds.agreement.readout_share`.
    """
    D = np.asarray(block.params["D"], dtype=np.float64)
    D = D.reshape(-1) if rec.x.ndim == 3 else D.reshape(D.shape[0], 1)  # Mamba's channels, Mamba-2's heads
    return readout_share(rec.y, D * rec.x)


#: The two Mamba kinds.
KINDS = (Kind("mamba", Mamba, mamba_view, ssm_states,
              description="SSM state (N, Di, S), a decay exp(dt A) per state entry",
              analysis="hiddenstate.kinds.ssm.mamba_analysis:MAMBA", card="hiddenstate.kinds.ssm.card:MAMBA_CARD",
              analyze="hiddenstate.kinds.ssm.mamba_analysis:analyze_mamba", title="Mamba", share=ssm_share,
              skip=("D",), stream="hiddenstate.kinds.ssm.stream:mamba_stream"),
         Kind("mamba2", Mamba2, mamba2_view, ssm_states,
              description="SSM state (N, H, P, S), a decay exp(dt A_h) per head",
              analysis="hiddenstate.kinds.ssm.mamba2_analysis:MAMBA2", card="hiddenstate.kinds.ssm.card:MAMBA2_CARD",
              analyze="hiddenstate.kinds.ssm.mamba2_analysis:analyze_mamba2", title="Mamba-2",
              share=ssm_share, skip=("D",), stream="hiddenstate.kinds.ssm.stream:mamba2_stream"))
