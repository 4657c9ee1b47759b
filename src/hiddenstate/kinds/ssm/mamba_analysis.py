"""The hidden-state tools on Mamba: trace, decay as keep gate, time constants, gradient, memory, PCA, units.

A Mamba block's state ``h`` (N, Di, S) follows ``h_t = exp(dt_t A) * h_{t-1} + dt_t B_t a_t``
(:mod:`hiddenstate.kinds.ssm.mamba_kernel`): the step Jacobian ``dh_t/dh_{t-1}`` is the diagonal
``exp(dt_t A)`` (it does not depend on ``h``), so

* the decay ``exp(dt A)`` in (0, 1] is each state entry's *keep gate*: its gate statistics
  (:func:`hiddenstate.probe.gatestats.gate_statistics`, a channel's S entries as its units) and
  its time constant ``1 / (1 - mean decay)`` in steps;
* the Jacobian product over the last k steps, ``dh_T/dh_{T-k}``, is the diagonal of the products
  of the last k decays: its largest entry (the spectral norm) against k is the gradient-against-lag
  curve, computed exactly, with no backward pass;
* the states themselves go through PCA (:func:`hiddenstate.probe.pca.pca`) flattened to Di*S,
  and through the memory curve: a ridge readout of the token (or the block's input) ``k`` steps
  back from the whole flattened state (:mod:`hiddenstate.probe.state_memory`);
* a channel is a unit (:mod:`hiddenstate.probe.state_units`): its activation is its readout
  ``y = C_t . h_t + D a_t`` before the gate, its keep gate the mean decay of its S entries; with
  the text behind the steps, the channels that track text features and the explorer's data.

What does not carry over is said with its reason in :attr:`MambaAnalysis.not_measured`. The
analysis base every kind shares (:class:`~hiddenstate.probe.state_analysis.StateAnalysis`),
``NEEDS_TEXT``, :func:`layers_phrase` and :func:`recomputed_phrase` are generic and live in
:mod:`hiddenstate.probe.state_analysis`; they are imported here as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds.base import diagonal_lag_norms
from hiddenstate.kinds.ssm.lm import MambaLM
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba_kernel import MambaRecord
from hiddenstate.kinds.ssm.view import mamba_view
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind, analyze_records
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult
from hiddenstate.probe.state_analysis import NEEDS_TEXT, StateAnalysis, layers_phrase, recomputed_phrase

__all__ = ["MAMBA", "NEEDS_TEXT", "NOT_MEASURED", "MambaAnalysis", "MambaLayerAnalysis", "analyze_mamba", "char_ids",
           "decay_flow", "is_mamba_char_model", "layers_phrase", "recomputed_phrase", "trace_mamba"]

#: What the analysis of a recurrent layer measures that it does not measure on Mamba, and why.
NOT_MEASURED = {
    "fixed points": "for a fixed input the SSM step h -> exp(dt A) h + dt B a is affine with a diagonal decay in "
                    "(0, 1], so its one fixed point h* = dt B a / (1 - exp(dt A)) exists and is stable by "
                    "construction, and it moves with every input (dt, B and a are functions of the input): there "
                    "is no search to run and no attractor landscape of the state alone to show",
}

def is_mamba_char_model(model) -> bool:
    """Whether ``model`` is a character model of Mamba blocks (a ``CharRNN`` of ``cell="mamba"``).

    Recognised by what it has (the probes do not import :mod:`hiddenstate.train`): ``cell ==
    "mamba"``, ``vocab_size``, ``embed`` and the stack ``rnn`` whose ``forward`` records.

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    return (getattr(model, "cell", None) == "mamba" and callable(getattr(model, "embed", None))
            and isinstance(getattr(model, "vocab_size", None), int) and hasattr(getattr(model, "rnn", None), "layers"))


