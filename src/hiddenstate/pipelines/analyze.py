"""``hiddenstate.analyze(model, x)``: one entry point that measures the hidden state of any model the package knows.

:func:`analyze` looks at what ``model`` is and hands it, with the common options, to the
analysis of its kind; each of those stays public and is what :func:`analyze` returns:

==========================================================  =====================================================
model                                                       analysis
==========================================================  =====================================================
:class:`~hiddenstate.RNN`, ``GRU``, ``LSTM``, ``MinGRU``,    :func:`hiddenstate.probe.analysis.analyze_model`
``MinLSTM``; a :class:`~hiddenstate.CharRNN` of those cells  (a CharRNN's ids embedded, its layers ``model.rnn``)
:class:`~hiddenstate.Mamba`, :class:`~hiddenstate.MambaLM`,  :func:`hiddenstate.kinds.ssm.mamba_analysis.analyze_mamba`
a CharRNN of cell ``"mamba"``
:class:`~hiddenstate.Mamba2`, ``Mamba2LM``                   :func:`hiddenstate.kinds.ssm.mamba2_analysis.analyze_mamba2`
:class:`~hiddenstate.GatedDeltaNet`, ``KimiDeltaAttention``  :func:`hiddenstate.kinds.delta.analysis.analyze_delta`
:class:`~hiddenstate.RGLRUBlock`, ``LightningAttention``,    :func:`hiddenstate.probe.block_analysis.analyze_block`
``ShortConv``, :class:`~hiddenstate.MLSTMLayer`,             (the generic one; each kind's ``LayerKind`` in its
``RWKVTimeMix``                                              ``analysis`` module says what it measures)
a block of any other registered kind                        its kind's ``analyze``, else the generic
                                                            :func:`hiddenstate.probe.block_analysis.analyze_block`
a transformers model of a registered family                 :func:`hiddenstate.pipelines.family_inspection.analyze_family_model`
==========================================================  =====================================================

Blocks are routed through the kind registry (:func:`hiddenstate.kinds.kind_of_block`), so a kind
registered later (one folder and one registry line) is analysed here with no change to this module.

The per-kind functions are imported when first used, so ``import hiddenstate`` stays lean.
"""

from __future__ import annotations

import inspect

import numpy as np

__all__ = ["ACCEPTED", "analyze"]

#: What :func:`analyze` accepts, as its TypeError names it.
ACCEPTED = ("a hiddenstate RNN, GRU, LSTM, MinGRU, MinLSTM or CharRNN; Mamba, MambaLM, Mamba2, Mamba2LM; "
            "GatedDeltaNet, KimiDeltaAttention; RGLRUBlock, LightningAttention, ShortConv; MLSTMLayer, RWKVTimeMix; "
            "or a transformers model of a registered family")


def _classic(model, x, state, common, options):
    from hiddenstate.probe.analysis import analyze_model

    name = common.pop("model_name")
    if name is not None:  # what the report header calls the model, as inspect_model sets it
        options["title_meta"] = {**(options.get("title_meta") or {}), "model": name}
    return analyze_model, (model, x, state), {**common, **options}


def _char(model, x, state, common, options):
    from hiddenstate.kinds.ssm.mamba_analysis import analyze_mamba

    if model.cell == "mamba":
        return analyze_mamba, (model, x, state), {**common, **options}
    ids = np.asarray(x)
    if ids.dtype == bool or ids.dtype.kind not in "iu" or ids.ndim not in (1, 2):
        raise TypeError(f"x must be token ids of shape (T,) or (T, N) (integers) for a CharRNN; got dtype "
                        f"{ids.dtype} and shape {ids.shape}.")
    if ids.size and (ids.min() < 0 or ids.max() >= model.vocab_size):
        raise ValueError(f"x must hold ids in [0, {model.vocab_size}); got values in [{ids.min()}, {ids.max()}].")
    ids = ids[:, None] if ids.ndim == 1 else ids  # (T, N)
    if common["tokens"] is None:
        common["tokens"] = ids
    func, args, kwargs = _classic(model.rnn, np.asarray(model.embed(ids), dtype=np.float64), state, common, options)
    return func, args, kwargs


def _family(model, x, state, common, options):
    from hiddenstate.pipelines.family_inspection import analyze_family_model

    if state is not None:
        raise ValueError(f"state must be None for a transformers {type(model).__name__}: its own run, which the "
                         "recurrent layers are recomputed from, starts from zero states; got a state.")
    return analyze_family_model, (model, x), {**common, **options}


