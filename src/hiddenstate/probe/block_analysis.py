"""One of our recurrent blocks traced and measured, whatever its kind: :func:`analyze_block`.

The block's kind is found in the registry (:func:`hiddenstate.kinds.kind_of_block`); its record
(the kind's ``run``) goes through the shared layer loop
(:func:`hiddenstate.probe.layer_loop.analyze_records`) with the kind's
:class:`~hiddenstate.probe.layer_loop.LayerKind` (the record's ``analysis``). A kind registered
from outside the package (a test's toy kind) is analysed here with no other code of its own.
:func:`analyze_recurrence` (RG-LRU, lightning attention, short convolution) and
:func:`analyze_layer` (mLSTM, RWKV-4) are the 0.2 entry points, kept: the same call, restricted to
their kinds.
"""

from __future__ import annotations

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds import KINDS, get_kind, kind_of_block
from hiddenstate.probe.layer_loop import analyze_records

__all__ = ["analyze_block", "analyze_layer", "analyze_recurrence"]


def _check(block, kinds):
    kind = kind_of_block(block)
    if kind is None or (kinds is not None and kind.name not in kinds):
        names = [get_kind(k).block.__name__ for k in kinds] if kinds is not None else sorted(
            k.block.__name__ for k in KINDS.values())
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise TypeError(f"block must be a hiddenstate {listed}; got {type(block).__name__}.")
    return kind


def analyze_block(block, u, state=None, *, max_lag: int = 30, model_name: str | None = None, text: str | None = None,
                  tokens=None, kinds=None, **forward):
    """Trace one of our blocks of a registered kind and measure its state: keep gate, time constants, gradient, PCA.

    Parameters
    ----------
    block : a block of a registered kind (:data:`hiddenstate.kinds.KINDS`)
    u : ndarray of shape (T, N, M), or (N, T, M) with ``block.batch_first``
        The block's input.
    state : the block's state type, optional
        The initial state (None: the block's fresh one).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary (default ``"hiddenstate <class name>"``).
    text : str, optional
        The characters of sequence 0, one per step: the units that track text features and the explorer.
    tokens : array_like of int, shape (T, N), optional
        Ids behind the steps for the memory curve (default None: it regresses the input ``u_{t-k}``).
    kinds : collection of str, optional
        Accept only blocks of these kinds (default: every registered kind).
    **forward
        More keywords of the block's ``forward`` (the RG-LRU's ``reset``).

    Returns
    -------
    StateAnalysis
        Of the kind's ``analysis_type``.

    Raises
    ------
    TypeError
        ``block`` of no registered kind (or not of ``kinds``); ``text`` not a str; and the errors
        of the block's ``forward``.
    ValueError
        ``max_lag`` not positive; an input of no steps; ``text`` empty or longer than T; a kind
        without an analysis.
    """
    kind = _check(block, kinds)
    max_lag = positive_int("max_lag", max_lag)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    rec = kind.run(block, u, state=state, **forward)[1]
    return analyze_records(kind.layer_kind(), [rec], x=u, tokens=tokens, ids=False, batch_first=block.batch_first,
                           max_lag=max_lag, text=text, model_name=model_name or f"hiddenstate {type(block).__name__}")


def analyze_recurrence(block, u, state=None, *, reset=None, max_lag: int = 30, model_name: str | None = None,
                       text: str | None = None, tokens=None):
    """Trace one of our RG-LRU, lightning or short convolution blocks and measure its state (:func:`analyze_block`).

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
        The characters of sequence 0, one per step.
    tokens : array_like of int, shape (T, N), optional
        Ids behind the steps for the memory curve.

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
    return analyze_block(block, u, state, max_lag=max_lag, model_name=model_name, text=text, tokens=tokens,
                         kinds=("rglru", "lightning", "shortconv"), reset=reset)


def analyze_layer(block, u, state=None, *, max_lag: int = 30, model_name: str | None = None, text: str | None = None,
                  tokens=None):
    """Trace one of our mLSTM or RWKV-4 layers and measure its state (:func:`analyze_block`).

    Parameters
    ----------
    block : MLSTMLayer or RWKVTimeMix
    u : ndarray of shape (T, N, M), or (N, T, M) with ``block.batch_first``
        The layer's input.
    state : MLSTMState or RWKVState, optional
        The initial state (None: the layer's fresh one).
    max_lag : int, default 30
        Largest lag of the Jacobian products (at most T) and of the memory curve (at most T // 3).
    model_name : str, optional
        What the model was, for the summary (default ``"hiddenstate <class name>"``).
    text : str, optional
        The characters of sequence 0, one per step.
    tokens : array_like of int, shape (T, N), optional
        Ids behind the steps for the memory curve.

    Returns
    -------
    MLSTMAnalysis or RWKVAnalysis

    Raises
    ------
    TypeError
        ``block`` is neither; ``text`` not a str; and the errors of the layer's ``forward``.
    ValueError
        ``max_lag`` not positive; an input of no steps; ``text`` empty or longer than T.
    """
    return analyze_block(block, u, state, max_lag=max_lag, model_name=model_name, text=text, tokens=tokens,
                         kinds=("mlstm", "rwkv"))