def char_ids(x, vocab_size: int) -> np.ndarray:
    """A character model's input as time-major ids (T, N), validated.

    Parameters
    ----------
    x : array_like of int, shape (T,) or (T, N)
        Character ids in [0, V); (T,) is one sequence.
    vocab_size : int
        V.

    Returns
    -------
    ndarray of int64, shape (T, N)

    Raises
    ------
    TypeError
        Not an integer array (bool included), or ragged.
    ValueError
        Not 1-D or 2-D, no sequence (N = 0), ids outside [0, V).
    """
    try:
        ids = np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists
        raise TypeError(f"x must be character ids of shape (T,) or (T, N); got a ragged {type(x).__name__}.") from None
    if ids.dtype == np.bool_ or ids.dtype.kind not in "iu":
        raise TypeError(f"x must be integer character ids of shape (T,) or (T, N); got dtype {ids.dtype}.")
    if ids.ndim not in (1, 2):
        raise ValueError(f"x must have shape (T,) or (T, N) (time-major, as the CharRNN takes it); got shape "
                         f"{ids.shape}.")
    ids = ids[:, None] if ids.ndim == 1 else ids  # (T, N)
    if ids.shape[1] == 0:
        raise ValueError(f"x must hold at least one sequence (N >= 1); got shape {ids.shape}.")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"x must hold ids in [0, V={vocab_size}); got values in [{ids.min()}, {ids.max()}].")
    return ids.astype(np.int64, copy=False)


def trace_mamba(model, x, states=None) -> list[MambaRecord]:
    """Every step's states and selective parameters of every layer.

    Parameters
    ----------
    model : MambaLM, Mamba or CharRNN of cell "mamba"
        A language model (``x``: token ids), one block (``x``: (T, N, M) floats, or (N, T, M)
        with ``batch_first``), or a character model of Mamba blocks
        (:class:`hiddenstate.kinds.ssm.stack.MambaStack`: ``x`` its character ids; each layer
        reads ``rms_norm`` of the residual stream, as the model computes it).
    x : array_like
        Token ids (N, T) (``batch_first``, as transformers) or (T, N); or the block's input; for a
        CharRNN, character ids (T,) or (T, N), time-major as :meth:`CharRNN.forward` takes them.
    states : list of MambaState, MambaState for a block, or a CharRNN's state, optional
        The initial states (None: zeros); for a CharRNN the pair ``(ssm (L, N, Di, S), conv (L,
        N, Di, K-1))`` its ``forward`` takes and returns.

    Returns
    -------
    list of MambaRecord
        One per layer, time-major (T, N, ...). For a CharRNN: exactly what its own forward pass
        computes (the last step's states are the state it returns).

    Raises
    ------
    TypeError
        ``model`` is none of those; and the errors of the model's ``forward``.
    ValueError
        For a CharRNN, ids that are not (T,) or (T, N) in [0, V) (:func:`char_ids`).
    """
    if isinstance(model, MambaLM):
        return model.forward(x, states, record=True)[3]
    if isinstance(model, Mamba):
        return [model.forward(x, states, record=True)[3]]
    if is_mamba_char_model(model):
        ids = char_ids(x, model.vocab_size)  # (T, N)
        return model.rnn.forward(model.embed(ids), states, need_cache=False, record=True)[3]
    raise TypeError(f"model must be a hiddenstate MambaLM, Mamba or CharRNN of cell 'mamba'; got "
                    f"{type(model).__name__}{f' of cell {model.cell!r}' if hasattr(model, 'cell') else ''}.")


def decay_flow(decay, max_lag: int) -> tuple[np.ndarray, np.ndarray]:
    """Norms of the exact Jacobian products ``dh_T/dh_{T-k} = diag(prod of the last k decays)``, k = 0 .. max_lag.

    Parameters
    ----------
    decay : ndarray of shape (T, N, Di, S)
        ``exp(dt A)`` of every step (:attr:`MambaRecord.decay`).
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    spectral : ndarray of shape (K,)
        The largest entry of the product (its spectral norm), averaged over the N sequences.
    rms : ndarray of shape (K,)
        The root mean square of its entries (what a gradient spread evenly over the state keeps),
        averaged over the N sequences. ``K = min(max_lag, T) + 1``; both are 1 at k = 0.
    """
    return diagonal_lag_norms(decay, max_lag)


