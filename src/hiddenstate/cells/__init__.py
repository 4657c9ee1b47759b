"""One cell per file: Elman RNN, GRU and LSTM, each with its forward and exact backward kernels."""

from hiddenstate.cells.gru import GRUCell
from hiddenstate.cells.lstm import LSTMCell
from hiddenstate.cells.rnn import RNNCell

__all__ = ["GRUCell", "LSTMCell", "RNNCell"]
