"""A safetensors file judged by its header alone, then only the tensors used read from it.

A safetensors file is an 8-byte little-endian length ``n``, ``n`` bytes of JSON (each tensor's
``dtype``, ``shape`` and ``data_offsets`` into the data that follows, and an optional
``__metadata__`` of strings), then the tensors' bytes. :func:`read_header` parses and checks
that JSON without reading a byte of the data: a name given twice is refused (``json`` would
keep the last), as are offsets that do not tile the data or a size that does not match the
shape and dtype. The caller then decides from names, dtypes and shapes which tensors it needs;
:func:`read_tensors` checks that their total size fits in memory
(:func:`hiddenstate.core.resources.check_memory`) and reads those, and no others. A file whose header
claims a 2 GiB tensor of another module costs nothing; one whose recurrent weights are 2 GiB is
refused before they are read if the machine cannot hold them.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.files import open_regular
from hiddenstate.core.resources import check_memory, format_bytes

__all__ = ["MAX_HEADER_BYTES", "SafetensorsHeader", "TensorEntry", "read_header", "read_tensors"]

#: The largest header read (safetensors' own limit, 100 MB).
MAX_HEADER_BYTES = 100_000_000

#: Bytes per element of every dtype safetensors names; NumPy reads the floating ones.
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
             "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_NUMPY = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as the header describes it.

    Attributes
    ----------
    name : str
    dtype : str
        safetensors' name (``"F32"``, ``"BF16"``, ``"I64"``, ...).
    shape : tuple of int
    start, end : int
        Its bytes in the file (absolute offsets, ``end - start == nbytes``).
    """

    name: str
    dtype: str
    shape: tuple
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data."""
        return self.end - self.start

    @property
    def is_float(self) -> bool:
        """Whether NumPy reads it as float16/32/64."""
        return self.dtype in _NUMPY

    @property
    def numpy_dtype(self) -> np.dtype:
        """The native NumPy dtype of a float16/32/64 tensor (float64 for the others, which are never read)."""
        return np.dtype(_NUMPY.get(self.dtype, "<f8")).newbyteorder("=")


@dataclass
class SafetensorsHeader:
    """What :func:`read_header` found.

    Attributes
    ----------
    path : str
        The file, as given.
    tensors : dict of str to TensorEntry
        In the header's order.
    metadata : dict of str to str
        ``__metadata__`` (empty if absent).
    size : int
        The file's size in bytes when its header was read.
    """

    path: str
    tensors: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    size: int = 0


def _no_duplicates(source: str):
    def hook(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"{source} must name each tensor once in its header; got {key!r} twice (a "
                                 "reader would silently keep one of them). Save the file again.")
            seen.add(key)
        return dict(pairs)
    return hook


def _entry(source: str, name: str, info, data_start: int) -> TensorEntry:
    bad = f"{source} must describe tensor {name!r} with a dtype, a shape and data_offsets; got {info!r}"[:400] + "."
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(bad)
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in _ITEMSIZE:
        raise ValueError(f"{source}[{name!r}] must have one of safetensors' dtypes ({', '.join(_ITEMSIZE)}); got "
                         f"{dtype!r}.")
    ints = (lambda v: isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in v))
    if not ints(shape) or not ints(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        raise ValueError(bad)
    nbytes = math.prod(shape) * _ITEMSIZE[dtype]
    if offsets[1] - offsets[0] != nbytes:
        raise ValueError(f"{source}[{name!r}] must take {nbytes} bytes ({dtype} of shape {tuple(shape)}); its "
                         f"data_offsets {offsets} give {offsets[1] - offsets[0]}. The file is damaged.")
    return TensorEntry(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def read_header(path, *, name: str = "path") -> SafetensorsHeader:
    """Parse and check a safetensors file's header; no tensor data is read.

    Parameters
    ----------
    path : str or os.PathLike
        A regular file (a FIFO or device is refused before it is opened).
    name : str, default "path"
        What the messages call ``path``.

    Returns
    -------
    SafetensorsHeader

    Raises
    ------
    TypeError
        ``path`` is not a path.
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not a regular file; not a safetensors file (a header length beyond the file or
        :data:`MAX_HEADER_BYTES`, JSON that is not an object of tensor entries); a tensor named
        twice; a size that does not match its dtype and shape; offsets that overlap, leave a gap
        or run past the end of the file; ``__metadata__`` that is not strings.
    """
    with open_regular(path, name=name) as f:
        source = f"'{os.fsdecode(os.fspath(path))}'"
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        if n is None or n > min(size - 8, MAX_HEADER_BYTES):
            got = f"{size} bytes" if n is None else f"a header length of {n} bytes in a file of {size}"
            raise ValueError(f"{name} must be a valid safetensors file (an 8-byte header length, a JSON header, the "
                             f"data); got {source}, with {got}.")
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates(source))
    except UnicodeDecodeError as error:
        raise ValueError(f"{name} must be a valid safetensors file; got {source}, whose header is not UTF-8 "
                         f"({error.reason} at byte {error.start}).") from None
    except ValueError as error:
        if str(error).startswith(source):  # a duplicate name
            raise
        raise ValueError(f"{name} must be a valid safetensors file; got {source}, whose header is not JSON "
                         f"({error}).") from None
    except RecursionError:
        raise ValueError(f"{name} must be a valid safetensors file; got {source}, whose header nests too deeply.") from None
    if not isinstance(header, dict):
        raise ValueError(f"{name} must be a valid safetensors file; got {source}, whose header is a "
                         f"{type(header).__name__}, not an object.")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError(f"{source} must have a __metadata__ of strings; got {meta!r}"[:300] + ".")
    data_start = 8 + n
    out = SafetensorsHeader(path=str(path), metadata=dict(meta), size=size)
    for key, info in header.items():
        out.tensors[key] = _entry(source, key, info, data_start)
    end = data_start
    for entry in sorted(out.tensors.values(), key=lambda e: (e.start, e.end)):
        if entry.start != end:
            raise ValueError(f"{source} must store its tensors one after another; {entry.name!r} starts at byte "
                             f"{entry.start}, not {end} ({'overlapping' if entry.start < end else 'a gap'}). The "
                             "file is damaged.")
        end = entry.end
    if end != size:
        raise ValueError(f"{source} must end where its last tensor ends (byte {end}); it has {size} bytes. The file "
                         "is truncated or was extended.")
    return out


def read_tensors(header: SafetensorsHeader, names, *, hint: str = "") -> dict:
    """Read the named tensors (only those) of a file whose header :func:`read_header` checked.

    Parameters
    ----------
    header : SafetensorsHeader
    names : iterable of str
        Tensors of ``header.tensors``, each float16, float32 or float64.
    hint : str, optional
        Appended to the message when they cannot fit in memory.

    Returns
    -------
    dict of str to ndarray
        Native-endian, writeable arrays of the stored dtype and shape.

    Raises
    ------
    ValueError
        A tensor that is not float16/32/64 (named, with its dtype); tensors too large for this
        machine's memory (:func:`hiddenstate.core.resources.check_memory`, before any is read); a file
        that changed size since its header was read.
    """
    entries = [header.tensors[n] for n in names]
    source = f"'{header.path}'"
    for e in entries:
        if not e.is_float:
            raise ValueError(f"{source}[{e.name!r}] must be a float16, float32 or float64 array; got dtype {e.dtype}.")
    total = sum(e.nbytes for e in entries)
    check_memory(f"reading {len(entries)} tensor(s) of {source} ({format_bytes(total)})", total,
                 hint or "Use a smaller model, or a machine with more memory.")
    out = {}
    with open_regular(header.path, name="path") as f:
        if os.fstat(f.fileno()).st_size != header.size:
            raise ValueError(f"{source} changed while it was being read (its size is no longer {header.size}); "
                             "read it again.")
        for e in entries:
            f.seek(e.start)
            arr = np.empty(e.shape, dtype=_NUMPY[e.dtype])  # little-endian, as stored
            if e.nbytes and f.readinto(memoryview(arr.reshape(-1)).cast("B")) != e.nbytes:
                raise ValueError(f"{source} changed while it was being read ({e.name!r} is cut short); read it again.")
            out[e.name] = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    return out
