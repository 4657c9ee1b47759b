"""Hypothesis strategies and small deterministic builders shared by the core test files.

Sizes stay tiny (a handful of steps, units and rows) so that property tests, gradient checks
and torch parity runs are fast. Every random array comes from an explicit
``numpy.random.Generator`` seeded by the test (or drawn by hypothesis as an integer seed),
never from the global ``np.random``.

Kinds of recurrence used across the tests::

    "rnn_tanh"   RNN / RNNCell, nonlinearity="tanh"
    "rnn_relu"   RNN / RNNCell, nonlinearity="relu"
    "gru"        GRU / GRUCell, reset_after=False (Cho et al. 2014, the seeds' form)
    "gru_after"  GRU / GRUCell, reset_after=True (torch.nn.GRU's form)
    "lstm"       LSTM / LSTMCell
    "rnn_sigmoid" RNN / RNNCell, nonlinearity="sigmoid" (Elman's logistic units; not in torch),
                  included where the installed hiddenstate offers it

The linear recurrences (no recurrent weights, so not in ``KINDS``, whose tests read
``weight_hh``; ``ALL_KINDS`` adds them where a test is about the layer machinery)::

    "mingru"      MinGRU / MinGRUCell, plain form, parallel scan
    "mingru_log"  MinGRU / MinGRUCell, log_space=True
    "mingru_seq"  MinGRU / MinGRUCell, scan="sequential"
    "minlstm"     MinLSTM / MinLSTMCell, plain form
    "minlstm_log" MinLSTM / MinLSTMCell, log_space=True
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import strategies as st

import hiddenstate as hs
from hiddenstate.classic.cells import rnn as _rnn

_HAS_SIGMOID = "sigmoid" in getattr(_rnn, "NONLINEARITIES", ())
KINDS = ("rnn_tanh", "rnn_relu", "gru", "gru_after", "lstm") + (("rnn_sigmoid",) if _HAS_SIGMOID else ())
#: the kinds torch implements (torch has no Cho-form GRU)
TORCH_KINDS = ("rnn_tanh", "rnn_relu", "gru_after", "lstm")
LINEAR_KINDS = ("mingru", "mingru_log", "mingru_seq", "minlstm", "minlstm_log")
ALL_KINDS = KINDS + LINEAR_KINDS
GATES = {"rnn_tanh": 1, "rnn_relu": 1, "rnn_sigmoid": 1, "gru": 3, "gru_after": 3, "lstm": 4,
         "mingru": 2, "mingru_log": 2, "mingru_seq": 2, "minlstm": 3, "minlstm_log": 3}
_LINEAR = {"mingru": (hs.MinGRU, hs.MinGRUCell, {}), "mingru_log": (hs.MinGRU, hs.MinGRUCell, {"log_space": True}),
           "mingru_seq": (hs.MinGRU, hs.MinGRUCell, {"scan": "sequential"}),
           "minlstm": (hs.MinLSTM, hs.MinLSTMCell, {}),
           "minlstm_log": (hs.MinLSTM, hs.MinLSTMCell, {"log_space": True})}


def _options(kind: str) -> tuple[type, type, dict]:
    if kind == "rnn_tanh":
        return hs.RNN, hs.RNNCell, {"nonlinearity": "tanh"}
    if kind == "rnn_relu":
        return hs.RNN, hs.RNNCell, {"nonlinearity": "relu"}
    if kind == "rnn_sigmoid":
        return hs.RNN, hs.RNNCell, {"nonlinearity": "sigmoid"}
    if kind == "gru":
        return hs.GRU, hs.GRUCell, {"reset_after": False}
    if kind == "gru_after":
        return hs.GRU, hs.GRUCell, {"reset_after": True}
    if kind == "lstm":
        return hs.LSTM, hs.LSTMCell, {}
    if kind in _LINEAR:
        return _LINEAR[kind]
    raise ValueError(f"unknown kind {kind!r}")


def kind_of_layer(layer) -> str:
    """The strategies' name of a layer's (or cell's) kind and options."""
    name = layer.kind.name
    if name in ("mingru", "minlstm"):
        return name + ("_log" if layer.log_space else "_seq" if name == "mingru" and layer.scan == "sequential" else "")
    if layer.is_lstm:
        return "lstm"
    if name == "gru":
        return "gru_after" if layer.reset_after else "gru"
    return "rnn_" + layer.nonlinearity


def make_layer(kind: str, input_size: int, hidden_size: int, num_layers: int = 1, *, seed: int = 0, **kwargs):
    """A layer of the given kind with weights drawn from ``default_rng(seed)``."""
    layer_cls, _, opts = _options(kind)
    return layer_cls(input_size, hidden_size, num_layers, rng=np.random.default_rng(seed), **opts, **kwargs)


def make_cell(kind: str, input_size: int, hidden_size: int, *, seed: int = 0, **kwargs):
    """A cell of the given kind with weights drawn from ``default_rng(seed)``."""
    _, cell_cls, opts = _options(kind)
    return cell_cls(input_size, hidden_size, rng=np.random.default_rng(seed), **opts, **kwargs)


def cell_like(layer, layer_index: int = 0, reverse: bool = False):
    """A cell holding the weights of one layer and direction of ``layer`` (copies, not views)."""
    kind = kind_of_layer(layer)
    sfx = f"_l{layer_index}" + ("_reverse" if reverse else "")
    width = layer.params["weight_ih" + sfx].shape[1]
    cell = make_cell(kind, width, layer.hidden_size, bias=layer.bias, dtype=layer.dtype)
    for name in cell.params:
        cell.params[name] = layer.params[name + sfx].copy()
    return cell


def random_state(layer, batch_size: int | None, rng: np.random.Generator, scale: float = 0.5):
    """A random initial state of the layer's structure: (L*D, N, H) (or (L*D, H) for None); LSTM a pair."""
    LD = layer.num_layers * layer.num_directions
    shape = (LD, layer.hidden_size) if batch_size is None else (LD, batch_size, layer.hidden_size)
    make = lambda: (scale * rng.standard_normal(shape)).astype(layer.dtype)
    return (make(), make()) if layer.is_lstm else make()


def take_rows(state, rows):
    """Select batch rows (axis 1) of a layer state or an LSTM (h, c) pair."""
    if isinstance(state, tuple):
        return tuple(s[:, rows] for s in state)
    return state[:, rows]


def state_parts(state) -> tuple:
    """A state as a tuple of arrays: ``(h,)`` or ``(h, c)``."""
    return tuple(state) if isinstance(state, tuple) else (state,)


# ---------------------------------------------------------------------------- strategies

seeds = st.integers(min_value=0, max_value=2**32 - 1)
kinds = st.sampled_from(KINDS)
small = st.integers(min_value=1, max_value=4)


@st.composite
def sizes(draw, max_T: int = 6, max_N: int = 3, max_I: int = 4, max_H: int = 4):
    """A dict of small sizes T, N, I, H (T >= 1)."""
    return {
        "T": draw(st.integers(1, max_T)),
        "N": draw(st.integers(1, max_N)),
        "I": draw(st.integers(1, max_I)),
        "H": draw(st.integers(1, max_H)),
    }


@st.composite
def chunkings(draw, T: int):
    """Positive chunk lengths that sum to ``T``."""
    cuts = sorted(draw(st.sets(st.integers(1, T - 1), max_size=min(4, T - 1)))) if T > 1 else []
    edges = [0, *cuts, T]
    return [b - a for a, b in itertools.pairwise(edges)]


def finite_floats(bound: float = 1e6):
    """Finite float64 values in [-bound, bound] (no NaN, no Inf, no subnormals)."""
    return st.floats(-bound, bound, allow_nan=False, allow_infinity=False, allow_subnormal=False)


gates01 = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
