"""hiddenstate: the hidden state of RNN, GRU and LSTM (and of minGRU, minLSTM) as a first-class object.

Create it (:func:`init_hidden`, :func:`initial_state`), update it (:mod:`hiddenstate.classic.textbook`,
the cells), carry it and train through it (:class:`RNN`, :class:`GRU`, :class:`LSTM` with exact
BPTT; :class:`MinGRU`, :class:`MinLSTM` with a parallel scan), check gradients (:mod:`hiddenstate.classic.gradcheck`) and look inside it
(:mod:`hiddenstate.probe`, :mod:`hiddenstate.report`). The recurrent blocks of modern language
models are here too, their state in the open (:class:`Mamba`, :class:`Mamba2`, :class:`GatedDeltaNet`,
:class:`KimiDeltaAttention`, :class:`RGLRUBlock`, :class:`LightningAttention`, :class:`ShortConv`,
:class:`MLSTMLayer`, :class:`RWKVTimeMix`), and :func:`analyze` measures any of these models with
the analysis of its kind. ``import hiddenstate`` loads NumPy only; the names that need scipy,
matplotlib or safetensors import them when first used.
"""

from hiddenstate.classic import gradcheck, textbook
from hiddenstate.classic.cells import GRUCell, LSTMCell, MinGRUCell, MinLSTMCell, RNNCell
from hiddenstate.classic.layers import GRU, LSTM, RNN, DirectionalState, MinGRU, MinLSTM, reverse_padded
from hiddenstate.classic.textbook import (
    candidate,
    elman_step,
    gru_step,
    hidden_state_update,
    lstm_step,
    reset_gate,
    update_gate,
)
from hiddenstate.core import functional, oldpaths, ragged
from hiddenstate.core.lazy import attach
from hiddenstate.core.ragged import last_valid, pad_sequences
from hiddenstate.probe.trace import trace
from hiddenstate.state import init_hidden, initial_state
from hiddenstate.version import __version__ as __version__

oldpaths.install()

__getattr__, __dir__ = attach(__name__, {
    "CharRNN": "hiddenstate.train.model",
    "GatedDeltaNet": "hiddenstate.kinds.delta.block",
    "KimiDeltaAttention": "hiddenstate.kinds.delta.block",
    "LightningAttention": "hiddenstate.kinds.lightning.block",
    "MLSTMLayer": "hiddenstate.kinds.mlstm.block",
    "Mamba": "hiddenstate.kinds.ssm.mamba",
    "Mamba2": "hiddenstate.kinds.ssm.mamba2",
    "Mamba2LM": "hiddenstate.kinds.ssm.lm",
    "MambaLM": "hiddenstate.kinds.ssm.lm",
    "MambaState": "hiddenstate.state",
    "RGLRUBlock": "hiddenstate.kinds.rglru.block",
    "RWKVTimeMix": "hiddenstate.kinds.rwkv.block",
    "ShortConv": "hiddenstate.kinds.shortconv.block",
    "EditRun": "hiddenstate.edit.result",
    "StateEdit": "hiddenstate.edit.ops",
    "intervene": "hiddenstate.edit.api:intervene",
    "Snapshot": "hiddenstate.keep.snapshot",
    "load_snapshot": "hiddenstate.keep.api:load_snapshot",
    "snapshot": "hiddenstate.keep.api:snapshot",
    "snapshot_bytes": "hiddenstate.keep.api:snapshot_bytes",
    "analyze": "hiddenstate.pipelines.analyze:analyze",
    "analyze_model": "hiddenstate.probe.analysis",
    "build_report": "hiddenstate.report.page",
    "find_fixed_points": "hiddenstate.probe.fixedpoints",
    "inspect_model": "hiddenstate.pipelines.inspection",
    "load_pretrained": "hiddenstate.train.pretrained",
    "initial_state_gradient": "hiddenstate.train.initial_state",
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
    "EditRun",
    "GRUCell",
    "GatedDeltaNet",
    "KimiDeltaAttention",
    "LSTMCell",
    "LightningAttention",
    "MLSTMLayer",
    "Mamba",
    "Mamba2",
    "Mamba2LM",
    "MambaLM",
    "MambaState",
    "MinGRU",
    "MinGRUCell",
    "MinLSTM",
    "MinLSTMCell",
    "RGLRUBlock",
    "RNNCell",
    "RWKVTimeMix",
    "ShortConv",
    "Snapshot",
    "StateEdit",
    "analyze",
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
    "initial_state_gradient",
    "inspect_model",
    "interop",
    "intervene",
    "last_valid",
    "load_pretrained",
    "load_snapshot",
    "lstm_step",
    "pad_sequences",
    "ragged",
    "reset_gate",
    "reverse_padded",
    "snapshot",
    "snapshot_bytes",
    "textbook",
    "trace",
    "update_gate",
]
