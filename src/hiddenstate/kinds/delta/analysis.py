"""The hidden-state tools on the delta rule (Gated DeltaNet, Kimi Delta Attention): the Mamba analyses' loop, per head.

A delta-rule layer's state is one matrix ``S`` (Dk, Dv) per value head (N, Hv, Dk, Dv)
(:mod:`hiddenstate.kinds.delta.kernel`), updated as ``S_t = (I - beta_t k_t k_t^T) diag(a_t) S_{t-1} +
beta_t k_t v_t^T``. Its record goes through the same layer loop as Mamba's
(:func:`hiddenstate.probe.layer_loop.analyze_records`) through the kind's view
(:mod:`hiddenstate.kinds.delta.view`), so a layer's analysis has

* the decay ``a_t = exp(g_t)`` as the keep gate: per head for the gated delta rule
  (``time_constants`` (Hv,)), per head and key channel for KDA (``time_constants`` (Hv, Dk));
* the exact gradient against lag: ``dS_T/dS_{T-k}`` is the product of the step Jacobians
  ``(I - beta k k^T) diag(a)``, which are not diagonal; its spectral norm and RMS against k
  (``flow_spectral``, ``flow_rms``) and each head's spectral norm (``head_flow``);
* the effective rank of each head's ``S_t`` on every step: ``effective_rank`` (T, Hv), the
  entropy effective rank of Roy & Vetterli (2007), ``exp`` of the entropy of the normalised
  singular values, and ``numerical_rank`` (T, Hv), the count of singular values above 1% of
  the largest, both averaged over the sequences: how full the associative memory is;
* the mean write strength ``beta`` per head (``mean_beta``);
* PCA and the memory curve of the state flattened to Hv*Dk*Dv entries; the head-channels
  ``d = h * Dv + j`` of the readout ``o_t = S_t^T q_t`` as units (with a text: the ones that
  track text features, and the explorer).

The output gate's statistics are KDA's ``sigmoid`` gate; the gated delta rule's gate is
``silu(z)``, not a (0, 1) gate, and is not measured (``not_measured`` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.delta.view import delta_view
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind, analyze_records
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult
from hiddenstate.probe.state_analysis import NEEDS_TEXT, StateAnalysis, layers_phrase, recomputed_phrase

__all__ = ["GATED_DELTA", "KDA", "NOT_MEASURED_DELTA", "DeltaAnalysis", "DeltaLayerAnalysis", "analyze_delta"]

#: What the analysis of a recurrent layer measures that it does not measure on the delta rule, and why.
NOT_MEASURED_DELTA = {
    "fixed points": "for a fixed input the step S -> (I - beta k k^T) diag(a) S + beta k v^T is affine, and with "
                    "the decay a in (0, 1] and beta in (0, 2) its linear part is a contraction, so its one fixed "
                    "point exists and is stable by construction, and it moves with every input (a, beta, k and v "
                    "are functions of the input): there is no search to run",
}

_NO_GATE = ("output gate statistics: the gated delta rule's output gate is silu(z), not a (0, 1) gate, and its "
            "record keeps silu(z), not z")


@dataclass(frozen=True)
class DeltaLayerAnalysis:
    """What was measured on one delta-rule layer (gated delta rule or KDA).

    Attributes
    ----------
    layer : int
        The layer's index (in its model).
    record : DeltaRecord
        Every step's matrix state, conv window, decay, beta, q, k, v, o and gate (time-major).
    decay : GateStats
        Statistics of the decay ``exp(g)`` (the keep gate): Hv units (per head) or Hv*Dk (KDA,
        head ``h`` key channel ``i`` at ``h * Dk + i``).
    gate : GateStats or None
        KDA's output gate ``sigmoid(g)`` per head-channel; None for the gated delta rule.
    time_constants : ndarray of shape (Hv,) or (Hv, Dk)
        ``1 / (1 - mean decay)`` in steps, per head (per head and key channel for KDA).
    flow_spectral, flow_rms : ndarray of shape (K,)
        The spectral norm and the RMS (``||J||_F / sqrt(F)``) of the exact ``dS_T/dS_{T-k}``
        (:func:`hiddenstate.kinds.delta.view.delta_lag_norms`), averaged over the sequences.
    head_flow : ndarray of shape (K, Hv)
        Each head's spectral norm of its ``dS_T/dS_{T-k}``.
    effective_rank : ndarray of shape (T, Hv)
        The entropy effective rank of each head's ``S_t`` (Roy & Vetterli 2007), averaged over N.
    numerical_rank : ndarray of shape (T, Hv)
        How many singular values of ``S_t`` exceed 1% of its largest, averaged over N.
    mean_beta : ndarray of shape (Hv,)
        Each head's mean write strength ``beta``.
    pca : PCAResult
        PCA of the states flattened to Hv*Dk*Dv features.
    memory : MemoryCurve or None
        The memory curve of the flattened state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the head-channels whose ``o`` tracks each text feature.
    recomputed : float or None
        For a layer recomputed from a model's own run, the relative error of its output.
    """

    layer: int
    record: object
    decay: GateStats
    gate: GateStats | None
    time_constants: np.ndarray
    flow_spectral: np.ndarray
    flow_rms: np.ndarray
    head_flow: np.ndarray
    effective_rank: np.ndarray
    numerical_rank: np.ndarray
    mean_beta: np.ndarray
    pca: PCAResult
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None

    @property
    def channels(self) -> np.ndarray:
        """Each head-channel's readout ``o_t = S_t^T q_t`` before the gated norm, shape (T, N, Hv*Dv)."""
        o = self.record.o
        return o.reshape(o.shape[:2] + (-1,))

    @property
    def head_time_constant(self) -> np.ndarray:
        """Each head's time constant, shape (Hv,): its own, or for KDA its slowest key channel's."""
        tau = self.time_constants
        return tau if tau.ndim == 1 else tau.max(axis=1)


