"""Checkpoints as a directory of safetensors and JSON, saved atomically and verified on load.

A checkpoint directory holds exactly three files:

``model.safetensors``
    The parameters, under their torch names (``weight_ih_l0`` ...), so
    ``safetensors.torch.load_file`` reads them straight into a ``torch.nn.GRU``'s state dict.
``optimizer.safetensors``
    Any other arrays (optimizer moments, a carried hidden state ...); may hold none.
``meta.json``
    ``{"format", "format_version", "files", "meta", "sha256"}``: ``meta`` is the caller's JSON
    document (configuration, vocabulary, step, ``rng.bit_generator.state``); ``files`` records the
    size and SHA-256 of both safetensors files, so a truncated, edited or mismatched file is
    detected; ``sha256`` is the SHA-256 of the record's own canonical JSON without that entry
    (:func:`record_digest`), so an edited or corrupted ``meta.json`` (a vocabulary with one
    character replaced, a changed step) is detected too. The digest guards against accidents and
    hand edits, not against forgery: anyone can recompute it. Records written before it existed
    (0.1) have no ``sha256`` and are still read; saving them again adds it.

Nothing is ever unpickled: loading parses only safetensors and strict JSON (no ``NaN`` or
``Infinity``, no number that overflows, no duplicate key; at most :data:`MAX_META_BYTES`).
Loading checks every file's size with ``os.stat`` before reading it, so a truncated or extended
file is refused at once; it then streams each tensor file through SHA-256 in chunks and only then
reads the tensors with safetensors' ``safe_open``: a bad file is never read into memory whole.

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
import errno
import glob
import hashlib
import os
import secrets
import shutil
import stat
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

from hiddenstate.core.files import fsync_dir, write_new
from hiddenstate.train.rundir.checkpoint_record import (
    MAX_META_BYTES,
    check_record,
    encode_record,
    parse_json,
    record_digest,
)

__all__ = [
    "MAX_META_BYTES",
    "META_FILE",
    "MODEL_FILE",
    "OPTIMIZER_FILE",
    "load_checkpoint",
    "previous_name",
    "record_digest",
    "save_checkpoint",
    "staging_prefix",
]

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
META_FILE = "meta.json"
_FILES = (MODEL_FILE, OPTIMIZER_FILE, META_FILE)
_CHUNK = 1 << 20  # bytes hashed at a time: a tensor file is never held in memory for its digest


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


def previous_name(name: str) -> str:
    """The name of the previous checkpoint kept during a save: ``.<name>.previous``.

    Parameters
    ----------
    name : str
        The checkpoint directory's name.

    Returns
    -------
    str
    """
    return f".{name}.previous"


def staging_prefix(name: str) -> str:
    """The prefix of the staging directories of a save: ``.<name>.saving-`` (then a random suffix).

    Parameters
    ----------
    name : str
        The checkpoint directory's name.

    Returns
    -------
    str
    """
    return f".{name}.saving-"


def _previous_path(directory: Path) -> Path:
    return directory.parent / previous_name(directory.name)


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
        If a key is empty or ``'__metadata__'``, ``meta`` holds nan/inf, nests too deeply, has two
        keys that become the same JSON string, or encodes to more than :data:`MAX_META_BYTES`
        (nothing is saved that :func:`load_checkpoint` would refuse), or ``directory`` exists and
        holds anything besides a checkpoint.
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
    meta_bytes = encode_record(meta, files)
    if directory.exists() or directory.is_symlink():
        _check_replaceable(directory)
    parent = directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    previous = _previous_path(directory)
    staging = parent / f"{staging_prefix(directory.name)}{secrets.token_hex(6)}"
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
                                        glob.escape(staging_prefix(directory.name)) + "*")):
        shutil.rmtree(stale, ignore_errors=True)  # staging left by an interrupted save
    return directory


def _stat_file(path: Path) -> os.stat_result:
    """``os.stat`` of a file of the checkpoint; a missing or non-regular one is a ValueError."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"'{path}' is missing: the checkpoint is incomplete. Save it again.") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"'{path}' must be a regular file; got a loop of symbolic links. Save the "
                             "checkpoint again.") from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"'{path}' must be a regular file; got a directory or special file. Save the "
                         "checkpoint again.")
    return st


