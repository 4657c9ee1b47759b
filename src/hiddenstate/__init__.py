"""hiddenstate: the hidden state of RNN, GRU and LSTM (and of minGRU, minLSTM) as a first-class object.

Create it (:func:`init_hidden`, :func:`initial_state`), update it (:mod:`hiddenstate.textbook`,
the cells), carry it and train through it (:class:`RNN`, :class:`GRU`, :class:`LSTM` with exact
BPTT; :class:`MinGRU`, :class:`MinLSTM` with a parallel scan), check gradients (:mod:`hiddenstate.gradcheck`) and look inside it
(:mod:`hiddenstate.probe`, :mod:`hiddenstate.report`). ``import hiddenstate`` loads NumPy only;
the names that need scipy, matplotlib or safetensors import them when first used.
"""

from hiddenstate import functional, gradcheck, oldpaths, ragged, textbook
from hiddenstate.cells import GRUCell, LSTMCell, MinGRUCell, MinLSTMCell, RNNCell
from hiddenstate.layers import GRU, LSTM, RNN, DirectionalState, MinGRU, MinLSTM, reverse_padded
from hiddenstate.lazy import attach
from hiddenstate.probe.trace import trace
from hiddenstate.ragged import last_valid, pad_sequences
from hiddenstate.state import init_hidden, initial_state
from hiddenstate.textbook import (
    candidate,
    elman_step,
    gru_step,
    hidden_state_update,
    lstm_step,
    reset_gate,
    update_gate,
)
from hiddenstate.version import __version__ as __version__

oldpaths.install()

__getattr__, __dir__ = attach(__name__, {
    "CharRNN": "hiddenstate.train.model",
    "Mamba": "hiddenstate.mamba",
    "Mamba2": "hiddenstate.mamba2",
    "Mamba2LM": "hiddenstate.mamba_lm",
    "MambaLM": "hiddenstate.mamba_lm",
    "MambaState": "hiddenstate.state",
    "analyze_model": "hiddenstate.probe.analysis",
    "build_report": "hiddenstate.report.page",
    "find_fixed_points": "hiddenstate.probe.fixedpoints",
    "inspect_model": "hiddenstate.inspection",
    "load_pretrained": "hiddenstate.train.pretrained",
    "interop": "hiddenstate.interop",
    "probe": "hiddenstate.probe",
    "report": "hiddenstate.report",
    "train": "hiddenstate.train",
    "experiments": "hiddenstate.experiments",
}, globals())

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "CharRNN",
    "DirectionalState",
    "GRUCell",
    "LSTMCell",
    "Mamba",
    "Mamba2",
    "Mamba2LM",
    "MambaLM",
    "MambaState",
    "MinGRU",
    "MinGRUCell",
    "MinLSTM",
    "MinLSTMCell",
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
    "inspect_model",
    "interop",
    "last_valid",
    "load_pretrained",
    "lstm_step",
    "pad_sequences",
    "ragged",
    "reset_gate",
    "reverse_padded",
    "textbook",
    "trace",
    "update_gate",
]
