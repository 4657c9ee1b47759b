"""``meta.json`` of a checkpoint: its strict JSON, its record, its digest, its size and depth limits.

A checkpoint's ``meta.json`` is the record::

    {"format": "hiddenstate-checkpoint", "format_version": 1,
     "files": {"model.safetensors": {"bytes": <int>, "sha256": <hex>}, "optimizer.safetensors": {...}},
     "meta": <the caller's JSON object>,
     "sha256": <record_digest(record)>}

written by :func:`encode_record` and checked by :func:`parse_json` and :func:`check_record`
(:mod:`hiddenstate.train.rundir.checkpoint` calls them). The rules, each with the file and the entry in
its message:

* strict JSON: UTF-8, no ``NaN``/``Infinity`` literal, no number that overflows to infinity
  (``1e999``), no key twice in one object, at most :data:`MAX_DEPTH` nested arrays/objects and
  :data:`MAX_META_BYTES` bytes (a ``RecursionError`` never escapes);
* the record: exactly the entries above, ``bytes`` a non-negative integer, ``sha256`` 64
  lowercase hex digits, ``meta`` an object;
* ``sha256``: the SHA-256 of the canonical JSON (:func:`canonical_json`) of the record without it.
  Reformatting the file (indentation, key order) keeps it valid; changing any value does not.
  Records of 0.1 have no ``sha256`` and are accepted without it.

:func:`encode_record` refuses what the loader would refuse, so a saved checkpoint always loads.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

from hiddenstate.core.validation import nonnegative_int

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "MAX_META_BYTES",
    "canonical_json",
    "check_field",
    "check_record",
    "encode_record",
    "parse_json",
    "record_digest",
]

#: ``record["format"]``.
FORMAT = "hiddenstate-checkpoint"
#: ``record["format_version"]``.
FORMAT_VERSION = 1
#: The largest ``meta.json`` that is read (and written): 16 MiB. A run's is a few kB (its
#: vocabulary is most of it); large data belongs in the safetensors files.
MAX_META_BYTES = 16 << 20
#: The deepest nesting of arrays and objects in ``meta.json``, the record itself counting as 1.
MAX_DEPTH = 100

_HEX64 = re.compile(r"[0-9a-f]{64}")
_ENTRIES = ("format", "format_version", "files", "meta", "sha256")


def _no_constant(literal: str):
    raise ValueError(f"{literal} is not a JSON number (strict JSON has no NaN or Infinity)")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"the number {literal} overflows to infinity")
    return value


def _distinct_keys(pairs: list) -> dict:
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice in one object")
        result[key] = value
    return result


def _depth(value) -> int:
    """Nesting depth of arrays/objects in a parsed JSON value (iterative: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > MAX_DEPTH:
                break
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _strict_loads(text: str):
    """``json.loads`` that refuses NaN/Infinity, overflowing numbers, repeated keys and deep nesting.

    Raises ValueError (json's own errors included) or RecursionError.
    """
    value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                       object_pairs_hook=_distinct_keys)
    if _depth(value) > MAX_DEPTH:
        raise RecursionError
    return value


def parse_json(text: str, where: str):
    """Parse ``text`` as strict JSON (see the module docstring); every failure is a ValueError.

    Parameters
    ----------
    text : str
        The contents of a JSON file.
    where : str
        The file, for messages (e.g. ``"'runs/gru/checkpoint/meta.json'"``).

    Returns
    -------
    object
        The parsed value (dicts, lists, str, int, float, bool, None).

    Raises
    ------
    ValueError
        Invalid or non-strict JSON, or nesting deeper than :data:`MAX_DEPTH`: ``"<where> must be
        valid UTF-8 JSON; got: ..."`` or ``"<where> must nest at most 100 ..."``.
    """
    try:
        return _strict_loads(text)
    except RecursionError:
        raise ValueError(
            f"{where} must nest at most {MAX_DEPTH} arrays/objects deep; got deeper nesting. The file "
            "was edited or is not a checkpoint's; restore it or save the checkpoint again."
        ) from None
    except ValueError as error:  # json.JSONDecodeError, the hooks above, int digit limits
        raise ValueError(
            f"{where} must be valid UTF-8 JSON (strict: no NaN, Infinity, overflowing number or "
            f"repeated key); got: {error}. The file is truncated or was edited; restore it or save "
            "the checkpoint again."
        ) from None


