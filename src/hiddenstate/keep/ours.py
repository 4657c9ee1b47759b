"""The state of our own language models as a snapshot: a CharRNN's ``h`` (and LSTM ``c``), a Mamba LM's states.

A :class:`~hiddenstate.train.model.CharRNN` of GRU, LSTM or RNN layers carries ``h`` (L, N, H)
and, for the LSTM, ``c`` (L, N, H) from one call of ``forward(inputs (T, N), state)`` to the next;
a :class:`~hiddenstate.MambaLM` or :class:`~hiddenstate.Mamba2LM` carries one
:class:`~hiddenstate.MambaState` per layer (``ssm`` and the convolution window ``conv``, batch
first). The snapshot keeps those arrays exactly (``h``, ``c``; ``layers.<i>.ssm``,
``layers.<i>.conv``), and continuing is the model's own forward pass from them: a chunked run
with the state carried equals one run to float64 round-off.

:func:`state_of` and :func:`from_state` convert between a snapshot and the model's own state
(what its ``forward``, its trainer and its generation take as the initial state and give back
as the final one).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.ssm.lm import Mamba2LM, MambaLM
from hiddenstate.state import MambaState
from hiddenstate.train.model import CharRNN

__all__ = ["CLASSIC", "capture", "check_fits", "describe", "estimate", "from_state", "initial_snapshot", "restore",
           "state_of", "step", "supported", "take_apart"]

#: The CharRNN cells whose state a snapshot keeps.
CLASSIC = ("gru", "lstm", "rnn")


def supported(model) -> bool:
    """Whether ``model`` is one of ours whose state a snapshot keeps.

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    return isinstance(model, (MambaLM, Mamba2LM)) or (isinstance(model, CharRNN) and model.cell in CLASSIC)


def _check(model):
    if not supported(model):
        what = f"CharRNN(cell={model.cell!r})" if isinstance(model, CharRNN) else type(model).__name__
        raise TypeError(f"model must be a transformers model of a registered family, a CharRNN of cell "
                        f"{', '.join(CLASSIC)}, a MambaLM or a Mamba2LM; got {what}.")


def describe(model) -> tuple:
    """``(model_type, config, digest)`` of our model: its class, its sizes and the SHA-256 of its parameters.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM

    Returns
    -------
    tuple of (str, dict, str)

    Raises
    ------
    TypeError
        Not one of ours that :func:`supported` accepts.
    """
    from hiddenstate.keep.families import digest_of

    if type(model).__module__.startswith("torch") or not type(model).__module__.startswith("hiddenstate."):
        raise TypeError(f"model must be the snapshot's model, one of ours; got {type(model).__name__}.")
    _check(model)
    cfg = {"class": type(model).__name__, "vocab_size": int(model.vocab_size), "num_layers": int(model.num_layers),
           "dtype": np.dtype(model.dtype).name,
           "params": {k: [list(v.shape), v.dtype.name] for k, v in sorted(model.params.items())}}
    if isinstance(model, CharRNN):
        cfg.update(cell=model.cell, hidden_size=int(model.hidden_size))
    return type(model).__name__, cfg, digest_of(model.params.items())


def _run(model, ids, state):
    """Logits (N, s, V) float64 and the final state of ``ids`` (N, s) from ``state`` (None: zeros)."""
    if isinstance(model, CharRNN):
        logits, state, _ = model.forward(ids.T, state, need_cache=False)
        return np.asarray(logits, dtype=np.float64).transpose(1, 0, 2), state
    logits, states, _ = model.forward(ids if model.batch_first else ids.T, state)
    logits = logits if model.batch_first else logits.transpose(1, 0, 2)
    return np.asarray(logits, dtype=np.float64), list(states)


