"""States out: every recorded step's states of chosen layers to a safetensors file, and back.

An analysis of recurrent layers (:func:`hiddenstate.analyze`, :func:`hiddenstate.inspect_model`
of a transformers model or a model directory) keeps each recorded layer's *record*: every step's
states, time-major. :func:`save_states` writes the ones asked for, :func:`load_states` reads
them back.

The file
--------
A safetensors file (readable by any safetensors library) with one tensor per layer and state,
named ``layer{L}.{state}`` (``layer3.recurrent``, ``layer0.ssm``, ``layer0.conv``), each of shape
(S, N, ...): S saved steps (the state *after* reading the token at that position), N sequences,
then the state's own axes as the kind's record holds them:

=====================  ===========================================  =============================
kind                   states                                       axes after (S, N)
=====================  ===========================================  =============================
mamba                  ``ssm``, ``conv``                            (D, Ds); (D, K-1)
mamba2                 ``ssm``, ``conv``                            (H, P, Ds); (C, K-1)
gated_delta, kda       ``recurrent``, ``conv``                      (Hv, Dk, Dv); (C, K-1)
rglru                  ``rg``, ``conv``                             (D,); (D, K-1)
lightning              ``kv``                                       (H, Dk, Dv)
shortconv              ``conv``                                     (D, K-1)
mlstm, rwkv            the kind's states                            see :mod:`hiddenstate.kinds`
=====================  ===========================================  =============================

``heads`` selects along the first of those axes (heads of a per-head or matrix state, channels
of a diagonal one or of a convolution window). The metadata (``__metadata__``, strings) says
what the tensors are: ``format`` (``hiddenstate.states/1``), ``model``, ``kind``, ``dtype`` and
``index``, a JSON object giving for every tensor its ``layer`` (the index in the model), ``state``,
``steps`` (the positions saved) and ``heads`` (None: all).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.files import names_directory, replaceable, write_atomically
from hiddenstate.core.validation import choice, nonnegative_int, positive_int

__all__ = ["FORMAT", "SavedStates", "load_states", "save_states", "states_target"]

#: The ``format`` entry of a states file's metadata.
FORMAT = "hiddenstate.states/1"

#: How a caller of :func:`save_states` allows a previous states file to be replaced (for the refusal's message).
_HOW = "overwrite=True (--save-states replaces it)"


@dataclass(frozen=True)
class SavedStates:
    """What :func:`load_states` read: the states by layer and name, and what they are.

    Attributes
    ----------
    states : dict of int to dict of str to ndarray
        ``states[layer][name]`` of shape (S, N, ...), the dtype it was saved in.
    steps : ndarray of int64, shape (S,)
        The positions saved (the state after reading the token at that position).
    heads : tuple of int or None
        The indices along the first state axis that were kept (None: all).
    model : str
        The model the states are of, as the analysis named it.
    kind : str
        The recurrence kind (``"gated_delta"``, ``"mamba2"``, ...).
    errors : dict of int to dict
        What :func:`hiddenstate.record_states` measured on the checked prefix, per layer:
        ``"output"``, the kernel's error against the model's own output; ``"state_size"``, the
        state's part of it (:func:`hiddenstate.record_states`); ``"state_part"``, the error with
        the skip term set to 0 in both where that was checked (else None). Read back from a
        file that :meth:`save` wrote (the header's ``proof``); empty for :func:`save_states`' files.
    checked_steps : int
        The steps of that prefix (0 for :func:`save_states`' files: every step was held to the model).
    dtype : str
        The states' dtype (``"float32"``).
    """

    states: dict = field(default_factory=dict)
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    heads: tuple | None = None
    model: str = ""
    kind: str = ""
    errors: dict = field(default_factory=dict)
    checked_steps: int = 0
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        """Bytes of all the states.

        Returns
        -------
        int
        """
        return sum(a.nbytes for by_name in self.states.values() for a in by_name.values())

    def save(self, path, *, overwrite: bool = False):
        """Write the states to a safetensors states file (the module docstring's layout).

        Parameters
        ----------
        path : str or os.PathLike
            A new file, or (with ``overwrite=True``) a previous states file.
        overwrite : bool, default False
            Replace a previous states file at ``path`` (any other file is never replaced).

        Returns
        -------
        pathlib.Path
            The file written.

        Raises
        ------
        TypeError, ValueError
            As :func:`states_target`.
        """
        tensors, index = {}, {}
        for layer, by_name in self.states.items():
            for name, array in by_name.items():
                key = f"layer{layer}.{name}"
                tensors[key] = np.ascontiguousarray(array)
                index[key] = {"layer": int(layer), "state": name, "steps": self.steps.tolist(),
                              "heads": None if self.heads is None else list(self.heads)}
        proof = {"errors": {str(k): v for k, v in self.errors.items()}, "checked_steps": self.checked_steps}
        return _write(tensors, index, self.model, self.kind, self.dtype, path, overwrite, how="overwrite=True",
                      extra={"proof": json.dumps(proof)})

    def __repr__(self) -> str:
        shapes = {layer: {n: a.shape for n, a in by_name.items()} for layer, by_name in self.states.items()}
        return (f"SavedStates(model={self.model!r}, kind={self.kind!r}, dtype={self.dtype!r}, steps={self.steps.size} "
                f"({self.steps[:1].tolist()}..{self.steps[-1:].tolist()}), heads={self.heads}, states={shapes}, "
                f"checked_steps={self.checked_steps})")


def _window(window, T: int) -> range:
    if window is None:
        return range(T)
    if not (isinstance(window, tuple) and len(window) == 2):
        raise TypeError(f"window must be a pair (start, stop) of step positions or None; got {window!r}.")
    start, stop = (nonnegative_int("window[0]", window[0]), nonnegative_int("window[1]", window[1]))
    if not start < stop <= T:
        raise ValueError(f"window must satisfy 0 <= start < stop <= T={T} (the steps recorded); got {window}.")
    return range(start, stop)


def _records(analysis, layers):
    from hiddenstate.kinds import get_kind

    recorded = getattr(analysis, "layers", None)
    meta = getattr(analysis, "meta", None)
    if not isinstance(recorded, list) or not isinstance(meta, dict):
        raise TypeError("analysis must be an analysis of recurrent layers (what hiddenstate.analyze or inspect_model "
                        f"returns, with .layers and .meta); got {type(analysis).__name__}.")
    kind_name = meta.get("kind") or getattr(analysis, "kind", None)
    if kind_name is None or not recorded or getattr(recorded[0], "record", None) is None:
        raise ValueError(f"analysis must hold the records of a recurrence kind's layers; got a "
                         f"{type(analysis).__name__} without them (a classic layer's analysis keeps its states in "
                         "hiddenstate.trace instead).")
    kind = get_kind(kind_name)
    by_index = {la.layer: la for la in recorded}
    if layers is None:
        chosen = list(by_index)
    else:
        chosen = [nonnegative_int("layers[]", i) for i in layers]
        missing = [i for i in chosen if i not in by_index]
        if missing or not chosen:
            raise ValueError(f"layers must be recorded layers of the analysis, {sorted(by_index)}; got {list(layers)}.")
    return kind, [(i, kind.states(by_index[i].record)) for i in chosen], str(meta.get("model", ""))


def save_states(analysis, path, *, layers=None, heads=None, window=None, stride: int = 1,
                dtype="float32", overwrite: bool = False):
    """Write the recorded states of ``analysis`` to a safetensors file (the module docstring's layout).

    Parameters
    ----------
    analysis : StateAnalysis
        What :func:`hiddenstate.analyze` or :func:`hiddenstate.inspect_model` returned for recurrent
        layers of a kind (Mamba, Mamba-2, the delta rule, ...), records kept.
    path : str or os.PathLike
        The file to write: a new file, or (with ``overwrite=True``) a previous states file.
    layers : sequence of int, optional
        The layers to save, by their index in the model (default: every recorded layer).
    heads : sequence of int, optional
        Indices along each state's first axis after (T, N): heads, or channels (default all).
    window : (int, int), optional
        The positions ``start <= t < stop`` to save (default all T).
    stride : int, default 1
        Save every ``stride``-th step of the window (its first included).
    dtype : {"float32", "float64"}, default "float32"
        The saved dtype (the records are float64).
    overwrite : bool, default False
        Replace a previous states file at ``path`` (any other file is never replaced).

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    TypeError
        ``analysis`` is not an analysis of recurrent layers; ``window`` not a pair.
    ValueError
        Layers that were not recorded; heads, window or stride out of range; ``path`` an existing
        file that is not a states file of ours, or one without ``overwrite=True``; a directory.
    """
    kind, chosen, model = _records(analysis, layers)
    try:
        name = np.dtype(dtype).name
    except (TypeError, ValueError):
        name = repr(dtype)
    out_dtype = np.dtype(choice("dtype", name, ("float32", "float64")))
    stride = positive_int("stride", stride)
    T = next(iter(chosen[0][1].values())).shape[0]
    steps = np.asarray(_window(window, T)[::stride], dtype=np.int64)
    kept = analysis.meta.get("steps")  # records cut to a window: their steps' positions in the input
    positions = steps if kept is None else np.asarray(kept, dtype=np.int64)[steps]
    tensors, index = {}, {}
    for layer, states in chosen:
        for name, array in states.items():
            keep = None
            if heads is not None:
                keep = [nonnegative_int("heads[]", h) for h in heads]
                if not keep or array.ndim < 3 or max(keep) >= array.shape[2]:
                    size = array.shape[2] if array.ndim >= 3 else 0
                    raise ValueError(f"heads must be indices below {size} (the first axis of layer {layer}'s "
                                     f"{name!r} state, shape {array.shape[2:]}); got {list(heads)}.")
            part = array[steps] if keep is None else array[steps][:, :, keep]
            key = f"layer{layer}.{name}"
            tensors[key] = np.ascontiguousarray(part, dtype=out_dtype)
            index[key] = {"layer": layer, "state": name, "steps": positions.tolist(), "heads": keep}
    return _write(tensors, index, model, kind.name, out_dtype.name, path, overwrite)


def _write(tensors: dict, index: dict, model: str, kind: str, dtype: str, path, overwrite: bool, *, how=_HOW,
           extra=None):
    """The states file: ``tensors`` by key with ``index`` and the rest in its metadata, written atomically."""
    from pathlib import Path

    from safetensors.numpy import save

    target = states_target(path, overwrite, how=how)
    metadata = {"format": FORMAT, "model": model, "kind": kind, "dtype": dtype, "index": json.dumps(index),
                **(extra or {})}
    write_atomically(Path(target), save(tensors, metadata=metadata))
    return Path(target)


def states_target(path, overwrite: bool = False, *, how: str = _HOW) -> str:
    """Where :func:`save_states` may write: a new file in an existing folder, or with ``overwrite`` a previous states file.

    Parameters
    ----------
    path : str or os.PathLike
    overwrite : bool, default False
        Whether a previous states file at ``path`` may be replaced.
    how : str, default "overwrite=True (--save-states replaces it)"
        How the caller's user allows that, for the message (``"--overwrite"`` on the command line).

    Returns
    -------
    str
        ``path`` as text.

    Raises
    ------
    TypeError
        Not a path.
    ValueError
        A directory; a file in no existing folder; an existing file that is not a states file
        (never replaced); a states file without ``overwrite``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}.")
    text = os.fsdecode(os.fspath(path))
    if names_directory(text):
        raise ValueError(f"path must name a file; got '{text}', which names a directory. Give a file name, e.g. "
                         f"'{os.path.join(text, 'states.safetensors')}'.")
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise ValueError(f"path must be a file in an existing folder; got '{text}', whose folder '{folder}' does not "
                         "exist. Create it first.")
    if replaceable(text, name="path"):
        if not _is_states_file(text):
            raise ValueError(f"path must be a new file or a previous states file; got '{text}', another file, "
                             "which is never replaced. Choose another name.")
        if not overwrite:
            raise ValueError(f"path must be a new file; got '{text}', a states file that exists. Pass {how} or "
                             "choose another name.")
    return text


def _is_states_file(path: str) -> bool:
    from hiddenstate.interop.safetensors_header import read_header

    try:
        return read_header(path).metadata.get("format") == FORMAT
    except (ValueError, OSError):
        return False


def load_states(path) -> SavedStates:
    """Read a file :func:`save_states` wrote.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    SavedStates
        ``states[layer][name]`` (S, N, ...) in the saved dtype, the saved ``steps``, ``heads``,
        ``model`` and ``kind``.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not a safetensors file, or one that :func:`save_states` did not write (its ``format``).
    """
    from hiddenstate.interop.safetensors_header import read_header, read_tensors

    header = read_header(path)
    meta = header.metadata
    if meta.get("format") != FORMAT:
        raise ValueError(f"path must be a states file written by save_states (metadata format {FORMAT!r}); got "
                         f"'{os.fsdecode(os.fspath(path))}', whose format is {meta.get('format')!r}.")
    index = json.loads(meta["index"])
    arrays = read_tensors(header, list(index))
    states, steps, heads = {}, None, None
    for key, entry in index.items():
        states.setdefault(int(entry["layer"]), {})[entry["state"]] = arrays[key]
        steps, heads = entry["steps"], entry["heads"]
    proof = json.loads(meta.get("proof", "{}"))
    return SavedStates(states=states, steps=np.asarray(steps, dtype=np.int64),
                       heads=None if heads is None else tuple(heads), model=meta.get("model", ""),
                       kind=meta.get("kind", ""), dtype=meta.get("dtype", "float32"),
                       errors={int(k): v for k, v in proof.get("errors", {}).items()},
                       checked_steps=int(proof.get("checked_steps", 0)))
