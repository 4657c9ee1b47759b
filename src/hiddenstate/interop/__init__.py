"""Weights in and out: torch modules and state dicts, Keras 3 weights, safetensors files.

One module per format, all through the torch-named state dict of
:mod:`hiddenstate.interop.statedict`: :mod:`~hiddenstate.interop.pytorch` (:func:`from_torch`,
:func:`to_torch`), :mod:`~hiddenstate.interop.keras3` (:func:`from_keras_weights`,
:func:`to_keras_weights`), :mod:`~hiddenstate.interop.safetensors_io` (:func:`save_safetensors`,
:func:`load_safetensors`); :mod:`~hiddenstate.interop.onnx_export` (:func:`to_onnx`,
:func:`charrnn_to_onnx`) writes ONNX graphs of the standard RNN/GRU/LSTM operators. torch and onnx
are imported only by the functions that need them; Keras never.
"""

from hiddenstate.interop.keras3 import from_keras_weights, to_keras_weights
from hiddenstate.interop.onnx_export import charrnn_to_onnx, to_onnx
from hiddenstate.interop.pytorch import charrnn_from_torch, charrnn_to_torch, from_torch, to_torch
from hiddenstate.interop.safetensors_io import load_safetensors, save_safetensors

__all__ = [
    "charrnn_from_torch",
    "charrnn_to_onnx",
    "charrnn_to_torch",
    "from_keras_weights",
    "from_torch",
    "load_safetensors",
    "save_safetensors",
    "to_keras_weights",
    "to_onnx",
    "to_torch",
]
