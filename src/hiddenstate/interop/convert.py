"""Weights from and to PyTorch, safetensors and Keras 3, exactly; anything that does not fit raises.

Our layers keep PyTorch's parameter names and layouts, so torch is a renaming-free copy and
Keras is a transpose plus (for the GRU) a swap of two gate blocks:

=================  =============================  ========================  ==============================
                   hiddenstate                    torch.nn.RNN/GRU/LSTM     Keras 3 SimpleRNN/GRU/LSTM
=================  =============================  ========================  ==============================
input weights      ``weight_ih_l{k}``             same                      ``kernel`` (I, G*H) = W_ih.T
                   (G*H, I)
recurrent weights  ``weight_hh_l{k}``             same                      ``recurrent_kernel`` (H, G*H) = W_hh.T
                   (G*H, H)
biases             ``bias_ih_l{k}``,              same                      one ``bias`` (G*H,); GRU reset_after=True:
                   ``bias_hh_l{k}`` (G*H,)                                  (2, 3H) = [input bias; recurrent bias]
GRU gate order     r, z, n                        r, z, n                   z, r, h (first two blocks swapped)
GRU candidate      False: ``W_hn (r*h) + b_hn``   ``r * (W_hn h + b_hn)``   False: ``(r*h) @ U_h`` + input-side bias
                   True: ``r * (W_hn h + b_hn)``  (ours, reset_after=True)  (ours with b_hh = 0); True: torch's
GRU update         ``z*h + (1-z)*n``              same                      same (``z*h + (1-z)*hh``)
LSTM gate order    i, f, g, o                     i, f, g, o                i, f, c, o (same order)
second direction   ``..._reverse``                same                      ``Bidirectional``: forward weights,
                                                                            then backward
=================  =============================  ========================  ==============================

Where Keras has one bias (SimpleRNN, LSTM, GRU with ``reset_after=False``), importing maps it to
``bias_ih`` and sets ``bias_hh`` to zero (the sum is what both frameworks compute); exporting
writes ``bias_ih + bias_hh``. Importing and exporting again returns the Keras arrays bit for
bit. Only the default activations map (tanh and sigmoid gates; SimpleRNN tanh, relu or sigmoid).

torch is needed only by :func:`from_torch` given a module and by :func:`to_torch`, and is
imported there; safetensors files are read and written with ``safetensors.numpy``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

from hiddenstate.validation import boolean, float_dtype, shape_str
from hiddenstate.cells.rnn import NONLINEARITIES
from hiddenstate.layers import GRU, LSTM, RNN

__all__ = [
    "from_keras_weights",
    "from_torch",
    "load_safetensors",
    "save_safetensors",
    "to_keras_weights",
    "to_torch",
]

_CLASSES = {"rnn": RNN, "gru": GRU, "lstm": LSTM}
_GATES = {"rnn": 1, "gru": 3, "lstm": 4}
_BY_GATES = {1: "rnn", 3: "gru", 4: "lstm"}
_TITLE = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}
_A = {"rnn": "an RNN", "gru": "a GRU", "lstm": "an LSTM"}
_KERAS_TITLE = {"rnn": "SimpleRNN", "gru": "GRU", "lstm": "LSTM"}
_KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)(_reverse)?$")
_META_KEY = "hiddenstate"


# -- shared helpers ----------------------------------------------------------------------------
def _kind(name: str, kind) -> str:
    """Normalise a kind: "rnn"/"SimpleRNN", "gru", "lstm" (any case) or one of our layer classes."""
    if isinstance(kind, type) and kind in (RNN, GRU, LSTM):
        return kind.__name__.lower()
    if isinstance(kind, str):
        k = kind.lower().replace("_", "")
        k = "rnn" if k == "simplernn" else k
        if k in _CLASSES:
            return k
    raise ValueError(f"{name} must be one of 'rnn' (or 'SimpleRNN'), 'gru', 'lstm'; got {kind!r}.")


def _layer_kind(layer) -> str:
    for k, cls in _CLASSES.items():
        if isinstance(layer, cls):
            return k
    raise TypeError(f"layer must be a hiddenstate RNN, GRU or LSTM; got {type(layer).__name__}.")


def _to_numpy(name: str, value) -> np.ndarray:
    """A float ndarray from a numpy array, a torch tensor or a Keras variable (no copy for numpy)."""
    if not isinstance(value, np.ndarray):
        inner = getattr(value, "value", None)  # keras.Variable -> backend tensor
        if inner is not None and hasattr(inner, "detach"):
            value = inner
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
            t = value.detach().cpu()
            if str(t.dtype) not in ("torch.float32", "torch.float64"):
                t = t.double()  # float16 / bfloat16: exact upcast (numpy has no bfloat16)
            value = t.numpy()
    arr = np.asarray(value)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array; got dtype {arr.dtype}.")
    return arr


def _config(layer) -> dict:
    """The constructor options that shapes cannot tell (stored in safetensors metadata)."""
    kind = _layer_kind(layer)
    cfg = {"kind": kind, "batch_first": layer.batch_first, "dropout": layer.dropout}
    if kind == "rnn":
        cfg["nonlinearity"] = layer.nonlinearity
    if kind == "gru":
        cfg["reset_after"] = layer.reset_after
    return cfg


def _found(rows: int, H: int) -> str:
    """' (the 3*H rows of a GRU)' when ``rows`` is another kind's gate count, else ''."""
    if H and rows % H == 0 and rows // H in _BY_GATES:
        return f", the {rows // H}*H rows of {_A[_BY_GATES[rows // H]]}"
    return ""