def _arrays(model, state) -> tuple:
    if isinstance(model, CharRNN):
        if model.cell == "lstm":
            h, c = state
            arrays = {"h": np.array(h, copy=True), "c": np.array(c, copy=True)}
        else:
            arrays = {"h": np.array(state, copy=True)}
        info = {k: {"layer": None, "part": k, "dtype": a.dtype.name, "batch_axis": 1} for k, a in arrays.items()}
        return arrays, info
    arrays, info = {}, {}
    for i, s in enumerate(state):
        for part in ("ssm", "conv"):
            a = np.array(getattr(s, part), copy=True)
            arrays[f"layers.{i}.{part}"] = a
            info[f"layers.{i}.{part}"] = {"layer": i, "part": part, "dtype": a.dtype.name, "batch_axis": 0}
    return arrays, info


def take_apart(model, live, axes=None) -> tuple:
    """Our model's state as a snapshot's arrays, their info and (no) values.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    live : the model's state
    axes : ignored
        (The batch axes are known: 1 for a CharRNN's h and c, 0 for a Mamba LM's states.)

    Returns
    -------
    arrays, info, scalars
    """
    return (*_arrays(model, live), {})


def capture(model, ids) -> tuple:
    """Run our ``model`` on the prefix ``ids`` (N, T) and keep its final state.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    ids : ndarray of int64, shape (N, T)

    Returns
    -------
    arrays, info, scalars, next_logits
        As :func:`hiddenstate.keep.families.capture` (no scalars).
    """
    _check(model)
    logits, state = _run(model, ids, None)
    arrays, info = _arrays(model, state)
    return arrays, info, {}, logits[:, -1]


def state_of(snap):
    """The model's own state from a snapshot: ``h`` (L, N, H) or ``(h, c)``; a list of MambaState.

    Parameters
    ----------
    snap : Snapshot
        Of one of our models.

    Returns
    -------
    ndarray, tuple of ndarray, or list of MambaState
        Copies: what ``forward(ids, state)`` takes as its initial state.

    Raises
    ------
    ValueError
        A snapshot of a transformers model.
    """
    if snap.backend != "ours":
        raise ValueError(f"snap must be a snapshot of one of our models; got one of a {snap.model_type} "
                         "(transformers).")
    a = {k: np.array(v, copy=True) for k, v in snap.arrays.items()}
    if snap.model_type == "CharRNN":
        return (a["h"], a["c"]) if "c" in a else a["h"]
    L = snap.config["num_layers"]
    return [MambaState(a[f"layers.{i}.ssm"], a[f"layers.{i}.conv"]) for i in range(L)]


def check_fits(model, snap) -> None:
    """Refuse a snapshot whose arrays are not ``model``'s state (their names, shapes and dtypes).

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    snap : Snapshot

    Raises
    ------
    ValueError
        Other arrays than the model's state has, of other shapes or dtypes; values (ours have none).
    """
    N = snap.batch
    if isinstance(model, CharRNN):
        zero = np.zeros((model.num_layers, N, model.hidden_size), dtype=model.dtype)
        want = _arrays(model, (zero, zero) if model.cell == "lstm" else zero)[0]
    else:
        want = _arrays(model, [blk.initial_state(N) for blk in model.layers])[0]
    got = {k: (a.shape, a.dtype) for k, a in snap.arrays.items()}
    if got != {k: (a.shape, a.dtype) for k, a in want.items()} or snap.scalars:
        odd = sorted(k for k in set(got) | set(want)
                     if got.get(k) != ((want[k].shape, want[k].dtype) if k in want else None))
        raise ValueError(f"snap must hold this {snap.model_type}'s state ({', '.join(want)}); got a snapshot whose "
                         f"arrays differ at {odd[:3] or sorted(snap.scalars)[:3]}.")


def restore(model, snap):
    """The live state :func:`step` continues from (the model's own state, copied).

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    snap : Snapshot

    Returns
    -------
    ndarray, tuple or list of MambaState
    """
    return state_of(snap)


def step(model, live, ids, start) -> tuple:
    """Continue our model from ``live`` on ``ids`` (N, S): its own forward pass, the state carried.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    live : the model's state
    ids : ndarray of int64, shape (N, S)
    start : int
        Unused (our models have no positions).

    Returns
    -------
    logits : ndarray of shape (N, S, V), float64
    live : the model's state after ``ids``
    """
    return _run(model, ids, live)


