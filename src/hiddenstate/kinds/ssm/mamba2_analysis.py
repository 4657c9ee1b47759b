"""The hidden-state tools on Mamba-2 (SSD): trace, the head's decay as keep gate, time constants, gradient, memory, PCA.

A Mamba-2 block's state ``h`` (N, H, P, S) follows ``h_t = exp(dt_t A_h) h_{t-1} + dt_t x_t B_t^T``
(:mod:`hiddenstate.kinds.ssm.mamba2_kernel`): the decay is one scalar per head and step, ``exp(dt_t A_h)``
(T, N, H), and it multiplies the head's whole (P, S) block of the state. The step Jacobian
``dh_t/dh_{t-1}`` is the diagonal matrix that repeats each head's decay over its P*S entries
(it does not depend on ``h``), so

* the head's decay in (0, 1] is its *keep gate*: gate statistics with the H heads as the units
  (:func:`hiddenstate.probe.gatestats.gate_statistics`) and a time constant
  ``1 / (1 - mean decay)`` in steps per head;
* ``dh_T/dh_{T-k}`` is that diagonal with each head's product of its last k decays: its largest
  entry and its RMS against k are :func:`hiddenstate.kinds.ssm.mamba_analysis.decay_flow` of the decay with
  a trailing axis of one (every head holds P*S entries, so the RMS over heads is the RMS over all
  H*P*S entries), and the per-head products themselves are kept (``head_flow``);
* the states, flattened to H*P*S, go through PCA and the memory curve
  (:mod:`hiddenstate.probe.state_memory`);
* a head-channel is a unit (:mod:`hiddenstate.probe.state_units`): channel ``d = h * P + p`` of
  ``y_t = h_t C_t + D x_t`` before the gate and the gated norm (after the norm a channel's value
  is divided by its whole group's RMS, so ``y`` is the last value that is the channel's own), its
  keep gate its head's decay.

The result is a :class:`Mamba2Analysis`, a :class:`~hiddenstate.kinds.ssm.mamba_analysis.MambaAnalysis` whose
layers are :class:`Mamba2LayerAnalysis`; :func:`hiddenstate.report.family_page.build_family_report`
writes its report.

References
----------
T. Dao, A. Gu, "Transformers are SSMs: Generalized models and efficient algorithms through
structured state space duality", arXiv:2405.21060, 2024.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds.base import head_products
from hiddenstate.kinds.ssm.lm import Mamba2LM
from hiddenstate.kinds.ssm.mamba2 import Mamba2
from hiddenstate.kinds.ssm.mamba2_kernel import Mamba2Record
from hiddenstate.kinds.ssm.mamba_analysis import MambaAnalysis
from hiddenstate.kinds.ssm.view import mamba2_view
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind, analyze_records
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult
from hiddenstate.probe.state_analysis import NEEDS_TEXT, layers_phrase, recomputed_phrase

__all__ = ["MAMBA2", "NOT_MEASURED2", "Mamba2Analysis", "Mamba2LayerAnalysis", "analyze_mamba2", "head_flow", "trace_mamba2"]

#: What the analysis of a recurrent layer measures that it does not measure on Mamba-2, and why.
NOT_MEASURED2 = {
    "fixed points": "for a fixed input the SSM step h -> exp(dt A_h) h + dt x B^T is affine with one decay in "
                    "(0, 1] per head, so its one fixed point h* = dt x B^T / (1 - exp(dt A_h)) exists and is stable "
                    "by construction, and it moves with every input (dt, x and B are functions of the input): there "
                    "is no search to run and no attractor landscape of the state alone to show",
}


def trace_mamba2(model, x, states=None) -> list[Mamba2Record]:
    """Every step's states and selective parameters of every Mamba-2 layer.

    Parameters
    ----------
    model : Mamba2LM or Mamba2
        A language model (``x``: token ids) or one block (``x``: (T, N, M) floats, or (N, T, M)
        with ``batch_first``).
    x : array_like
        Token ids (N, T) (``batch_first``, as transformers) or (T, N); or the block's input.
    states : list of MambaState, or MambaState for a block, optional
        The initial states (None: zeros).

    Returns
    -------
    list of Mamba2Record
        One per layer, time-major (T, N, ...).

    Raises
    ------
    TypeError
        ``model`` is neither; and the errors of the model's ``forward``.
    """
    if isinstance(model, Mamba2LM):
        return model.forward(x, states, record=True)[3]
    if isinstance(model, Mamba2):
        return [model.forward(x, states, record=True)[3]]
    raise TypeError(f"model must be a hiddenstate Mamba2LM or Mamba2; got {type(model).__name__}.")


def head_flow(decay, max_lag: int) -> np.ndarray:
    """Each head's exact ``dh_T/dh_{T-k}``: the product of its last k decays, k = 0 .. max_lag, averaged over N.

    Parameters
    ----------
    decay : ndarray of shape (T, N, H)
        ``exp(dt A_h)`` of every step (:attr:`Mamba2Record.decay`).
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    ndarray of shape (K, H)
        ``K = min(max_lag, T) + 1``; row 0 is 1. Every entry of head ``h``'s (P, S) block of the
        Jacobian equals row k's value for that sequence.
    """
    return head_products(decay, max_lag)


@dataclass(frozen=True)
class Mamba2LayerAnalysis:
    """What was measured on one Mamba-2 layer.

    Attributes
    ----------
    layer : int
        The layer's index.
    record : Mamba2Record
        Every step's states, ``dt``, decay, ``B``, ``C``, ``x``, ``y``, gate (time-major).
    decay : GateStats
        Statistics of the decay ``exp(dt A_h)`` (the keep gate) per head: H units.
    gate : GateStats
        Statistics of the output gate's sigmoid part ``sigmoid(z)`` per channel (Di units).
    time_constants : ndarray of shape (H,)
        ``1 / (1 - mean decay)`` in steps, per head.
    mean_dt : ndarray of shape (H,)
        Each head's mean step size.
    flow_spectral, flow_rms : ndarray of shape (K,)
        The largest entry and the RMS of ``dh_T/dh_{T-k}`` over all H*P*S entries, averaged over
        the sequences, for k = 0 .. K-1.
    head_flow : ndarray of shape (K, H)
        :func:`head_flow`: each head's product of its last k decays.
    pca : PCAResult
        PCA of the SSM states flattened to H*P*S features.
    memory : MemoryCurve or None
        The memory curve of the flattened SSM state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the head-channels whose ``y`` tracks each text feature.
    recomputed : float or None
        For a layer recomputed from a model's own run, the relative error of its output
        (:attr:`hiddenstate.kinds.ssm.mamba_analysis.MambaLayerAnalysis.recomputed`); None otherwise.
    """

    layer: int
    record: Mamba2Record
    decay: GateStats
    gate: GateStats
    time_constants: np.ndarray
    mean_dt: np.ndarray
    flow_spectral: np.ndarray
    flow_rms: np.ndarray
    head_flow: np.ndarray
    pca: PCAResult
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None

    @property
    def channels(self) -> np.ndarray:
        """Each head-channel's ``y = h_t C_t + D x_t`` before the gate, shape (T, N, Di), channel ``h * P + p``."""
        y = self.record.y
        return y.reshape(y.shape[:2] + (-1,))

    @property
    def channel_decay(self) -> np.ndarray:
        """Each head-channel's keep gate, its head's decay ``exp(dt A_h)``, shape (T, N, Di), in (0, 1]."""
        return np.repeat(self.record.decay, self.record.y.shape[-1], axis=-1)

    @property
    def channel_time_constant(self) -> np.ndarray:
        """Each head-channel's time constant (its head's), shape (Di,)."""
        return np.repeat(self.time_constants, self.record.y.shape[-1])