@dataclass(frozen=True)
class MambaLayerAnalysis:
    """What was measured on one Mamba layer.

    Attributes
    ----------
    layer : int
        The layer's index.
    record : MambaRecord
        Every step's states, ``dt``, decay, ``B``, ``C``, gate (time-major).
    decay : GateStats
        Statistics of the decay ``exp(dt A)`` (the keep gate) per state entry, Di*S units
        (channel ``d``, entry ``s`` at ``d * S + s``).
    gate : GateStats
        Statistics of the output gate's sigmoid part ``sigmoid(z)`` (``silu(z) = z sigmoid(z)``)
        per channel: the fraction of steps it passes (> 0.9) or blocks (< 0.1).
    time_constants : ndarray of shape (Di, S)
        ``1 / (1 - mean decay)`` in steps, per state entry.
    channel_time_constant : ndarray of shape (Di,)
        Each channel's longest time constant (its slowest state entry).
    mean_dt : ndarray of shape (Di,)
        Each channel's mean step size.
    flow_spectral, flow_rms : ndarray of shape (K,)
        :func:`decay_flow`: the norms of ``dh_T/dh_{T-k}`` for k = 0 .. K-1.
    pca : PCAResult
        PCA of the SSM states flattened to Di*S features.
    memory : MemoryCurve or None
        The memory curve of the SSM state (:func:`hiddenstate.probe.state_memory.state_memory_curve`);
        None when the steps are too few for a held-out split.
    units : dict of str to UnitCorrelation, or None
        With a text: the channels whose activation ``y`` tracks each text feature
        (:func:`hiddenstate.probe.state_units.channel_features`).
    recomputed : float or None
        For a layer recomputed from a model's own run (a transformers model's), the relative
        error ``max |ours - theirs| / max |theirs|`` of its output; None otherwise.
    """

    layer: int
    record: MambaRecord
    decay: GateStats
    gate: GateStats
    time_constants: np.ndarray
    channel_time_constant: np.ndarray
    mean_dt: np.ndarray
    flow_spectral: np.ndarray
    flow_rms: np.ndarray
    pca: PCAResult
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None

    @property
    def channels(self) -> np.ndarray:
        """Each channel's activation ``y = C_t . h_t + D a_t`` (before the gate), shape (T, N, Di)."""
        return self.record.y

    @property
    def channel_decay(self) -> np.ndarray:
        """Each channel's keep gate, the mean of its S decays ``exp(dt A)``, shape (T, N, Di), in (0, 1]."""
        return self.record.decay.mean(axis=-1)


