"""Interventions that propagate: change a recurrent layer's state at a step and see what the model does next.

:class:`StateEdit` names the layer, the step, the part of the state, the heads or channels and the
operation (:mod:`hiddenstate.edit.ops`); :func:`intervene` runs a transformers model of a
registered family (:mod:`hiddenstate.edit.families`), a ``save_pretrained`` directory of one, or
one of our models (:mod:`hiddenstate.edit.ours`: a CharRNN of any cell, MambaLM,
Mamba2LM) with the edits, the edited layer continuing its recurrence from the edited state, and returns an :class:`EditRun`: the edited and clean logits,
the edited layers' states and the effect per position. Causal tracing over layers x steps, the
same edits swept (op ``replace`` from a clean run into a corrupted one), is
:mod:`hiddenstate.edit.causal`. NumPy only on import.
"""

from __future__ import annotations

from hiddenstate.edit.api import intervene
from hiddenstate.edit.ops import OPS, StateEdit
from hiddenstate.edit.result import EditRun

__all__ = ["OPS", "EditRun", "StateEdit", "intervene"]
