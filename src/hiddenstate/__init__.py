"""hiddenstate: the hidden state of RNN, GRU and LSTM as a first-class object."""
__version__ = "0.1.0"
