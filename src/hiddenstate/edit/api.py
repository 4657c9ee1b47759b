"""``hiddenstate.intervene``: dispatch a model (transformers, a directory, or ours) to its interventions."""

from __future__ import annotations

import os

__all__ = ["intervene"]


def intervene(model, ids, edits, *, target=None, output="delta"):
    """Run ``model`` on ``ids`` with ``edits`` of its recurrent states, and the clean run beside it.

    The edited layer continues its recurrence from the edited state; everything after it runs as
    the model's own code (:mod:`hiddenstate.edit.families`) or as our model's own forward pass
    (:mod:`hiddenstate.edit.ours`).

    Parameters
    ----------
    model : transformers model of a registered family, or str or os.PathLike
        A directory is a ``save_pretrained`` directory of a registered family (loaded offline,
        :func:`~hiddenstate.interop.families.directory.load_model_dir`).
    ids : array_like of int, shape (N, T) or (T,)
        Token ids (for every model, sequences first).
    edits : StateEdit or list of StateEdit
        Applied in order at each step they cover.
    target : array_like of int, shape (N, T), optional
        Token ids whose probability :class:`~hiddenstate.edit.result.EditRun` reads at each position.
    output : {"delta", "ours"}, default "delta"
        A transformers model only: what replaces the edited mixer's output
        (:mod:`hiddenstate.edit.families`).

    Returns
    -------
    EditRun
        ``logits`` and ``clean_logits`` (N, T, V), float64, equal at positions <= the first edited
        step; ``states`` of the edited layers; ``logit_diff``, ``kl``, ``target_prob``.

    Raises
    ------
    TypeError
        A model of no registered family (our own models are not supported yet); edits that are not StateEdits; ids that are not integers.
    ValueError
        A layer that is not recurrent, a step past the ids, heads or channels out of range, a
        value of the wrong size, a source of another model or shape (each naming the argument).
    """
    if isinstance(model, (str, os.PathLike)):
        from hiddenstate.interop.families.directory import load_model_dir

        model = load_model_dir(model)
    if type(model).__module__.startswith("hiddenstate."):
        raise TypeError(f"model must be a transformers model of a registered family or its save_pretrained "
                        f"directory; got our {type(model).__name__}, whose interventions are not built yet. Run it "
                        f"in segments with its forward(ids, state) and edit the state in between.")
    from hiddenstate.edit.families import intervene_family

    return intervene_family(model, ids, edits, target=target, output=output)
