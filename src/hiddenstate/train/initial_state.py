"""The initial state of a character model as an input, its gradient, and a state tuned for a style.

A :class:`~hiddenstate.train.model.CharRNN` starts every sequence from a state ``h0`` in the
format of its recurrent layers and returns the final state (``forward(inputs, h0)``). The formats:

==========================  ==================================================================
``cell``                    ``h0`` (N rows)
==========================  ==================================================================
gru, rnn, mingru, minlstm   ndarray (L, N, H)
lstm                        pair ``(h0, c0)``, each (L, N, H)
mamba                       pair ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))``
==========================  ==================================================================

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

from hiddenstate.core.validation import positive_int

__all__ = [
    "broadcast_state",
    "check_initial_state",
    "initial_state_gradient",
    "state_from_arrays",
    "state_names",
    "state_to_arrays",
]


def state_names(model) -> tuple:
    """The names of the parts of a model's state, in order.

    Parameters
    ----------
    model : CharRNN

    Returns
    -------
    tuple of str
        ``("h",)``, ``("h", "c")`` (LSTM) or ``("ssm", "conv")`` (mamba).
    """
    return {"lstm": ("h", "c"), "mamba": ("ssm", "conv")}.get(model.cell, ("h",))


def _parts(state) -> tuple:
    return tuple(state) if isinstance(state, (tuple, list)) else (state,)


def _pack(model, parts):
    return tuple(parts) if len(state_names(model)) == 2 else parts[0]


def _legend(model, rows) -> str:
    shapes = [tuple(s.shape) for s in _parts(model.initial_state(1))]
    spelled = ["(" + ", ".join(map(str, (s[0], rows) + s[2:])) + ")" for s in shapes]
    names = state_names(model)
    body = spelled[0] if len(names) == 1 else "a pair (" + ", ".join(f"{n} {s}" for n, s in zip(names, spelled)) + ")"
    return f"{body} of floats for {model!r}"


def check_initial_state(model, h0, *, batch_size: int | None = None, name: str = "h0"):
    """Check a state for ``model`` and return it in the model's format and dtype.

    Parameters
    ----------
    model : CharRNN
    h0 : ndarray, pair of ndarray, or Snapshot
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
    want = [tuple(s.shape) for s in _parts(model.initial_state(1))]
    got = []
    for part in _parts(h0):
        try:
            got.append(np.asarray(part))
        except (ValueError, TypeError):  # ragged nested lists
            got.append(None)
    n = got[0].shape[1] if got and got[0] is not None and got[0].ndim > 1 else None
    ok = len(got) == len(want) and all(a is not None and a.dtype.kind == "f" for a in got)
    ok = ok and n is not None and (n == 1 or rows is None or n == rows)
    ok = ok and all(a.shape == (w[0], n) + w[2:] for a, w in zip(got, want))
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
    h0 = check_initial_state(model, h0, batch_size=batch_size)
    return _pack(model, [np.repeat(a, batch_size, axis=1) if a.shape[1] != batch_size else a for a in _parts(h0)])


def initial_state_gradient(model, inputs, targets, h0):
    """Mean cross-entropy of a chunk read from ``h0`` and its exact gradient with respect to ``h0``.

    Backpropagation through time through every layer of the model down to the state it started
    from (the weights are not changed). A one-row ``h0`` starts every row; its gradient is the
    sum over the rows of the batch.

    Parameters
    ----------
    model : CharRNN
    inputs, targets : ndarray of shape (T, N), integer
        ``targets[t, n]`` is the character after ``inputs[t, n]``.
    h0 : ndarray or pair
        N = 1 or N rows, in the model's format (see :func:`check_initial_state`).

    Returns
    -------
    loss : float
        Nats per character.
    d_h0 : ndarray or pair of ndarray
        Shaped like ``h0``: d loss / d ``h0``, in the model's dtype.

    Raises
    ------
    ValueError, TypeError
        A state that breaks :func:`check_initial_state`; ids as :meth:`CharRNN.forward` refuses.
    """
    N = np.shape(inputs)[1] if np.ndim(inputs) == 2 else 1
    h0 = check_initial_state(model, h0, batch_size=N)
    loss, d_state, _ = model.loss_and_state_grad(inputs, targets, broadcast_state(model, h0, N))
    return loss, _pack(
        model, [d.sum(axis=1, keepdims=True) if a.shape[1] == 1 else d for a, d in zip(_parts(h0), _parts(d_state))]
    )


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
    return dict(zip(state_names(model), _parts(check_initial_state(model, h0))))


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
