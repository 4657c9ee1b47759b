"""Layers from and to ``torch.nn.RNN/GRU/LSTM`` modules and their state dicts, exactly.

Our parameters have torch's names and layouts, so the conversion is a copy: no renaming, no
transpose, the same gate order (GRU r, z, n; LSTM i, f, g, o). A GRU with ``reset_after=False``
(torch computes only ``r * (W_hn h + b_hn)``) becomes our own ``ChoGRU`` torch module; whole
character models convert with :func:`charrnn_to_torch` / :func:`charrnn_from_torch`. What does not
map raises: an RNN with ``nonlinearity="sigmoid"``, an LSTM with ``proj_size > 0``, a learned
``h0`` (unless ``strict=False``). torch is imported only inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hiddenstate.classic.cells.rnn import NONLINEARITIES
from hiddenstate.core.validation import boolean, float_dtype
from hiddenstate.interop.kinds import convertible_kind, kind_name
from hiddenstate.interop.statedict import as_float_array, layer_from_state, refuse_learned_state
from hiddenstate.interop.torch_modules import cho_gru_class, torch_char_model_class
from hiddenstate.train.model import CharRNN

__all__ = ["charrnn_from_torch", "charrnn_to_torch", "from_torch", "to_torch"]

#: The torch.nn class of each kind, by name (torch's own knowledge).
_MODULES = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}
_TORCH_NONLINEARITIES = ("tanh", "relu")


def _import_torch():
    """The ``torch`` module, or an ImportError that says this conversion needs it."""
    from hiddenstate.core.extras import require

    return require("torch", "this conversion")


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
    if isinstance(source, cho_gru_class()):  # our torch module of the Cho-form GRU
        if kind not in (None, "gru"):
            raise ValueError(f"source is a ChoGRU; kind={kind!r} expects a torch.nn.{_MODULES[kind]}.")
        state = {k: as_float_array(f"state_dict[{k!r}]", v) for k, v in source.state_dict().items()}
        return layer_from_state(state, "ChoGRU.state_dict()", kind="gru", reset_after=False,
                                batch_first=source.batch_first if batch_first is None else batch_first,
                                dropout=float(source.dropout), dtype=dtype)
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
        An RNN must have ``nonlinearity`` "tanh" or "relu". A GRU with ``reset_after=False`` (the
        Cho et al. 2014 candidate, our default), which ``torch.nn.GRU`` cannot express, becomes a
        ``ChoGRU`` (:func:`hiddenstate.interop.torch_modules.cho_gru_class`): a torch module with
        ``torch.nn.GRU``'s names and call signature that computes that candidate.
    strict : bool, default True
        A learned initial state (``learn_h0=True``) has no place in a torch module: raise, or,
        with ``strict=False``, leave it out (pass ``layer.initial_state(N, "learned")`` as the
        module's ``h0`` yourself).

    Returns
    -------
    torch.nn.RNN, torch.nn.GRU, ChoGRU or torch.nn.LSTM
        Of ``layer``'s dtype (float64 or float32); its ``state_dict()`` equals ``layer.params`` (without
        ``h0``/``c0``).

    Raises
    ------
    ValueError
        An RNN with ``nonlinearity="sigmoid"``, or a learned ``h0`` with ``strict=True``.
    TypeError
        ``layer`` is not one of our sequence layers.
    """
    kind = convertible_kind(layer, "a torch module")
    strict = boolean("strict", strict)
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
    if kind == "gru" and not layer.reset_after:  # torch has no Cho-form GRU: our own module computes it
        module = cho_gru_class()(layer.input_size, layer.hidden_size, **options)
    else:
        module = getattr(torch.nn, _MODULES[kind])(layer.input_size, layer.hidden_size, **options)
    state = {k: torch.tensor(v) for k, v in layer.params.items() if k not in ("h0", "c0")}  # copies
    module.load_state_dict(state, strict=True)
    return module


def charrnn_to_torch(model):
    """A :class:`~hiddenstate.CharRNN` as a torch module that gives the same logits (copied weights).

    Parameters
    ----------
    model : hiddenstate.CharRNN

    Returns
    -------
    torch.nn.Module
        A ``TorchCharRNN`` (:func:`torch_char_model_class`) of the model's dtype whose
        ``state_dict()`` has exactly the keys and values of ``model.params``; its recurrent part is
        a ``torch.nn.GRU``/``LSTM``/``RNN`` (:func:`hiddenstate.interop.to_torch`).

    Raises
    ------
    TypeError
        ``model`` is not a CharRNN.
    ValueError
        Its recurrent layers have no torch equivalent (see :func:`hiddenstate.interop.to_torch`).
    """
    if not (hasattr(model, "rnn") and hasattr(model, "embed") and "decoder.weight" in getattr(model, "params", {})):
        raise TypeError(f"model must be a hiddenstate CharRNN; got {type(model).__name__}.")
    torch = _import_torch()
    module = torch_char_model_class()(model.vocab_size, to_torch(model.rnn), model.embedding_dim)
    module.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.params.items()}, strict=True)
    return module


def charrnn_from_torch(module, *, dtype=None):
    """A :class:`~hiddenstate.CharRNN` from a torch character model (ours, or any of the same shape).

    Parameters
    ----------
    module : torch.nn.Module
        With a recurrent ``rnn`` (``torch.nn.GRU``, ``LSTM`` or ``RNN``), a ``decoder``
        ``torch.nn.Linear`` (H -> V) and, for embedded input, an ``encoder``
        ``torch.nn.Embedding`` (V -> E); without one, the input is one-hot (``rnn.input_size``
        must then be V). :func:`charrnn_to_torch`'s modules qualify.
    dtype : {float64, float32}, optional
        Default: the module's.

    Returns
    -------
    hiddenstate.CharRNN
        Same logits as ``module`` (weights copied; nothing shared).

    Raises
    ------
    TypeError
        ``module`` lacks ``rnn`` or ``decoder``.
    ValueError
        The parts do not fit together (sizes), or the recurrent module does not convert.
    """
    rnn, decoder = getattr(module, "rnn", None), getattr(module, "decoder", None)
    if rnn is None or decoder is None:
        raise TypeError(f"module must have a recurrent `rnn` and a Linear `decoder`; got {type(module).__name__}.")
    encoder = getattr(module, "encoder", None)
    V = int(decoder.out_features)
    E = None if encoder is None else int(encoder.embedding_dim)
    if (E if E is not None else V) != rnn.input_size:
        raise ValueError(f"module.rnn.input_size must be {E if E is not None else V} (the "
                         f"{'embedding size' if E is not None else 'one-hot vocabulary size'}); got {rnn.input_size}.")
    layer = from_torch(rnn)
    dt = layer.dtype if dtype is None else np.dtype(dtype)
    cell = layer.kind.name
    if cell == "rnn" and layer.nonlinearity != "tanh":
        raise ValueError(f"module.rnn must be a tanh RNN for a CharRNN; got nonlinearity={layer.nonlinearity!r}.")
    model = CharRNN(V, layer.hidden_size, layer.num_layers, cell=cell, embedding_dim=E, dropout=layer.dropout,
                    dtype=dt, rng=np.random.default_rng(0))
    state = {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}
    model.load_state_dict(state)
    return model
