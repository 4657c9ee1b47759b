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
    model : transformers model of a registered family, str or os.PathLike, or one of ours
        A directory is a ``save_pretrained`` directory of a registered family (loaded offline,
        :func:`~hiddenstate.interop.families.directory.load_model_dir`). Ours: a
        :class:`~hiddenstate.train.model.CharRNN` of any cell (GRU, LSTM, RNN, minGRU, minLSTM,
        Mamba blocks), a
        :class:`~hiddenstate.MambaLM` or a :class:`~hiddenstate.Mamba2LM`
        (:mod:`hiddenstate.edit.ours`: ``layer`` is the index in the stack).
    ids : array_like of int, shape (N, T) or (T,)
        Token ids (for every model, sequences first).
    edits : StateEdit or list of StateEdit
        Applied in order at each step they cover.
    target : array_like of int, shape (N, T), optional
        Token ids whose probability :class:`~hiddenstate.edit.result.EditRun` reads at each position.
    output : {"delta", "ours"}, default "delta"
        ``"delta"``: the model's own output plus the exact difference of our edited and clean
        recomputations (of the edited mixer, :mod:`hiddenstate.edit.families`; of our model's
        segmented run, :mod:`hiddenstate.edit.ours`); ``"ours"``: the edited recomputation itself.

    Returns
    -------
    EditRun
        ``logits`` and ``clean_logits`` (N, T, V), float64, equal at positions <= the first edited
        step; ``states`` of the edited layers; ``logit_diff``, ``kl``, ``target_prob``.

    Raises
    ------
    TypeError
        A model of no registered family and not one of ours above; edits that are not
        StateEdits; ids that are not integers.
    ValueError
        A layer that is not recurrent or past our stack, a step past the ids, heads or channels out of range, a
        value of the wrong size, a source of another model or shape (each naming the argument).
    """
    if isinstance(model, (str, os.PathLike)):
        from hiddenstate.interop.families.directory import load_model_dir

        model = load_model_dir(model)
    if type(model).__module__.startswith("hiddenstate."):
        from hiddenstate.edit.ours import intervene_ours

        return intervene_ours(model, ids, edits, target=target, output=output)
    from hiddenstate.edit.families import intervene_family

    return intervene_family(model, ids, edits, target=target, output=output)
