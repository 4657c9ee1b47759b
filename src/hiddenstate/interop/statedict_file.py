"""A layer from a safetensors file of a torch state dict, saying what was inferred and what was assumed.

``safetensors.torch.save_file(module.state_dict(), "model.safetensors")`` stores a
``torch.nn.RNN/GRU/LSTM``'s weights under torch's names (``weight_ih_l0``,
``weight_hh_l0_reverse``, ...), or a whole model's with a prefix (``encoder.lstm.weight_ih_l0``).
:func:`load_state_dict_file` finds the recurrent keys, infers the kind (from the rows of
``weight_hh_l0``), sizes, layers, directions and bias from the names and shapes, and lists, one
line each, what it inferred and what the shapes cannot tell (a tanh or relu RNN, a GRU's
candidate form), with the value it took. Pickles (``torch.save``'s ``.pt``/``.pth``) are refused
unread: unpickling a file can run any code in it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hiddenstate.classic.cells import KINDS
from hiddenstate.core.files import regular_file
from hiddenstate.core.validation import shape_str
from hiddenstate.interop.kinds import kind_from_weight_hh, kind_name
from hiddenstate.interop.safetensors_header import read_header, read_tensors
from hiddenstate.interop.statedict import layer_from_state, load_strict

__all__ = ["PICKLE_HINT", "StateDictFile", "load_state_dict_file", "refuse_pickle"]

#: How to turn a pickled torch checkpoint into a file hiddenstate reads.
PICKLE_HINT = 'safetensors.torch.save_file(model.state_dict(), "model.safetensors")'
_PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt", ".tar", ".joblib")
_KEY = re.compile(r"^(.*?)(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)(_reverse)?$")
_MAX_LISTED = 4


def refuse_pickle(path) -> None:
    """Raise if ``path`` is (by its suffix or first bytes) a pickle or a ``torch.save`` archive.

    Parameters
    ----------
    path : str or os.PathLike
        The file to check; at most its first 4 bytes are read, never unpickled.

    Raises
    ------
    ValueError
        ``.pt``, ``.pth``, ``.pkl``, ``.pickle``, ``.bin``, ``.ckpt``, ``.tar``, ``.joblib``, or
        content that starts like a pickle (protocol 2-5) or a zip archive (``torch.save``);
        the message says how to save a safetensors file instead.
    """
    p = Path(path)
    head = b""
    if p.is_file():
        with open(p, "rb") as f:
            head = f.read(4)
    pickled = head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
    if p.suffix.lower() in _PICKLE_SUFFIXES or pickled or head == b"PK\x03\x04":
        raise ValueError(f"'{p}' is a pickled file (torch.save); hiddenstate never unpickles (loading a pickle can "
                         f"run any code in it). Save the state dict as safetensors instead: {PICKLE_HINT}")


@dataclass
class StateDictFile:
    """What :func:`load_state_dict_file` built and how.

    Attributes
    ----------
    layer : RNN, GRU, LSTM, MinGRU or MinLSTM
        The layer, weights loaded (float64).
    inferred : list of str
        One line per property read off the names and shapes (``"hidden_size 16 (weight_hh_l0 (48, 16))"``).
    assumed : list of str
        One line per property the shapes cannot tell, with the value taken and the flag that changes it.
    ignored : list of str
        Keys of the file that are not the layer's (another part of a whole model).
    """

    layer: object
    inferred: list = field(default_factory=list)
    assumed: list = field(default_factory=list)
    ignored: list = field(default_factory=list)


def _shapes(header, names) -> dict:
    """Placeholders of the tensors' dtypes and shapes that hold no memory: the checks of names and shapes run on them."""
    return {name: np.broadcast_to(np.zeros((), dtype=header.tensors[name].numpy_dtype), header.tensors[name].shape)
            for name in names}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def load_state_dict_file(path, *, kind=None, nonlinearity=None, reset_after=None, prefix=None) -> StateDictFile:
    """Build the layer a safetensors file of a torch state dict holds, and say how it was inferred.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.safetensors`` file (``safetensors.torch.save_file(module.state_dict(), path)``, or
        :func:`hiddenstate.interop.save_safetensors`, whose metadata gives the options).
    kind : {"rnn", "gru", "lstm", "mingru", "minlstm"}, optional
        Default: from the rows of ``weight_hh_l0`` (G*H, H), G = 1, 3, 4. Required for a file
        without ``weight_hh`` (minGRU, minLSTM).
    nonlinearity : {"tanh", "relu", "sigmoid"}, optional
        RNN only; shapes cannot tell (default: the metadata's, else "tanh", torch's default).
    reset_after : bool, optional
        GRU only; shapes cannot tell (default: the metadata's, else True, ``torch.nn.GRU``'s
        candidate; False is the Cho et al. 2014 form).
    prefix : str, optional
        The part of the names before ``weight_ih_l0`` (``"encoder.lstm."``). Default: the one
        prefix the file's recurrent keys share; other keys are ignored (and listed).

    Returns
    -------
    StateDictFile

    Raises
    ------
    ValueError
        A pickled file (:func:`refuse_pickle`); not a safetensors file of float arrays; no
        recurrent keys, or several modules' (choose with ``prefix``); shapes of no layer, or of
        another kind than ``kind``; an option given for a kind that does not have it.
    FileNotFoundError
        No file at ``path``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__} {path!r}.")
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise FileNotFoundError(f"'{p}' does not exist; give a .safetensors file of a torch state dict.")
    if p.is_dir():
        raise ValueError(f"'{p}' must be a .safetensors file; got a directory.")
    regular_file(p, name="path", hint="Give a .safetensors file of a torch state dict.")  # a FIFO would block
    refuse_pickle(p)
    kind = None if kind is None else kind_name("kind", kind, linear=True)
    header = read_header(p)  # names, dtypes, shapes: no tensor is read before they are checked
    meta = header.metadata
    try:
        saved = json.loads(meta["hiddenstate"]) if "hiddenstate" in meta else {}
    except ValueError:
        saved = {}
    saved = saved if isinstance(saved, dict) else {}
    raw = header.tensors  # name -> TensorEntry
    groups = {}
    for key in raw:
        m = _KEY.match(key)
        if m:
            groups.setdefault(m.group(1), []).append(key)
    if prefix is None:
        if not groups:
            shown = sorted(raw)[:_MAX_LISTED]
            raise ValueError(f"'{p}' must hold a torch recurrent state dict (weight_ih_l0, weight_hh_l0, ...); got "
                             f"keys {shown}{' ...' if len(raw) > _MAX_LISTED else ''}.")
        if len(groups) > 1:
            raise ValueError(f"'{p}' holds the weights of {len(groups)} recurrent modules (prefixes "
                             f"{sorted(groups)}); choose one with --prefix.")
        prefix = next(iter(groups))
    elif prefix not in groups:
        raise ValueError(f"--prefix must be one of {sorted(groups)} in '{p}'; got {prefix!r}.")
    used = [k for k in raw if k.startswith(prefix) and (_KEY.match(k[len(prefix):]) or k[len(prefix):] in ("h0", "c0"))]
    out = StateDictFile(layer=None)
    out.ignored = sorted(set(raw) - set(used))
    for key in used:
        if not raw[key].is_float:
            raise ValueError(f"'{p}'[{key!r}] must be a float16, float32 or float64 array; got dtype {raw[key].dtype}.")
    state = {k[len(prefix):]: v for k, v in _shapes(header, used).items()}  # shapes only, no memory
    if prefix:
        out.inferred.append(f"prefix {prefix!r} (the keys of one recurrent module; {len(out.ignored)} other "
                            "tensors ignored)")
    w_hh = state.get("weight_hh_l0")
    found = None if w_hh is None else kind_from_weight_hh(w_hh)
    saved_kind = saved.get("kind") if saved.get("kind") in KINDS else None
    kind_source = "--kind"
    if kind is None and found is None and saved_kind is not None:
        kind, kind_source = saved_kind, "the file's metadata"
    if kind is None and found is None:
        what = ("has no weight_hh_l0 (a minGRU or minLSTM file)" if w_hh is None
                else f"has weight_hh_l0 {shape_str(w_hh.shape)}, whose rows are no 1, 3 or 4 times its columns")
        raise ValueError(f"'{p}' {what}; give the kind with --kind.")
    real = kind or found
    for name, value in (("nonlinearity", nonlinearity), ("reset_after", reset_after)):
        if value is not None and name not in KINDS[real].options:
            raise ValueError(f"{_flag(name)} applies to {'an RNN' if name == 'nonlinearity' else 'a GRU'} only; "
                             f"the file holds a {real.upper()}.")
    if kind is None:
        G = KINDS[found].num_gates
        out.inferred.append(f"kind {found} (weight_hh_l0 {shape_str(w_hh.shape)}: {G}*H rows for H = {w_hh.shape[1]})")
    else:
        out.inferred.append(f"kind {kind} ({kind_source})")
    options = {}
    if real == "rnn":
        nl = nonlinearity or saved.get("nonlinearity")
        if nl is None:
            out.assumed.append("nonlinearity: shapes cannot tell tanh from relu; assumed tanh, torch's default "
                               "(--nonlinearity relu otherwise)")
        options["nonlinearity"] = nl or "tanh"
    if real == "gru":
        ra = reset_after if reset_after is not None else saved.get("reset_after")
        if ra is None:
            out.assumed.append("reset_after: shapes cannot tell the GRU's candidate form; assumed True, "
                               "torch.nn.GRU's r * (W_hn h + b_hn) (--no-reset-after for Cho et al. 2014)")
        options["reset_after"] = True if ra is None else bool(ra)
    extra = {o: saved[o] for o in KINDS[real].options if o in saved and o not in ("nonlinearity", "reset_after")}
    layer = layer_from_state(state, f"'{p}'", kind=kind, nonlinearity=options.get("nonlinearity", "tanh"),
                             reset_after=options.get("reset_after", True), dtype=np.float64,
                             options=extra if not KINDS[real].recurrent else None)
    # every name and shape fits: now read those tensors (only those), if they fit in memory
    tensors = read_tensors(header, used, hint="The file's recurrent weights are larger than this machine can hold.")
    load_strict(layer, {k[len(prefix):]: v for k, v in tensors.items()}, f"'{p}'")
    w_ih = state["weight_ih_l0"]
    out.inferred.append(f"input_size {layer.input_size}, hidden_size {layer.hidden_size} (weight_ih_l0 "
                        f"{shape_str(w_ih.shape)})")
    out.inferred.append(f"num_layers {layer.num_layers} (keys _l0 to _l{layer.num_layers - 1})")
    out.inferred.append(f"bidirectional {layer.bidirectional} ({'' if layer.bidirectional else 'no '}_reverse keys)")
    out.inferred.append(f"bias {layer.bias} ({'' if layer.bias else 'no '}bias_ih/bias_hh keys)")
    out.layer = layer
    return out