def _dispatch(model):
    """The route of ``model``: a function ``(model, x, state, common, options) -> (func, args, kwargs)``, or None.

    A block of a registered kind (:mod:`hiddenstate.kinds`, a toy kind of a test included) goes to
    its kind's own analysis, or to the generic one (:func:`~hiddenstate.probe.block_analysis.analyze_block`)
    when the kind has none; the classic layers, the character model and our language models have
    routes of their own, a transformers model of a registered family is recomputed from its own run.
    """
    from hiddenstate.classic.recurrent import RecurrentLayer
    from hiddenstate.kinds import kind_of_block
    from hiddenstate.kinds.ssm.lm import Mamba2LM, MambaLM
    from hiddenstate.kinds.ssm.mamba2_analysis import analyze_mamba2
    from hiddenstate.kinds.ssm.mamba_analysis import analyze_mamba
    from hiddenstate.train.model import CharRNN

    def plain(func):
        return lambda m, x, state, common, options: (func, (m, x, state), {**common, **options})

    routes = ((CharRNN, _char), (RecurrentLayer, _classic), (MambaLM, plain(analyze_mamba)),
              (Mamba2LM, plain(analyze_mamba2)))
    for classes, route in routes:
        if isinstance(model, classes) and not (route is _classic and model.kind is None):
            return route
    kind = kind_of_block(model)
    if kind is not None:
        from hiddenstate.probe.block_analysis import analyze_block

        return plain(kind.analyzer() or analyze_block)
    if isinstance(model, (str, bytes)) or not hasattr(model, "config"):
        return None
    from hiddenstate.interop.families import find_family

    return _family if find_family(model) is not None else None


def analyze(model, x, state=None, *, max_lag: int = 30, text: str | None = None, tokens=None,
            model_name: str | None = None, **options):
    """Measure the hidden state of ``model`` on ``x`` with the analysis of its kind.

    One entry point for every recurrent model the package knows: it picks the per-kind
    analysis (the module docstring's table) and passes the common options and ``options``
    through, unchanged; the result is that function's.

    Parameters
    ----------
    model : recurrent layer, block, language model or transformers model
        A hiddenstate ``RNN``, ``GRU``, ``LSTM``, ``MinGRU``, ``MinLSTM`` or ``CharRNN``;
        ``Mamba``, ``MambaLM``, ``Mamba2``, ``Mamba2LM``; ``GatedDeltaNet``,
        ``KimiDeltaAttention``; ``RGLRUBlock``, ``LightningAttention``, ``ShortConv``;
        ``MLSTMLayer``, ``RWKVTimeMix``; or a transformers model of a registered family
        (:mod:`hiddenstate.interop.families`).
    x : array_like
        What the model reads: a layer's or block's input (T, N, M) ((N, T, M) with
        ``batch_first``); token ids for a language model ((N, T)) or a CharRNN ((T,) or
        (T, N)); token ids (N, T) for a transformers model.
    state : optional
        The initial state in the model's own form (``h0`` of a classic layer, a block's state
        NamedTuple, ...); None: zeros. Must be None for a transformers model.
    max_lag : int, default 30
        Largest lag of the memory curve and of the Jacobian products.
    text : str, optional
        The characters of sequence 0, one per step: the units that track text features.
    tokens : array_like of int, shape (T, N) or (T,), optional
        Token ids behind the steps, time-major, for the memory curve (a CharRNN's ids by default).
    model_name : str, optional
        What the analysis calls the model (for a classic layer, ``meta["model"]``).
    **options
        Passed to the per-kind function, which must take them: ``lengths``, ``grad_steps``,
        ``n_fixed_point_starts``, ``rng``, ``echo``, ... (:func:`~hiddenstate.probe.analysis.analyze_model`);
        ``reset`` and the other options of a block's ``forward`` (its kind's analysis passes them on); ``layers``,
        ``max_bytes`` (:func:`~hiddenstate.pipelines.family_inspection.analyze_family_model`).

    Returns
    -------
    Analysis or MambaAnalysis
        What the per-kind function returns: an :class:`~hiddenstate.probe.analysis.Analysis` for
        a classic layer or CharRNN, a :class:`~hiddenstate.kinds.ssm.mamba_analysis.MambaAnalysis`
        (or its subclass of the kind: ``Mamba2Analysis``, ``DeltaAnalysis``,
        ``RecurrenceAnalysis``, ``MLSTMAnalysis``, ``RWKVAnalysis``) for the others.

    Raises
    ------
    TypeError
        ``model`` of none of the accepted types (the message names them and the type received);
        an option the per-kind function does not take (named, with those it takes); and the
        per-kind function's own.
    ValueError
        A state for a transformers model; ids of a CharRNN out of its vocabulary; and the
        per-kind function's own.
    """
    route = _dispatch(model)
    if route is None:
        raise TypeError(f"model must be {ACCEPTED}; got {type(model).__module__}.{type(model).__qualname__}.")
    common = {"max_lag": max_lag, "text": text, "tokens": tokens, "model_name": model_name}
    func, args, kwargs = route(model, x, state, common, dict(options))
    taken = inspect.signature(func).parameters
    open_ended = any(p.kind is p.VAR_KEYWORD for p in taken.values())  # it passes them on to the block's forward
    unknown = [] if open_ended else sorted(k for k in options if k not in taken)
    if unknown:
        known = sorted(k for k, p in taken.items() if p.kind is p.KEYWORD_ONLY)
        raise TypeError(f"options must be keyword arguments of {func.__name__} for a {type(model).__name__} "
                        f"({', '.join(known)}); got {', '.join(unknown)}.")
    return func(*args, **kwargs)
