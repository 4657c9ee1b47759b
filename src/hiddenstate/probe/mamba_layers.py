"""The one layer loop of the Mamba analyses: records in, measurements out (:func:`analyze_records`).

Both Mamba analyses (:func:`hiddenstate.probe.mamba.analyze_mamba`,
:func:`hiddenstate.probe.mamba2.analyze_mamba2`) and the inspection of a transformers model's
recurrent layers (recomputed from hooks, :mod:`hiddenstate.interop.families.hooks`) measure
*records*: every step's states and selective parameters of each layer, time-major. What is the
same for every kind is done here once, per layer:

* the output gate's statistics (``sigmoid(z)``, :func:`~hiddenstate.probe.gatestats.gate_statistics`),
* PCA of the SSM state flattened to its entries (:func:`~hiddenstate.probe.pca.pca`, Gram form),
* the memory curve of that flattened state (:mod:`hiddenstate.probe.mamba_memory`),
* with a text, the channels that track text features and the explorer's data of the last layer
  (:mod:`hiddenstate.probe.mamba_units`);

and what differs (the decay's shape: per state entry for Mamba, per head for Mamba-2; the
time constants; the gradient-against-lag curve; the sizes in ``meta``) is the kind's
:class:`LayerKind`. A layer keeps the index it has in its model (a hybrid's recurrent layers are
not numbered 0, 1, 2, ...) and, when it was recomputed from a model's own run, the relative error
of that recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from hiddenstate.functional import sigmoid
from hiddenstate.probe.gatestats import gate_statistics
from hiddenstate.probe.mamba_memory import memory_rows, memory_target, state_memory_curve
from hiddenstate.probe.mamba_units import channel_features, mamba_explore_data
from hiddenstate.probe.pca import pca
from hiddenstate.probe.textfeatures import usable_text_features
from hiddenstate.validation import positive_int

__all__ = ["LayerKind", "analyze_records"]


class LayerKind(NamedTuple):
    """What one kind of record needs of the shared loop (``MAMBA`` in :mod:`hiddenstate.probe.mamba`, ``MAMBA2``).

    Attributes
    ----------
    name : str
        ``"mamba"`` or ``"mamba2"``.
    measure : callable
        ``measure(index, record, max_lag) -> dict``: the kind's own fields of its layer analysis
        (the decay's statistics, time constants, step sizes, gradient against lag).
    layer_type : type
        The layer analysis (``MambaLayerAnalysis``), built with ``layer``, ``record``, ``gate``,
        ``pca``, ``memory``, ``units``, ``recomputed`` and the fields of ``measure``.
    analysis_type : type
        The analysis (``MambaAnalysis``).
    sizes : callable
        ``sizes(record) -> dict``: the entries of ``meta`` the record's shapes give.
    not_measured : dict of str to str
        What this kind's analysis never measures, and why.
    needs_text : str
        Why the unit features and the explorer are missing without a text.
    """

    name: str
    measure: Callable
    layer_type: type
    analysis_type: type
    sizes: Callable
    not_measured: dict
    needs_text: str


def analyze_records(kind: LayerKind, records, *, x, ids: bool, batch_first: bool, tokens=None, max_lag: int = 30,
                    text: str | None = None, model_name: str = "", layers=None, recomputed=None, layer_map=None):
    """Measure every recorded layer: decay as keep gate, time constants, gradient against lag, memory, PCA, channels.

    Parameters
    ----------
    kind : LayerKind
        The records' kind.
    records : sequence of MambaRecord or Mamba2Record
        One per layer, time-major (T, N, ...), all of the same T and N.
    x : array_like
        The model's input, for the memory curve's target
        (:func:`hiddenstate.probe.mamba_memory.memory_target`): token ids, or a block's input.
    ids : bool
        ``x`` holds token ids.
    batch_first : bool
        ``x`` is (N, T, ...).
    tokens : array_like of int, shape (T, N), optional
        The ids the memory curve decodes (default: ``x`` when ``ids``).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    text : str, optional
        Sequence 0's characters, one per step (1 to T of them): the channels that track text
        features and the explorer.
    model_name : str, default ""
        ``meta["model"]``.
    layers : sequence of int, optional
        The layers' indices in their model (default 0, 1, ...).
    recomputed : sequence of float, optional
        Per layer, the relative error of its recomputation against the model's own output.
    layer_map : sequence of LayerInfo, optional
        The whole model's layers (index, role, class name, path), kept for the report.

    Returns
    -------
    MambaAnalysis
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
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    records = list(records)
    if not records:
        raise ValueError("records must hold at least one layer's record; got none.")
    T, N = records[0].ssm.shape[:2]
    if any(r.ssm.shape[:2] != (T, N) for r in records):
        raise ValueError(f"records must all have the same T and N; got {[r.ssm.shape[:2] for r in records]}.")
    if T == 0:
        raise ValueError("x must have at least one step; got T = 0.")
    if text is not None and not 1 <= len(text) <= T:
        raise ValueError(f"text must hold the characters of sequence 0, one per step: 1 to T={T} characters; got "
                         f"{len(text)}.")
    layers = list(range(len(records))) if layers is None else [int(i) for i in layers]
    recomputed = [None] * len(records) if recomputed is None else [float(e) for e in recomputed]
    if len(layers) != len(records) or len(recomputed) != len(records):
        raise ValueError(f"layers and recomputed must give one entry per record ({len(records)}); got {len(layers)} "
                         f"and {len(recomputed)}.")
    target, what = memory_target(x, tokens, T, N, ids=ids, batch_first=batch_first)
    K = min(max_lag, T // 3)
    try:
        memory_rows(T, N, K)
    except ValueError as exc:
        skip_memory = f"the sequences are too short for a held-out split: {exc}"
    else:
        skip_memory = None
    feats, skipped = usable_text_features(text, unit="channel") if text is not None else ({}, {})
    out = []
    for i, rec, err in zip(layers, records, recomputed):
        flat = rec.ssm.reshape(T, N, -1)  # every state entry a feature
        out.append(kind.layer_type(
            layer=i, record=rec, **kind.measure(i, rec, max_lag),
            gate=gate_statistics(sigmoid(rec.z), name=f"layer {i} output gate sigmoid(z)", keep=False),
            pca=pca(flat, method="gram"),  # wide: thousands of steps of thousands of entries
            memory=None if skip_memory else state_memory_curve(flat, target, max_lag=K),
            units=channel_features(rec, feats) if feats and len(text) >= 2 else None, recomputed=err))
    meta = {"T": T, "N": N, **kind.sizes(records[0]), "num_layers": len(records), "model": model_name}
    not_measured = dict(kind.not_measured)
    if skip_memory:
        not_measured["memory curve"] = skip_memory
    else:
        meta["memory target"] = what
    if text is None:
        not_measured["unit features and the explorer"] = kind.needs_text
    else:
        not_measured.update(skipped)
        if not feats:
            not_measured["unit features"] = "no text feature varies enough on this text to correlate with."
    explore = mamba_explore_data(records[-1], text, out[-1].units) if text is not None else None
    return kind.analysis_type(layers=out, not_measured=not_measured, meta=meta, text=text, explore=explore,
                              layer_map=None if layer_map is None else tuple(layer_map))