@dataclass(frozen=True)
class Mamba2Analysis(MambaAnalysis):
    """The measurements of every layer of a Mamba-2 model (:func:`analyze_mamba2`).

    Attributes
    ----------
    layers : list of Mamba2LayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``kind`` ("mamba2"), ``T``, ``N``, ``num_heads``, ``head_dim``, ``d_inner``, ``d_state``,
        ``n_groups``, ``d_conv``, ``num_layers``, ``model`` and, with a memory curve, ``memory target``.
    text : str or None
        The characters of sequence 0.
    explore : dict or None
        With a text: the explorer's data of the top layer's head-channels.
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it (:attr:`hiddenstate.kinds.ssm.mamba_analysis.MambaAnalysis.layer_map`).
    """

    not_measured: dict = field(default_factory=lambda: dict(NOT_MEASURED2))

    def summary(self) -> str:
        """One line per layer: head decays, time constants, step size, gradient, memory capacity, PCA.

        Returns
        -------
        str
        """
        m = self.meta
        P = m.get("head_dim", 1)
        lines = [f"{m.get('model', 'Mamba-2')}: {layers_phrase(self)}, state (H={m.get('num_heads')}, "
                 f"P={m.get('head_dim')}, S={m.get('d_state')}) per sequence, {m.get('T')} steps of {m.get('N')} "
                 f"sequence(s)"]
        for la in self.layers:
            tau = la.time_constants
            mem = "" if la.memory is None else f"; memory capacity {la.memory.capacity:.3g} ({la.memory.metric})"
            lines.append(f"layer {la.layer}: mean head decay {float(np.mean(la.decay.mean)):.3f}; head time "
                         f"constants median {float(np.median(tau)):.3g}, max {float(np.max(tau)):.3g} steps (head "
                         f"{int(np.argmax(tau))}); mean dt {float(np.mean(la.mean_dt)):.3g}; "
                         f"|dh_T/dh_(T-{la.flow_spectral.size - 1})| {la.flow_spectral[-1]:.3g}; "
                         f"{la.pca.n_components_for(0.9)} PCs explain 90%{mem}" + _units_phrase(la.units, P)
                         + recomputed_phrase(la.recomputed))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def analyze_mamba2(model, x, states=None, *, max_lag: int = 30, model_name: str | None = None,
                   text: str | None = None, tokens=None) -> Mamba2Analysis:
    """Trace a Mamba-2 model and measure its state: head decays, time constants, gradient against lag, memory, PCA.

    Parameters
    ----------
    model : Mamba2LM or Mamba2
    x : array_like
        Token ids (an LM) or the block's input (see :func:`trace_mamba2`).
    states : optional
        Initial states (see :func:`trace_mamba2`).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary and the report.
    text : str, optional
        The characters of sequence 0, one per step (``1 <= len(text) <= T``): adds the
        head-channels that track text features and the explorer's data of the top layer.
    tokens : array_like of int, shape (T, N) (or (T,) for one sequence), optional
        The ids behind the steps, time-major, for the memory curve (default: a Mamba2LM's ids;
        for a block, None: the curve regresses the block's input ``u_{t-k}``).

    Returns
    -------
    Mamba2Analysis

    Raises
    ------
    TypeError, ValueError
        From :func:`trace_mamba2`; ``max_lag`` not a positive integer; an input of no steps;
        ``text`` not a str, empty or longer than T; ``tokens`` not integers or not of shape (T, N).
    """
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    records = trace_mamba2(model, x, states)
    return analyze_records(MAMBA2, records, x=x, tokens=tokens, ids=isinstance(model, Mamba2LM),
                           batch_first=model.batch_first, max_lag=max_lag, text=text,
                           model_name=model_name or f"hiddenstate {type(model).__name__}")