def _layer_from_state(state: dict, source: str, *, kind, nonlinearity="tanh", batch_first=False,
                      reset_after=True, dropout=0.0, dtype=np.float64):
    """Infer sizes from torch-named arrays, build the layer and load it strictly."""
    for key, a in state.items():
        if key in ("h0", "c0"):
            continue
        if not _KEY.match(key):
            hint = " (an LSTM with proj_size > 0, which hiddenstate does not support)" if key.startswith(
                "weight_hr") else ""
            raise ValueError(f"{source} has an unexpected key {key!r} of shape {shape_str(a.shape)}{hint}; keys must "
                             f"be weight_ih_l<k>, weight_hh_l<k>, bias_ih_l<k>, bias_hh_l<k> (+ '_reverse'), h0, c0.")
    for key in ("weight_ih_l0", "weight_hh_l0"):
        if key not in state:
            raise ValueError(f"{source} must contain {key!r}; got keys {sorted(state)}.")
    w_hh = state["weight_hh_l0"]
    if w_hh.ndim != 2 or w_hh.shape[1] == 0 or w_hh.shape[0] % w_hh.shape[1] or \
            w_hh.shape[0] // w_hh.shape[1] not in _BY_GATES:
        raise ValueError(f"{source}['weight_hh_l0'] must have shape (G*H, H) with G = 1 (RNN), 3 (GRU) or 4 (LSTM); "
                         f"got {shape_str(w_hh.shape)}.")
    H = w_hh.shape[1]
    found = _BY_GATES[w_hh.shape[0] // H]
    if kind is None:
        kind = found
    elif kind != found:
        G = _GATES[kind]
        raise ValueError(f"{source}['weight_hh_l0'] has shape {shape_str(w_hh.shape)}{_found(w_hh.shape[0], H)}; "
                         f"kind={kind!r} needs shape ({G}*H={G * H}, {H}). Load it as kind={found!r}.")
    w_ih = state["weight_ih_l0"]
    if w_ih.ndim != 2:
        raise ValueError(f"{source}['weight_ih_l0'] must have shape (G*H, I); got {shape_str(w_ih.shape)}.")
    layers = [int(_KEY.match(k).group(2)) for k in state if _KEY.match(k)]
    options = {"bias": "bias_ih_l0" in state or "bias_hh_l0" in state,
               "bidirectional": any(k.endswith("_reverse") for k in state),
               "batch_first": batch_first, "dropout": dropout, "learn_h0": "h0" in state or "c0" in state,
               "dtype": dtype, "rng": np.random.default_rng(0)}
    if kind == "rnn":
        options["nonlinearity"] = nonlinearity
    if kind == "gru":
        options["reset_after"] = reset_after
    layer = _CLASSES[kind](w_ih.shape[1], H, max(layers) + 1, **options)
    _load_strict(layer, state, source)
    return layer


def _load_strict(layer, state: dict, source: str) -> None:
    """``layer.load_state_dict`` with messages that name the source, the key and both shapes."""
    missing = sorted(set(layer.params) - set(state))
    extra = sorted(set(state) - set(layer.params))
    if missing or extra:
        raise ValueError(f"{source} does not fit {layer!r}: missing keys {missing}, unexpected keys "
                         f"{[f'{k} {shape_str(state[k].shape)}' for k in extra]}. Nothing was loaded.")
    kind, H = _layer_kind(layer), layer.hidden_size
    for key, want in layer.params.items():
        got = state[key].shape
        if got != want.shape:
            what = _found(got[0], H) if key.startswith("weight_hh") and len(got) == 2 and got[1] == H else ""
            raise ValueError(f"{source}[{key!r}] must have shape {shape_str(want.shape)} to load into "
                             f"{_TITLE[kind]}(input_size={layer.input_size}, hidden_size={H}, ...); got "
                             f"{shape_str(got)}{what}. Nothing was loaded.")
    layer.load_state_dict(state)


# -- torch ---------------------------------------------------------------------------------------
def _import_torch():
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
    kind : {"rnn", "gru", "lstm"}, optional
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
    kind = None if kind is None else _kind("kind", kind)
    dtype = float_dtype("dtype", dtype)
    if nonlinearity is not None and nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be one of {NONLINEARITIES} or None; got {nonlinearity!r}.")
    if batch_first is not None:
        batch_first = boolean("batch_first", batch_first)
    if isinstance(source, Mapping):
        state = {str(k): _to_numpy(f"state_dict[{k!r}]", v) for k, v in source.items()}
        return _layer_from_state(state, "state_dict", kind=kind, nonlinearity=nonlinearity or "tanh",
                                 batch_first=bool(batch_first), dtype=dtype)
    torch = _import_torch()
    for found, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU), ("rnn", torch.nn.RNN)):
        if isinstance(source, cls):
            break
    else:
        raise TypeError(f"source must be a torch.nn.RNN, GRU or LSTM, or a state dict; got {type(source).__name__}.")
    if kind is not None and kind != found:
        raise ValueError(f"source is a torch.nn.{_TITLE[found]}; kind={kind!r} expects a torch.nn.{_TITLE[kind]}.")
    if found == "lstm" and getattr(source, "proj_size", 0):
        raise ValueError(f"source must be an LSTM without projections; got proj_size={source.proj_size} "
                         f"(weight_hr_l0), which hiddenstate does not support.")
    module_nl = getattr(source, "nonlinearity", "tanh")
    if found == "rnn" and nonlinearity is not None and nonlinearity != module_nl:
        raise ValueError(f"nonlinearity must match the module's; got {nonlinearity!r}, module has {module_nl!r}.")
    state = {k: _to_numpy(f"state_dict[{k!r}]", v) for k, v in source.state_dict().items()}
    return _layer_from_state(state, f"torch.nn.{_TITLE[found]}.state_dict()", kind=found, nonlinearity=module_nl,
                             batch_first=source.batch_first if batch_first is None else batch_first,
                             dropout=float(source.dropout), dtype=dtype)


