"""Weights in and out: torch modules and state dicts, Keras 3 weights, safetensors files.

One module per format, all through the torch-named state dict of
:mod:`hiddenstate.interop.statedict`: :mod:`~hiddenstate.interop.pytorch` (:func:`from_torch`,
:func:`to_torch`), :mod:`~hiddenstate.interop.keras3` (:func:`from_keras_weights`,
:func:`to_keras_weights`), :mod:`~hiddenstate.interop.safetensors_io` (:func:`save_safetensors`,
:func:`load_safetensors`). torch is imported only by the torch functions that need it; Keras never.
"""

from hiddenstate.interop.keras3 import from_keras_weights, to_keras_weights
from hiddenstate.interop.pytorch import from_torch, to_torch
from hiddenstate.interop.safetensors_io import load_safetensors, save_safetensors

__all__ = [
    "from_keras_weights",
    "from_torch",
    "load_safetensors",
    "save_safetensors",
    "to_keras_weights",
    "to_torch",
]