def _measure(index: int, rec: Mamba2Record, max_lag: int, common: dict) -> dict:
    """A Mamba-2 layer's own measurement beyond the view's: each head's mean step size."""
    return {"mean_dt": rec.dt.reshape(-1, rec.decay.shape[-1]).mean(axis=0)}


def _sizes(rec: Mamba2Record) -> dict:
    """``meta``'s sizes of a Mamba-2 record: H, P, Di, S, G and the convolution's width K."""
    _, _, H, P, S = rec.ssm.shape
    return {"kind": "mamba2", "num_heads": H, "head_dim": P, "d_inner": H * P, "d_state": S,
            "n_groups": rec.B.shape[2], "d_conv": rec.conv.shape[-1] + 1}


#: The Mamba-2 records' kind for the shared layer loop (:func:`hiddenstate.probe.layer_loop.analyze_records`).
MAMBA2 = LayerKind("mamba2", _measure, Mamba2LayerAnalysis, Mamba2Analysis, _sizes, NOT_MEASURED2,
                   NEEDS_TEXT.replace("analyze_mamba", "analyze_mamba2"), mamba2_view)


def _units_phrase(units, P: int) -> str:
    """``; head-channel 17 (head 4, row 1) tracks position in line (r = +0.62)``: the best-tracked feature."""
    if not units:
        return ""
    name, u = max(units.items(), key=lambda kv: abs(float(kv[1].top_r[0])))
    d = int(u.best_unit)
    return f"; head-channel {d} (head {d // P}, row {d % P}) tracks {name} (r = {float(u.top_r[0]):+.2f})"
