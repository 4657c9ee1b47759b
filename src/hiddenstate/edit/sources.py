"""Where ``mean`` and ``replace`` read their states: the clean run, another prompt's run, or a previous EditRun."""

from __future__ import annotations

import numpy as np

from hiddenstate.edit.result import EditRun

__all__ = ["group_by_layer", "source_states", "target_of"]


def group_by_layer(edits) -> dict:
    """The edits by layer, in the order given.

    Parameters
    ----------
    edits : sequence of StateEdit

    Returns
    -------
    dict of int to list of StateEdit

    Raises
    ------
    TypeError
        ``edits`` not a list of StateEdit.
    """
    from hiddenstate.edit.ops import StateEdit

    if isinstance(edits, StateEdit):
        edits = [edits]
    if not isinstance(edits, (list, tuple)) or not all(isinstance(e, StateEdit) for e in edits):
        raise TypeError(f"edits must be a list of hiddenstate.StateEdit; got {type(edits).__name__}.")
    out: dict = {}
    for e in edits:
        out.setdefault(e.layer, []).append(e)
    return out


def source_states(edit, model_name: str, fields: dict, run_ids) -> dict | None:
    """The states ``edit`` reads from its ``source``, by field (T', N', ...), checked against this model's; None without one.

    Parameters
    ----------
    edit : StateEdit
    model_name : str
        This model's name (an :class:`EditRun` source must be of the same).
    fields : dict of str to tuple
        This layer's state shapes after (N,): ``{"ssm": (H, P, S), ...}``.
    run_ids : callable
        ``run_ids(ids) -> dict of str to ndarray (T', N', ...)``: the clean states of the edit's
        layer on other ids of this model.

    Returns
    -------
    dict of str to ndarray, or None

    Raises
    ------
    ValueError
        A source of another model, without this layer, or of another state shape.
    """
    src = edit.source
    if src is None:
        return None
    if isinstance(src, EditRun):
        if src.model != model_name or edit.layer not in src.clean_states:
            raise ValueError(f"source must be a run of this {model_name} model holding layer {edit.layer}; got an "
                             f"EditRun of {src.model} with layers {sorted(src.clean_states)}.")
        states = src.clean_states[edit.layer]
    else:
        arr = np.asarray(src)
        if arr.dtype.kind not in "iu" or arr.dtype == bool:
            raise TypeError(f"source must be token ids (N, T) of another prompt or an EditRun of this model; got "
                            f"{type(src).__name__} of dtype {arr.dtype}. A state array goes in value= instead.")
        states = run_ids(arr)
    for f, shape in fields.items():
        got = states.get(f)
        if got is None or got.shape[2:] != shape:
            raise ValueError(f"source must hold layer {edit.layer}'s {f!r} state of shape (T, N, "
                             f"{', '.join(map(str, shape))}); got {None if got is None else got.shape}.")
    return states


def target_of(edit, N: int, clean: dict | None, source: dict | None):
    """``target(field, step)`` for :func:`~hiddenstate.edit.blocks.run_edited`, or None for zero, add and scale.

    Parameters
    ----------
    edit : StateEdit
    N : int
        Sequences of the run.
    clean : dict of str to ndarray (T, N, ...), or None
        The layer's clean states on the intervened ids (the default reference of ``mean``).
    source : dict of str to ndarray (T', N', ...), or None
        :func:`source_states`.

    Returns
    -------
    callable or None

    Raises
    ------
    ValueError
        A ``replace`` source with fewer steps than ``until + 1`` or another number of sequences
        than N (or 1).
    """
    if edit.op == "replace" and edit.value is not None:
        return lambda f, s: edit.value
    if edit.op == "replace":
        some = next(iter(source.values()))
        if some.shape[0] <= edit.until or some.shape[1] not in (1, N):
            raise ValueError(f"source must have at least until+1={edit.until + 1} steps and N={N} (or 1) sequences "
                             f"to replace steps {edit.step}..{edit.until}; got T={some.shape[0]}, N={some.shape[1]}.")
        return lambda f, s: source[f][s] if source[f].shape[1] == N else source[f][s, 0]
    if edit.op == "mean":
        ref = source if source is not None else clean
        means = {f: v.mean(axis=(0, 1)) for f, v in ref.items()}
        return lambda f, s: means[f]
    return None
