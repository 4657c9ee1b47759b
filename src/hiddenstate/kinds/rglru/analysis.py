"""The hidden-state tools on Griffin's RG-LRU (RecurrentGemma): the shared layer loop through the kind's view.

A layer's :class:`~hiddenstate.probe.state_analysis.RecurrenceLayerAnalysis` has the diagonal keep
gate ``a_t`` per channel (``decay``, ``time_constants`` (W,), without the document starts, where
the block keeps nothing by reset), the exact gradient against lag ``dh_T/dh_{T-k} = diag(a_T ...
a_{T-k+1})`` (``flow_spectral``: its largest entry, ``flow_rms``), PCA and the memory curve of
``h``, the channels ``h_t`` as units. Its output gate ``gelu_tanh(linear_y(u))`` is not a (0, 1)
gate. A transformers model of the ``recurrent_gemma`` family goes through ``hiddenstate.inspect_model``.

References
----------
S. De et al., "Griffin: Mixing Gated Linear Recurrences with Local Attention for Efficient
Language Models", arXiv:2402.19427, 2024.
"""

from __future__ import annotations

from hiddenstate.kinds.rglru.view import rglru_view
from hiddenstate.probe.layer_loop import LayerKind
from hiddenstate.probe.state_analysis import NEEDS_TEXT, RecurrenceAnalysis, RecurrenceLayerAnalysis

__all__ = ["NOT_MEASURED_RGLRU", "RGLRU"]

_AFFINE = ("for a fixed input the step is affine in the state with a linear part of norm below 1 (a decay in (0, 1)), "
           "so its one fixed point exists and is stable by construction, and it moves with every input: there is no "
           "search to run")

#: What the analysis of a recurrent layer measures that it does not measure on the RG-LRU, and why.
NOT_MEASURED_RGLRU = {"fixed points": _AFFINE,
                      "output gate statistics": "the RG-LRU's output gate gelu_tanh(linear_y(u)) is not a (0, 1) gate"}

_FLOW = ("The exact Jacobian product dh_T/dh_(T-k), the diagonal of the last k decays a_t (0 through a document "
         "start), its largest entry against the lag k:")


def _measure(index: int, rec, max_lag: int, common: dict) -> dict:
    """The words of the layer's card: a channel's keep gate ``a_t``."""
    return {"kind": "rglru", "flow_note": _FLOW, "gate_unit": "channel", "keep_label": "a_t"}


def _sizes(rec) -> dict:
    W, K = rec.rg.shape[-1], rec.conv.shape[-1] + 1
    return {"kind": "rglru", "lru_width": W, "d_conv": K, "state entries": "W",
            "state": f"RG-LRU state (W={W}) with a decay per channel, and convolution window (W, K-1={K - 1})",
            "unit": "A channel d is a unit: its activation is its RG-LRU state h_t[d], the recurrence's readout "
                    "before the GELU gate."}


#: The RG-LRU's records' kind for the shared layer loop.
RGLRU = LayerKind("rglru", _measure, RecurrenceLayerAnalysis, RecurrenceAnalysis, _sizes, NOT_MEASURED_RGLRU,
                  NEEDS_TEXT.replace("analyze_mamba", "analyze_recurrence"), rglru_view)
