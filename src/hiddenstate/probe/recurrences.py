"""The hidden-state tools on the RG-LRU, lightning attention and the short convolution: the Mamba analyses' loop.

Each record goes through the same layer loop as Mamba's
(:func:`hiddenstate.probe.layer_loop.analyze_records`) through its kind's view
(:mod:`hiddenstate.kinds.recurrences`), so a layer's :class:`RecurrenceLayerAnalysis` has, as the
kind defines them:

* **RG-LRU** (Griffin, De et al. 2024; RecurrentGemma): the diagonal keep gate ``a_t`` per
  channel (``decay``, ``time_constants`` (W,), without the document starts, where the block keeps
  nothing by reset), the exact gradient against lag ``dh_T/dh_{T-k} = diag(a_T ... a_{T-k+1})``
  (``flow_spectral``: its largest entry, ``flow_rms``), PCA and the memory curve of ``h``, the
  channels ``h_t`` as units. Its output gate ``gelu_tanh(linear_y(u))`` is not a (0, 1) gate;
* **lightning attention** (MiniMax-01): one constant decay ``exp(-lambda_h)`` per head
  (``time_constants`` (H,) = ``1 / (1 - exp(-lambda_h))``), ``dS_T/dS_{T-k} = exp(-k lambda_h) I``
  per head (``head_flow``), the matrix state's ``effective_rank`` and ``numerical_rank`` (T, H)
  on every step, the output gate ``sigmoid(output_gate(u))``, the head-channels of ``o_t = q_t
  S_t`` as units;
* **short convolution** (LFM2): no keep gate: its state is the window of the last K - 1 values
  of ``B * x``, so its memory is exactly K - 1 steps (``flow_spectral`` 1 up to lag K - 2 and 0
  from K - 1 on, whatever the input); the analysis says so in ``not_measured``; PCA and the
  memory curve of the window, the channels' ``z = B * x`` as units.

:func:`analyze_recurrence` traces one of our three blocks; a transformers model of the
``recurrent_gemma``, ``minimax`` or ``lfm2`` family goes through ``hiddenstate.inspect_model``
(:mod:`hiddenstate.pipelines.family_inspection`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds.lightning.block import LightningAttention
from hiddenstate.kinds.recurrences import lightning_view, rglru_view, shortconv_view
from hiddenstate.kinds.rglru.block import RGLRUBlock
from hiddenstate.kinds.shortconv.block import ShortConv
from hiddenstate.kinds.ssm.mamba_analysis import NEEDS_TEXT, MambaAnalysis, layers_phrase, recomputed_phrase
from hiddenstate.probe.gatestats import GateStats
from hiddenstate.probe.layer_loop import LayerKind, analyze_records
from hiddenstate.probe.memory import MemoryCurve
from hiddenstate.probe.pca import PCAResult

__all__ = ["LIGHTNING", "RGLRU", "SHORTCONV", "RecurrenceAnalysis", "RecurrenceLayerAnalysis", "analyze_recurrence"]

_AFFINE = ("for a fixed input the step is affine in the state with a linear part of norm below 1 (a decay in (0, 1)), "
           "so its one fixed point exists and is stable by construction, and it moves with every input: there is no "
           "search to run")

_NOT_MEASURED = {
    "rglru": {"fixed points": _AFFINE,
              "output gate statistics": "the RG-LRU's output gate gelu_tanh(linear_y(u)) is not a (0, 1) gate"},
    "lightning": {"fixed points": _AFFINE},
    "shortconv": {
        "keep gate and time constants": "a short convolution's state is the window of the last K-1 values of B*x, "
                                        "shifted by one each step: no gate keeps anything, so a keep gate is not "
                                        "defined; its memory is exactly K-1 steps (dS_T/dS_(T-k) is the shift by k, "
                                        "spectral norm 1 for k < K-1 and 0 from K-1 on)",
        "fixed points": "after K-1 steps the window is a function of the last K-1 inputs alone: no state dynamics",
        "output gate statistics": "the output gate C is linear in the input, not a (0, 1) gate"},
}

_FLOW_NOTE = {
    "rglru": "The exact Jacobian product dh_T/dh_(T-k), the diagonal of the last k decays a_t (0 through a document "
             "start), its largest entry against the lag k:",
    "lightning": "The exact Jacobian product dS_T/dS_(T-k) = exp(-k lambda_h) I on head h, its largest entry (the "
                 "slowest head's) against the lag k:",
    "shortconv": "The exact Jacobian product dS_T/dS_(T-k) of the window, the shift by k: spectral norm 1 while the "
                 "oldest value is still in the window, 0 from lag K-1 on:",
}


@dataclass(frozen=True)
class RecurrenceLayerAnalysis:
    """What was measured on one RG-LRU, lightning attention or short convolution layer.

    Attributes
    ----------
    layer : int
        The layer's index (in its model).
    record : RGLRURecord, LightningRecord or ShortConvRecord
        Every step's states and gates (time-major).
    kind : str
        ``"rglru"``, ``"lightning"`` or ``"shortconv"``.
    flow_spectral, flow_rms : ndarray of shape (K,)
        The largest entry (spectral norm) and the RMS of the exact ``dS_T/dS_{T-k}``, k = 0 ..
        K-1, averaged over the sequences.
    pca : PCAResult
        PCA of the states flattened to their entries.
    decay : GateStats or None
        The keep gate's statistics: ``a_t`` per channel (RG-LRU), ``exp(-lambda_h)`` per head
        (lightning); None for the short convolution.
    time_constants : ndarray of shape (W,) or (H,), or None
        ``1 / (1 - mean keep)`` in steps; None for the short convolution.
    gate : GateStats or None
        Lightning's output gate ``sigmoid(output_gate(u))`` per head-channel; None for the others.
    head_flow : ndarray of shape (K, H), or None
        Lightning: each head's ``exp(-k lambda_h)``.
    effective_rank, numerical_rank : ndarray of shape (T, H), or None
        Lightning: the entropy effective rank of each head's ``S_t`` and its count of singular
        values above 1% of the largest, averaged over the sequences.
    memory : MemoryCurve or None
        The memory curve of the flattened state; None when the steps are too few.
    units : dict of str to UnitCorrelation, or None
        With a text: the units that track each text feature.
    recomputed : float or None
        For a layer recomputed from a model's own run, the relative error of its output.
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

    @property
    def flow_note(self) -> str:
        """What ``flow_spectral`` is, for the report (one sentence, plain text).

        Returns
        -------
        str
        """
        return _FLOW_NOTE[self.kind]

    def card_rows(self) -> list:
        """The layer's measurements as (label, value) rows, plain text, for the report's card.

        Returns
        -------
        list of (str, str)
        """
        rows = []
        if self.decay is not None:
            tau = self.time_constants
            what = "channel" if self.kind == "rglru" else "head"
            q = np.quantile(tau[np.isfinite(tau)], [0.1, 0.5, 0.9]) if np.isfinite(tau).any() else [np.inf] * 3
            rows += [(f"mean {what} decay {'a_t' if self.kind == 'rglru' else 'exp(-lambda_h)'}",
                      f"{float(np.mean(self.decay.mean)):.4f}"),
                     (f"{what}s kept > {self.decay.high:g} (share of steps)",
                      f"{100 * float(np.mean(self.decay.right)):.1f}%"),
                     (f"{what} time constant 1/(1 - mean decay), 10/50/90%", " / ".join(f"{v:.3g}" for v in q) + " steps"),
                     (f"longest {what} time constant", f"{float(np.max(tau)):.4g} steps ({what} {int(np.argmax(tau))})")]
        else:
            window = self.record.conv.shape[-1]
            rows.append(("keep gate", f"none: a window of the last K-1 = {window} values, its memory exactly "
                                      f"{window} steps"))
        if self.gate is not None:
            rows.append(("output gate sigmoid(output_gate(u)) open > 0.9 / shut < 0.1",
                         f"{100 * float(np.mean(self.gate.right)):.1f}% / {100 * float(np.mean(self.gate.left)):.1f}%"))
        rows.append((f"|dS_T/dS_(T-{self.flow_spectral.size - 1})| (largest entry / RMS)",
                     f"{self.flow_spectral[-1]:.3g} / {self.flow_rms[-1]:.3g}"))
        if self.effective_rank is not None:
            D = min(self.record.kv.shape[-2:])
            rows.append(("effective rank of S_t at the last step, mean over heads (numerical)",
                         f"{float(self.effective_rank[-1].mean()):.3g} of {D} "
                         f"({float(self.numerical_rank[-1].mean()):.3g})"))
        rows.append(("principal components for 90% of the state's variance", str(self.pca.n_components_for(0.9))))
        return rows


