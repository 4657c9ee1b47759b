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
    model : transformers model of a registered family, str or os.PathLike, CharRNN, MambaLM or Mamba2LM
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
        A model of no supported kind; edits that are not StateEdits; ids that are not integers.
    ValueError
        A layer that is not recurrent, a step past the ids, heads or channels out of range, a
        value of the wrong size, a source of another model or shape (each naming the argument).
    """
    if isinstance(model, (str, os.PathLike)):
        from hiddenstate.interop.families.directory import load_model_dir

        model = load_model_dir(model)
    if type(model).__module__.startswith("hiddenstate."):
        from hiddenstate.edit.ours import intervene_ours

        if output != "delta":
            raise ValueError(f"output must be 'delta' (the default) for our own models, which have one "
                             f"computation; got {output!r:.60}.")
        return intervene_ours(model, ids, edits, target=target)
    from hiddenstate.edit.families import intervene_family

    return intervene_family(model, ids, edits, target=target, output=output)
