"""Causal tracing of recurrent states over layers x steps (issue 32): :func:`causal_trace`, :func:`trace_cost`.

The clean and corrupted runs once each (:mod:`hiddenstate.edit.causal.families` for a
transformers model, :mod:`hiddenstate.edit.causal.ours` for ours), then one edited run per
(layer, step) cell; :class:`CausalTrace` holds the target's probabilities and draws the heatmap,
:class:`TraceCost` what the sweep costs before it runs.
"""

from __future__ import annotations

from hiddenstate.edit.causal.api import causal_trace, trace_cost
from hiddenstate.edit.causal.result import CausalTrace, TraceCost

__all__ = ["CausalTrace", "TraceCost", "causal_trace", "trace_cost"]
