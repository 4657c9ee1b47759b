"""The initial state of a character model as an input, its gradient, and a state tuned for a style.

A :class:`~hiddenstate.train.model.CharRNN` starts every sequence from a state ``h0`` in the
format of its recurrent layers and returns the final state (``forward(inputs, h0)``). The formats:

==========================  ==================================================================
``cell``                    ``h0`` (N rows)
==========================  ==================================================================
gru, rnn, mingru, minlstm   ndarray (L, N, H)
lstm                        pair ``(h0, c0)``, each (L, N, H)
mamba                       pair ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))``
MambaLM, Mamba2LM           list of L :class:`~hiddenstate.MambaState` ``(ssm (N, ...), conv (N, ...))``
==========================  ==================================================================

The last row is the state of :class:`hiddenstate.MambaLM` / :class:`~hiddenstate.Mamba2LM`, and
so of a transformers Mamba, FalconMamba or Mamba-2 model converted with
:func:`hiddenstate.interop.from_transformers`: :func:`initial_state_gradient` gives its
``dL/dh0`` too (exact BPTT through our blocks); the trainer tunes the character models only.

A state of one row (N = 1) is a state for *every* row: :func:`broadcast_state` repeats it, and
the gradient of a loss read from it is the sum over the rows (:func:`initial_state_gradient`).

**Initial-state tuning** trains only that one-row state with the weights frozen (the RWKV
community's "state tuning", BlinkDL/RWKV-LM#246): the gradient ``dL/dh0`` is exact backpropagation
through time through our layers (:meth:`CharRNN.loss_and_state_grad
<hiddenstate.train.model.CharRNN.loss_and_state_grad>`). ``hiddenstate train --tune-initial-state
RUN`` does it with the trainer (:func:`hiddenstate.train.train`, ``tune_initial_state=``): the
same checkpoints, resume and distributed runs as training the weights; the checkpoint holds the
tuned state (:attr:`hiddenstate.train.Trained.initial_state`), which :func:`hiddenstate.train.sample`,
:class:`~hiddenstate.train.generate.Stream` and :func:`hiddenstate.train.evaluate` start from.

Named arrays (``state_to_arrays`` / ``state_from_arrays``) are how a state is written to a file:
``h`` (and ``c``) or ``ssm`` and ``conv``, the names of a checkpoint's carried state.

Examples
--------
>>> import numpy as np
>>> from hiddenstate.train.model import CharRNN
>>> model = CharRNN(5, 8, cell="lstm", rng=np.random.default_rng(0))
>>> h0 = check_initial_state(model, model.initial_state(1))
>>> loss, d_h0 = initial_state_gradient(model, np.array([[0], [1], [2]]), np.array([[1], [2], [3]]), h0)
>>> [d.shape for d in d_h0]
[(1, 1, 8), (1, 1, 8)]
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.functional import cross_entropy
from hiddenstate.core.validation import positive_int

__all__ = [
    "broadcast_state",
    "check_initial_state",
    "initial_state_gradient",
    "state_from_arrays",
    "state_names",
    "state_to_arrays",
]


def _is_lm(model) -> bool:
    """A Mamba or Mamba-2 language model (MambaLM, Mamba2LM, and what ``from_transformers`` converts)."""
    return not hasattr(model, "cell") and hasattr(model, "layers") and hasattr(model, "d_model")


def state_names(model) -> tuple:
    """The names of the parts of a model's state, in order.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM

    Returns
    -------
    tuple of str
        CharRNN: ``("h",)``, ``("h", "c")`` (LSTM) or ``("ssm", "conv")`` (mamba); a Mamba LM:
        ``("layers.0.ssm", "layers.0.conv", "layers.1.ssm", ...)`` (the names of its snapshot).
    """
    if _is_lm(model):
        return tuple(f"layers.{i}.{part}" for i in range(len(model.layers)) for part in ("ssm", "conv"))
    return {"lstm": ("h", "c"), "mamba": ("ssm", "conv")}.get(model.cell, ("h",))


def _batch_axis(model) -> int:
    return 0 if _is_lm(model) else 1


def _zeros(model) -> list:
    """The parts of a one-row zero state, flat."""
    if _is_lm(model):
        return [part for blk in model.layers for part in blk.initial_state(1)]
    return list(_parts(model.initial_state(1)))


def _flat(model, state) -> tuple:
    """The parts of a state in the model's format, flat (an LM's list of per-layer pairs is unrolled)."""
    if _is_lm(model) and isinstance(state, (list, tuple)) and all(isinstance(s, (list, tuple)) for s in state):
        return tuple(part for layer in state for part in layer)
    return _parts(state)


def _parts(state) -> tuple:
    return tuple(state) if isinstance(state, (tuple, list)) else (state,)


def _pack(model, parts):
    if _is_lm(model):
        return [type(blk.initial_state(1))(*parts[2 * i: 2 * i + 2]) for i, blk in enumerate(model.layers)]
    return tuple(parts) if len(state_names(model)) == 2 else parts[0]


def _legend(model, rows) -> str:
    axis = _batch_axis(model)
    spelled = ["(" + ", ".join(map(str, s.shape[:axis] + (rows,) + s.shape[axis + 1:])) + ")" for s in _zeros(model)]
    names = state_names(model)
    if _is_lm(model):
        body = f"a list of L={len(model.layers)} MambaState (ssm {spelled[0]}, conv {spelled[1]})"
    else:
        body = spelled[0] if len(names) == 1 else "a pair (" + ", ".join(f"{n} {s}" for n, s in zip(names, spelled)) + ")"
    return f"{body} of floats for {model!r}"


def check_initial_state(model, h0, *, batch_size: int | None = None, name: str = "h0"):
    """Check a state for ``model`` and return it in the model's format and dtype.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    h0 : ndarray, pair of ndarray, list of MambaState (a Mamba LM), or Snapshot
        In the format of the table above, with N = 1 (a state for every row) or N =
        ``batch_size``. Floating arrays of any precision; they are cast to the model's dtype. A
        :class:`hiddenstate.Snapshot` of ``model`` (e.g. a tuned state saved with
        :func:`hiddenstate.keep.ours.initial_snapshot`) gives its state, after checking that it
        was taken of this model (type, configuration and weight digest).
    batch_size : int, optional
        N of the batch the state will start; None: any N.
    name : str, default "h0"
        What the message calls the argument.

    Returns
    -------
    ndarray or tuple of ndarray
        C-contiguous copies in the model's dtype.

    Raises
    ------
    ValueError
        A snapshot of another model (its own message, from ``Snapshot.check_model``). In one
        message naming ``name``, the model, the format and what was received: a state of
        another structure (a pair for a GRU, a single array for an LSTM), shape (another model's
        L, H, Di, S, K), row count, or dtype (integer, boolean, complex), or non-finite values.
    """
    rows = None if batch_size is None else positive_int("batch_size", batch_size)
    if hasattr(h0, "check_model") and hasattr(h0, "arrays"):  # a hiddenstate.Snapshot of this very model
        h0.check_model(model, name=f"{name} (a snapshot)")
        h0 = _pack(model, [h0.arrays[k] for k in state_names(model)])
    want, axis = [tuple(z.shape) for z in _zeros(model)], _batch_axis(model)
    got = []
    for part in _flat(model, h0):
        try:
            got.append(np.asarray(part))
        except (ValueError, TypeError):  # ragged nested lists
            got.append(None)
    n = got[0].shape[axis] if got and got[0] is not None and got[0].ndim > axis else None
    ok = len(got) == len(want) and all(a is not None and a.dtype.kind == "f" for a in got)
    ok = ok and n is not None and (n == 1 or rows is None or n == rows)
    ok = ok and all(a.shape == w[:axis] + (n,) + w[axis + 1:] for a, w in zip(got, want))
    if not ok:
        received = ", ".join("None" if a is None else f"{a.dtype} {a.shape}" for a in got)
        received = received if len(got) == 1 else f"{len(got)} arrays ({received})"
        received = received if isinstance(h0, (tuple, list, np.ndarray)) else type(h0).__name__
        n_rule = "N = 1 (one state for every row)" + ("" if rows in (None, 1) else f" or N = {rows}")
        raise ValueError(f"{name} must be {_legend(model, 'N')}, {n_rule}; got {received}.")
    out = [np.ascontiguousarray(a, dtype=model.dtype) for a in got]
    if not all(np.isfinite(a).all() for a in out):
        raise ValueError(
            f"{name} must hold finite values in the model's dtype {model.dtype} for {model!r}; "
            "got NaN or infinity (or a value too large for the dtype)."
        )
    return _pack(model, out)


def broadcast_state(model, h0, batch_size: int):
    """A one-row state repeated over ``batch_size`` rows (an N-row state is returned as it is).

    Parameters
    ----------
    model : CharRNN
    h0 : ndarray or pair
        Checked by :func:`check_initial_state` (N = 1 or ``batch_size``).
    batch_size : int
        N.

    Returns
    -------
    ndarray or pair of ndarray
        The model's format with N rows (copies).
    """
    h0, axis = check_initial_state(model, h0, batch_size=batch_size), _batch_axis(model)
    return _pack(model, [np.repeat(a, batch_size, axis=axis) if a.shape[axis] != batch_size else a
                         for a in _flat(model, h0)])


def initial_state_gradient(model, inputs, targets, h0):
    """Mean cross-entropy of a chunk read from ``h0`` and its exact gradient with respect to ``h0``.

    Backpropagation through time through every layer of the model down to the state it started
    from (the weights are not changed). A one-row ``h0`` starts every row; its gradient is the
    sum over the rows of the batch.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
        A Mamba LM is also what :func:`hiddenstate.interop.from_transformers` makes of a
        transformers Mamba, FalconMamba or Mamba-2 model.
    inputs, targets : ndarray of shape (T, N) (a LM with ``batch_first``: (N, T)), integer
        ``targets[t, n]`` is the token after ``inputs[t, n]``.
    h0 : ndarray, pair, or (LM) list of MambaState
        N = 1 or N rows, in the model's format (see :func:`check_initial_state`).

    Returns
    -------
    loss : float
        Nats per character.
    d_h0 : ndarray, pair of ndarray, or list of MambaState
        Shaped like ``h0``: d loss / d ``h0``, in the model's dtype.

    Raises
    ------
    ValueError, TypeError
        A state that breaks :func:`check_initial_state`; ids as :meth:`CharRNN.forward` refuses.
    """
    lm, axis = _is_lm(model), _batch_axis(model)
    N = np.shape(inputs)[0 if lm and model.batch_first else 1] if np.ndim(inputs) == 2 else 1
    h0 = check_initial_state(model, h0, batch_size=N)
    if lm:
        loss, d_state = _lm_loss_and_state_grad(model, inputs, targets, broadcast_state(model, h0, N))
    else:
        loss, d_state, _ = model.loss_and_state_grad(inputs, targets, broadcast_state(model, h0, N))
    return loss, _pack(model, [d.sum(axis=axis, keepdims=True) if a.shape[axis] == 1 else d
                               for a, d in zip(_flat(model, h0), _flat(model, d_state))])


def _lm_loss_and_state_grad(model, ids, targets, states):
    """Mean cross-entropy of a Mamba LM's chunk read from ``states`` and d loss / d ``states``."""
    targets = np.asarray(targets)
    if targets.shape != np.shape(ids) or not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(f"targets must be integer ids of the shape of ids {np.shape(ids)}; got {targets.dtype} "
                         f"{targets.shape}.")
    logits, _, cache = model.forward(ids, states)
    V = logits.shape[-1]
    with np.errstate(under="ignore"):
        loss, d_logits = cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    _, d_states = model.backward(cache, np.asarray(d_logits).reshape(logits.shape))
    return loss, d_states