def from_state(model, state, *, prefix_length, next_logits):
    """A snapshot of our ``model`` holding ``state`` (a final state from its forward, or one tuned as an initial state).

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    state : ndarray (L, N, H), pair of them (LSTM), or list of MambaState
        The model's own state.
    prefix_length : int
        The tokens the state has seen (0 for an initial state).
    next_logits : ndarray of shape (N, V)
        The logits the state gives for the next token (``W_hy h`` of the last step; for an
        initial state, the logits the model's first step would read off it).

    Returns
    -------
    Snapshot

    Raises
    ------
    TypeError
        Not one of our supported models.
    ValueError
        ``next_logits`` not of shape (N, V); a negative prefix_length.
    """
    from hiddenstate.keep.snapshot import Snapshot

    model_type, config, digest = describe(model)
    arrays, info = _arrays(model, state)
    N = next(a.shape[info[k]["batch_axis"]] for k, a in arrays.items())
    next_logits = np.asarray(next_logits, dtype=np.float64)
    if next_logits.shape != (N, model.vocab_size):
        raise ValueError(f"next_logits must have shape (N={N}, V={model.vocab_size}); got {next_logits.shape}.")
    if isinstance(prefix_length, bool) or not isinstance(prefix_length, (int, np.integer)) or prefix_length < 0:
        raise ValueError(f"prefix_length must be an int >= 0; got {prefix_length!r:.60}.")
    return Snapshot(arrays, info, {}, next_logits, model_type, config, digest, int(prefix_length), "ours")


def initial_snapshot(model, state):
    """A snapshot of a CharRNN's initial state (e.g. one tuned with ``tune_initial_state``), to save and start from.

    Parameters
    ----------
    model : CharRNN
        Of cell gru, lstm or rnn (the cells whose state a snapshot keeps).
    state : ndarray (L, N, H) or a pair of them (LSTM)
        The state to start from (N = 1: the one state of a tuning run,
        :attr:`hiddenstate.train.Trained.initial_state`).

    Returns
    -------
    Snapshot
        ``prefix_length`` 0; ``next_logits`` (N, V) are the decoder's scores of the top layer's
        ``h`` (``W_hy h0 + b_y``). ``Stream(model, snap)``, ``model.sample(..., state=snap)``,
        :func:`hiddenstate.train.evaluate` (``initial_state=snap``) and
        :func:`~hiddenstate.train.initial_state.initial_state_gradient` take it; ``snap.save(path)``
        and :func:`hiddenstate.load_snapshot` keep it (refused on another model, named by its
        config or weight digest).

    Raises
    ------
    TypeError
        Not a CharRNN of cell gru, lstm or rnn.
    ValueError
        A state that is not one for ``model`` (:func:`~hiddenstate.train.initial_state.check_initial_state`).
    """
    from hiddenstate.train.initial_state import check_initial_state

    _check(model)
    if not isinstance(model, CharRNN):
        raise TypeError(f"model must be a CharRNN (an initial state of a character model); got {type(model).__name__}.")
    state = check_initial_state(model, state, name="state")
    h = state[0] if isinstance(state, tuple) else state  # (L, N, H)
    logits = h[-1] @ model.params["decoder.weight"].T + model.params["decoder.bias"]  # (N, V)
    return from_state(model, state, prefix_length=0, next_logits=logits)


def estimate(model, N, T) -> int:
    """Bytes of a snapshot of our model after a prefix (N, T): the state's arrays (no T) and next_logits.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM
    N, T : int

    Returns
    -------
    int
    """
    _check(model)
    itemsize = np.dtype(model.dtype).itemsize
    if isinstance(model, CharRNN):
        n = model.num_layers * N * model.hidden_size * (2 if model.cell == "lstm" else 1)
    else:
        n = sum(s.ssm.size + s.conv.size for s in (blk.initial_state(N) for blk in model.layers))
    return int(n * itemsize + N * model.vocab_size * 8)
