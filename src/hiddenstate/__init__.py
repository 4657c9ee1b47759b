"""hiddenstate: the hidden state of RNN, GRU and LSTM as a first-class object.

Create it (:func:`init_hidden`, :func:`initial_state`), update it (:mod:`hiddenstate.seeds`,
the cells), carry it and train through it (:class:`RNN`, :class:`GRU`, :class:`LSTM` with exact
BPTT), and check gradients (:mod:`hiddenstate.gradcheck`).
"""

from . import functional, gradcheck, seeds
from .cells import GRUCell, LSTMCell, RNNCell
from .layers import GRU, LSTM, RNN, DirectionalState, reverse_padded
from .seeds import (
    candidate,
    elman_step,
    gru_step,
    hidden_state_update,
    lstm_step,
    reset_gate,
    update_gate,
)
from .state import init_hidden, initial_state

__version__ = "0.1.0"

__all__ = [
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "RNN",
    "RNNCell",
    "DirectionalState",
    "candidate",
    "elman_step",
    "functional",
    "gradcheck",
    "gru_step",
    "hidden_state_update",
    "init_hidden",
    "initial_state",
    "lstm_step",
    "reset_gate",
    "reverse_padded",
    "seeds",
    "update_gate",
]
