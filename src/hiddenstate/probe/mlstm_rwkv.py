"""The hidden-state tools on xLSTM's mLSTM and RWKV-4's time mixing: the Mamba analyses' loop, through each kind's view.

Both records go through the same layer loop as Mamba's
(:func:`hiddenstate.probe.layer_loop.analyze_records`) through their kind's view
(:mod:`hiddenstate.kinds.mlstm.view`, :mod:`hiddenstate.kinds.rwkv.view`).

**mLSTM** (:class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer`, transformers' ``xLSTMLayer``): a matrix memory
``C`` (Dk, Dv), a normaliser ``n`` and a stabiliser ``m`` per head. A layer's analysis has

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

**RWKV-4** (:class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix`, transformers' ``RwkvSelfAttention``): the WKV
numerator and denominator per channel with a running maximum. A layer's analysis has

* the decay ``exp(-exp(time_decay))`` per channel as the keep gate (the same on every step: a
  parameter, not a gate of the input) and each channel's time constant (``time_constants`` (A,));
* the exact gradient against lag, the powers of the decays (``flow_spectral``, ``flow_rms``);
* the receptance ``sigmoid(r)`` as the output gate (``gate``);
* each channel's mean share of the current token in its readout (``current_share`` (A,)):
  how much of ``wkv_t`` is the present token (with its bonus) rather than the memory;
* PCA and the memory curve of the stored ``(num, den)``; the channels' ``wkv`` as units.

References
----------
M. Beck et al., "xLSTM: Extended Long Short-Term Memory", NeurIPS 2024, arXiv:2405.04517.
B. Peng et al., "RWKV: Reinventing RNNs for the Transformer Era", Findings of EMNLP 2023,
arXiv:2305.13048.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.mlstm.block import MLSTMLayer
from hiddenstate.kinds.mlstm.view import mlstm_view
from hiddenstate.kinds.rwkv.block import RWKVTimeMix
from hiddenstate.kinds.rwkv.view import rwkv_view
from hiddenstate.kinds.ssm.mamba_analysis import NEEDS_TEXT, MambaAnalysis, layers_phrase, recomputed_phrase
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind, analyze_records
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult

__all__ = ["MLSTM", "NOT_MEASURED_MLSTM", "NOT_MEASURED_RWKV", "RWKV", "MLSTMAnalysis", "MLSTMLayerAnalysis",
           "RWKVAnalysis", "RWKVLayerAnalysis", "analyze_layer"]

#: What the analysis of a recurrent layer measures that it does not measure on the mLSTM, and why.
NOT_MEASURED_MLSTM = {
    "fixed points": "for a fixed input the memory's step C -> sigmoid(f) C + exp(i) k v^T is affine with its forget "
                    "gate in (0, 1), so its one fixed point exists and is stable by construction, and it moves with "
                    "every input (f, i, k and v are functions of the input): there is no search to run",
}

#: What the analysis of a recurrent layer measures that it does not measure on RWKV-4, and why.
NOT_MEASURED_RWKV = {
    "fixed points": "for a fixed input the WKV step (num, den) -> w (num, den) + e^k (v, 1) is affine with a fixed "
                    "decay w in (0, 1) per channel, so its one fixed point exists and is stable by construction, and "
                    "it moves with every input (k and v are functions of the input): there is no search to run",
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
class RWKVLayerAnalysis:
    """What was measured on one RWKV-4 time-mixing layer.

    Attributes
    ----------
    layer : int
        The layer's index (in its model).
    record : RWKVRecord
        Every step's shift, num, den, max, decay, keys, receptance, readout and current-token share.
    decay : GateStats
        Statistics of the decay ``exp(-exp(time_decay))`` (the keep gate, constant in time), one unit per channel.
    gate : GateStats
        The receptance ``sigmoid(r)`` per channel.
    time_constants : ndarray of shape (A,)
        ``1 / (1 - decay)`` in steps, per channel.
    flow_spectral, flow_rms : ndarray of shape (K,)
        The largest entry and the RMS of ``d num~_T / d num~_{T-k}`` (the decays to the power k).
    current_share : ndarray of shape (A,)
        Each channel's mean share of the current token in its readout ``wkv_t``.
    pca : PCAResult
        PCA of the stored (num, den) flattened to 2A features.
    memory : MemoryCurve or None
        The memory curve of the flattened state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the channels whose ``wkv`` tracks each text feature.
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
    current_share: np.ndarray
    pca: PCAResult
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None


def _tail(la) -> str:
    mem = "" if la.memory is None else f"; memory capacity {la.memory.capacity:.3g} ({la.memory.metric})"
    return f"; {la.pca.n_components_for(0.9)} PCs explain 90%{mem}" + recomputed_phrase(la.recomputed)


def _tau(tau) -> str:
    return f"median {float(np.median(tau)):.3g}, max {float(np.max(tau)):.3g} steps"


@dataclass(frozen=True)
class MLSTMAnalysis(MambaAnalysis):
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
                         f"{_tau(la.time_constants)}; mean log input gate {float(np.mean(la.mean_input_gate)):.3g} (the "
                         f"stabiliser took it on {100 * float(np.mean(la.input_wins)):.0f}% of steps); "
                         f"|dC_T/dC_(T-{la.flow_spectral.size - 1})| {la.flow_spectral[-1]:.3g}; effective rank at the "
                         f"last step {float(la.effective_rank[-1].mean()):.3g} of {full} (numerical "
                         f"{float(la.numerical_rank[-1].mean()):.3g})" + _tail(la))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


