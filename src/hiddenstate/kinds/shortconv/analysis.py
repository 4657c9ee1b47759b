"""The hidden-state tools on LFM2's short convolution: the shared layer loop through the kind's view.

A short convolution has no keep gate: its state is the window of the last K - 1 values of
``B * x``, so its memory is exactly K - 1 steps (``flow_spectral`` 1 up to lag K - 2 and 0 from
K - 1 on, whatever the input); the analysis says so in ``not_measured``. A layer's
:class:`~hiddenstate.probe.state_analysis.RecurrenceLayerAnalysis` has PCA and the memory curve of
the window, the channels' ``z = B * x`` as units. A transformers model of the ``lfm2`` family goes
through ``hiddenstate.inspect_model``.
"""

from __future__ import annotations

from hiddenstate.kinds.shortconv.cca_view import cca_view
from hiddenstate.kinds.shortconv.view import shortconv_view
from hiddenstate.probe.layer_loop import LayerKind
from hiddenstate.probe.state_analysis import NEEDS_TEXT, RecurrenceAnalysis, RecurrenceLayerAnalysis

__all__ = ["CCA", "NOT_MEASURED_CCA", "NOT_MEASURED_SHORTCONV", "SHORTCONV"]

#: What the analysis of a recurrent layer measures that it does not measure on the short convolution, and why.
NOT_MEASURED_SHORTCONV = {
    "keep gate and time constants": "a short convolution's state is the window of the last K-1 values of B*x, "
                                    "shifted by one each step: no gate keeps anything, so a keep gate is not "
                                    "defined; its memory is exactly K-1 steps (dS_T/dS_(T-k) is the shift by k, "
                                    "spectral norm 1 for k < K-1 and 0 from K-1 on)",
    "fixed points": "after K-1 steps the window is a function of the last K-1 inputs alone: no state dynamics",
    "output gate statistics": "the output gate C is linear in the input, not a (0, 1) gate"}

_FLOW = ("The exact Jacobian product dS_T/dS_(T-k) of the window, the shift by k: spectral norm 1 while the oldest "
         "value is still in the window, 0 from lag K-1 on:")


def _measure(index: int, rec, max_lag: int, common: dict) -> dict:
    """The words of the layer's card: no keep gate, a window of K-1 values."""
    window = rec.conv.shape[-1]
    return {"kind": "shortconv", "flow_note": _FLOW, "gate_unit": "channel",
            "no_keep": f"none: a window of the last K-1 = {window} values, its memory exactly {window} steps"}


def _sizes(rec) -> dict:
    M, W = rec.conv.shape[-2:]
    return {"kind": "shortconv", "hidden_size": M, "d_conv": W + 1, "state entries": "M*(K-1)",
            "state": f"convolution window (M={M}, K-1={W}; no keep gate)",
            "unit": "A channel d is a unit: its activation is z_t[d] = B_t[d] x_t[d], the value entering its window."}


#: The short convolution's records' kind for the shared layer loop.
SHORTCONV = LayerKind("shortconv", _measure, RecurrenceLayerAnalysis, RecurrenceAnalysis, _sizes,
                      NOT_MEASURED_SHORTCONV, NEEDS_TEXT.replace("analyze_mamba", "analyze_recurrence"), shortconv_view)

#: What the analysis does not measure on ZAYA's CCA projection, and why.
NOT_MEASURED_CCA = {
    "keep gate and time constants": "the CCA state is the window of the last W values of [q | k], shifted by one "
                                    "each step, and the last token's delayed value, replaced each step: no gate "
                                    "keeps anything; its memory is exactly W steps",
    "fixed points": "after W steps the state is a function of the last W inputs alone: no state dynamics",
    "output gate statistics": "the projection has no output gate"}

_CCA_FLOW = ("The exact Jacobian product dS_T/dS_(T-k) of the window and the delayed value: the shift by k on the "
             "window, 0 on the value from lag 1 on; spectral norm 1 while the oldest value is still in the window:")


def _measure_cca(index: int, rec, max_lag: int, common: dict) -> dict:
    """The words of a CCA layer's card: no keep gate, a window of W values and a one-token delayed value."""
    window = rec.conv.shape[-1]
    return {"kind": "cca", "flow_note": _CCA_FLOW, "gate_unit": "channel",
            "no_keep": f"none: a window of the last W = {window} values of [q | k] and a one-token delayed value, "
                       f"its memory exactly {max(window, 1)} step(s)"}


def _sizes_cca(rec) -> dict:
    C, W = rec.conv.shape[-2:]
    V = rec.v.shape[-1]
    return {"kind": "cca", "channels": C, "window": W, "delayed_value": V, "state entries": "C*W + Ck/2",
            "state": f"convolution window of [q | k] (C={C}, W={W}) and the delayed value (Ck/2={V}); no keep gate",
            "unit": "A unit is a window channel (its activation z_t = [q_t | k_t], the value entering its window) "
                    "or a delayed value channel (v_t = v_proj_delayed(u_t))."}


#: ZAYA's CCA projection records' kind for the shared layer loop.
CCA = LayerKind("cca", _measure_cca, RecurrenceLayerAnalysis, RecurrenceAnalysis, _sizes_cca, NOT_MEASURED_CCA,
                NEEDS_TEXT.replace("analyze_mamba", "analyze_recurrence"), cca_view)
