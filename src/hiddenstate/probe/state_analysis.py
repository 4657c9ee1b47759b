"""What an analysis of a recurrent state is, whatever the kind: :class:`StateAnalysis` and the generic layer analysis.

Every kind's analysis (``MambaAnalysis``, ``DeltaAnalysis``, ``MLSTMAnalysis``, ...) is a
:class:`StateAnalysis`: the measured layers, what was not measured and why, the sizes (``meta``),
the text and the explorer's data, and a transformers model's layer map. A kind whose layers need
no fields of their own beyond the shared layer loop's (:mod:`hiddenstate.probe.layer_loop`) uses
:class:`RecurrenceLayerAnalysis` and :class:`RecurrenceAnalysis`: the layer says what it measured
as (label, value) rows (:meth:`RecurrenceLayerAnalysis.card_rows`), in the words its kind gives
through its ``measure`` (``keep_label``, ``gate_unit``, ``flow_note``, ...), and the family page
shows those rows as its card (the RG-LRU, lightning attention, the short convolution, and any kind
registered with no card of its own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from hiddenstate.kinds.agreement import Agreement
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult

__all__ = ["NEEDS_TEXT", "RecurrenceAnalysis", "RecurrenceLayerAnalysis", "StateAnalysis", "kind_of",
           "layers_phrase", "per_head_mean", "recomputed_phrase", "summary_tail", "tau_phrase"]

#: Why the unit features and the explorer are missing from an analysis made without ``text``.
NEEDS_TEXT = ("they need the characters behind the steps: pass text= (the characters of sequence 0, one per "
              "step) to analyze_mamba or inspect_model")


def kind_of(analysis) -> str | None:
    """The kind an analysis is of: ``meta["kind"]``, else its class's ``kind`` (Mamba's meta names none).

    Parameters
    ----------
    analysis : StateAnalysis

    Returns
    -------
    str or None
    """
    meta = getattr(analysis, "meta", None)
    return (meta.get("kind") if isinstance(meta, dict) else None) or getattr(analysis, "kind", None)


def layers_phrase(analysis) -> str:
    """How many layers a summary's first line says were measured: of all, or of a transformers model's recurrent ones.

    Parameters
    ----------
    analysis : StateAnalysis
        Any kind's analysis (``layers``, ``layer_map``).

    Returns
    -------
    str
        ``"2 layer(s)"`` without a layer map; with one, ``"2 of 4 recurrent layers"`` and, for a
        hybrid, ``" (6 layers in all)"``.
    """
    n, layer_map = len(analysis.layers), getattr(analysis, "layer_map", None)
    if not layer_map:
        return f"{n} layer(s)"
    recurrent = sum(e.role == "recurrent" for e in layer_map)
    return (f"{n} of {recurrent} recurrent layer{'' if recurrent == 1 else 's'}"
            + (f" ({len(layer_map)} layers in all)" if len(layer_map) > recurrent else ""))


def recomputed_phrase(error) -> str:
    """``; recomputed: 2.1e-07 of the model's own output`` for a summary ('' when the layer was not recomputed).

    An :class:`~hiddenstate.kinds.agreement.Agreement` adds the state's share of the readout
    and the state-part check (:meth:`~hiddenstate.kinds.agreement.Agreement.phrase`): ``...;
    the state's share 6e-09 of the readout, its part held to 3.1e-07 with the skip D x set to 0
    in both``, or that the share is too small for the check to see the recurrence.

    Parameters
    ----------
    error : float, Agreement or None
        The layer's ``recomputed`` error.

    Returns
    -------
    str
    """
    if error is None:
        return ""
    if isinstance(error, Agreement):  # with the state's share, and what the check could see of the state
        return f"; recomputed: {error.phrase()}"
    return f"; recomputed: {error:.2g} of the model's own output"


def summary_tail(la) -> str:
    """A summary line's end: ``; 3 PCs explain 90%; memory capacity 0.5 (r2); recomputed: ...``.

    Parameters
    ----------
    la : layer analysis
        With ``pca``, ``memory`` (or None) and ``recomputed`` (or None).

    Returns
    -------
    str
    """
    mem = "" if la.memory is None else f"; memory capacity {la.memory.capacity:.3g} ({la.memory.metric})"
    return f"; {la.pca.n_components_for(0.9)} PCs explain 90%{mem}" + recomputed_phrase(la.recomputed)


def tau_phrase(tau) -> str:
    """``median 4.2, max 31 steps`` of time constants.

    Parameters
    ----------
    tau : ndarray
        Time constants in steps (any shape, finite).

    Returns
    -------
    str
    """
    return f"median {float(np.median(tau)):.3g}, max {float(np.max(tau)):.3g} steps"


def per_head_mean(a) -> np.ndarray:
    """The mean over every axis but the last: (..., H) -> (H,).

    Parameters
    ----------
    a : ndarray of shape (..., H)

    Returns
    -------
    ndarray of shape (H,)
    """
    return a.reshape(-1, a.shape[-1]).mean(axis=0)


@dataclass(frozen=True)
class RecurrenceLayerAnalysis:
    """What was measured on one layer of a kind with no layer analysis of its own (RG-LRU, lightning, short conv).

    Attributes
    ----------
    layer : int
        The layer's index (in its model).
    record : NamedTuple
        Every step's states and gates (time-major).
    kind : str
        The kind's name (``"rglru"``, ``"lightning"``, ``"shortconv"``, ...).
    flow_spectral, flow_rms : ndarray of shape (K,)
        The largest entry (spectral norm) and the RMS of the exact ``dS_T/dS_{T-k}``, k = 0 ..
        K-1, averaged over the sequences.
    pca : PCAResult
        PCA of the states flattened to their entries.
    decay : GateStats or None
        The keep gate's statistics; None for a kind without a keep gate.
    time_constants : ndarray, or None
        ``1 / (1 - mean keep)`` in steps, shaped as the kind's ``keep_shape``; None without a keep gate.
    gate : GateStats or None
        The output gate's statistics where it is a (0, 1) gate; None otherwise.
    head_flow : ndarray of shape (K, H), or None
        Each head's product of its last k decays, for a kind with heads.
    effective_rank, numerical_rank : ndarray of shape (T, H), or None
        For a matrix state: the entropy effective rank of each head's ``S_t`` and its count of
        singular values above 1% of the largest, averaged over the sequences.
    memory : MemoryCurve or None
        The memory curve of the flattened state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the units that track each text feature.
    recomputed : float or None
        For a layer recomputed from a model's own run, the relative error of its output.
    flow_note : str, default ""
        What ``flow_spectral`` is, for the report (one sentence, plain text).
    gate_unit : str, default "head"
        What one keep gate unit is called in the rows (``"channel"``, ``"head"``).
    keep_label : str, default "decay"
        The keep gate's name in the rows (``"a_t"``, ``"exp(-lambda_h)"``).
    out_gate_label : str, default "output gate"
        The output gate's name in the rows.
    no_keep : str, default ""
        The row that stands for the keep gate of a kind without one (``"none: a window of ..."``).
    rank_of : int, default 0
        For a matrix state, the largest rank its heads can have (min(Dk, Dv)).
    """

    layer: int
    record: object
    kind: str
    flow_spectral: np.ndarray
    flow_rms: np.ndarray
    pca: PCAResult
    decay: GateStats | None = None
    time_constants: np.ndarray | None = None
    gate: GateStats | None = None
    head_flow: np.ndarray | None = None
    effective_rank: np.ndarray | None = None
    numerical_rank: np.ndarray | None = None
    memory: MemoryCurve | None = None
    units: dict | None = None
    recomputed: float | None = None
    flow_note: str = ""
    gate_unit: str = "head"
    keep_label: str = "decay"
    out_gate_label: str = "output gate"
    no_keep: str = ""
    rank_of: int = 0

    def card_rows(self) -> list:
        """The layer's measurements as (label, value) rows, plain text, for the report's card.

        Returns
        -------
        list of (str, str)
        """
        rows = []
        what = self.gate_unit
        if self.decay is not None:
            tau = self.time_constants
            q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
            rows += [(f"mean {what} decay {self.keep_label}", f"{float(np.mean(self.decay.mean)):.4f}"),
                     (f"{what}s kept > {self.decay.high:g} (share of steps)",
                      f"{100 * float(np.mean(self.decay.right)):.1f}%"),
                     (f"{what} time constant 1/(1 - mean decay), 10/50/90%", " / ".join(f"{v:.3g}" for v in q) + " steps"),
                     (f"longest {what} time constant", f"{float(np.max(tau)):.4g} steps ({what} {int(np.argmax(tau))})")]
        else:
            rows.append(("keep gate", self.no_keep or "none"))
        if self.gate is not None:
            rows.append((f"{self.out_gate_label} open > 0.9 / shut < 0.1",
                         f"{100 * float(np.mean(self.gate.right)):.1f}% / {100 * float(np.mean(self.gate.left)):.1f}%"))
        rows.append((f"|dS_T/dS_(T-{self.flow_spectral.size - 1})| (largest entry / RMS)",
                     f"{self.flow_spectral[-1]:.3g} / {self.flow_rms[-1]:.3g}"))
        if self.effective_rank is not None:
            rows.append(("effective rank of S_t at the last step, mean over heads (numerical)",
                         f"{float(self.effective_rank[-1].mean()):.3g} of {self.rank_of} "
                         f"({float(self.numerical_rank[-1].mean()):.3g})"))
        rows.append(("principal components for 90% of the state's variance", str(self.pca.n_components_for(0.9))))
        return rows


@dataclass(frozen=True)
class StateAnalysis:
    """The measurements of every recorded layer of a model, whatever the kind: the base of every kind's analysis.

    Attributes
    ----------
    layers : list
        One layer analysis per recorded layer (the kind's ``layer_type``).
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``T``, ``N``, the kind's sizes, ``num_layers``, ``model`` and, with a memory curve,
        ``memory target`` (what it decodes); for a kind with no layer analysis of its own also
        ``kind``, ``state`` (the state in words), ``state entries`` and ``unit`` (what a unit is).
    text : str or None
        The characters of sequence 0 the unit features and the explorer read.
    explore : dict or None
        With a text: the explorer's data of the top layer's units.
    layer_map : tuple of LayerInfo, or None
        For a transformers model, every layer of it: ``(index, role, class_name, path)``, the
        recorded ones of role ``"recurrent"`` (:mod:`hiddenstate.interop.families`).
    """

    layers: list
    not_measured: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    text: str | None = None
    explore: dict | None = None
    layer_map: tuple | None = None
    #: The kind of an analysis whose ``meta`` has no ``"kind"`` (None: ``meta["kind"]`` says it).
    kind: ClassVar[str | None] = None

    def summary(self) -> str:
        """One line per layer: its card's rows (keep gate, time constants, gradient against lag, rank), PCA, memory.

        Returns
        -------
        str
        """
        m = self.meta
        lines = [f"{m.get('model', m.get('kind'))}: {layers_phrase(self)}, {m.get('state')} per sequence, "
                 f"{m.get('T')} steps of {m.get('N')} sequence(s)"]
        for la in self.layers:
            rows = dict(la.card_rows()) if hasattr(la, "card_rows") else {}
            parts = [f"{k} {v}" for k, v in rows.items() if not k.startswith("principal")]
            mem = "" if la.memory is None else f"; memory capacity {la.memory.capacity:.3g} ({la.memory.metric})"
            lines.append(f"layer {la.layer}: " + "; ".join(parts) + f"; {la.pca.n_components_for(0.9)} PCs explain 90%"
                         + mem + recomputed_phrase(la.recomputed))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


@dataclass(frozen=True)
class RecurrenceAnalysis(StateAnalysis):
    """The measurements of every layer of a kind whose layers are :class:`RecurrenceLayerAnalysis` (RG-LRU, ...).

    Attributes
    ----------
    layers : list of RecurrenceLayerAnalysis
    not_measured : dict of str to str
        What the analysis of the other kinds has that this one has not, with the reason.
    meta : dict
        ``kind``, ``T``, ``N``, the kind's sizes, ``state`` (the state in words), ``state
        entries``, ``unit`` (what a unit is), ``num_layers``, ``model`` and, with a memory
        curve, ``memory target``.
    text : str or None
    explore : dict or None
    layer_map : tuple of LayerInfo, or None
    """