@dataclass(frozen=True)
class DeltaAnalysis(StateAnalysis):
    """The measurements of every delta-rule layer of a model (:func:`analyze_delta`, or a transformers model's).

    Attributes
    ----------
    layers : list of DeltaLayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``kind`` (``"gated_delta"`` or ``"kda"``), ``T``, ``N``, ``num_heads`` (Hv), ``head_k_dim``,
        ``head_v_dim``, ``d_conv``, ``num_layers``, ``model`` and, with a memory curve, ``memory target``.
    text : str or None
        The characters of sequence 0.
    explore : dict or None
        With a text: the explorer's data of the top layer's head-channels.
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it.
    """

    not_measured: dict = field(default_factory=lambda: dict(NOT_MEASURED_DELTA))

    def summary(self) -> str:
        """One line per layer: decay, time constants, beta, gradient, effective rank, PCA, memory.

        Returns
        -------
        str
        """
        m = self.meta
        lines = [f"{m.get('model', 'delta rule')}: {layers_phrase(self)}, matrix state (Hv={m.get('num_heads')}, "
                 f"Dk={m.get('head_k_dim')}, Dv={m.get('head_v_dim')}) per sequence, {m.get('T')} steps of "
                 f"{m.get('N')} sequence(s)"]
        for la in self.layers:
            tau = la.head_time_constant
            mem = "" if la.memory is None else f"; memory capacity {la.memory.capacity:.3g} ({la.memory.metric})"
            lines.append(f"layer {la.layer}: mean decay {float(np.mean(la.decay.mean)):.3f}; head time constants "
                         f"median {float(np.median(tau)):.3g}, max {float(np.max(tau)):.3g} steps; mean beta "
                         f"{float(np.mean(la.mean_beta)):.3g}; |dS_T/dS_(T-{la.flow_spectral.size - 1})| "
                         f"{la.flow_spectral[-1]:.3g}; effective rank at the last step {float(la.effective_rank[-1].mean()):.3g}"
                         f" of {min(m.get('head_k_dim', 0), m.get('head_v_dim', 0))} (numerical "
                         f"{float(la.numerical_rank[-1].mean()):.3g}); {la.pca.n_components_for(0.9)} PCs explain 90%"
                         f"{mem}" + recomputed_phrase(la.recomputed))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def _measure(index: int, rec, max_lag: int, common: dict) -> dict:
    """A delta-rule layer's own measurement beyond the view's: each head's mean write strength."""
    return {"mean_beta": rec.beta.reshape(-1, rec.beta.shape[-1]).mean(axis=0)}


def _sizes(name):
    def sizes(rec) -> dict:
        _, _, Hv, Dk, Dv = rec.recurrent.shape
        return {"kind": name, "num_heads": Hv, "head_k_dim": Dk, "head_v_dim": Dv, "d_conv": rec.conv.shape[-1] + 1}
    return sizes


_TEXT = NEEDS_TEXT.replace("analyze_mamba", "analyze_delta")

#: The gated delta rule's records' kind for the shared layer loop (no (0, 1) output gate).
GATED_DELTA = LayerKind("gated_delta", _measure, DeltaLayerAnalysis, DeltaAnalysis, _sizes("gated_delta"),
                        {**NOT_MEASURED_DELTA, "output gate": _NO_GATE}, _TEXT, delta_view)

#: Kimi Delta Attention's records' kind for the shared layer loop.
KDA = LayerKind("kda", _measure, DeltaLayerAnalysis, DeltaAnalysis, _sizes("kda"), NOT_MEASURED_DELTA, _TEXT,
                delta_view)


def analyze_delta(block, u, state=None, *, max_lag: int = 30, model_name: str | None = None, text: str | None = None,
                  tokens=None) -> DeltaAnalysis:
    """Trace one of our delta-rule blocks and measure its state: decay, time constants, gradient, effective rank, PCA.

    Parameters
    ----------
    block : GatedDeltaNet or KimiDeltaAttention
    u : ndarray of shape (T, N, M), or (N, T, M) with ``block.batch_first``
        The block's input.
    state : DeltaState, optional
        The initial states (None: zeros).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary (default ``"hiddenstate <class name>"``).
    text : str, optional
        The characters of sequence 0, one per step: the head-channels that track text features
        and the explorer.
    tokens : array_like of int, shape (T, N), optional
        Ids behind the steps for the memory curve (default None: it regresses the input ``u_{t-k}``).

    Returns
    -------
    DeltaAnalysis

    Raises
    ------
    TypeError
        ``block`` is neither; ``text`` not a str; and the errors of the block's ``forward``.
    ValueError
        ``max_lag`` not positive; an input of no steps; ``text`` empty or longer than T.
    """
    if not isinstance(block, (GatedDeltaNet, KimiDeltaAttention)):
        raise TypeError(f"block must be a hiddenstate GatedDeltaNet or KimiDeltaAttention; got {type(block).__name__}.")
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    rec = block.forward(u, state, record=True)[3]
    kind = KDA if isinstance(block, KimiDeltaAttention) else GATED_DELTA
    return analyze_records(kind, [rec], x=u, tokens=tokens, ids=False, batch_first=block.batch_first,
                           max_lag=max_lag, text=text, model_name=model_name or f"hiddenstate {type(block).__name__}")