def state_to_arrays(model, h0) -> dict:
    """A state as named arrays (for a safetensors file or a checkpoint).

    Parameters
    ----------
    model : CharRNN
    h0 : ndarray or pair
        Checked by :func:`check_initial_state`.

    Returns
    -------
    dict of str to ndarray
        :func:`state_names` -> part.
    """
    return dict(zip(state_names(model), _flat(model, check_initial_state(model, h0))))


def state_from_arrays(model, arrays: dict, *, name: str = "initial_state"):
    """The inverse of :func:`state_to_arrays`, checked against ``model``.

    Parameters
    ----------
    model : CharRNN
    arrays : dict of str to ndarray
        Exactly the names of :func:`state_names`.
    name : str, default "initial_state"
        What the messages call it.

    Returns
    -------
    ndarray or pair of ndarray

    Raises
    ------
    ValueError
        Other names (a state saved for another kind of model), or parts that break
        :func:`check_initial_state`.
    """
    names = state_names(model)
    if not isinstance(arrays, dict) or sorted(arrays) != sorted(names):
        got = sorted(arrays) if isinstance(arrays, dict) else type(arrays).__name__
        raise ValueError(
            f"{name} must hold the arrays {list(names)} of {model!r}; got {got} (a state of another kind of model)."
        )
    return check_initial_state(model, _pack(model, [arrays[k] for k in names]), name=name)
