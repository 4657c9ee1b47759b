"""``inspect_model`` of a model of recurrent layers: a transformers model of a registered family, or our Mamba blocks.

:func:`hiddenstate.inspect_model` hands these here (:func:`is_recurrent_model`; 0.2's
``is_mamba_model`` and ``inspect_mamba`` are kept as aliases):

* a transformers model whose family is registered (:mod:`hiddenstate.interop.families`:
  ``MambaForCausalLM``, ``Mamba2ForCausalLM``, the hybrids ``BambaForCausalLM``,
  ``NemotronHForCausalLM``, ``GraniteMoeHybridForCausalLM``, the delta-rule families
  ``Qwen3NextForCausalLM``, ``OlmoHybridForCausalLM``, ``KimiLinearForCausalLM``; RecurrentGemma's RG-LRU,
  MiniMax's lightning attention and LFM2's short convolution, xLSTM's mLSTM, RWKV-4). The model itself runs on the
  ids; each chosen recurrent layer is recomputed by our block from the input its hook saw, held to
  the model's own output (:func:`~hiddenstate.interop.families.hooks.recompute_layers`), and its
  records go through the Mamba analyses' shared layer loop
  (:func:`~hiddenstate.probe.layer_loop.analyze_records`) with the model's own layer indices,
  the recomputation error of each and the model's layer map. Nothing here depends on the family:
  the family's kind picks the records' :class:`~hiddenstate.probe.layer_loop.LayerKind` through the
  kind's record in the registry (:func:`hiddenstate.probe.layer_loop.layer_kind`; a delta-rule kind gives a
  :class:`~hiddenstate.kinds.delta.analysis.DeltaAnalysis`), and the report its card;
* our :class:`~hiddenstate.Mamba`, :class:`~hiddenstate.Mamba2`, :class:`~hiddenstate.MambaLM`
  and :class:`~hiddenstate.kinds.ssm.lm.Mamba2LM`, traced as they compute
  (:func:`~hiddenstate.kinds.ssm.mamba_analysis.analyze_mamba`, :func:`~hiddenstate.kinds.ssm.mamba2_analysis.analyze_mamba2`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hiddenstate.core.resources import check_memory, format_bytes, traced_peak
from hiddenstate.interop.families import MAX_BYTES, family_of, find_family, recompute_layers
from hiddenstate.interop.families.config_check import check_epsilons
from hiddenstate.interop.families.hooks import kept_steps, recompute_bytes, step_costs
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.ssm.lm import Mamba2LM, MambaLM
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba2 import Mamba2
from hiddenstate.kinds.ssm.mamba2_analysis import analyze_mamba2
from hiddenstate.kinds.ssm.mamba_analysis import analyze_mamba
from hiddenstate.probe.layer_loop import NEEDS_TEXT_KEY, analyze_records, layer_kind
from hiddenstate.probe.state_analysis import StateAnalysis
from hiddenstate.report.family_page import build_family_report

__all__ = ["analyze_family_model", "inspect_mamba", "inspect_recurrent_model", "inspection_bytes", "is_mamba_model",
           "is_recurrent_model"]

# Our own models this pipeline traces as they compute (the other kinds' blocks: analyze_block)
_OURS = (Mamba, MambaLM, Mamba2, Mamba2LM)


def is_recurrent_model(model) -> bool:
    """Whether :func:`inspect_recurrent_model` measures ``model``: a registered transformers family's model, or our Mamba blocks/LMs.

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    return isinstance(model, _OURS) or (not isinstance(model, str) and find_family(model) is not None
                                        and hasattr(model, "config"))


def _ids_array(ids) -> np.ndarray:
    """Token ids as a NumPy array (N, T) (a torch tensor read on the CPU; (T,) is one sequence)."""
    try:
        arr = ids.detach().cpu().numpy() if hasattr(ids, "detach") else np.asarray(ids)
    except (ValueError, TypeError):  # ragged nested lists
        raise TypeError(f"ids must be token ids of shape (N, T) or (T,); got a ragged {type(ids).__name__}.") from None
    return arr[None] if arr.ndim == 1 else arr


def _quadratic(T: int, N: int, F: int) -> int:
    """The Gram matrix of a layer's PCA and its eigenvectors: 2 min(T N, F)^2 float64 entries."""
    return 2 * min(T * N, F) ** 2 * 8


