"""hiddenstate: the hidden state of RNN, GRU and LSTM as a first-class object.

Create it (:func:`init_hidden`, :func:`initial_state`), update it (:mod:`hiddenstate.seeds`,
the cells), carry it and train through it (:class:`RNN`, :class:`GRU`, :class:`LSTM` with exact
BPTT), and check gradients (:mod:`hiddenstate.gradcheck`).
"""

from . import functional, gradcheck, interop, ragged, seeds
from .analysis import analyze_model
from .cells import GRUCell, LSTMCell, RNNCell
from .layers import GRU, LSTM, RNN, DirectionalState, reverse_padded
from .model import CharRNN
from .seeds import (
    candidate,
    elman_step,
    gru_step,
    hidden_state_update,
    lstm_step,
    reset_gate,
    update_gate,
)
from .fixedpoints import find_fixed_points
from .ragged import last_valid, pad_sequences
from .report import build_report
from .state import init_hidden, initial_state
from .trace import trace

__version__ = "0.1.0"

__all__ = [
    "CharRNN",
    "DirectionalState",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "RNN",
    "RNNCell",
    "analyze_model",
    "build_report",
    "candidate",
    "elman_step",
    "find_fixed_points",
    "functional",
    "gradcheck",
    "gru_step",
    "hidden_state_update",
    "init_hidden",
    "initial_state",
    "interop",
    "last_valid",
    "lstm_step",
    "pad_sequences",
    "ragged",
    "reset_gate",
    "reverse_padded",
    "seeds",
    "trace",
    "update_gate",
]