@dataclass(frozen=True)
class RecurrenceAnalysis(MambaAnalysis):
    """The measurements of every RG-LRU, lightning or short convolution layer of a model.

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

    not_measured: dict = field(default_factory=dict)

    def summary(self) -> str:
        """One line per layer: keep gate and time constants, gradient against lag, rank, PCA, memory.

        Returns
        -------
        str
        """
        m = self.meta
        lines = [f"{m.get('model', m.get('kind'))}: {layers_phrase(self)}, {m.get('state')} per sequence, "
                 f"{m.get('T')} steps of {m.get('N')} sequence(s)"]
        for la in self.layers:
            rows = dict(la.card_rows())
            parts = [f"{k} {v}" for k, v in rows.items() if not k.startswith("principal")]
            mem = "" if la.memory is None else f"; memory capacity {la.memory.capacity:.3g} ({la.memory.metric})"
            lines.append(f"layer {la.layer}: " + "; ".join(parts) + f"; {la.pca.n_components_for(0.9)} PCs explain 90%"
                         + mem + recomputed_phrase(la.recomputed))
        lines += [f"not measured: {k}: {v}" for k, v in self.not_measured.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        """The :meth:`summary`."""
        return self.summary()


def _measure(name):
    def measure(index: int, rec, max_lag: int, common: dict) -> dict:
        return {"kind": name}
    return measure


def _rglru_sizes(rec) -> dict:
    W, K = rec.rg.shape[-1], rec.conv.shape[-1] + 1
    return {"kind": "rglru", "lru_width": W, "d_conv": K, "state entries": "W",
            "state": f"RG-LRU state (W={W}) with a decay per channel, and convolution window (W, K-1={K - 1})",
            "unit": "A channel d is a unit: its activation is its RG-LRU state h_t[d], the recurrence's readout "
                    "before the GELU gate."}


def _lightning_sizes(rec) -> dict:
    H, D, Dv = rec.kv.shape[-3:]
    return {"kind": "lightning", "num_heads": H, "head_dim": D, "state entries": "H*D*D",
            "state": f"matrix state (H={H}, D={D}, D={Dv}) with a constant decay per head",
            "unit": "A head-channel d = h D + j is a unit: its activation is o_t[h, j] = (q_t S_t)[j] of head h, "
                    "before the RMS norm and the output gate."}


def _shortconv_sizes(rec) -> dict:
    M, W = rec.conv.shape[-2:]
    return {"kind": "shortconv", "hidden_size": M, "d_conv": W + 1, "state entries": "M*(K-1)",
            "state": f"convolution window (M={M}, K-1={W}; no keep gate)",
            "unit": "A channel d is a unit: its activation is z_t[d] = B_t[d] x_t[d], the value entering its window."}


_TEXT = NEEDS_TEXT.replace("analyze_mamba", "analyze_recurrence")

#: The RG-LRU's records' kind for the shared layer loop.
RGLRU = LayerKind("rglru", _measure("rglru"), RecurrenceLayerAnalysis, RecurrenceAnalysis, _rglru_sizes,
                  _NOT_MEASURED["rglru"], _TEXT, rglru_view)

#: Lightning attention's records' kind.
LIGHTNING = LayerKind("lightning", _measure("lightning"), RecurrenceLayerAnalysis, RecurrenceAnalysis,
                      _lightning_sizes, _NOT_MEASURED["lightning"], _TEXT, lightning_view)

#: The short convolution's records' kind.
SHORTCONV = LayerKind("shortconv", _measure("shortconv"), RecurrenceLayerAnalysis, RecurrenceAnalysis,
                      _shortconv_sizes, _NOT_MEASURED["shortconv"], _TEXT, shortconv_view)

_KIND_OF = ((RGLRUBlock, RGLRU), (LightningAttention, LIGHTNING), (ShortConv, SHORTCONV))


def analyze_recurrence(block, u, state=None, *, reset=None, max_lag: int = 30, model_name: str | None = None,
                       text: str | None = None, tokens=None) -> RecurrenceAnalysis:
    """Trace one of our RG-LRU, lightning or short convolution blocks and measure its state.

    Parameters
    ----------
    block : RGLRUBlock, LightningAttention or ShortConv
    u : ndarray of shape (T, N, M), or (N, T, M) with ``block.batch_first``
        The block's input.
    state : the block's state type, optional
        The initial states (None: zeros).
    reset : ndarray of bool, shape (T, N) ((N, T) with ``batch_first``), optional
        The RG-LRU's document starts (transformers' ``position_ids == 0``).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary (default ``"hiddenstate <class name>"``).
    text : str, optional
        The characters of sequence 0, one per step: the units that track text features and the
        explorer.
    tokens : array_like of int, shape (T, N), optional
        Ids behind the steps for the memory curve (default None: it regresses the input ``u_{t-k}``).

    Returns
    -------
    RecurrenceAnalysis

    Raises
    ------
    TypeError
        ``block`` of another type; ``text`` not a str; and the errors of the block's ``forward``.
    ValueError
        ``max_lag`` not positive; an input of no steps; ``text`` empty or longer than T; and
        ``reset`` for a block that has none.
    """
    kind = next((k for cls, k in _KIND_OF if isinstance(block, cls)), None)
    if kind is None:
        raise TypeError(f"block must be a hiddenstate RGLRUBlock, LightningAttention or ShortConv; got "
                        f"{type(block).__name__}.")
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    rec = block.forward(u, state, reset=reset, record=True)[3]
    return analyze_records(kind, [rec], x=u, tokens=tokens, ids=False, batch_first=block.batch_first,
                           max_lag=max_lag, text=text, model_name=model_name or f"hiddenstate {type(block).__name__}")
