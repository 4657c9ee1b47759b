"""The one layer loop of the recurrent-layer analyses: records in, measurements out (:func:`analyze_records`).

Every kind's analysis (``kinds/<kind>/analysis.py``: :func:`hiddenstate.kinds.ssm.mamba_analysis.analyze_mamba`,
:func:`hiddenstate.kinds.ssm.mamba2_analysis.analyze_mamba2`, :mod:`hiddenstate.kinds.delta.analysis`, ...;
one of our blocks of any registered kind: :func:`hiddenstate.probe.block_analysis.analyze_block`) and the inspection of a transformers model's recurrent layers
(recomputed from hooks, :mod:`hiddenstate.interop.families.hooks`) measure *records*: every
step's states and gates of each layer, time-major. Every kind's record is read through its
:class:`~hiddenstate.kinds.RecordView` (the kind's ``view``), so what follows is done here once,
per layer, for every kind:

* the keep gate (decay or forget gate) per gate unit as the kind defines it: its statistics
  (:func:`~hiddenstate.probe.gatestats.gate_statistics`, ``decay``) and time constants
  ``1 / (1 - mean)`` shaped as the kind's ``keep_shape`` (``time_constants``);
* the exact gradient against lag, the norms of ``dS_T/dS_{T-k}`` (``flow_spectral``,
  ``flow_rms``; per head ``head_flow`` where the kind has heads);
* the output gate's statistics, where the kind's output gate is a (0, 1) gate (``gate``);
* PCA of the state flattened to its entries (:func:`~hiddenstate.probe.pca.pca`, Gram form;
  the explained variance of every component, the first :data:`PCA_AXES` axes and their scores:
  all of them would be as large as the states),
* the memory curve of that flattened state (:mod:`hiddenstate.probe.state_memory`),
* for a matrix state, its effective rank per step and head (``effective_rank``: the entropy
  effective rank of Roy & Vetterli; ``numerical_rank``: the singular values above 1% of the
  largest, :mod:`hiddenstate.kinds.delta.view`);
* with a text, the units that track text features and the explorer's data of the last layer
  (:mod:`hiddenstate.probe.state_units`);

and what differs (extra measurements, such as the step sizes; the sizes in ``meta``; the
result's types) is the kind's :class:`LayerKind`, found through the kind's record in the registry
(:func:`layer_kind`). A layer keeps the index it has in its model (a
hybrid's recurrent layers are not numbered 0, 1, 2, ...) and, when it was recomputed from a
model's own run, the relative error of that recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.agreement import Agreement
from hiddenstate.kinds.delta.view import effective_rank, numerical_rank
from hiddenstate.probe.caveats import MIN_LAG, data_lag, input_warnings
from hiddenstate.probe.gatestats import gate_statistics, time_constant
from hiddenstate.probe.pca import pca
from hiddenstate.probe.state_memory import memory_rows, memory_target, state_memory_curve
from hiddenstate.probe.state_units import view_explore_data
from hiddenstate.probe.textfeatures import usable_features, usable_text_features
from hiddenstate.probe.tokens import token_features
from hiddenstate.probe.unitfeatures import best_units

__all__ = ["NEEDS_TEXT_KEY", "PCA_AXES", "LayerKind", "analyze_records", "layer_kind", "view_measures"]

#: How many principal axes (and their scores) a layer's PCA keeps: the plane a figure draws, and one more.
PCA_AXES = 3

#: The entry of ``not_measured`` that an analysis made without a text has (its value: the kind's ``needs_text``).
NEEDS_TEXT_KEY = "unit features and the explorer"


class LayerKind(NamedTuple):
    """What one kind of record needs of the shared loop (a kind's ``analysis``: ``MAMBA`` of :mod:`hiddenstate.kinds.ssm.mamba_analysis`, ...).

    Attributes
    ----------
    name : str
        The kind's name (``"mamba"``, ``"mamba2"``, ``"gated_delta"``, ``"kda"``), as in
        :data:`hiddenstate.kinds.KINDS`.
    measure : callable
        ``measure(index, record, max_lag, common) -> dict``: the kind's own fields of its layer
        analysis beyond the common ones (``common``: the dict of ``decay``, ``time_constants``,
        ``flow_spectral``, ``flow_rms`` and, where they apply, ``head_flow``,
        ``effective_rank``, ``numerical_rank`` computed from the view), e.g. the step sizes.
    layer_type : type
        The layer analysis (``MambaLayerAnalysis``, or the generic
        :class:`~hiddenstate.probe.state_analysis.RecurrenceLayerAnalysis`), built with ``layer``, ``record``, ``gate``,
        ``pca``, ``memory``, ``units``, ``recomputed``, the common fields and those of ``measure``.
    analysis_type : type
        The analysis, a :class:`~hiddenstate.probe.state_analysis.StateAnalysis` (``MambaAnalysis``).
    sizes : callable
        ``sizes(record) -> dict``: the entries of ``meta`` the record's shapes give.
    not_measured : dict of str to str
        What this kind's analysis never measures, and why.
    needs_text : str
        Why the unit features and the explorer are missing without a text.
    view : callable, optional
        ``view(record) -> RecordView`` (:mod:`hiddenstate.kinds`): what the loop reads of a record;
        None: the registered kind's ``view`` (:func:`hiddenstate.kinds.get_kind` of ``name``).
    """

    name: str
    measure: Callable
    layer_type: type
    analysis_type: type
    sizes: Callable
    not_measured: dict
    needs_text: str
    view: Callable | None = None


def layer_kind(name: str) -> LayerKind:
    """The :class:`LayerKind` of the registered kind ``name`` (its record's ``analysis``, resolved on first use).

    Parameters
    ----------
    name : str
        A registered kind (:data:`hiddenstate.kinds.KINDS`).

    Returns
    -------
    LayerKind

    Raises
    ------
    ValueError
        No kind of that name, or a kind without an analysis.
    """
    return get_kind(name).layer_kind()


def view_measures(view, index: int, max_lag: int) -> dict:
    """The measurements every kind gets from its view: keep gate, time constants, lag norms, effective rank.

    Parameters
    ----------
    view : RecordView
        One layer's view (:mod:`hiddenstate.kinds`).
    index : int
        The layer's index (for the gate statistics' name).
    max_lag : int
        Largest lag of the Jacobian products.

    Returns
    -------
    dict
        ``decay`` (GateStats of the keep gate, one unit per gate unit) and ``time_constants``
        (``1 / (1 - mean keep)`` shaped ``view.keep_shape``) where the kind has a keep gate,
        ``flow_spectral`` and ``flow_rms``
        (K,), and ``head_flow`` (K, H) where the kind has heads; for a matrix state
        ``effective_rank`` (T, H), the entropy effective rank of each head's ``S_t`` averaged over
        the sequences, and ``numerical_rank`` (T, H), its count of singular values above 1% of
        the largest, averaged likewise.
    """
    lag = view.lag_norms(max_lag)
    out = {"flow_spectral": lag.spectral, "flow_rms": lag.rms}
    if view.keep is not None:  # a kind without a keep gate (a short convolution) has neither
        keep = gate_statistics(view.keep, name=f"layer {index} {view.keep_name}", keep=True)
        out["decay"] = keep
        out["time_constants"] = time_constant(np.clip(keep.mean, 0.0, 1.0)).reshape(view.keep_shape)
    if lag.heads is not None:
        out["head_flow"] = lag.heads
    if view.matrix is not None:
        out["effective_rank"] = effective_rank(view.matrix).mean(axis=1)
        out["numerical_rank"] = numerical_rank(view.matrix).mean(axis=1)
    return out


def _keep_tau(view):
    """The time constants of a view's keep gate (None without one): what :func:`data_lag` reads."""
    if view.keep is None:
        return None
    return time_constant(np.clip(view.keep.reshape(-1, view.keep.shape[-1]).mean(axis=0), 0.0, 1.0))


def _units(view, feats: dict) -> dict:
    """The units of sequence 0 that track each text feature best (Pearson r of their activation), top 3."""
    n = len(next(iter(feats.values())))
    return best_units(view.units[:n, 0], feats, top=3)


def analyze_records(kind: LayerKind, records, *, x, ids: bool, batch_first: bool, tokens=None, max_lag: int | None = 30,
                    text=None, model_name: str = "", layers=None, recomputed=None, layer_map=None,
                    echo=None):
    """Measure every recorded layer: decay as keep gate, time constants, gradient against lag, memory, PCA, channels.

    Parameters
    ----------
    kind : LayerKind or str
        The records' kind (a registered kind's name: its :func:`layer_kind`).
    records : sequence of records of ``kind``
        One per layer (MambaRecord, Mamba2Record, DeltaRecord, ...), time-major (T, N, ...), all
        of the same T and N.
    x : array_like
        The model's input, for the memory curve's target
        (:func:`hiddenstate.probe.state_memory.memory_target`): token ids, or a block's input.
    ids : bool
        ``x`` holds token ids.
    batch_first : bool
        ``x`` is (N, T, ...).
    tokens : array_like of int, shape (T, N), optional
        The ids the memory curve decodes (default: ``x`` when ``ids``).
    max_lag : int or None, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
        None: chosen from the data, per layer :func:`hiddenstate.probe.caveats.data_lag` (three
        slowest time constants, 30 to T - 1) for the Jacobian products, and ``min(T // 3, 128)``
        for the memory curve.
    text : str or sequence of str, optional
        Sequence 0's characters, one per step (1 to T of them), or its tokens' pieces (the
        text each token added, :func:`hiddenstate.probe.tokens.token_pieces`): the channels that
        track text features (per token, :func:`hiddenstate.probe.tokens.token_features`) and the
        explorer, whose data holds every layer (``explore["layers"]``; the top level is the
        last layer's).
    model_name : str, default ""
        ``meta["model"]``.
    layers : sequence of int, optional
        The layers' indices in their model (default 0, 1, ...).
    recomputed : sequence of float, optional
        Per layer, the relative error of its recomputation against the model's own output (an
        :class:`~hiddenstate.kinds.agreement.Agreement`, kept as it is: it carries the state's
        share and the state-part check).
    layer_map : sequence of LayerInfo, optional
        The whole model's layers (index, role, class name, path), kept for the report.
    echo : callable, optional
        ``echo(line)`` is told as each layer's analyses start.

    Returns
    -------
    StateAnalysis
        Of ``kind.analysis_type``.

    Raises
    ------
    TypeError
        ``text`` not a str; ``tokens`` not integers.
    ValueError
        No record, records of different T or N, no step; ``max_lag`` not positive; ``text``
        empty or longer than T; ``tokens`` not (T, N); ``layers`` or ``recomputed`` not one per
        record.
    """
    kind = layer_kind(kind) if isinstance(kind, str) else kind
    auto = max_lag is None
    max_lag = MIN_LAG if auto else positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        if not isinstance(text, (list, tuple)) or not all(isinstance(p, str) for p in text):
            raise TypeError(f"text must be a str, a sequence of str (one token's text per step) or None; got "
                            f"{type(text).__name__}.")
        text = list(text)
    records = list(records)
    if not records:
        raise ValueError("records must hold at least one layer's record; got none.")
    view = kind.view if kind.view is not None else get_kind(kind.name).view
    shapes = [view(r).state.shape[:2] for r in records]  # a view may copy the states: one at a time, dropped
    T, N = shapes[0]
    if any(s != (T, N) for s in shapes):
        raise ValueError(f"records must all have the same T and N; got {shapes}.")
    if T == 0:
        raise ValueError("x must have at least one step; got T = 0.")
    if text is not None and not 1 <= len(text) <= T:
        raise ValueError(f"text must hold the characters of sequence 0, one per step: 1 to T={T} characters; got "
                         f"{len(text)}.")
    layers = list(range(len(records))) if layers is None else [int(i) for i in layers]
    recomputed = ([None] * len(records) if recomputed is None else  # an Agreement (a float with the state's share) kept
                  [e if isinstance(e, Agreement) else float(e) for e in recomputed])
    if len(layers) != len(records) or len(recomputed) != len(records):
        raise ValueError(f"layers and recomputed must give one entry per record ({len(records)}); got {len(layers)} "
                         f"and {len(recomputed)}.")
    target, what = memory_target(x, tokens, T, N, ids=ids, batch_first=batch_first)
    K = min(128, T // 3) if auto else min(max_lag, T // 3)
    try:
        memory_rows(T, N, K)
    except ValueError as exc:
        skip_memory = f"the sequences are too short for a held-out split: {exc}"
    else:
        skip_memory = None
    if text is None:
        feats, skipped = {}, {}
    elif isinstance(text, str):
        feats, skipped = usable_text_features(text, unit="channel")
    else:
        feats, skipped = usable_features(token_features(text), unit="channel", step="tokens")
    explores = []
    out = []
    for k, (i, rec, err) in enumerate(zip(layers, records, recomputed)):
        if echo is not None:
            echo(f"analysing layer {i}, {k + 1} of {len(records)}")
        v = None  # the previous layer's view (its states may be a copy) is freed before this one is made
        v = view(rec)
        flat = v.state  # every state entry a feature
        lag = data_lag(T, _keep_tau(v)) if auto else max_lag
        common = view_measures(v, i, lag)
        gate = None if v.out_gate is None else gate_statistics(
            v.out_gate, name=f"layer {i} output gate {v.out_gate_name}", keep=False)
        out.append(kind.layer_type(
            layer=i, record=rec, **common, **kind.measure(i, rec, lag, common), gate=gate,
            pca=pca(flat, method="gram", keep=min(PCA_AXES, *flat.shape[-1:], T * N)),  # wide: thousands of entries
            memory=None if skip_memory else state_memory_curve(flat, target, max_lag=K),
            units=_units(v, feats) if feats and len(text) >= 2 else None,
            recomputed=err))
        del flat
        if text is not None:
            explores.append(view_explore_data(v, text, out[-1].units, time_constants=common.get("time_constants"),
                                              name=f"layer {i}"))
    meta = {"T": T, "N": N, **kind.sizes(records[0]), "num_layers": len(records), "model": model_name}
    not_measured = dict(kind.not_measured)
    if skip_memory:
        not_measured["memory curve"] = skip_memory
    else:
        meta["memory target"] = what
    if text is None:
        not_measured[NEEDS_TEXT_KEY] = kind.needs_text
    else:
        not_measured.update(skipped)
        if not feats:
            not_measured["unit features"] = "no text feature varies enough on this text to correlate with."
    explore = {**explores[-1], "layers": explores} if explores else None
    scored = None if skip_memory else N * (T - memory_rows(T, N, K)[0])
    warnings = input_warnings(T, N, scored=scored, ids=target if ids else None, has_text=text is not None)
    if warnings:
        meta["warnings"] = warnings
    return kind.analysis_type(layers=out, not_measured=not_measured, meta=meta, text=text, explore=explore,
                              layer_map=None if layer_map is None else tuple(layer_map))

