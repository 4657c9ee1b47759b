"""transformers ``JevForDecision`` (JEV, autotrust/JEV-9B): a decision head on a text backbone, by default Qwen3.5's.

``model.model`` is an ``AutoModel`` of ``config.text_config`` (by default a ``Qwen3_5TextModel``,
whose ``linear_attn`` layers, ``Qwen3_5GatedDeltaNet``, are the recurrent ones:
:mod:`~hiddenstate.interop.families.qwen3_5_text`); ``model.proj`` scores ``num_verbalizers``
single-token labels from the last hidden state, soft-capped (``softcap * tanh(s / softcap)``)
when ``config.softcap`` is set. The head is not recurrent and not ours: the layer map is the text
backbone's. JEV's own forward reads the head only at the token before each question's mark (it
needs ``marks``, ``num_options`` and ``question_type_ids``); the recomputation and the
interventions run what it runs, ``model.model(input_ids, use_cache=False)``, and take the head's
scores at every position (:func:`run`), so an intervention's logits are the label scores.
"""

from __future__ import annotations

from dataclasses import replace

from hiddenstate.interop.families.qwen3_5_text import NOTES, qwen3_5_family, text_config

__all__ = ["FAMILY", "head", "run", "tiny_config"]


def run(model, ids):
    """JEV's text backbone and decision head on every position: the label scores (N, T, num_verbalizers).

    Parameters
    ----------
    model : transformers JevForDecision
    ids : torch.Tensor of int64, shape (N, T)

    Returns
    -------
    torch.Tensor of shape (N, T, num_verbalizers)
        ``model.proj`` of ``model.model(input_ids=ids, use_cache=False).last_hidden_state``,
        soft-capped as the model's forward does when ``config.softcap`` is set.
    """
    return head(model, model.model(input_ids=ids, use_cache=False).last_hidden_state)


def head(model, hidden):
    """JEV's decision head on the backbone's hidden states: ``model.proj``, soft-capped as its forward does.

    Parameters
    ----------
    model : transformers JevForDecision
    hidden : torch.Tensor of shape (N, T, M)
        The text backbone's last hidden states.

    Returns
    -------
    torch.Tensor of shape (N, T, num_verbalizers)
    """
    import torch

    scores = model.proj(hidden.to(model.proj.weight.dtype))
    cap = model.config.softcap
    return scores if cap is None else cap * torch.tanh(scores / cap)


def tiny_config():
    """A ``JevConfig`` on the 4-layer Qwen3.5 text backbone of ``qwen3_5_text``: 50 labels, soft cap 10.

    Returns
    -------
    transformers.JevConfig
        Random weights from it: ``transformers.JevForDecision(tiny_config())``.
    """
    import transformers

    return transformers.JevConfig(hidden_size=16, num_verbalizers=50, softcap=10.0,
                                  text_config=text_config("Qwen3_5TextConfig").to_dict())


FAMILY = replace(qwen3_5_family("jev", ("JevForDecision",), tiny_config=tiny_config,
                                notes=NOTES + " The decision head (model.proj, soft-capped label scores) is not "
                                              "recurrent: the layer map is the text backbone's (model.model)."),
                 run=run, head=head)