@dataclass(frozen=True)
class MambaAnalysis(StateAnalysis):
    """The measurements of every layer of a Mamba model (:func:`analyze_mamba`), a :class:`~hiddenstate.probe.state_analysis.StateAnalysis`.

    Attributes
    ----------
    layers : list of MambaLayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``T``, ``N``, ``d_inner``, ``d_state``, ``d_conv``, ``num_layers``, ``model`` and, with a
        memory curve, ``memory target`` (what it decodes).
    text : str or None
        The characters of sequence 0 the unit features and the explorer read.
    explore : dict or None
        With a text: the explorer's data of the top layer's channels
        (:func:`hiddenstate.probe.state_units.mamba_explore_data`).
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it: ``(index, role, class_name, path)``, the
        recorded ones of role ``"recurrent"`` (:mod:`hiddenstate.interop.families`).
    """

    not_measured: dict = field(default_factory=lambda: dict(NOT_MEASURED))
    #: The kind of an analysis whose ``meta`` names none (Mamba's meta holds only its sizes).
    kind: ClassVar[str] = "mamba"

    def summary(self) -> str:
        """One line per layer: decay, time constants, step size, gradient, memory capacity, PCA, channels.

        Returns
        -------
        str
        """
        lines = [f"{self.meta.get('model', 'Mamba')}: {layers_phrase(self)}, state (Di={self.meta.get('d_inner')}, "
                 f"S={self.meta.get('d_state')}) per sequence, {self.meta.get('T')} steps of {self.meta.get('N')} "
                 f"sequence(s)"]
        for la in self.layers:
            tau = la.channel_time_constant
            lines.append(f"layer {la.layer}: mean decay {float(np.mean(la.decay.mean)):.3f}, "
                         f"{100 * float(np.mean(la.decay.right)):.0f}% of entries > {la.decay.high:g}; "
                         f"channel time constants median {float(np.median(tau)):.3g}, max {float(np.max(tau)):.3g} "
                         f"steps; mean dt {float(np.mean(la.mean_dt)):.3g}; |dh_T/dh_(T-{la.flow_spectral.size - 1})| "
                         f"{la.flow_spectral[-1]:.3g}; {la.pca.n_components_for(0.9)} PCs explain 90%"
                         + _memory_phrase(la.memory) + _units_phrase(la.units) + recomputed_phrase(la.recomputed))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def analyze_mamba(model, x, states=None, *, max_lag: int = 30, model_name: str | None = None, text: str | None = None,
                  tokens=None) -> MambaAnalysis:
    """Trace a Mamba model and measure its state: decay, time constants, gradient against lag, memory, PCA, channels.

    Parameters
    ----------
    model : MambaLM, Mamba or CharRNN of cell "mamba"
    x : array_like
        Token ids (an LM, a CharRNN) or the block's input (see :func:`trace_mamba`).
    states : optional
        Initial states (see :func:`trace_mamba`).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary (``"transformers MambaForCausalLM"``).
    text : str, optional
        The characters of sequence 0, one per step (``1 <= len(text) <= T``): adds each layer's
        channels that track text features (``layers[l].units``) and the explorer's data of the top
        layer (``explore``). Without it the "Not measured" card says that they need it.
    tokens : array_like of int, shape (T, N) (or (T,) for one sequence), optional
        The token ids behind the steps, time-major: the memory curve decodes the token ``k``
        steps back (accuracy). Default: for a MambaLM its ids ``x`` (time-major); for a block,
        None, and the curve regresses the block's real input ``u_{t-k}`` (variance-weighted
        ``R^2``; one more matrix product a lag, of the same ridge readout).

    Returns
    -------
    MambaAnalysis

    Raises
    ------
    TypeError, ValueError
        From :func:`trace_mamba`; a ``max_lag`` that is not a positive integer; an input of
        no steps; ``text`` that is not a str, empty or longer than T; ``tokens`` that are not
        integers or not of shape (T, N).
    """
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    records = trace_mamba(model, x, states)
    char = is_mamba_char_model(model)  # its character ids, time-major, are what the memory curve decodes
    name = model_name or f"hiddenstate {type(model).__name__}" + (" (mamba)" if char else "")
    return analyze_records(MAMBA, records, x=char_ids(x, model.vocab_size) if char else x, tokens=tokens,
                           ids=char or isinstance(model, MambaLM), batch_first=not char and model.batch_first,
                           max_lag=max_lag, text=text, model_name=name)


def _measure(index: int, rec: MambaRecord, max_lag: int, common: dict) -> dict:
    """A Mamba layer's own measurements beyond the view's: each channel's longest time constant, its mean dt."""
    Di = rec.ssm.shape[2]
    return {"channel_time_constant": common["time_constants"].max(axis=1), "mean_dt": rec.dt.reshape(-1, Di).mean(axis=0)}


def _sizes(rec: MambaRecord) -> dict:
    """``meta``'s sizes of a Mamba record: Di, S and the convolution's width K."""
    return {"d_inner": rec.ssm.shape[2], "d_state": rec.ssm.shape[3], "d_conv": rec.conv.shape[-1] + 1}


#: The Mamba-1 records' kind for the shared layer loop (:func:`hiddenstate.probe.layer_loop.analyze_records`).
MAMBA = LayerKind("mamba", _measure, MambaLayerAnalysis, MambaAnalysis, _sizes, NOT_MEASURED, NEEDS_TEXT, mamba_view)


def _memory_phrase(mc) -> str:
    """``; memory capacity 2.3 (accuracy, chance 0.12)`` for the summary ('' without a curve)."""
    if mc is None:
        return ""
    chance = f", chance {mc.chance:.2f}" if mc.metric == "accuracy" else ""
    return (f"; memory capacity {mc.capacity:.3g} ({mc.metric} over lags 0..{int(mc.lags[-1])}{chance}, "
            f"lag 1: {mc.score[min(1, mc.score.size - 1)]:.2f})")


def _units_phrase(units) -> str:
    """``; channel 17 tracks position in line (r = +0.62)`` for the summary: the best-tracked feature."""
    if not units:
        return ""
    name, u = max(units.items(), key=lambda kv: abs(float(kv[1].top_r[0])))
    return f"; channel {u.best_unit} tracks {name} (r = {float(u.top_r[0]):+.2f})"