def canonical_json(value) -> bytes:
    """The canonical JSON of a parsed value: sorted keys, no spaces, ASCII (what is hashed).

    Parameters
    ----------
    value : object
        A JSON value as :func:`parse_json` returns it.

    Returns
    -------
    bytes
        ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
        allow_nan=False)`` as ASCII bytes.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def record_digest(record: dict) -> str:
    """The SHA-256 that ``record["sha256"]`` must hold: of the canonical JSON of the other entries.

    After a deliberate edit of ``meta.json``, ``record["sha256"] = record_digest(record)`` makes
    the file load again (it is a check against accidents, not a signature).

    Parameters
    ----------
    record : dict
        A parsed ``meta.json`` record (``format``, ``format_version``, ``files``, ``meta``).

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    ValueError
        ``record`` nests too deeply to encode.
    """
    body = {key: value for key, value in record.items() if key != "sha256"}
    try:
        return hashlib.sha256(canonical_json(body)).hexdigest()
    except RecursionError:
        raise ValueError(f"record must nest at most {MAX_DEPTH} arrays/objects deep; got deeper nesting.") from None


def check_field(where: str, field: str, rule, value):
    """Apply a rule of :mod:`hiddenstate.core.validation` to an entry of a file; errors are ValueErrors.

    Parameters
    ----------
    where : str
        The file, e.g. ``"'runs/gru/checkpoint/meta.json'"``.
    field : str
        The entry, dotted, e.g. ``"train.lr"``.
    rule : callable
        ``rule(name, value)``, returning the value or raising TypeError/ValueError.
    value : object
        The entry's value.

    Returns
    -------
    object
        What ``rule`` returns.

    Raises
    ------
    ValueError
        ``"<where>: field '<field>' must <rule>; got <value>."`` A wrong type in a file is a wrong
        value of the file, so TypeErrors of the rule become ValueErrors.
    """
    try:
        return rule(f"{where}: field '{field}'", value)
    except TypeError as error:
        raise ValueError(str(error)) from None


def encode_record(meta, files: dict) -> bytes:
    """The bytes of ``meta.json`` for a document and the digests of the tensor files.

    Parameters
    ----------
    meta : dict
        The caller's JSON-serializable document.
    files : dict
        File name -> ``{"bytes": int, "sha256": str}`` of each tensor file.

    Returns
    -------
    bytes
        The record (module docstring), indented, with its ``sha256``; it passes
        :func:`parse_json` and :func:`check_record`.

    Raises
    ------
    TypeError
        ``meta`` not a dict, or not JSON-serializable.
    ValueError
        ``meta`` holds nan/inf or a cycle, nests deeper than :data:`MAX_DEPTH`, has two keys that
        become the same JSON string (``1`` and ``"1"``), or encodes to more than
        :data:`MAX_META_BYTES`.
    """
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict; got {type(meta).__name__}.")
    record = {"format": FORMAT, "format_version": FORMAT_VERSION, "files": files, "meta": meta}
    too_deep = ValueError(f"meta must nest at most {MAX_DEPTH - 1} arrays/objects deep; got deeper nesting. "
                          "Flatten the document.")
    try:
        text = json.dumps(record, allow_nan=False)
    except TypeError as error:
        raise TypeError(
            f"meta must be JSON-serializable (dict, list, str, int, float, bool, None); got: "
            f"{error}. Convert numpy scalars with .item() and arrays with .tolist(), or pass "
            "arrays through `arrays`."
        ) from None
    except RecursionError:
        raise too_deep from None
    except ValueError as error:
        raise ValueError(
            f"meta must be strict JSON (no nan/inf, no cycles); got: {error}. "
            "Store non-finite numbers as strings or None."
        ) from None
    try:
        record = _strict_loads(text)  # what load_checkpoint will see, and hash
    except RecursionError:
        raise too_deep from None
    except ValueError as error:
        raise ValueError(f"meta must have distinct keys as JSON strings; got: {error}. Use str keys.") from None
    record["sha256"] = record_digest(record)
    data = (json.dumps(record, indent=2) + "\n").encode("utf-8")
    if len(data) > MAX_META_BYTES:
        raise ValueError(f"meta must encode to at most {MAX_META_BYTES >> 20} MiB of JSON; got {len(data)} "
                         "bytes. Store large data as arrays (`arrays`).")
    return data


def _sha256_rule(name: str, value) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise ValueError(f"{name} must be a SHA-256 in 64 lowercase hex digits; got {value!r}.")
    return value


def check_record(record, where: str, file_names: tuple[str, ...]) -> dict:
    """Check a parsed ``meta.json`` record: its entries, their types, and its digest.

    Parameters
    ----------
    record : object
        What :func:`parse_json` returned.
    where : str
        The file, for messages.
    file_names : tuple of str
        The tensor files ``record["files"]`` describes.

    Returns
    -------
    dict
        ``record``.

    Raises
    ------
    ValueError
        Not a record of this format or version, an entry of the wrong type or range (named:
        ``"<where>: field 'files.model.safetensors.bytes' must be ..."``), or a ``sha256`` that
        does not match (the file was edited or corrupted).
    """
    ok = (
        isinstance(record, dict)
        and record.get("format") == FORMAT
        and isinstance(record.get("files"), dict)
        and "meta" in record
        and all(
            isinstance(record["files"].get(name), dict)
            and isinstance(record["files"][name].get("bytes"), int)
            and isinstance(record["files"][name].get("sha256"), str)
            for name in file_names
        )
    )
    if not ok:
        raise ValueError(
            f"{where} must be a {FORMAT} record with 'format', 'files' (size and sha256 of "
            f"{' and '.join(file_names)}) and 'meta'; got keys "
            f"{sorted(record) if isinstance(record, dict) else type(record).__name__}. "
            "It was not written by save_checkpoint, or was edited."
        )
    version = record.get("format_version")
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise ValueError(
            f"{where} must have format_version {FORMAT_VERSION}; got {version!r}. It was written by "
            "another hiddenstate version."
        )
    if "sha256" in record and record["sha256"] != record_digest(record):
        raise ValueError(
            f"{where} must match the sha256 recorded in it (of its canonical JSON); it does not. The "
            "file was edited or corrupted: restore it, or save the checkpoint again (see "
            "hiddenstate.train.rundir.checkpoint_record.record_digest for a deliberate edit)."
        )
    unknown = sorted(set(record) - set(_ENTRIES))
    if unknown:
        raise ValueError(f"{where} must hold only the entries {list(_ENTRIES)}; got also {unknown}. It was "
                         "written by another hiddenstate version, or edited.")
    extra = sorted(set(record["files"]) - set(file_names))
    if extra:
        raise ValueError(f"{where}: field 'files' must describe only {list(file_names)}; got also {extra}.")
    for name in file_names:
        entry = record["files"][name]
        if set(entry) != {"bytes", "sha256"}:
            raise ValueError(f"{where}: field 'files.{name}' must hold only 'bytes' and 'sha256'; got "
                             f"{sorted(entry)}.")
        check_field(where, f"files.{name}.bytes", nonnegative_int, entry["bytes"])
        check_field(where, f"files.{name}.sha256", _sha256_rule, entry["sha256"])
    if not isinstance(record["meta"], dict):
        raise ValueError(f"{where}: field 'meta' must be a JSON object; got {type(record['meta']).__name__}.")
    return record
