"""The view of LFM2's short convolution (``"shortconv"``): what every analysis reads of its record.

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
from hiddenstate.kinds.base import Kind, LagNorms, RecordView
from hiddenstate.kinds.shortconv.block import ShortConv
from hiddenstate.kinds.shortconv.cca_view import KIND as CCA_KIND

__all__ = ["KINDS", "shift_lag_norms", "shortconv_view"]


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


#: The kinds' records (registered in :mod:`hiddenstate.kinds`): the short convolution's and ZAYA's CCA projection's.
KINDS = (Kind("shortconv", ShortConv, shortconv_view, lambda rec: {"conv": rec.conv},
              description="conv window (N, M, K-1): a memory of exactly K-1 steps, no keep gate",
              analysis="hiddenstate.kinds.shortconv.analysis:SHORTCONV", card="hiddenstate.kinds.shortconv.card:CARD",
              title="short convolution"), CCA_KIND)
