"""The hidden-state tools on xLSTM's mLSTM: the shared layer loop through the kind's view.

**mLSTM** (:class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer`, transformers' ``xLSTMLayer``): a matrix memory
``C`` (Dk, Dv), a normaliser ``n`` and a stabiliser ``m`` per head. A layer's analysis
(:class:`MLSTMLayerAnalysis`) has

* the forget gate ``sigmoid(f_t)`` per head as the keep gate, its statistics and each head's
  time constant ``1 / (1 - mean)`` (``time_constants`` (H,));
* the exact gradient against lag of the memory, each head's product of its last k forget gates
  (``flow_spectral``, ``flow_rms``, ``head_flow``);
* the output gate ``sigmoid(o)`` (``gate``);
* the effective rank of each head's ``C_t`` on every step (``effective_rank``, ``numerical_rank``
  (T, H)): how full the associative memory is;
* the mean log input gate ``i_t`` per head (``mean_input_gate``) and the share of steps on which
  the stabiliser took the input gate, ``m_t = i_t`` (``input_wins``): the write outweighed the
  whole decayed memory;
* PCA and the memory curve of the stored ``(C, n)`` flattened; the head-channels of the readout
  ``h`` as units.

References
----------
M. Beck et al., "xLSTM: Extended Long Short-Term Memory", NeurIPS 2024, arXiv:2405.04517.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.kinds.mlstm.view import mlstm_view
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult
from hiddenstate.probe.state_analysis import (
    NEEDS_TEXT,
    StateAnalysis,
    layers_phrase,
    per_head_mean,
    summary_tail,
    tau_phrase,
)

__all__ = ["MLSTM", "NOT_MEASURED_MLSTM", "MLSTMAnalysis", "MLSTMLayerAnalysis"]

#: What the analysis of a recurrent layer measures that it does not measure on the mLSTM, and why.
NOT_MEASURED_MLSTM = {
    "fixed points": "for a fixed input the memory's step C -> sigmoid(f) C + exp(i) k v^T is affine with its forget "
                    "gate in (0, 1), so its one fixed point exists and is stable by construction, and it moves with "
                    "every input (f, i, k and v are functions of the input): there is no search to run",
}

@dataclass(frozen=True)
class MLSTMLayerAnalysis:
    """What was measured on one mLSTM layer.

    Attributes
    ----------
    layer : int
        The layer's index (in its model).
    record : MLSTMRecord
        Every step's C, n, m, forget and input gates, readout and output gate (time-major).
    decay : GateStats
        Statistics of the forget gate ``sigmoid(f)`` (the keep gate), one unit per head.
    gate : GateStats
        The output gate ``sigmoid(o)`` per head-channel.
    time_constants : ndarray of shape (H,)
        ``1 / (1 - mean forget gate)`` in steps, per head.
    flow_spectral, flow_rms : ndarray of shape (K,)
        The largest entry and the RMS of the memory's ``dC~_T/dC~_{T-k}`` (each head's product of
        forget gates), averaged over the sequences.
    head_flow : ndarray of shape (K, H)
        Each head's product of its last k forget gates, averaged over the sequences.
    effective_rank : ndarray of shape (T, H)
        The entropy effective rank of each head's ``C_t`` (Roy & Vetterli 2007), averaged over N.
    numerical_rank : ndarray of shape (T, H)
        How many singular values of ``C_t`` exceed 1% of its largest, averaged over N.
    mean_input_gate : ndarray of shape (H,)
        Each head's mean log input gate ``i`` (the gate is ``exp(i)``).
    input_wins : ndarray of shape (H,)
        Each head's share of steps on which the stabiliser took the input gate (``m_t = i_t``).
    pca : PCAResult
        PCA of the stored states flattened to H*Dk*Dv + H*Dk features.
    memory : MemoryCurve or None
        The memory curve of the flattened state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the head-channels whose readout tracks each text feature.
    recomputed : float or None
        For a layer recomputed from a model's own run, the relative error of its output.
    """

    layer: int
    record: object
    decay: GateStats
    gate: GateStats
    time_constants: np.ndarray
    flow_spectral: np.ndarray
    flow_rms: np.ndarray
    head_flow: np.ndarray
    effective_rank: np.ndarray
    numerical_rank: np.ndarray
    mean_input_gate: np.ndarray
    input_wins: np.ndarray
    pca: PCAResult
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None



@dataclass(frozen=True)
class MLSTMAnalysis(StateAnalysis):
    """The measurements of every mLSTM layer of a model (an xLSTM model's, or :func:`analyze_layer`'s).

    Attributes
    ----------
    layers : list of MLSTMLayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``kind`` (``"mlstm"``), ``T``, ``N``, ``num_heads``, ``head_k_dim``, ``head_v_dim``,
        ``num_layers``, ``model`` and, with a memory curve, ``memory target``.
    text : str or None
        The characters of sequence 0.
    explore : dict or None
        With a text: the explorer's data of the top layer's head-channels.
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it.
    """

    not_measured: dict = field(default_factory=lambda: dict(NOT_MEASURED_MLSTM))

    def summary(self) -> str:
        """One line per layer: forget gates, time constants, input gate, gradient, effective rank, PCA, memory.

        Returns
        -------
        str
        """
        m = self.meta
        lines = [f"{m.get('model', 'mLSTM')}: {layers_phrase(self)}, matrix memory (H={m.get('num_heads')}, "
                 f"Dk={m.get('head_k_dim')}, Dv={m.get('head_v_dim')}) per sequence, {m.get('T')} steps of "
                 f"{m.get('N')} sequence(s)"]
        full = min(m.get("head_k_dim", 0), m.get("head_v_dim", 0))
        for la in self.layers:
            lines.append(f"layer {la.layer}: mean forget gate {float(np.mean(la.decay.mean)):.3f}; head time constants "
                         f"{tau_phrase(la.time_constants)}; mean log input gate {float(np.mean(la.mean_input_gate)):.3g} (the "
                         f"stabiliser took it on {100 * float(np.mean(la.input_wins)):.0f}% of steps); "
                         f"|dC_T/dC_(T-{la.flow_spectral.size - 1})| {la.flow_spectral[-1]:.3g}; effective rank at the "
                         f"last step {float(la.effective_rank[-1].mean()):.3g} of {full} (numerical "
                         f"{float(la.numerical_rank[-1].mean()):.3g})" + summary_tail(la))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def _measure_mlstm(index: int, rec, max_lag: int, common: dict) -> dict:
    """An mLSTM layer's own measurements beyond the view's: the mean log input gate, how often it set the stabiliser."""
    return {"mean_input_gate": per_head_mean(rec.igate), "input_wins": per_head_mean((rec.m[..., 0] == rec.igate) * 1.0)}


def _sizes_mlstm(rec) -> dict:
    _, _, H, Dk, Dv = rec.C.shape
    return {"kind": "mlstm", "num_heads": H, "head_k_dim": Dk, "head_v_dim": Dv}


_TEXT = NEEDS_TEXT.replace("analyze_mamba", "analyze_layer")

#: The mLSTM records' kind for the shared layer loop.
MLSTM = LayerKind("mlstm", _measure_mlstm, MLSTMLayerAnalysis, MLSTMAnalysis, _sizes_mlstm, NOT_MEASURED_MLSTM, _TEXT,
                  mlstm_view)
