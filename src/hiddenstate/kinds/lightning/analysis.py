"""The hidden-state tools on MiniMax's lightning attention: the shared layer loop through the kind's view.

A layer's :class:`~hiddenstate.probe.state_analysis.RecurrenceLayerAnalysis` has one constant
decay ``exp(-lambda_h)`` per head (``time_constants`` (H,) = ``1 / (1 - exp(-lambda_h))``),
``dS_T/dS_{T-k} = exp(-k lambda_h) I`` per head (``head_flow``), the matrix state's
``effective_rank`` and ``numerical_rank`` (T, H) on every step, the output gate
``sigmoid(output_gate(u))``, the head-channels of ``o_t = q_t S_t`` as units. A transformers
model of the ``minimax`` family goes through ``hiddenstate.inspect_model``.

References
----------
MiniMax, "MiniMax-01: Scaling Foundation Models with Lightning Attention", arXiv:2501.08313, 2025.
"""

from __future__ import annotations

from hiddenstate.kinds.lightning.view import lightning_view
from hiddenstate.probe.layer_loop import LayerKind
from hiddenstate.probe.state_analysis import NEEDS_TEXT, RecurrenceAnalysis, RecurrenceLayerAnalysis

__all__ = ["LIGHTNING", "NOT_MEASURED_LIGHTNING"]

_AFFINE = ("for a fixed input the step is affine in the state with a linear part of norm below 1 (a decay in (0, 1)), "
           "so its one fixed point exists and is stable by construction, and it moves with every input: there is no "
           "search to run")

#: What the analysis of a recurrent layer measures that it does not measure on lightning attention, and why.
NOT_MEASURED_LIGHTNING = {"fixed points": _AFFINE}

_FLOW = ("The exact Jacobian product dS_T/dS_(T-k) = exp(-k lambda_h) I on head h, its largest entry (the slowest "
         "head's) against the lag k:")


def _measure(index: int, rec, max_lag: int, common: dict) -> dict:
    """The words of the layer's card: a head's constant decay, its output gate, the rank its matrix state can have."""
    return {"kind": "lightning", "flow_note": _FLOW, "gate_unit": "head", "keep_label": "exp(-lambda_h)",
            "out_gate_label": "output gate sigmoid(output_gate(u))", "rank_of": int(min(rec.kv.shape[-2:]))}


def _sizes(rec) -> dict:
    H, D, Dv = rec.kv.shape[-3:]
    return {"kind": "lightning", "num_heads": H, "head_dim": D, "state entries": "H*D*D",
            "state": f"matrix state (H={H}, D={D}, D={Dv}) with a constant decay per head",
            "unit": "A head-channel d = h D + j is a unit: its activation is o_t[h, j] = (q_t S_t)[j] of head h, "
                    "before the RMS norm and the output gate."}


#: Lightning attention's records' kind for the shared layer loop.
LIGHTNING = LayerKind("lightning", _measure, RecurrenceLayerAnalysis, RecurrenceAnalysis, _sizes,
                      NOT_MEASURED_LIGHTNING, NEEDS_TEXT.replace("analyze_mamba", "analyze_recurrence"), lightning_view)
