"""Layers from and to ``torch.nn.RNN/GRU/LSTM`` modules and their state dicts, exactly.

Our parameters have torch's names and layouts, so the conversion is a copy: no renaming, no
transpose, the same gate order (GRU r, z, n; LSTM i, f, g, o). What does not map raises: a GRU
with ``reset_after=False`` (torch computes only ``r * (W_hn h + b_hn)``), an RNN with
``nonlinearity="sigmoid"``, an LSTM with ``proj_size > 0``, a learned ``h0`` (unless
``strict=False``). torch is imported only inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hiddenstate.cells.rnn import NONLINEARITIES
from hiddenstate.interop.kinds import kind_name, layer_kind
from hiddenstate.interop.statedict import as_float_array, layer_from_state, refuse_learned_state
from hiddenstate.validation import boolean, float_dtype

__all__ = ["from_torch", "to_torch"]

#: The torch.nn class of each kind, by name (torch's own knowledge).
_MODULES = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}
_TORCH_NONLINEARITIES = ("tanh", "relu")


def _import_torch():
    """The ``torch`` module, or an ImportError that says this conversion needs it."""
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without torch
        raise ImportError("this conversion needs PyTorch (pip install torch); hiddenstate itself does not.") from None
    return torch


def from_torch(source, *, kind=None, nonlinearity=None, batch_first=None, dtype=np.float64):
    """Build our layer from a ``torch.nn.RNN/GRU/LSTM`` or from its ``state_dict``.

    Parameters
    ----------
    source : torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM, or mapping str -> array
        A module (every option is read from it), or a torch-named state dict (torch tensors or
        NumPy arrays: ``weight_ih_l{k}`` (G*H, I_k), ``weight_hh_l{k}`` (G*H, H), optional
        ``bias_ih_l{k}``/``bias_hh_l{k}``, ``..._reverse``; our ``h0``/``c0`` are accepted too).
        From a state dict, sizes, ``num_layers``, ``bidirectional`` and ``bias`` are inferred
        from the keys and shapes, and the kind from the rows of ``weight_hh_l0`` (G = rows / H).
    kind : {"rnn", "gru", "lstm"}, a layer class or a cell kind, optional
        What you expect; a source of another kind raises instead of loading.
    nonlinearity : {"tanh", "relu", "sigmoid"}, optional
        RNN only; a state dict cannot tell (default "tanh"); for a module it must match.
    batch_first : bool, optional
        Default: the module's, or False for a state dict.
    dtype : {float64, float32}, default float64
        Parameters are cast to it (float32 -> float64 is exact).

    Returns
    -------
    RNN, GRU or LSTM
        A GRU is built with ``reset_after=True`` (torch's candidate). ``dropout`` is copied from
        a module. Weights are copies; nothing is shared with torch.

    Raises
    ------
    ValueError
        A kind other than ``kind``, a missing or unexpected key (e.g. an LSTM with
        ``proj_size > 0``), a shape that does not fit: the message names the key and the shapes.
        Nothing is loaded partially.
    TypeError
        ``source`` is neither a mapping nor a torch recurrent module.
    """
    kind = None if kind is None else kind_name("kind", kind)
    dtype = float_dtype("dtype", dtype)
    if nonlinearity is not None and nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be one of {NONLINEARITIES} or None; got {nonlinearity!r}.")
    if batch_first is not None:
        batch_first = boolean("batch_first", batch_first)
    if isinstance(source, Mapping):
        state = {str(k): as_float_array(f"state_dict[{k!r}]", v) for k, v in source.items()}
        return layer_from_state(state, "state_dict", kind=kind, nonlinearity=nonlinearity or "tanh",
                                batch_first=bool(batch_first), dtype=dtype)
    torch = _import_torch()
    found = next((k for k in ("lstm", "gru", "rnn") if isinstance(source, getattr(torch.nn, _MODULES[k]))), None)
    if found is None:
        raise TypeError(f"source must be a torch.nn.RNN, GRU or LSTM, or a state dict; got {type(source).__name__}.")
    if kind is not None and kind != found:
        raise ValueError(f"source is a torch.nn.{_MODULES[found]}; kind={kind!r} expects a torch.nn.{_MODULES[kind]}.")
    if found == "lstm" and getattr(source, "proj_size", 0):
        raise ValueError(f"source must be an LSTM without projections; got proj_size={source.proj_size} "
                         f"(weight_hr_l0), which hiddenstate does not support.")
    module_nl = getattr(source, "nonlinearity", "tanh")
    if found == "rnn" and nonlinearity is not None and nonlinearity != module_nl:
        raise ValueError(f"nonlinearity must match the module's; got {nonlinearity!r}, module has {module_nl!r}.")
    state = {k: as_float_array(f"state_dict[{k!r}]", v) for k, v in source.state_dict().items()}
    return layer_from_state(state, f"torch.nn.{_MODULES[found]}.state_dict()", kind=found, nonlinearity=module_nl,
                            batch_first=source.batch_first if batch_first is None else batch_first,
                            dropout=float(source.dropout), dtype=dtype)


def to_torch(layer, *, strict=True):
    """The equivalent ``torch.nn.RNN/GRU/LSTM``, same options, dtype and (copied) weights.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        A GRU must have ``reset_after=True``, an RNN ``nonlinearity`` "tanh" or "relu".
    strict : bool, default True
        A learned initial state (``learn_h0=True``) has no place in a torch module: raise, or,
        with ``strict=False``, leave it out (pass ``layer.initial_state(N, "learned")`` as the
        module's ``h0`` yourself).

    Returns
    -------
    torch.nn.RNN, torch.nn.GRU or torch.nn.LSTM
        Of ``layer``'s dtype (float64 or float32); its ``state_dict()`` equals ``layer.params`` (without
        ``h0``/``c0``).

    Raises
    ------
    ValueError
        A GRU with ``reset_after=False`` (torch only has the ``reset_after=True`` candidate;
        use Keras ``reset_after=False`` or rebuild the layer), an RNN with
        ``nonlinearity="sigmoid"``, or a learned ``h0`` with ``strict=True``.
    TypeError
        ``layer`` is not one of our sequence layers.
    """
    kind = layer_kind(layer)
    strict = boolean("strict", strict)
    if kind == "gru" and not layer.reset_after:
        raise ValueError("layer must be a GRU with reset_after=True to become a torch.nn.GRU; got reset_after=False "
                         "(torch computes r * (W_hn h + b_hn), not W_hn (r * h)). Use to_keras_weights for Keras "
                         "GRU(reset_after=False), or train a GRU(..., reset_after=True).")
    if kind == "rnn" and layer.nonlinearity not in _TORCH_NONLINEARITIES:
        raise ValueError(f"layer must have nonlinearity 'tanh' or 'relu' to become a torch.nn.RNN; got "
                         f"{layer.nonlinearity!r}. Use to_keras_weights (SimpleRNN(activation='sigmoid')).")
    refuse_learned_state(layer, strict, holder="a torch module", call="to_torch", use="the module's h0")
    torch = _import_torch()
    options = {"num_layers": layer.num_layers, "bias": layer.bias, "batch_first": layer.batch_first,
               "dropout": layer.dropout, "bidirectional": layer.bidirectional,
               "dtype": torch.float64 if layer.dtype == np.float64 else torch.float32}
    if kind == "rnn":
        options["nonlinearity"] = layer.nonlinearity
    module = getattr(torch.nn, _MODULES[kind])(layer.input_size, layer.hidden_size, **options)
    state = {k: torch.tensor(v) for k, v in layer.params.items() if k not in ("h0", "c0")}  # copies
    module.load_state_dict(state, strict=True)
    return module
