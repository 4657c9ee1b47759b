"""A snapshot on disk: one safetensors file, its arrays as tensors and a JSON header in ``__metadata__``.

Layout (format ``hiddenstate.snapshot``, version 1)::

    tensors      every array of Snapshot.arrays under its name, its stored dtype (bfloat16 as U16 bits),
                 and "next_logits" (N, V) float64
    __metadata__ {"format": "hiddenstate.snapshot", "version": "1", "header": JSON}
    header       {"model_type", "backend", "config", "digest", "prefix_length", "batch", "vocab_size",
                  "arrays": {name: {"layer", "part", "dtype", "batch_axis", "shape", "stored"}},
                  "scalars": {path: value}, "extra": {...}}

Reading checks everything before a byte of data is read: the safetensors header itself
(:func:`hiddenstate.interop.safetensors_header.read_header`: offsets that tile the file, sizes that
match shapes and dtypes, so a truncated file or a declared size the file does not hold is
refused), the format and version, the JSON header's fields and types, that the tensors are
exactly those the header lists with the shapes and dtypes it says, and that the model is the
snapshot's (type, config, weight digest). Writing never replaces a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from hiddenstate.core.files import names_directory, open_regular, write_new
from hiddenstate.interop.safetensors_header import read_header

__all__ = ["FORMAT", "VERSION", "read_snapshot_arrays", "read_snapshot_header", "save_snapshot"]

FORMAT = "hiddenstate.snapshot"
VERSION = "1"
#: safetensors' dtype names of the arrays a snapshot stores, and NumPy's.
_STORED = {"float16": "F16", "float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32", "uint16": "U16",
           "bool": "BOOL", "int8": "I8", "uint8": "U8", "int16": "I16"}
_NUMPY = {v: k for k, v in _STORED.items()}
_KEYS = {"model_type": str, "backend": str, "config": dict, "digest": str, "prefix_length": int, "batch": int,
         "vocab_size": int, "arrays": dict, "scalars": dict, "extra": dict}


def _path_text(path, name="path"):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike; got {type(path).__name__}.")
    text = os.fsdecode(os.fspath(path))
    if names_directory(text) or os.path.isdir(text):
        raise ValueError(f"{name} must name a file; got '{text}', a directory. Give a file name, e.g. "
                         f"'{os.path.join(text, 'prefix.snapshot.safetensors')}'.")
    return text


def save_snapshot(snap, path) -> Path:
    """Write ``snap`` to a new file at ``path`` (the module docstring's layout).

    Parameters
    ----------
    snap : Snapshot
    path : str or os.PathLike
        Must not exist.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        ``path`` is not a path.
    ValueError
        ``path`` exists (nothing is replaced) or names a directory.
    """
    from safetensors.numpy import save

    text = _path_text(path)
    if os.path.lexists(text):
        raise ValueError(f"path must be a new file; got '{text}', which exists. A snapshot never replaces a file: "
                         "choose another name or remove it first.")
    tensors, arrays = {}, {}
    for k, a in snap.arrays.items():
        arrays[k] = {**snap.info[k], "shape": list(a.shape), "stored": a.dtype.name}
        tensors[k] = np.ascontiguousarray(a).reshape(a.shape or (1,))  # safetensors stores a 0-d array as (1,)
    tensors["next_logits"] = np.ascontiguousarray(snap.next_logits, dtype=np.float64)
    header = {"model_type": snap.model_type, "backend": snap.backend, "config": snap.config, "digest": snap.digest,
              "prefix_length": snap.prefix_length, "batch": snap.batch, "vocab_size": int(snap.next_logits.shape[1]),
              "arrays": arrays, "scalars": snap.scalars, "extra": snap.extra}
    meta = {"format": FORMAT, "version": VERSION, "header": json.dumps(header, sort_keys=True)}
    data = save(tensors, metadata=meta)
    try:
        write_new(Path(text), data)
    except FileExistsError:
        raise ValueError(f"path must be a new file; got '{text}', which appeared while the snapshot was being "
                         "written. Nothing was replaced.") from None
    return Path(text)


def _bad(source, what):
    return ValueError(f"path must be a snapshot file of hiddenstate; got {source}, {what}.")


def _header(meta, source) -> dict:
    if meta.get("format") != FORMAT:
        raise _bad(source, f"whose format is {meta.get('format')!r:.60}, not {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise _bad(source, f"of format version {meta.get('version')!r:.20}; this hiddenstate reads version {VERSION}")
    try:
        header = json.loads(meta.get("header", ""))
    except (ValueError, RecursionError) as error:
        raise _bad(source, f"whose header is not JSON ({str(error)[:80]})") from None
    if not isinstance(header, dict):
        raise _bad(source, f"whose header is a {type(header).__name__}, not an object")
    for key, typ in _KEYS.items():
        v = header.get(key)
        low = 0 if key == "prefix_length" else 1  # an initial state (a tuned one) has read nothing: 0
        if not isinstance(v, typ) or (typ is int and (isinstance(v, bool) or v < low)):
            raise _bad(source, f"whose header has {key}={v!r:.60} (must be a {typ.__name__}"
                               f"{f' >= {low}' if typ is int else ''})")
    for k, a in header["arrays"].items():
        ok = (isinstance(a, dict) and isinstance(a.get("shape"), list) and a.get("stored") in _STORED
              and isinstance(a.get("dtype"), str) and (a.get("layer") is None or type(a.get("layer")) is int)
              and isinstance(a.get("part"), str)
              and (a.get("batch_axis") is None or (type(a["batch_axis"]) is int
                                                   and 0 <= a["batch_axis"] < len(a["shape"]))))
        if not ok or k == "next_logits":
            raise _bad(source, f"whose header describes array {k!r:.80} as {a!r:.120}")
    for k, v in header["scalars"].items():
        if not (v is None or isinstance(v, (bool, int, float, str))):
            raise _bad(source, f"whose header has scalar {k!r:.80} = {v!r:.60} (must be a number, bool, str or null)")
    return header


def read_snapshot_header(path) -> tuple:
    """Read and check a snapshot file's header (no array data is read).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    header : dict
        The JSON header (module docstring), checked.
    st : SafetensorsHeader
        The file's tensors, checked against ``header``; pass both to :func:`read_snapshot_arrays`.

    Raises
    ------
    TypeError
        ``path`` is not a path.
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not a snapshot file: a damaged or truncated safetensors file, another format or version,
        a header that is not JSON or lacks a field, tensors other than those the header lists or
        of other shapes or dtypes.
    """
    text = _path_text(path)
    source = f"'{text}'"
    st = read_header(text, name="path")
    header = _header(st.metadata, source)
    if header["backend"] not in ("transformers", "ours"):
        raise _bad(source, f"whose backend is {header['backend']!r:.40}")
    names = set(header["arrays"]) | {"next_logits"}
    if set(st.tensors) != names:
        extra, missing = sorted(set(st.tensors) - names), sorted(names - set(st.tensors))
        raise _bad(source, f"whose tensors are not those its header lists (missing {missing[:3]}, unlisted "
                           f"{extra[:3]})")
    N = header["batch"]
    for k in names:
        shape, dtype = _want(header, k)
        e = st.tensors[k]
        if (e.shape, e.dtype) != (shape or (1,), dtype):
            raise _bad(source, f"whose tensor {k!r:.80} is {e.dtype} {e.shape}, where its header says {dtype} {shape}")
        ax = header["arrays"].get(k, {}).get("batch_axis")
        if ax is not None and shape[ax] != N:
            raise _bad(source, f"whose tensor {k!r:.80} has {shape[ax]} rows on its batch axis, not batch={N}")
    return header, st


def _want(header, k):
    """(shape, safetensors dtype) of array ``k`` as the header declares it."""
    if k == "next_logits":
        return (header["batch"], header["vocab_size"]), "F64"
    a = header["arrays"][k]
    return tuple(a["shape"]), _STORED[a["stored"]]


def read_snapshot_arrays(header, st) -> dict:
    """The arrays of a file whose header :func:`read_snapshot_header` checked, ``"next_logits"`` among them.

    Parameters
    ----------
    header : dict
    st : SafetensorsHeader

    Returns
    -------
    dict of str to ndarray
        Native-endian, of the declared shapes and stored dtypes.

    Raises
    ------
    ValueError
        The file changed since its header was read.
    """
    source = f"'{st.path}'"
    data = {}
    with open_regular(st.path, name="path") as f:
        if os.fstat(f.fileno()).st_size != st.size:
            raise ValueError(f"path {source} changed while it was being read; read it again.")
        for k in [*header["arrays"], "next_logits"]:
            e = st.tensors[k]
            f.seek(e.start)
            arr = np.empty(e.shape, dtype=np.dtype(_NUMPY[e.dtype]).newbyteorder("<"))
            if e.nbytes and f.readinto(memoryview(arr.reshape(-1)).cast("B")) != e.nbytes:
                raise ValueError(f"path {source} changed while it was being read; read it again.")
            data[k] = arr.astype(arr.dtype.newbyteorder("="), copy=False).reshape(_want(header, k)[0])
    return data