def _too_large(path: Path, size: int) -> None:
    if size > MAX_META_BYTES:
        raise ValueError(
            f"'{path}' must hold at most {MAX_META_BYTES} bytes ({MAX_META_BYTES >> 20} MiB) of JSON; "
            f"got {size}. It is not a meta.json that save_checkpoint wrote (it was extended or "
            "replaced); restore it or save the checkpoint again."
        )


def _read_record(path: Path) -> dict:
    size = _stat_file(path).st_size
    _too_large(path, size)  # before reading a byte of it
    with open(path, "rb") as f:
        data = f.read(size + 1)  # bounded (read(n) allocates n bytes up front), should it have grown
        if len(data) > size:  # it did: read on, at most up to the limit
            data += f.read(MAX_META_BYTES + 1 - len(data))
    _too_large(path, len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"'{path}' must be valid UTF-8 JSON; got: {error}. The file is truncated or was "
            "edited; restore it or save the checkpoint again."
        ) from None
    return check_record(parse_json(text, f"'{path}'"), f"'{path}'", (MODEL_FILE, OPTIMIZER_FILE))


def _hash_stream(f, size: int) -> tuple[str, int]:
    """SHA-256 and length of what ``f`` holds, read ``_CHUNK`` bytes at a time (at most size + 1)."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(max(1, min(_CHUNK, size + 1))))
    total = 0
    while total <= size:
        n = f.readinto(buffer)
        if not n:
            break
        digest.update(buffer[:n])
        total += n
    return digest.hexdigest(), total


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _check_size(path: Path, st: os.stat_result, expected: dict) -> None:
    if st.st_size != expected["bytes"]:
        raise ValueError(
            f"'{path}' must have the {expected['bytes']} bytes recorded in {META_FILE}; got "
            f"{st.st_size}. The file is truncated or comes from another save."
        )


def _read_tensors(path: Path, expected: dict) -> dict[str, np.ndarray]:
    """Verify a tensor file against its recorded size and digest, then read its tensors.

    The size is checked before a byte is read, the digest is streamed in chunks from one open
    file, and the tensors are read (``safe_open``) only after both match, from the same file:
    its identity (device, inode, size, mtime) must not change meanwhile.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the with below)
    except FileNotFoundError:
        raise ValueError(f"'{path}' is missing: the checkpoint is incomplete. Save it again.") from None
    with f:
        st = os.fstat(f.fileno())
        _check_size(path, st, expected)
        sha256, read = _hash_stream(f, expected["bytes"])
    if read != expected["bytes"] or sha256 != expected["sha256"]:
        raise ValueError(
            f"'{path}' must match the sha256 recorded in {META_FILE}; it does not. The file was "
            "modified or comes from another save."
        )
    try:
        with safetensors.safe_open(os.fspath(path), framework="np") as f:
            tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not a dict)
    except Exception as error:  # only reachable if the recorded digest was forged as well
        raise ValueError(f"'{path}' must be a valid safetensors file; got: {error}.") from None
    try:
        unchanged = _identity(os.stat(path)) == _identity(st)
    except OSError:
        unchanged = False
    if not unchanged:
        raise ValueError(f"'{path}' changed while it was being loaded (is another process saving this "
                         "checkpoint?). Load it again.")
    return tensors


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
        If ``directory`` is not a directory, or a file is missing, truncated, extended, modified,
        from another save or not of the expected format (``meta.json``: not strict JSON, too
        large or too deeply nested, an entry of the wrong type, a digest that does not match); the
        message names the file (and the entry).

    Notes
    -----
    Sizes are compared (``os.stat``) before any file is read, so a checkpoint file that grew to
    gigabytes is refused in milliseconds; a tensor file is read twice (streamed through SHA-256,
    then by ``safe_open``) but never held whole in memory besides the arrays returned.
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
    names = (MODEL_FILE, OPTIMIZER_FILE)
    stats = {name: _stat_file(directory / name) for name in names}  # every file present first
    record = _read_record(directory / META_FILE)
    for name in names:  # sizes, from stat, before any tensor file is read
        _check_size(directory / name, stats[name], record["files"][name])
    params, arrays = (_read_tensors(directory / name, record["files"][name]) for name in names)
    return params, record["meta"], arrays