def _analysis_cost(kind_name: str, blk, cast, max_lag: int) -> tuple:
    """What one layer's analyses hold at their peak beside its record: bytes a step, fixed, and F (dry runs)."""
    kind, loop = get_kind(kind_name), layer_kind(kind_name)
    peaks = []
    for T0 in (48, 96):  # long enough for every analysis (the memory curve's held-out split) to run
        rng = np.random.default_rng(0)
        _, rec = kind.run(blk, rng.normal(0.0, 0.5, (1, T0, blk.d_model)))
        rec = type(rec)(*(a.astype(cast) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a for a in rec))
        F = kind.view(rec).state.shape[-1]
        ids = rng.integers(0, 50, (1, T0))
        _, peak = traced_peak(analyze_records, loop, [rec], x=ids, ids=True, batch_first=True, max_lag=max_lag)
        peaks.append(peak - _quadratic(T0, 1, F))
    step = max(peaks[1] - peaks[0], 0) // 48
    return step, max(peaks[0] - 48 * step, 0), F


def inspection_bytes(model, T: int, N: int, *, layers=None, record_dtype="float64", max_lag: int = 30,
                     costs=None, kept=None) -> int:
    """The peak of what :func:`analyze_family_model` allocates beside the model's own forward pass (NumPy arrays).

    The larger of the recomputation's peak
    (:func:`~hiddenstate.interop.families.hooks.recompute_bytes`) and the analyses' peak: every
    record, and the largest of one layer's analyses beside them (what they hold a step, from
    dry runs of the layer's block on 48 and 96 steps under :mod:`tracemalloc`, and the Gram
    matrix of its PCA, ``2 min(T N, F)^2`` float64 entries for F state entries). Measured against
    the peak :mod:`tracemalloc` sees around ``inspect_model(model, ids)`` (tests/test_memory_estimate.py).

    Parameters
    ----------
    model : transformers model of a registered family
    T, N : int
        Steps and sequences.
    layers : int or list of int, optional
        Recurrent layer indices (default all).
    record_dtype : {"float64", "float32"}, default "float64"
        The records' dtype.
    max_lag : int, default 30
        The analyses' largest lag.
    costs : dict of int to StepCost, optional
        :func:`~hiddenstate.interop.families.hooks.step_costs` of the same model and layers
        (default: measured here).
    kept : int, optional
        Steps of each sequence the records keep (a ``window`` and ``stride``; default T): the
        records and their analyses are of those steps.

    Returns
    -------
    int

    Raises
    ------
    TypeError, ValueError
        ``model`` of no registered family; ``layers`` not recurrent layers; ``T``, ``N`` not
        non-negative ints; ``record_dtype`` neither.
    """
    costs = step_costs(model, layers=layers) if costs is None else costs
    peak = recompute_bytes(model, T, N, record_dtype=record_dtype, costs=costs, kept=kept)
    cast = np.dtype(record_dtype).type
    kind, steps, seen = family_of(model).kind, (T if kept is None else kept) * N, {}
    records = sum(steps * (c.record // 2 if cast is np.float32 else c.record) for c in costs.values())
    for c in costs.values():
        if id(c.block) not in seen:
            step, fixed, F = _analysis_cost(kind, c.block, cast, max_lag)
            seen[id(c.block)] = fixed + steps * step + _quadratic(steps, 1, F)
    return max(peak, records + max(seen.values()))


def analyze_family_model(model, ids, *, layers=None, max_bytes=MAX_BYTES, max_lag: int = 30, text=None, tokens=None,
                         model_name: str | None = None, record_dtype="float64", window=None,
                         stride: int = 1, echo=None) -> StateAnalysis:
    """Measure the recurrent layers of a transformers model of a registered family, recomputed from its own run.

    Parameters
    ----------
    model : transformers model of a registered family
        (:func:`hiddenstate.interop.families.family_of`).
    ids : array_like of int or torch.Tensor, shape (N, T) or (T,)
        Token ids, as transformers takes them.
    layers : int or list of int, optional
        The recurrent layers to record (model indices; default all).
    max_bytes : int or None, default 4 GiB
        The cap on the records' estimated size, checked before the model runs
        (:func:`~hiddenstate.interop.families.hooks.recompute_layers`). The whole inspection's
        peak (:func:`inspection_bytes`: the records, their recomputation and their analyses) is
        estimated too and refused, before the model runs, over this machine's memory
        (:func:`~hiddenstate.core.resources.check_memory`).
    max_lag : int or None, default 30
        Largest lag of the Jacobian products and of the memory curve; None: chosen from the data
        (:func:`~hiddenstate.probe.layer_loop.analyze_records`).
    text : str or list of str, optional
        Sequence 0's characters, or its tokens' pieces (the text each token added), one per step:
        the channels that track text features and the explorer.
    tokens : array_like of int, shape (T, N), optional
        The ids the memory curve decodes (default ``ids``, time-major).
    model_name : str, optional
        What the analysis calls the model (default ``"transformers <class name>"``).
    record_dtype : {"float64", "float32"}, default "float64"
        The records' dtype (``"float32"`` halves them; the recomputation and its check stay
        float64, and the analyses read the float32 records in float64).
    window : (int, int), optional
        ``(start, stop)``: record and analyse only the states of those positions (every step is
        still computed; :func:`~hiddenstate.interop.families.hooks.recompute_layers`). The
        analyses read the kept steps as a sequence of their own: ``text``, ``tokens`` and the
        ids are cut alike, and with a ``stride`` the lags count kept steps.
    stride : int, default 1
        Keep every ``stride``-th step of the window.
    echo : callable, optional
        ``echo(line)`` is told each stage once its checks have passed: the memory estimate, the
        forward pass, each layer's recomputation, each layer's analyses.

    Returns
    -------
    StateAnalysis
        Of the family's kind (a :class:`~hiddenstate.kinds.ssm.mamba2_analysis.Mamba2Analysis` for Mamba-2
        mixers): ``layers[k].layer`` the model's index of the k-th recorded layer,
        ``layers[k].recomputed`` its relative error against the model's own output,
        ``layer_map`` every layer of the model.

    Raises
    ------
    TypeError, ValueError
        From :func:`~hiddenstate.interop.families.hooks.recompute_layers` (a layer above the
        tolerance, a request over ``max_bytes``, ``layers`` that are not recurrent) and
        :func:`~hiddenstate.probe.layer_loop.analyze_records`.
    """
    arr = _ids_array(ids)
    if text is not None and isinstance(text, (str, list, tuple)) and arr.ndim == 2 and not 1 <= len(text) <= arr.shape[1]:
        raise ValueError(f"text must hold the characters of sequence 0, one per step: 1 to T={arr.shape[1]} "
                         f"characters (or tokens' pieces); got {len(text)}.")  # before the model runs
    check_epsilons(getattr(model, "config", None))  # a NaN norm epsilon would surface as "u must be finite"
    if arr.ndim == 2 and arr.size and arr.dtype.kind in "iu":  # else recompute_layers says what is wrong
        N, T = arr.shape
        kept = len(range(T)[kept_steps(T, window, stride)])
        if kept < 2 and (window is not None or stride != 1):  # the analyses need two steps: said before the run
            raise ValueError(f"window and stride must keep at least 2 steps to analyse (window {window}, stride "
                             f"{stride} keep {kept} of T={T}); widen the window or lower the stride.")
        costs = step_costs(model, layers=layers)
        total = inspection_bytes(model, T, N, record_dtype=record_dtype, max_lag=max_lag, costs=costs, kept=kept)
        check_memory(f"inspecting {len(costs)} recurrent layer(s) of this "
                     f"{type(model).__name__} on T={T:,} steps of N={N} sequence(s)", total,
                     "Record fewer layers (layers=, --layers), give fewer tokens, or record_dtype='float32' "
                     "(--record-dtype float32).")
        if echo is not None:
            echo(f"estimated peak {format_bytes(total)} beside the model's own forward pass")
    rc = recompute_layers(model, ids, layers=layers, max_bytes=max_bytes, record_dtype=record_dtype, window=window,
                          stride=stride, echo=echo)
    if rc.steps is not None:  # the analyses read the kept steps
        arr = arr[:, rc.steps]
        kept_text = None if text is None else [text[t] for t in rc.steps if t < len(text)]
        text = None if not kept_text else ("".join(kept_text) if isinstance(text, str) else kept_text)
        tokens = None if tokens is None else np.asarray(tokens)[rc.steps]
    an = analyze_records(layer_kind(rc.family.kind), rc.records, x=arr, ids=True, batch_first=True,
                         tokens=tokens, max_lag=max_lag, text=text,
                         model_name=model_name or f"transformers {type(model).__name__}", layers=rc.layers,
                         recomputed=rc.errors, layer_map=rc.layer_map, echo=echo)
    if rc.steps is not None:  # the input's positions of the kept steps (a states file names them)
        an.meta["steps"] = [int(t) for t in rc.steps]
    return an


def inspect_recurrent_model(model, x, states=None, *, out=None, title=None, max_lag: int = 30, text=None, tokens=None,
                            source=None, layers=None, max_bytes=MAX_BYTES, needs_text: str | None = None,
                            record_dtype="float64", window=None, stride: int = 1, echo=None) -> StateAnalysis:
    """:func:`hiddenstate.inspect_model` of a model of recurrent layers: measure it and optionally write its report.

    Parameters
    ----------
    model : transformers model of a registered family, or Mamba, Mamba2, MambaLM, Mamba2LM
    x : array_like or torch.Tensor
        Token ids (N, T) (a transformers model, an LM) or the block's input.
    states : optional
        Our model's initial states (None: zeros); must be None for a transformers model (its
        own run starts from zero states).
    out : str or os.PathLike, optional
        Write the report there (checked by the caller).
    title : str, optional
        The report's title (default: it names the model, ``"Inside the recurrent layers of a
        FalconH1ForCausalLM"``; for ours, the kind and the model).
    max_lag : int or None, default 30
        Largest lag of the Jacobian products and of the memory curve (None: from the data, for a
        transformers model).
    text : str or list of str, optional
        Sequence 0's characters, or its tokens' pieces, one per step.
    tokens : array_like of int, shape (T, N), optional
        The ids the memory curve decodes.
    source : str, optional
        What the report calls the model.
    layers : int or list of int, optional
        A transformers model's recurrent layers to record (default all); None for ours.
    max_bytes : int or None, default 4 GiB
        A transformers model's cap on the records (see :func:`analyze_family_model`).
    needs_text : str, optional
        Why the unit features and the explorer are missing when there is no ``text``, in the
        caller's words (the command line names its flag); default the analyses' own, which name
        ``text=``. Used by the summary and the report's "Not measured" card alike.
    record_dtype : {"float64", "float32"}, default "float64"
        A transformers model's records' dtype (see :func:`analyze_family_model`).
    window : (int, int), optional
        A transformers model's kept positions ``start <= t < stop`` (see :func:`analyze_family_model`;
        default all): the records, the analyses and the report are of those steps.
    stride : int, default 1
        Keep every ``stride``-th step of the window.
    echo : callable, optional
        ``echo(line)`` is told each stage of a transformers model's inspection
        (:func:`analyze_family_model`), then the report's writing.

    Returns
    -------
    StateAnalysis

    Raises
    ------
    ValueError
        ``states`` or ``layers`` where they do not apply; and the errors of the analyses.
    """
    family = None if isinstance(model, _OURS) else find_family(model)
    if type(x).__module__.split(".")[0] == "torch" and family is None:
        x = x.detach().cpu().numpy()
    if tokens is not None and hasattr(tokens, "detach"):
        tokens = tokens.detach().cpu().numpy()
    if family is None:
        if layers is not None:
            raise ValueError(f"layers must be None for a hiddenstate {type(model).__name__} (every layer is traced); "
                             f"got {layers!r}. It selects the recorded layers of a transformers model.")
        if window is not None or stride != 1:
            raise ValueError(f"window and stride apply to a transformers model (whose layers are recomputed and cut "
                             f"to the kept steps); got window={window!r}, stride={stride!r} for a hiddenstate "
                             f"{type(model).__name__}. Pass a shorter x instead.")
        source = source or f"hiddenstate {type(model).__name__}"
        analyze = analyze_mamba2 if isinstance(model, (Mamba2, Mamba2LM)) else analyze_mamba
        an = analyze(model, x, states, max_lag=max_lag, model_name=source, text=text, tokens=tokens)
        subtitle = f"{source}, converted exactly; every layer's state measured on every step."
    else:
        if states is not None:
            raise ValueError(f"h0 must be None for a transformers {type(model).__name__}: the model's own run, which "
                             "the recurrent layers are recomputed from, starts from zero states; got a state.")
        source = source or f"transformers {type(model).__name__}"
        an = analyze_family_model(model, x, layers=layers, max_bytes=max_bytes, max_lag=max_lag, text=text,
                                  tokens=tokens, model_name=source, record_dtype=record_dtype, window=window,
                                  stride=stride, echo=echo)
        errors = [la.recomputed for la in an.layers]
        n_rec = sum(e.role == "recurrent" for e in an.layer_map)
        subtitle = (f"{source}: {len(an.layers)} of its {n_rec} recurrent layer(s) ({len(an.layer_map)} layers in "
                    f"all) recomputed from the model's own run by our {family.kind} block in float64, each within "
                    f"{max(errors):.2g} of the model's own output; every recorded layer's state measured on every "
                    "step.")
        if title is None:  # the model, whatever its family (a Falcon-H1 is not "a Mamba model")
            title = f"Inside the recurrent layers of a {type(model).__name__}"
    if needs_text is not None and NEEDS_TEXT_KEY in an.not_measured:
        an = dataclasses.replace(an, not_measured={**an.not_measured, NEEDS_TEXT_KEY: needs_text})
    if out is not None:
        if echo is not None:
            echo(f"writing the report {out}")
        build_family_report(out, an, title=title or "", subtitle=subtitle)
    return an


#: 0.2's names, kept: they serve every registered family and kind.
is_mamba_model = is_recurrent_model
inspect_mamba = inspect_recurrent_model

