"""Weights in and out: torch modules and state dicts, Keras 3 weights, safetensors files.

One module per format, all through the torch-named state dict of
:mod:`hiddenstate.interop.statedict`: :mod:`~hiddenstate.interop.pytorch` (:func:`from_torch`,
:func:`to_torch`), :mod:`~hiddenstate.interop.keras3` (:func:`from_keras`, :func:`from_keras_weights`,
:func:`to_keras_weights`), :mod:`~hiddenstate.interop.safetensors_io` (:func:`save_safetensors`,
:func:`load_safetensors`); :mod:`~hiddenstate.interop.onnx_export` (:func:`to_onnx`,
:func:`charrnn_to_onnx`) writes ONNX graphs of the standard RNN/GRU/LSTM operators;
:mod:`~hiddenstate.interop.torch_export` (:func:`charrnn_to_exported_program`) a ``torch.export``
program; :mod:`~hiddenstate.interop.statedict_file` (:func:`load_state_dict_file`) reads a
safetensors file of a torch state dict, saying what it inferred;
:mod:`~hiddenstate.interop.transformers_io` (:func:`from_transformers`, :func:`to_transformers`)
converts Hugging Face Mamba models; :mod:`~hiddenstate.interop.families` registers the recurrent
families of transformers (one module each) and recomputes a model's recurrent layers from its own
run (:func:`~hiddenstate.interop.families.recompute_layers`); :mod:`~hiddenstate.interop.torch_rnns`
(:func:`find_rnns`, :func:`recompute_rnns`) does the same for the ``torch.nn.RNN/GRU/LSTM`` modules
and cells inside any torch model. torch, transformers and onnx are
imported only by the functions that need them; Keras never.
"""

from hiddenstate.interop.keras3 import from_keras, from_keras_weights, to_keras_weights
from hiddenstate.interop.onnx_export import charrnn_to_onnx, to_onnx
from hiddenstate.interop.pytorch import charrnn_from_torch, charrnn_to_torch, from_torch, to_torch
from hiddenstate.interop.safetensors_io import load_safetensors, save_safetensors
from hiddenstate.interop.statedict_file import load_state_dict_file
from hiddenstate.interop.torch_export import charrnn_to_exported_program
from hiddenstate.interop.torch_rnns import find_rnns, recompute_rnns
from hiddenstate.interop.transformers_io import from_transformers, to_transformers

__all__ = [
    "charrnn_from_torch",
    "charrnn_to_exported_program",
    "charrnn_to_onnx",
    "charrnn_to_torch",
    "find_rnns",
    "from_keras",
    "from_keras_weights",
    "from_torch",
    "from_transformers",
    "load_safetensors",
    "load_state_dict_file",
    "recompute_rnns",
    "save_safetensors",
    "to_keras_weights",
    "to_onnx",
    "to_torch",
    "to_transformers",
]