def to_torch(layer, *, strict=True):
    """The equivalent ``torch.nn.RNN/GRU/LSTM``, same options, dtype and (copied) weights.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
    strict : bool, default True
        A learned initial state (``learn_h0=True``) has no place in a torch module: raise, or,
        with ``strict=False``, leave it out (pass ``layer.initial_state(N, "learned")`` as the
        module's ``h0`` yourself).

    Returns
    -------
    torch.nn.RNN, torch.nn.GRU or torch.nn.LSTM

    Raises
    ------
    ValueError
        A GRU with ``reset_after=False`` (torch only has the ``reset_after=True`` candidate;
        use Keras ``reset_after=False`` or rebuild the layer), an RNN with
        ``nonlinearity="sigmoid"``, or a learned ``h0`` with ``strict=True``.
    """
    kind = _layer_kind(layer)
    strict = boolean("strict", strict)
    if kind == "gru" and not layer.reset_after:
        raise ValueError("layer must be a GRU with reset_after=True to become a torch.nn.GRU; got reset_after=False "
                         "(torch computes r * (W_hn h + b_hn), not W_hn (r * h)). Use to_keras_weights for Keras "
                         "GRU(reset_after=False), or train a GRU(..., reset_after=True).")
    if kind == "rnn" and layer.nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"layer must have nonlinearity 'tanh' or 'relu' to become a torch.nn.RNN; got "
                         f"{layer.nonlinearity!r}. Use to_keras_weights (SimpleRNN(activation='sigmoid')).")
    if layer.learn_h0 and strict:
        raise ValueError("layer has a learned initial state (params['h0']) that a torch module cannot hold; got "
                         "strict=True. Call to_torch(layer, strict=False) and pass "
                         "layer.initial_state(N, 'learned') as the module's h0.")
    torch = _import_torch()
    options = {"num_layers": layer.num_layers, "bias": layer.bias, "batch_first": layer.batch_first,
               "dropout": layer.dropout, "bidirectional": layer.bidirectional,
               "dtype": torch.float64 if layer.dtype == np.float64 else torch.float32}
    if kind == "rnn":
        options["nonlinearity"] = layer.nonlinearity
    module = getattr(torch.nn, _TITLE[kind])(layer.input_size, layer.hidden_size, **options)
    state = {k: torch.tensor(v) for k, v in layer.params.items() if k not in ("h0", "c0")}  # copies
    module.load_state_dict(state, strict=True)
    return module


