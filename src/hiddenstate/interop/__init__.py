"""Weights in and out: torch modules and state dicts, Keras 3 weights, safetensors files."""

from hiddenstate.interop.convert import (
    from_keras_weights,
    from_torch,
    load_safetensors,
    save_safetensors,
    to_keras_weights,
    to_torch,
)

__all__ = [
    "from_keras_weights",
    "from_torch",
    "load_safetensors",
    "save_safetensors",
    "to_keras_weights",
    "to_torch",
]
