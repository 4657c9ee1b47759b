"""``hiddenstate.snapshot``, ``snapshot_bytes``, ``load_snapshot``: a model's state after a prefix, kept.

Dispatch by model: a transformers model of a registered family
(:mod:`hiddenstate.keep.families`), or one of ours (:mod:`hiddenstate.keep.ours`).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.keep.fileformat import read_snapshot_arrays, read_snapshot_header
from hiddenstate.keep.snapshot import Snapshot, backend

__all__ = ["load_snapshot", "snapshot", "snapshot_bytes"]


def _backend_name(model) -> str:
    module = type(model).__module__
    if module.startswith("hiddenstate."):
        return "ours"
    if module.startswith("transformers"):
        return "transformers"
    raise TypeError(f"model must be a transformers model of a registered family, a CharRNN (gru, lstm, rnn), a "
                    f"MambaLM or a Mamba2LM; got {type(model).__name__} (from {module.split('.')[0]}).")


def _vocab(model):
    V = getattr(model, "vocab_size", None)
    cfg = getattr(model, "config", None)
    if V is None and cfg is not None:
        V = getattr(cfg, "vocab_size", None)
        if V is None and callable(getattr(cfg, "get_text_config", None)):
            V = getattr(cfg.get_text_config(), "vocab_size", None)
    return V


def _prefix(model, ids, prefix_length, name="ids"):
    """``ids`` as int64 (N, T) cut to its first ``prefix_length`` tokens, checked."""
    if type(ids).__module__.startswith("torch"):
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids of shape (N, T) or (T,); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"{name} must have shape (N, T) with N, T >= 1 (or (T,)); got shape {np.shape(ids)}.")
    T = arr.shape[1]
    if prefix_length is not None:
        if isinstance(prefix_length, bool) or not isinstance(prefix_length, (int, np.integer)) or prefix_length < 1:
            raise ValueError(f"prefix_length must be a positive int (the tokens of ids the state has seen); got "
                             f"{prefix_length!r:.60}.")
        if prefix_length > T:
            raise ValueError(f"prefix_length must be at most the ids' length T={T}; got {prefix_length}. The state "
                             f"after a prefix needs the prefix's tokens.")
        arr = arr[:, :prefix_length]
    V = _vocab(model)
    if V is not None and (arr.min() < 0 or arr.max() >= V):
        raise ValueError(f"{name} must lie in [0, vocab_size={V}); got values in [{arr.min()}, {arr.max()}].")
    return np.ascontiguousarray(arr, dtype=np.int64)


def snapshot(model, ids, *, prefix_length=None) -> Snapshot:
    """The model's whole state after the prefix ``ids``: every recurrent and convolution state, every key and value.

    Parameters
    ----------
    model : transformers model of a registered family, or CharRNN (gru, lstm, rnn), MambaLM, Mamba2LM
    ids : array_like of int or torch.Tensor, shape (N, T) or (T,)
        The prefix's token ids, sequences first.
    prefix_length : int, optional
        Keep the state after the first ``prefix_length`` tokens of ``ids`` only (default all T).

    Returns
    -------
    Snapshot
        Its ``nbytes`` is what :func:`snapshot_bytes` stated before.

    Raises
    ------
    TypeError
        A model of no registered family and not one of ours; ids that are not integers.
    ValueError
        Ids of another shape or out of the vocabulary; ``prefix_length`` above T or below 1.
    """
    name = _backend_name(model)
    ids = _prefix(model, ids, prefix_length)
    be = backend(name)
    model_type, config, digest = be.describe(model)
    arrays, info, scalars, next_logits = be.capture(model, ids)
    return Snapshot(arrays, info, scalars, np.asarray(next_logits, dtype=np.float64), model_type, config, digest,
                    int(ids.shape[1]), name)


def snapshot_bytes(model, ids, *, prefix_length=None) -> int:
    """The bytes :func:`snapshot` of ``model`` after ``ids`` will take, stated before it is taken.

    From the model's sizes: our models' states do not grow with T; a transformers model's state
    is measured on one row after one and after two tokens (each array's constant part and its
    growth per token: an attention layer's keys and values grow, up to its sliding window), then
    scaled to N rows and T tokens.

    Parameters
    ----------
    model, ids, prefix_length
        As :func:`snapshot` (only the shape of ``ids`` is read, and its values checked).

    Returns
    -------
    int
        Bytes (the arrays and the (N, V) float64 ``next_logits``).

    Raises
    ------
    TypeError, ValueError
        As :func:`snapshot`.
    """
    name = _backend_name(model)
    ids = _prefix(model, ids, prefix_length)
    return backend(name).estimate(model, *ids.shape)


def load_snapshot(path, model) -> Snapshot:
    """A snapshot read from ``path``, checked against ``model`` (the model it was taken of) before its arrays are read.

    Parameters
    ----------
    path : str or os.PathLike
        A file :meth:`Snapshot.save` wrote.
    model : the model the snapshot was taken of

    Returns
    -------
    Snapshot

    Raises
    ------
    TypeError
        ``path`` not a path; ``model`` of no registered family and not one of ours.
    FileNotFoundError
        No file at ``path``.
    ValueError
        A file that is not a snapshot or is damaged (:func:`hiddenstate.keep.fileformat.read_snapshot_header`);
        a model whose type, config or weights differ from the snapshot's; arrays or values the
        model's state has no place for (a crafted header).
    """
    _backend_name(model)
    header, st = read_snapshot_header(path)
    info = {k: {f: a[f] for f in ("layer", "part", "dtype", "batch_axis")} for k, a in header["arrays"].items()}
    snap = Snapshot({}, info, header["scalars"], np.zeros((header["batch"], header["vocab_size"])),
                    header["model_type"], header["config"], header["digest"], header["prefix_length"],
                    header["backend"], header["extra"])
    snap.check_model(model)  # before a byte of the arrays is read
    data = read_snapshot_arrays(header, st)
    snap.next_logits = data.pop("next_logits")
    snap.arrays = data
    backend(snap.backend).check_fits(model, snap)  # the arrays are the places the model's state has
    return snap
