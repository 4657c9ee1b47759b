"""One cell per file: Elman RNN, GRU and LSTM, each with its forward and exact backward kernels."""

from .gru import GRUCell
from .lstm import LSTMCell
from .rnn import RNNCell

__all__ = ["GRUCell", "LSTMCell", "RNNCell"]