@dataclass(frozen=True)
class RWKVAnalysis(MambaAnalysis):
    """The measurements of every RWKV-4 time-mixing layer of a model (an RWKV model's, or :func:`analyze_layer`'s).

    Attributes
    ----------
    layers : list of RWKVLayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``kind`` (``"rwkv"``), ``T``, ``N``, ``attention_hidden_size``, ``hidden_size``,
        ``num_layers``, ``model`` and, with a memory curve, ``memory target``.
    text : str or None
        The characters of sequence 0.
    explore : dict or None
        With a text: the explorer's data of the top layer's channels.
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it.
    """

    not_measured: dict = field(default_factory=lambda: dict(NOT_MEASURED_RWKV))

    def summary(self) -> str:
        """One line per layer: decays, time constants, current-token share, gradient, PCA, memory.

        Returns
        -------
        str
        """
        m = self.meta
        lines = [f"{m.get('model', 'RWKV')}: {layers_phrase(self)}, WKV state (A={m.get('attention_hidden_size')}"
                 f" numerators and denominators) per sequence, {m.get('T')} steps of {m.get('N')} sequence(s)"]
        for la in self.layers:
            lines.append(f"layer {la.layer}: mean channel decay {float(np.mean(la.decay.mean)):.3f}; channel time "
                         f"constants {_tau(la.time_constants)}; current token's share of the readout "
                         f"{float(np.mean(la.current_share)):.3g}; |dS_T/dS_(T-{la.flow_spectral.size - 1})| "
                         f"{la.flow_spectral[-1]:.3g}" + _tail(la))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def _per_head(a) -> np.ndarray:
    return a.reshape(-1, a.shape[-1]).mean(axis=0)


def _measure_mlstm(index: int, rec, max_lag: int, common: dict) -> dict:
    """An mLSTM layer's own measurements beyond the view's: the mean log input gate, how often it set the stabiliser."""
    return {"mean_input_gate": _per_head(rec.igate), "input_wins": _per_head((rec.m[..., 0] == rec.igate) * 1.0)}


def _measure_rwkv(index: int, rec, max_lag: int, common: dict) -> dict:
    """An RWKV layer's own measurement beyond the view's: each channel's mean current-token share."""
    return {"current_share": _per_head(rec.current)}


def _sizes_mlstm(rec) -> dict:
    _, _, H, Dk, Dv = rec.C.shape
    return {"kind": "mlstm", "num_heads": H, "head_k_dim": Dk, "head_v_dim": Dv}


def _sizes_rwkv(rec) -> dict:
    return {"kind": "rwkv", "attention_hidden_size": rec.num.shape[-1], "hidden_size": rec.shift.shape[-1]}


_TEXT = NEEDS_TEXT.replace("analyze_mamba", "analyze_layer")

#: The mLSTM records' kind for the shared layer loop.
MLSTM = LayerKind("mlstm", _measure_mlstm, MLSTMLayerAnalysis, MLSTMAnalysis, _sizes_mlstm, NOT_MEASURED_MLSTM, _TEXT,
                  mlstm_view)

#: The RWKV-4 records' kind for the shared layer loop.
RWKV = LayerKind("rwkv", _measure_rwkv, RWKVLayerAnalysis, RWKVAnalysis, _sizes_rwkv, NOT_MEASURED_RWKV, _TEXT,
                 rwkv_view)


def analyze_layer(block, u, state=None, *, max_lag: int = 30, model_name: str | None = None, text: str | None = None,
                  tokens=None) -> MambaAnalysis:
    """Trace one of our mLSTM or RWKV-4 layers and measure its state: keep gates, time constants, gradient, PCA.

    Parameters
    ----------
    block : MLSTMLayer or RWKVTimeMix
    u : ndarray of shape (T, N, M), or (N, T, M) with ``block.batch_first``
        The layer's input.
    state : MLSTMState or RWKVState, optional
        The initial state (None: the layer's fresh one).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary (default ``"hiddenstate <class name>"``).
    text : str, optional
        The characters of sequence 0, one per step: the units that track text features and the explorer.
    tokens : array_like of int, shape (T, N), optional
        Ids behind the steps for the memory curve (default None: it regresses the input ``u_{t-k}``).

    Returns
    -------
    MLSTMAnalysis or RWKVAnalysis

    Raises
    ------
    TypeError
        ``block`` is neither; ``text`` not a str; and the errors of the layer's ``forward``.
    ValueError
        ``max_lag`` not positive; an input of no steps; ``text`` empty or longer than T.
    """
    if not isinstance(block, (MLSTMLayer, RWKVTimeMix)):
        raise TypeError(f"block must be a hiddenstate MLSTMLayer or RWKVTimeMix; got {type(block).__name__}.")
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    kind = MLSTM if isinstance(block, MLSTMLayer) else RWKV
    rec = get_kind(kind.name).run(block, u, state=state)[1]
    return analyze_records(kind, [rec], x=u, tokens=tokens, ids=False, batch_first=block.batch_first, max_lag=max_lag,
                           text=text, model_name=model_name or f"hiddenstate {type(block).__name__}")