# -- safetensors ---------------------------------------------------------------------------------
def save_safetensors(layer, path, *, metadata=None) -> Path:
    """Write the layer's parameters under torch names to a safetensors file, atomically.

    ``safetensors.torch.load_file(path)`` gives a state dict that ``torch.nn.GRU.load_state_dict``
    accepts (for a layer without a learned ``h0``). The options that shapes cannot tell
    (kind, ``reset_after``, ``nonlinearity``, ``batch_first``, ``dropout``) go into the file's
    metadata under the key ``"hiddenstate"`` (JSON), so :func:`load_safetensors` rebuilds the
    same layer.

    The bytes are written to a fresh temporary file next to ``path``, flushed and fsynced,
    then moved over ``path`` with ``os.replace``: a reader sees the old file or the new one,
    never a partial one.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
    path : str or os.PathLike
    metadata : mapping str -> str, optional
        Extra metadata to store (the keys ``"format"`` and ``"hiddenstate"`` are reserved).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    _layer_kind(layer)
    path = Path(path)
    meta = {"format": "pt", _META_KEY: json.dumps({**_config(layer), "version": 1}, sort_keys=True)}
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in metadata.items()):
            raise TypeError(f"metadata must be a mapping str -> str; got {metadata!r}.")
        reserved = sorted(set(metadata) & set(meta))
        if reserved:
            raise ValueError(f"metadata must not use the reserved keys {reserved}; got {sorted(metadata)}.")
        meta.update(metadata)
    data = safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in layer.params.items()}, metadata=meta)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable (POSIX); not possible everywhere
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover
        fd = None
    if fd is not None:
        try:
            os.fsync(fd)
        except OSError:  # pragma: no cover
            pass
        finally:
            os.close(fd)
    return path


def load_safetensors(path, layer=None, *, dtype=np.float64):
    """Read a torch-named safetensors file into ``layer``, or build the layer it describes.

    Parameters
    ----------
    path : str or os.PathLike
        Written by :func:`save_safetensors`, or by ``safetensors.torch.save_file(module.state_dict())``
        for a ``torch.nn.RNN/GRU/LSTM``.
    layer : RNN, GRU or LSTM, optional
        Load into it (every key and shape must match; on any mismatch nothing is loaded).
        None: build the layer from the file (sizes from the shapes, options from the
        ``"hiddenstate"`` metadata; a file written by torch gives ``reset_after=True``,
        ``nonlinearity="tanh"``, ``batch_first=False``).
    dtype : {float64, float32}, default float64
        dtype of a layer built from the file (a given layer keeps its own).

    Returns
    -------
    RNN, GRU or LSTM
        ``layer``, or the new layer.

    Raises
    ------
    ValueError
        Not a safetensors file; a file of another kind (a GRU file loaded into an LSTM), or of
        another ``reset_after``/``nonlinearity`` per its metadata; a missing, unexpected or
        misshapen key (named with both shapes).
    """
    path = Path(path)
    dtype = float_dtype("dtype", dtype)
    try:
        with safetensors.safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}
    except FileNotFoundError:
        raise
    except Exception as error:  # safetensors raises its own SafetensorError
        if not path.exists():
            raise FileNotFoundError(f"path must name an existing file; got '{path}'.") from None
        raise ValueError(f"'{path}' must be a valid safetensors file of float arrays; got: {error}.") from None
    for k, v in state.items():
        if v.dtype.kind != "f":
            raise ValueError(f"'{path}'[{k!r}] must be a float array; got dtype {v.dtype}.")
    cfg = {}
    if _META_KEY in meta:
        try:
            cfg = json.loads(meta[_META_KEY])
            cfg["kind"] = _kind("metadata kind", cfg["kind"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"'{path}' must hold valid 'hiddenstate' metadata; got {meta[_META_KEY]!r} "
                             f"({error}).") from None
    source = f"'{path}'"
    if layer is None:
        return _layer_from_state(state, source, kind=cfg.get("kind"), nonlinearity=cfg.get("nonlinearity", "tanh"),
                                 batch_first=bool(cfg.get("batch_first", False)),
                                 reset_after=bool(cfg.get("reset_after", True)),
                                 dropout=float(cfg.get("dropout", 0.0)), dtype=dtype)
    kind = _layer_kind(layer)
    w = state.get("weight_hh_l0")
    if w is not None and w.ndim == 2 and w.shape[1] and w.shape[0] % w.shape[1] == 0:
        found = _BY_GATES.get(w.shape[0] // w.shape[1])
        if found is not None and found != kind:
            raise ValueError(f"{source} holds {_A[found]} (weight_hh_l0 has shape {shape_str(w.shape)} = "
                             f"({_GATES[found]}*H, H)); it cannot load into {_A[kind]}, whose "
                             f"weight_hh_l0 has shape {shape_str(layer.params['weight_hh_l0'].shape)}.")
    if cfg.get("kind", kind) != kind:
        raise ValueError(f"{source} holds {_A[cfg['kind']]} (metadata); it cannot load into {_A[kind]}.")
    for option in ("reset_after", "nonlinearity"):
        if option in cfg and hasattr(layer, option) and cfg[option] != getattr(layer, option):
            raise ValueError(f"{source} was saved with {option}={cfg[option]!r}; the layer has "
                             f"{option}={getattr(layer, option)!r}. The weights would compute another function; "
                             f"build the layer with {option}={cfg[option]!r} or use load_safetensors(path).")
    _load_strict(layer, state, source)
    return layer


# -- Keras 3 -------------------------------------------------------------------------------------
def _swap_zr(a: np.ndarray, H: int) -> np.ndarray:
    """Swap the first two H-blocks of the last axis: Keras z, r, h <-> ours r, z, n (an involution)."""
    return np.concatenate([a[..., H:2 * H], a[..., :H], a[..., 2 * H:]], axis=-1)


def from_keras_weights(kind, weights, *, reset_after=None, bidirectional=False, nonlinearity="tanh",
                       batch_first=False, dtype=np.float64):
    """Build our layer from the weights of a Keras 3 ``SimpleRNN``, ``GRU`` or ``LSTM``.

    Parameters
    ----------
    kind : {"rnn" (or "SimpleRNN"), "gru", "lstm"}
    weights : list of arrays, or list of such lists
        What ``keras_layer.get_weights()`` returns: ``[kernel (I, G*H), recurrent_kernel (H, G*H),
        bias]`` (no bias when ``use_bias=False``). With ``bidirectional=True``, what a
        ``keras.layers.Bidirectional`` wrapper returns: the forward layer's arrays, then the
        backward layer's. A list of such lists is a stack (one entry per Keras layer, each
        reading the previous one's full sequence; layer k > 0 has kernel (D*H, G*H)).
        Arrays may be NumPy arrays, torch tensors or Keras variables.
    reset_after : bool, optional
        GRU only. Default: from the bias shape ((3H,) -> False, (2, 3H) -> True). Required for
        a GRU without bias; if given, it must agree with the bias shape.
    bidirectional : bool, default False
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        SimpleRNN's ``activation`` (RNN only; weights cannot tell).
    batch_first : bool, default False
        Keras data is (N, T, I); set True to feed it unchanged.
    dtype : {float64, float32}, default float64

    Returns
    -------
    RNN, GRU or LSTM
        ``weight_ih = kernel.T``, ``weight_hh = recurrent_kernel.T`` (GRU: z and r blocks
        swapped), ``bias_ih`` = the Keras (input) bias, ``bias_hh`` = the Keras recurrent bias
        (GRU ``reset_after=True``) or zeros.

    Raises
    ------
    ValueError
        A wrong number of arrays, or a shape that does not fit ``kind`` (e.g. LSTM weights given
        as ``kind="gru"``): the message names the array and the shapes.
    """
    kind = _kind("kind", kind)
    bidirectional = boolean("bidirectional", bidirectional)
    batch_first = boolean("batch_first", batch_first)
    dtype = float_dtype("dtype", dtype)
    if reset_after is not None:
        reset_after = boolean("reset_after", reset_after)
        if kind != "gru":
            raise ValueError(f"reset_after must be None for kind={kind!r}; got {reset_after}.")
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be one of {NONLINEARITIES}; got {nonlinearity!r}.")
    if not isinstance(weights, (list, tuple)) or len(weights) == 0:
        raise TypeError(f"weights must be a non-empty list of arrays (keras_layer.get_weights()) or a list of such "
                        f"lists; got {type(weights).__name__}.")
    stacked = all(isinstance(w, (list, tuple)) for w in weights)
    if not stacked and any(isinstance(w, (list, tuple)) for w in weights):
        raise TypeError("weights must be a list of arrays or a list of lists of arrays, not a mix; got "
                        f"{[type(w).__name__ for w in weights]}.")
    groups = list(weights) if stacked else [weights]
    G, D, title = _GATES[kind], 2 if bidirectional else 1, _KERAS_TITLE[kind]
    has_bias = None
    H = None
    state = {}
    for k, group in enumerate(groups):
        where = f"weights[{k}]" if stacked else "weights"
        arrays = [_to_numpy(f"{where}[{j}]", a) for j, a in enumerate(group)]
        per = len(arrays) // D
        if len(arrays) % D or per not in (2, 3) or (has_bias is not None and per != 2 + has_bias):
            want = f"{D * 3} ({'forward then backward ' if D == 2 else ''}kernel, recurrent_kernel, bias)"
            if has_bias is False:
                want = f"{D * 2} (no bias, like weights[0])"
            raise ValueError(f"{where} must hold {want} arrays for a Keras {title}"
                             f"{' wrapped in Bidirectional' if D == 2 else ''}; got {len(arrays)} of shapes "
                             f"{[shape_str(a.shape) for a in arrays]}.")
        has_bias = per == 3
        for d in range(D):
            kernel, recurrent = arrays[d * per], arrays[d * per + 1]
            kname, rname = f"{where}[{d * per}] (kernel)", f"{where}[{d * per + 1}] (recurrent_kernel)"
            if recurrent.ndim != 2 or recurrent.shape[0] == 0 or (H is not None and recurrent.shape[0] != H):
                want = "(H, G*H)" if H is None else f"(H={H}, {G}*H={G * H})"
                raise ValueError(f"{rname} must have shape {want}; got {shape_str(recurrent.shape)}.")
            H = recurrent.shape[0]
            if recurrent.shape[1] != G * H:
                what = _found(recurrent.shape[1], H).replace("rows", "columns")
                raise ValueError(f"{rname} must have shape (H, {G}*H) = ({H}, {G * H}) for a Keras {title}; got "
                                 f"{shape_str(recurrent.shape)}{what}.")
            width = None if k == 0 else D * H
            if kernel.ndim != 2 or kernel.shape[1] != G * H or (width is not None and kernel.shape[0] != width):
                legend = f"(I, {G}*H={G * H})" if width is None else f"(D*H={width}, {G}*H={G * H})"
                raise ValueError(f"{kname} must have shape {legend}; got {shape_str(kernel.shape)}.")
            sfx = f"_l{k}" + ("_reverse" if d else "")
            if kind == "gru":
                kernel, recurrent = _swap_zr(kernel, H), _swap_zr(recurrent, H)
            state["weight_ih" + sfx] = kernel.T
            state["weight_hh" + sfx] = recurrent.T
            if not has_bias:
                continue
            bias, bname = arrays[d * per + 2], f"{where}[{d * per + 2}] (bias)"
            if kind == "gru":
                after = {(G * H,): False, (2, G * H): True}.get(bias.shape)
                if after is None:
                    raise ValueError(f"{bname} must have shape ({G * H},) (reset_after=False) or (2, {G * H}) "
                                     f"(reset_after=True) for a Keras GRU with H={H}; got {shape_str(bias.shape)}.")
                if reset_after is not None and after != reset_after:
                    raise ValueError(f"{bname} has shape {shape_str(bias.shape)}, the bias of a reset_after={after} "
                                     f"GRU; got reset_after={reset_after}. Drop the argument or fix the weights.")
                reset_after = after
                bias = _swap_zr(bias, H)
                state["bias_ih" + sfx] = bias[0] if after else bias
                state["bias_hh" + sfx] = bias[1] if after else np.zeros_like(bias)
            else:
                if bias.shape != (G * H,):
                    raise ValueError(f"{bname} must have shape ({G}*H={G * H},) for a Keras {title}; got "
                                     f"{shape_str(bias.shape)}.")
                state["bias_ih" + sfx] = bias
                state["bias_hh" + sfx] = np.zeros_like(bias)
    options = {"bias": has_bias, "bidirectional": bidirectional, "batch_first": batch_first, "dtype": dtype,
               "rng": np.random.default_rng(0)}
    if kind == "gru":
        if reset_after is None:
            raise ValueError("reset_after must be given for a Keras GRU without bias (use_bias=False); got None. "
                             "Keras's default is reset_after=True.")
        options["reset_after"] = reset_after
    if kind == "rnn":
        options["nonlinearity"] = nonlinearity
    first = state["weight_ih_l0"]
    layer = _CLASSES[kind](first.shape[1], H, len(groups), **options)
    _load_strict(layer, state, "Keras weights")
    return layer


def to_keras_weights(layer, *, strict=True):
    """The Keras 3 weights of ``layer``, ready for ``keras_layer.set_weights``.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        A GRU maps to ``keras.layers.GRU(H, reset_after=layer.reset_after)``; an RNN to
        ``keras.layers.SimpleRNN(H, activation=layer.nonlinearity)``; bidirectional layers to
        ``keras.layers.Bidirectional`` (merge_mode "concat").
    strict : bool, default True
        A learned initial state has no place among Keras weights: raise, or leave it out with
        ``strict=False`` (pass it as ``initial_state`` yourself).

    Returns
    -------
    list of ndarray (``num_layers == 1``), or a list of such lists (one per layer)
        ``[kernel (I, G*H), recurrent_kernel (H, G*H), bias]`` per direction (forward first);
        no bias if ``layer.bias`` is False. The single Keras bias is ``bias_ih + bias_hh``; a
        GRU with ``reset_after=True`` gets both, stacked as (2, 3H).

    Raises
    ------
    ValueError
        A learned ``h0`` with ``strict=True``.
    """
    kind = _layer_kind(layer)
    strict = boolean("strict", strict)
    if layer.learn_h0 and strict:
        raise ValueError("layer has a learned initial state (params['h0']) that Keras weights cannot hold; got "
                         "strict=True. Call to_keras_weights(layer, strict=False) and pass "
                         "layer.initial_state(N, 'learned') as the Keras initial_state.")
    H, p = layer.hidden_size, layer.params
    out = []
    for k in range(layer.num_layers):
        group = []
        for d in range(layer.num_directions):
            sfx = f"_l{k}" + ("_reverse" if d else "")
            kernel, recurrent = p["weight_ih" + sfx].T, p["weight_hh" + sfx].T  # (I, G*H), (H, G*H)
            bias = None
            if layer.bias:
                b_ih, b_hh = p["bias_ih" + sfx], p["bias_hh" + sfx]
                bias = np.stack([b_ih, b_hh]) if kind == "gru" and layer.reset_after else b_ih + b_hh
            if kind == "gru":
                kernel, recurrent = _swap_zr(kernel, H), _swap_zr(recurrent, H)
                bias = None if bias is None else _swap_zr(bias, H)
            group += [np.ascontiguousarray(kernel), np.ascontiguousarray(recurrent)]
            if bias is not None:
                group.append(np.array(bias))
        out.append(group)
    return out[0] if layer.num_layers == 1 else out

