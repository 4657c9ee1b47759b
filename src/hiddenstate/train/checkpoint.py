"""Checkpoints as a directory of safetensors and JSON, saved atomically and verified on load.

A checkpoint directory holds exactly three files:

``model.safetensors``
    The parameters, under their torch names (``weight_ih_l0`` ...), so
    ``safetensors.torch.load_file`` reads them straight into a ``torch.nn.GRU``'s state dict.
``optimizer.safetensors``
    Any other arrays (optimizer moments, a carried hidden state ...); may hold none.
``meta.json``
    ``{"format", "format_version", "files", "meta"}``: ``meta`` is the caller's JSON document
    (configuration, vocabulary, step, ``rng.bit_generator.state``); ``files`` records the size and
    SHA-256 of both safetensors files, so a truncated, edited or mismatched file is detected.

Nothing is ever unpickled: loading parses only safetensors and JSON.

Saving never modifies the previous checkpoint in place. The three files are written and fsynced
into a fresh staging directory next to the target, and the target is then switched with
``os.replace`` on whole directories::

    <parent>/.<name>.saving-<random>/   written, fsynced
    <name>            -> .<name>.previous   (only if <name> exists)
    .<name>.saving-*  -> <name>
    remove .<name>.previous

At every instant either ``<name>`` is a complete checkpoint, or it is missing and
``.<name>.previous`` is (a crash between the two renames); :func:`load_checkpoint` then reads
``.<name>.previous``, and the next save cleans up. One process should save to a given directory
at a time.

Examples
--------
>>> import numpy as np, tempfile, os
>>> rng = np.random.default_rng(0)
>>> params = {"weight_hh_l0": rng.standard_normal((6, 2))}
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> _ = save_checkpoint(path, params, {"step": 10, "rng": rng.bit_generator.state})
>>> loaded, meta, arrays = load_checkpoint(path)
>>> bool((loaded["weight_hh_l0"] == params["weight_hh_l0"]).all()), meta["step"], arrays
(True, 10, {})
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

import numpy as np
import safetensors.numpy

from hiddenstate.files import fsync_dir, write_new

__all__ = ["META_FILE", "MODEL_FILE", "OPTIMIZER_FILE", "load_checkpoint", "save_checkpoint"]

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
META_FILE = "meta.json"
_FILES = (MODEL_FILE, OPTIMIZER_FILE, META_FILE)
_FORMAT = "hiddenstate-checkpoint"
_FORMAT_VERSION = 1


def _checkpoint_path(directory) -> Path:
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a str or os.PathLike; got {type(directory).__name__}.")
    path = Path(directory)
    if path.name in ("", ".", ".."):
        raise ValueError(
            f"directory must end in a directory name; got '{directory}'. "
            "Name the checkpoint directory itself, e.g. 'runs/gru/checkpoint'."
        )
    return path


def _previous_path(directory: Path) -> Path:
    return directory.parent / f".{directory.name}.previous"


def _serialize(name: str, tensors) -> bytes:
    """Validate a dict of arrays and return its safetensors bytes."""
    if not isinstance(tensors, dict):
        raise TypeError(f"{name} must be a dict of str -> ndarray; got {type(tensors).__name__}.")
    for key, value in tensors.items():
        if not isinstance(key, str) or not key or key == "__metadata__":
            raise ValueError(
                f"{name} keys must be non-empty strings other than '__metadata__'; got {key!r}."
            )
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{name}['{key}'] must be an ndarray; got {type(value).__name__}. "
                "Wrap it with np.asarray."
            )
    # safetensors.numpy copies raw memory from the data pointer: a transposed or reversed view
    # would be written in memory order (or read out of bounds), so make every array C-contiguous.
    tensors = {k: v if v.flags.c_contiguous else v.copy(order="C") for k, v in tensors.items()}
    try:
        return safetensors.numpy.save(tensors)
    except Exception as error:  # safetensors raises its own exception type for bad dtypes
        raise TypeError(
            f"{name} must hold arrays that safetensors can store (bool, int, uint, float16/32/64); "
            f"got: {error}."
        ) from None


def _encode_record(meta, files: dict) -> bytes:
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict; got {type(meta).__name__}.")
    record = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "files": files,
        "meta": meta,
    }
    try:
        text = json.dumps(record, indent=2, allow_nan=False)
    except TypeError as error:
        raise TypeError(
            f"meta must be JSON-serializable (dict, list, str, int, float, bool, None); got: "
            f"{error}. Convert numpy scalars with .item() and arrays with .tolist(), or pass "
            "arrays through `arrays`."
        ) from None
    except ValueError as error:
        raise ValueError(
            f"meta must be strict JSON (no nan/inf, no cycles); got: {error}. "
            "Store non-finite numbers as strings or None."
        ) from None
    return (text + "\n").encode("utf-8")


def _digest(data: bytes) -> dict:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


_write_file = write_new  # a module-level name, so a test can make it fail mid-save


def _check_replaceable(directory: Path) -> None:
    """Refuse to replace anything but a checkpoint directory (or an empty one)."""
    if not directory.is_dir():
        raise ValueError(
            f"directory must be a checkpoint directory; got '{directory}', which is a file. "
            "Choose another path."
        )
    other = sorted(p.name for p in directory.iterdir() if p.name not in _FILES)
    if other:
        raise ValueError(
            f"directory must be new or hold only a checkpoint ({', '.join(_FILES)}); got "
            f"'{directory}' with other entries {other[:5]}. Saving replaces the whole directory: "
            "choose a dedicated one."
        )


def save_checkpoint(
    directory: str | os.PathLike,
    params: dict[str, np.ndarray],
    meta: dict,
    arrays: dict[str, np.ndarray] | None = None,
) -> Path:
    """Save parameters, extra arrays and a JSON document as one atomically replaced directory.

    Parameters
    ----------
    directory : str or os.PathLike
        The checkpoint directory. It is created (with its parents) if missing; if it exists it
        must hold nothing but a previous checkpoint, which is replaced as a whole.
    params : dict of str to ndarray
        Model parameters (any shape; dtypes safetensors stores, e.g. float64, float32, int64),
        written to ``model.safetensors`` byte for byte.
    meta : dict
        A JSON-serializable document (strict JSON: no nan or inf), e.g. the configuration,
        ``vocab.to_json()``, the step, ``rng.bit_generator.state`` and ``batcher.state_dict()``.
    arrays : dict of str to ndarray, optional
        Other arrays, e.g. ``Adam.state_dict()``; written to ``optimizer.safetensors``.

    Returns
    -------
    pathlib.Path
        ``directory``.

    Raises
    ------
    TypeError
        If ``params``/``arrays`` are not dicts of ndarrays of a storable dtype, or ``meta`` is
        not a JSON-serializable dict.
    ValueError
        If a key is empty or ``'__metadata__'``, ``meta`` holds nan/inf, or ``directory``
        exists and holds anything besides a checkpoint.
    OSError
        If writing fails; the previous checkpoint is then left as it was.

    Notes
    -----
    Files are fsynced before the directory switch and the parent directory after it, so a
    checkpoint that this function returned from survives a power loss. A crash at any point
    leaves either the previous or the new checkpoint loadable, never a mix (see the module
    docstring).
    """
    directory = _checkpoint_path(directory)
    model_bytes = _serialize("params", params)
    optimizer_bytes = _serialize("arrays", {} if arrays is None else arrays)
    files = {MODEL_FILE: _digest(model_bytes), OPTIMIZER_FILE: _digest(optimizer_bytes)}
    meta_bytes = _encode_record(meta, files)
    if directory.exists() or directory.is_symlink():
        _check_replaceable(directory)
    parent = directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    previous = _previous_path(directory)
    staging = parent / f".{directory.name}.saving-{secrets.token_hex(6)}"
    staging.mkdir()
    try:
        for name, data in ((MODEL_FILE, model_bytes), (OPTIMIZER_FILE, optimizer_bytes),
                           (META_FILE, meta_bytes)):
            _write_file(staging / name, data)
        fsync_dir(staging)
        if directory.exists():
            if previous.exists():  # left by an interrupted save; `directory` is complete
                shutil.rmtree(previous)
            os.replace(directory, previous)
        os.replace(staging, directory)
        fsync_dir(parent)
    except BaseException:
        # Best effort; after a hard crash load_checkpoint falls back to `previous` instead.
        shutil.rmtree(staging, ignore_errors=True)
        if not directory.exists() and previous.exists():
            with contextlib.suppress(OSError):
                os.replace(previous, directory)
        raise
    shutil.rmtree(previous, ignore_errors=True)
    for stale in glob.glob(os.path.join(glob.escape(str(parent)),
                                        glob.escape(f".{directory.name}.saving-") + "*")):
        shutil.rmtree(stale, ignore_errors=True)  # staging left by an interrupted save
    return directory


def _read_record(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"'{path}' is missing: the checkpoint is incomplete. Save it again.")
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"'{path}' must be valid UTF-8 JSON; got: {error}. The file is truncated or was "
            "edited; restore it or save the checkpoint again."
        ) from None
    ok = (
        isinstance(record, dict)
        and record.get("format") == _FORMAT
        and isinstance(record.get("files"), dict)
        and "meta" in record
        and all(
            isinstance(record["files"].get(name), dict)
            and isinstance(record["files"][name].get("bytes"), int)
            and isinstance(record["files"][name].get("sha256"), str)
            for name in (MODEL_FILE, OPTIMIZER_FILE)
        )
    )
    if not ok:
        raise ValueError(
            f"'{path}' must be a {_FORMAT} record with 'format', 'files' (size and sha256 of "
            f"{MODEL_FILE} and {OPTIMIZER_FILE}) and 'meta'; got keys "
            f"{sorted(record) if isinstance(record, dict) else type(record).__name__}. "
            "It was not written by save_checkpoint, or was edited."
        )
    if record.get("format_version") != _FORMAT_VERSION:
        raise ValueError(
            f"'{path}' must have format_version {_FORMAT_VERSION}; got "
            f"{record.get('format_version')!r}. It was written by another hiddenstate version."
        )
    return record


def _read_tensors(path: Path, expected: dict) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ValueError(f"'{path}' is missing: the checkpoint is incomplete. Save it again.")
    data = path.read_bytes()
    if len(data) != expected["bytes"]:
        raise ValueError(
            f"'{path}' must have the {expected['bytes']} bytes recorded in {META_FILE}; got "
            f"{len(data)}. The file is truncated or comes from another save."
        )
    if hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise ValueError(
            f"'{path}' must match the sha256 recorded in {META_FILE}; it does not. The file was "
            "modified or comes from another save."
        )
    try:
        return safetensors.numpy.load(data)
    except Exception as error:  # only reachable if the recorded digest was forged as well
        raise ValueError(f"'{path}' must be a valid safetensors file; got: {error}.") from None


def load_checkpoint(
    directory: str | os.PathLike,
) -> tuple[dict[str, np.ndarray], dict, dict[str, np.ndarray]]:
    """Load and verify a checkpoint written by :func:`save_checkpoint`.

    Parameters
    ----------
    directory : str or os.PathLike
        The checkpoint directory. If it is missing because a save was interrupted between its two
        renames, the previous checkpoint (``.<name>.previous`` beside it) is loaded instead.

    Returns
    -------
    params : dict of str to ndarray
        Writeable arrays, bitwise equal to those saved (same dtype and shape).
    meta : dict
        The saved document, as ``json.loads(json.dumps(meta))`` gives it (tuples become lists).
    arrays : dict of str to ndarray
        The extra arrays (empty if none were saved).

    Raises
    ------
    TypeError
        If ``directory`` is not a str or os.PathLike.
    FileNotFoundError
        If there is no checkpoint at ``directory``.
    ValueError
        If ``directory`` is not a directory, or a file is missing, truncated, modified, from
        another save or not of the expected format; the message names the file.
    """
    directory = _checkpoint_path(directory)
    if not directory.exists():
        previous = _previous_path(directory)
        if not previous.is_dir():
            raise FileNotFoundError(
                f"directory must hold a checkpoint; got '{directory}', which does not exist. "
                "Check the path, or save a checkpoint there first."
            )
        directory = previous
    if not directory.is_dir():
        raise ValueError(f"directory must be a checkpoint directory; got '{directory}', a file.")
    record = _read_record(directory / META_FILE)
    params = _read_tensors(directory / MODEL_FILE, record["files"][MODEL_FILE])
    arrays = _read_tensors(directory / OPTIMIZER_FILE, record["files"][OPTIMIZER_FILE])
    return params, record["meta"], arrays
