"""Layers in safetensors files under torch's names, written atomically, read back strictly.

A file is a plain torch state dict (``module.load_state_dict(safetensors.torch.load_file(path))``
works); the options that shapes cannot tell go into its metadata under ``"hiddenstate"`` (JSON),
so :func:`load_safetensors` rebuilds the same layer. Files are read and written with
``safetensors.numpy``; torch is not needed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import safetensors.numpy

from hiddenstate.classic.cells import KINDS
from hiddenstate.core.files import output_file, write_atomically
from hiddenstate.core.validation import float_dtype, shape_str
from hiddenstate.interop.kinds import kind_from_weight_hh, kind_name, layer_kind, with_article
from hiddenstate.interop.safetensors_header import read_header, read_tensors
from hiddenstate.interop.statedict import layer_from_state, load_strict

__all__ = ["load_safetensors", "save_safetensors"]

_META_KEY = "hiddenstate"


def _config(layer) -> dict:
    """The constructor options that shapes cannot tell: kind, batch_first, dropout and the kind's math options."""
    return {"kind": layer_kind(layer), "batch_first": layer.batch_first, "dropout": layer.dropout, **layer.options}


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
    layer : RNN, GRU, LSTM, MinGRU or MinLSTM
        The layer to save (its parameters, a learned ``h0``/``c0`` included).
    path : str or os.PathLike
        The file to write; an existing file is replaced.
    metadata : mapping str -> str, optional
        Extra metadata to store (the keys ``"format"`` and ``"hiddenstate"`` are reserved).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    TypeError
        ``layer`` is not one of our sequence layers, ``metadata`` is not a mapping str -> str, or
        ``path`` is not a str or os.PathLike.
    ValueError
        ``metadata`` uses a reserved key; ``path`` ends in a path separator or is a directory, a
        device or a FIFO (only a regular file is replaced).
    OSError
        The file cannot be written (no temporary file is left behind).
    """
    path = output_file(path, example="layer.safetensors")  # a directory, device or FIFO is never replaced
    meta = {"format": "pt", _META_KEY: json.dumps({**_config(layer), "version": 1}, sort_keys=True)}
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in metadata.items()):
            raise TypeError(f"metadata must be a mapping str -> str; got {metadata!r}.")
        reserved = sorted(set(metadata) & set(meta))
        if reserved:
            raise ValueError(f"metadata must not use the reserved keys {reserved}; got {sorted(metadata)}.")
        meta.update(metadata)
    write_atomically(path, safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in layer.params.items()},
                                                   metadata=meta))
    return path


def _read(path: Path):
    """The checked header of a safetensors file, placeholders of its tensors' shapes (no memory) and its options."""
    header = read_header(path)  # a FIFO, a duplicate name, bad offsets: refused before any tensor is read
    for k, e in header.tensors.items():
        if not e.is_float:
            raise ValueError(f"'{path}'[{k!r}] must be a float array; got dtype {e.dtype}.")
    shapes = {k: np.broadcast_to(np.zeros((), dtype=e.numpy_dtype), e.shape) for k, e in header.tensors.items()}
    meta = header.metadata
    cfg = {}
    if _META_KEY in meta:
        try:
            cfg = json.loads(meta[_META_KEY])
            cfg["kind"] = kind_name("metadata kind", cfg["kind"], linear=True)
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"'{path}' must hold valid 'hiddenstate' metadata; got {meta[_META_KEY]!r} "
                             f"({error}).") from None
        for option in ("batch_first", "reset_after"):  # bool("False") is True: a string would be read silently wrong
            if option in cfg and not isinstance(cfg[option], bool):
                raise ValueError(f"'{path}' metadata {option} must be a JSON bool (true or false); got "
                                 f"{cfg[option]!r:.60}. Save the layer again with save_safetensors.")
    return header, shapes, cfg


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
    TypeError
        ``path`` is not a str or os.PathLike.
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not a regular file (a FIFO or device is refused unopened); not a safetensors file, or one
        that names a tensor twice or whose tensors do not fit in memory (decided from its
        header, before a tensor is read); a file of another kind (a GRU file loaded into an LSTM), or of
        another ``reset_after``/``nonlinearity`` per its metadata; a missing, unexpected or
        misshapen key (named with both shapes).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__} {path!r}.")
    path = Path(path)
    dtype = float_dtype("dtype", dtype)
    header, state, cfg = _read(path)  # state: the shapes only, until they are checked
    source = f"'{path}'"
    if layer is None:
        extra = {} if "kind" not in cfg else {o: cfg[o] for o in KINDS[cfg["kind"]].options
                                               if o in cfg and o not in ("nonlinearity", "reset_after")}
        built = layer_from_state(state, source, kind=cfg.get("kind"), nonlinearity=cfg.get("nonlinearity", "tanh"),
                                 batch_first=bool(cfg.get("batch_first", False)),
                                 reset_after=bool(cfg.get("reset_after", True)),
                                 dropout=float(cfg.get("dropout", 0.0)), dtype=dtype, options=extra)
        load_strict(built, read_tensors(header, list(header.tensors)), source)
        return built
    kind = layer_kind(layer)
    w = state.get("weight_hh_l0")
    found = None if w is None else kind_from_weight_hh(w)
    if found is not None and found != kind:
        raise ValueError(f"{source} holds {with_article(found)} (weight_hh_l0 has shape {shape_str(w.shape)} = "
                         f"({KINDS[found].num_gates}*H, H)); it cannot load into {with_article(kind)}, whose "
                         f"weight_hh_l0 has shape {shape_str(layer.params['weight_hh_l0'].shape)}.")
    if cfg.get("kind", kind) != kind:
        raise ValueError(f"{source} holds {with_article(cfg['kind'])} (metadata); it cannot load into "
                         f"{with_article(kind)}.")
    for option, value in layer.options.items():
        if option in cfg and cfg[option] != value and option != "scan":  # scan: how, not what, is computed
            raise ValueError(f"{source} was saved with {option}={cfg[option]!r}; the layer has "
                             f"{option}={value!r}. The weights would compute another function; "
                             f"build the layer with {option}={cfg[option]!r} or use load_safetensors(path).")
    load_strict(layer, state, source, check_only=True)  # keys and shapes, before a tensor is read
    load_strict(layer, read_tensors(header, list(header.tensors)), source)
    return layer
