"""A model directory's ``config.json``: its family, its config, and what it allows to ask.

:func:`read_config` reads the file (a regular file, at most :data:`MAX_JSON_BYTES`, a JSON object)
and refuses custom code and models of no registered family (:func:`config_family`);
:func:`model_config` builds transformers' config of it (the family's own config class: its
``num_hidden_layers`` is the model's, where a family derives it, NemotronH from
``layers_block_type``). What a user asks of the model is checked against that config before any
weight is read or any model is built (a real model takes tens of seconds to build), each in one
line naming the argument, the rule and the value received:

* :func:`check_layers`: the recorded layers lie in ``0 <= i < num_hidden_layers`` (whether each
  is recurrent needs the layer map, which needs the model: checked later, before it runs);
* :func:`check_ids`: the token ids are integers of shape (T,) or (N, T) in ``0 <= id <
  vocab_size`` (:func:`token_ids`).

On the path of ``inspect_model(DIR, ...)`` and ``hiddenstate inspect DIR`` all of it happens once:
:func:`model_request` reads and checks ``config.json`` and the layers into a :class:`ModelRequest`,
:meth:`ModelRequest.with_ids` checks the ids, and the loader
(:func:`~hiddenstate.interop.families.directory.load_model_dir`) and the report take that object.

transformers is imported with the hub switched off (:func:`offline_transformers`).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
from pathlib import Path

import numpy as np

from hiddenstate.core.files import open_regular
from hiddenstate.core.resources import format_bytes
from hiddenstate.core.validation import shape_str
from hiddenstate.interop.families.config_check import check_config_fields
from hiddenstate.interop.families.registry import Family, find_family, registered

__all__ = ["CONFIG_FILE", "MAX_JSON_BYTES", "ModelRequest", "check_ids", "check_layers", "config_family",
           "model_config", "model_request", "offline_transformers", "read_config", "read_json", "special_floats",
           "token_ids"]

CONFIG_FILE = "config.json"
#: The largest ``config.json`` or index read.
MAX_JSON_BYTES = 50_000_000
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def offline_transformers():
    """The ``transformers`` module, imported with the hub and telemetry off (set in the environment first).

    Returns
    -------
    module
        ``transformers``; no network is reached through it.
    """
    os.environ.update(_OFFLINE)
    import transformers

    return transformers


def special_floats(obj):
    """transformers' JSON spelling of inf and NaN in a config (``{"__float__": "Infinity"}``) read back as floats.

    Parameters
    ----------
    obj : dict, list or scalar
        Parsed JSON.

    Returns
    -------
    dict, list or scalar
        ``obj`` with each ``{"__float__": "Infinity" | "-Infinity" | "NaN"}`` a float.
    """
    if isinstance(obj, dict):
        if set(obj) == {"__float__"} and obj["__float__"] in ("Infinity", "-Infinity", "NaN"):
            return float(obj["__float__"].replace("Infinity", "inf"))
        return {k: special_floats(v) for k, v in obj.items()}
    return [special_floats(v) for v in obj] if isinstance(obj, list) else obj


def read_json(path, what: str) -> dict:
    """A JSON object from a regular file of at most :data:`MAX_JSON_BYTES`.

    Parameters
    ----------
    path : str or os.PathLike
    what : str
        What the messages call the file (``"config.json"``).

    Returns
    -------
    dict

    Raises
    ------
    FileNotFoundError, ValueError
        No such file, not a regular file (a FIFO is refused unopened), too large, not JSON, or
        JSON that is not an object.
    """
    with open_regular(path, name=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_JSON_BYTES:
            raise ValueError(f"{what} must be at most {format_bytes(MAX_JSON_BYTES)}; got '{path}' of "
                             f"{format_bytes(size)}.")
        raw = f.read()
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"{what} must be a JSON object; got '{path}', which is not JSON "
                         f"({' '.join(str(error).split())[:200]}).") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} must be a JSON object; got '{path}', a JSON {type(obj).__name__}.")
    return obj


def config_family(directory, cfg: dict) -> tuple:
    """The family of a ``config.json`` and the transformers class to build, or a one-line refusal.

    Parameters
    ----------
    directory : str or os.PathLike
        The model directory (for the messages).
    cfg : dict
        Its ``config.json``.

    Returns
    -------
    family : Family
    class_name : str
        The config's ``architectures`` entry of the family (default the family's causal LM).

    Raises
    ------
    ValueError
        ``auto_map`` (custom code, never run), a ``model_type`` of no registered family (the
        registered ones named), ``architectures`` that name none of the family's classes.
    """
    where = f"'{Path(directory) / CONFIG_FILE}'"
    if "auto_map" in cfg:
        raise ValueError(f"{where} asks for custom code (auto_map {cfg['auto_map']!r}"[:300] + "); hiddenstate builds "
                         "transformers' own classes only and never runs code from a model directory "
                         "(trust_remote_code stays off).")
    kind = cfg.get("model_type")
    names = ", ".join(f.name for f in registered())
    family = find_family(kind) if isinstance(kind, str) else None
    if family is None:
        raise ValueError(f"{where} must have the model_type of a registered recurrent family ({names}); got "
                         f"{kind!r}.")
    archs = cfg.get("architectures") or [family.classes[0]]
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"{where} must list its architectures as class names; got {archs!r}"[:300] + ".")
    cls = next((a for a in archs if a in family.classes), None)
    if cls is None:
        raise ValueError(f"{where} must name one of the {family.name} family's classes "
                         f"({', '.join(family.classes)}) in its architectures; got {archs}.")
    return family, cls


def read_config(directory) -> dict:
    """A model directory's ``config.json``, checked to be of a registered family (:func:`config_family`).

    Parameters
    ----------
    directory : str or os.PathLike

    Returns
    -------
    dict
        The JSON object.

    Raises
    ------
    FileNotFoundError, ValueError
        From :func:`read_json` and :func:`config_family`.
    """
    cfg = read_json(Path(directory) / CONFIG_FILE, "config.json")
    config_family(directory, cfg)
    return cfg


def model_config(directory, cfg: dict | None = None):
    """transformers' config of a model directory: the family's config class, from ``config.json`` (no model built).

    Parameters
    ----------
    directory : str or os.PathLike
        A model directory.
    cfg : dict, optional
        Its ``config.json`` already read (default: read it, :func:`read_config`).

    Returns
    -------
    transformers config
        What the model would be built from: of the family's config class (transformers'
        ``CONFIG_MAPPING`` of the ``model_type``, which imports no model code).

    Raises
    ------
    FileNotFoundError, ValueError
        From :func:`read_config`; what transformers' config class refuses.
    """
    cfg = read_config(directory) if cfg is None else cfg
    _, cls_name = config_family(directory, cfg)
    return _build_config(cfg, cls_name, f"'{Path(directory) / CONFIG_FILE}'")


def _build_config(cfg: dict, cls_name: str, where: str = "config.json"):
    """transformers' config of a checked ``config.json`` (its ``model_type``'s config class)."""
    transformers = offline_transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:  # the configuration module alone: importing the model's module takes seconds more
        config_class = CONFIG_MAPPING[cfg["model_type"]]
    except KeyError:
        config_class = getattr(transformers, cls_name).config_class
    cfg = special_floats(cfg)
    check_config_fields(cfg, config_class, where)  # each field's type and range, before transformers reads one
    try:
        return config_class.from_dict(cfg)
    except (TypeError, ValueError) as error:  # what the config class's own validators refuse, in one line
        cause = getattr(error, "__cause__", None) or error
        raise ValueError(f"{where} must be a valid {config_class.__name__}; got fields it refuses "
                         f"({' '.join(str(cause).split())[:300]}). Fix config.json.") from None


def _count(config, key: str) -> int | None:
    """``config.key`` (a multimodal config's: its text backbone's) when it is a positive int (not a bool), else None."""
    value = getattr(config, key, None)
    if value is None and callable(getattr(config, "get_text_config", None)):  # Qwen3.5's vocab_size is text_config's
        value = getattr(config.get_text_config(), key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _checked_layers(config, layers, name: str, where: str):
    """``layers`` as sorted unique indices below ``num_hidden_layers`` of ``config`` (None stays None)."""
    if layers is None:
        return None
    try:
        items = [layers] if np.ndim(layers) == 0 else list(layers)
        wanted = sorted({int(i) for i in items})
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a layer index or a list of them; got {layers!r}.") from None
    n = _count(config, "num_hidden_layers")
    bad = [i for i in wanted if i < 0 or (n is not None and i >= n)]
    if bad:
        rule = f"0 <= i < num_hidden_layers={n} (from {where})" if n else "i >= 0"
        raise ValueError(f"{name} must be layer indices with {rule}; got {', '.join(map(str, bad))}.")
    if isinstance(layers, np.ndarray) and layers.ndim <= 1 and layers.dtype.kind in "iu":
        items = layers.reshape(-1).tolist()
    if any(isinstance(i, (bool, np.bool_)) or not isinstance(i, (numbers.Integral, np.integer)) for i in items):
        # int() read 2.5 as 2, True as 1 and "1" as 1: refused as the model's own check refuses them
        raise TypeError(f"{name} must be a recurrent layer index (an int) or a list of them; got {layers!r:.80}.")
    return tuple(wanted)


@dataclasses.dataclass(frozen=True)
class ModelRequest:
    """A model directory's ``config.json`` read and checked once, with the layers and ids asked of its model.

    Made by :func:`model_request` (the ids by :meth:`with_ids`); what the rest of the path of
    ``inspect_model(DIR, ...)`` and ``hiddenstate inspect DIR`` takes instead of reading the file
    again.

    Parameters
    ----------
    directory : pathlib.Path
        The model directory.
    cfg : dict
        Its ``config.json``, as parsed (checked: no ``auto_map``, a registered ``model_type``).
    family : Family
        The registered family of its ``model_type``.
    class_name : str
        The transformers class to build (the config's ``architectures`` entry of the family).
    config : transformers config
        The family's config class built from ``cfg`` (:func:`model_config`).
    layers : tuple of int or None
        The layers to record, sorted and unique, each below ``num_hidden_layers`` (None: all).
    ids : ndarray of int64, shape (N, T), or None
        The token ids, each below ``vocab_size`` (None: not given yet).
    """

    directory: Path
    cfg: dict
    family: Family
    class_name: str
    config: object
    layers: tuple | None = None
    ids: np.ndarray | None = None

    @property
    def where(self) -> str:
        """``"'DIR/config.json'"``, as the messages name the file."""
        return f"'{self.directory / CONFIG_FILE}'"

    def with_ids(self, x, *, name: str = "x") -> ModelRequest:
        """This request with ``x`` checked as its token ids against the config's ``vocab_size``.

        Parameters
        ----------
        x : array_like of int or torch.Tensor, shape (T,) or (N, T)
        name : str, default "x"
            What the messages call ``x`` (``"--ids 'ids.npy'"`` on the command line).

        Returns
        -------
        ModelRequest
            A copy with ``ids`` (N, T) int64.

        Raises
        ------
        TypeError, ValueError
            From :func:`token_ids`.
        """
        ids = token_ids(x, _count(self.config, "vocab_size"), name=name, where=f"from {self.where}")
        return dataclasses.replace(self, ids=ids)


def model_request(directory, layers=None, *, name: str = "layers") -> ModelRequest:
    """Read and check a model directory's ``config.json`` and the layers asked of its model, once.

    Parameters
    ----------
    directory : str or os.PathLike
        A model directory.
    layers : int, list of int or None
        The layers to record (None: all).
    name : str, default "layers"
        What the messages call ``layers`` (``"--layers"`` on the command line).

    Returns
    -------
    ModelRequest
        Without ids (:meth:`ModelRequest.with_ids` adds them).

    Raises
    ------
    FileNotFoundError, ValueError
        From :func:`read_json` and :func:`config_family`; what transformers' config class
        refuses; an index outside ``0 <= i < num_hidden_layers``.
    TypeError
        ``layers`` is not an index (an int) or a list of them.
    """
    d = Path(directory)
    cfg = read_json(d / CONFIG_FILE, "config.json")
    family, cls_name = config_family(d, cfg)
    config = _build_config(cfg, cls_name, f"'{d / CONFIG_FILE}'")
    return ModelRequest(d, cfg, family, cls_name, config,
                        _checked_layers(config, layers, name, f"'{d / CONFIG_FILE}'"))


def check_layers(directory, layers, *, name: str = "layers"):
    """``layers`` checked against ``num_hidden_layers`` of the directory's ``config.json``.

    Parameters
    ----------
    directory : str or os.PathLike
        A model directory.
    layers : int, list of int or None
        The layers to record (None: all, nothing to check).
    name : str, default "layers"
        What the messages call ``layers`` (``"--layers"`` on the command line).

    Returns
    -------
    list of int or None
        The indices, sorted and unique.

    Raises
    ------
    TypeError
        ``layers`` is not an index (an int) or a list of them.
    ValueError
        An index outside ``0 <= i < num_hidden_layers``; and what :func:`model_config` refuses.
    """
    wanted = model_request(directory, layers, name=name).layers  # config.json's refusals even when layers is None
    return None if wanted is None else list(wanted)


def token_ids(x, vocab_size, *, name: str = "x", where: str = "") -> np.ndarray:
    """Token ids (N, T) from ``x``, checked: integers of shape (T,) or (N, T), each ``0 <= id < vocab_size``.

    Parameters
    ----------
    x : array_like of int or torch.Tensor, shape (T,) or (N, T)
    vocab_size : int or None
        The model's vocabulary size (None: not checked).
    name : str, default "x"
        What the messages call ``x`` (``"--ids 'ids.npy'"`` on the command line).
    where : str, default ""
        Where ``vocab_size`` comes from, for the message (``"from 'DIR/config.json'"``).

    Returns
    -------
    ndarray of int64, shape (N, T)

    Raises
    ------
    TypeError
        ``x`` is not integers (or is ragged).
    ValueError
        Not of shape (T,) or (N, T) with N, T >= 1, or an id out of range: the first one is named
        with its position, and how many are.
    """
    try:
        arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be token ids of shape (T,) or (N, T); got a ragged {type(x).__name__}.") from None
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids (T,) or (N, T) (or a str, with a tokenizer.json in the "
                        f"model directory); got dtype {arr.dtype}.")
    if arr.ndim not in (1, 2) or 0 in arr.shape:
        raise ValueError(f"{name} must be token ids of shape (T,) or (N, T), T, N >= 1; got shape "
                         f"{shape_str(arr.shape)}.")
    if isinstance(vocab_size, int) and not isinstance(vocab_size, bool):
        out = (arr < 0) | (arr >= vocab_size)
        if out.any():
            at = tuple(int(i) for i in np.argwhere(out)[0])
            count = int(out.sum())
            raise ValueError(f"{name} must hold token ids with 0 <= id < vocab_size={vocab_size}"
                             f"{f' ({where})' if where else ''}; got {arr[at]} at {list(at)}"
                             f"{f' ({count:,} of {arr.size:,} ids out of range)' if count > 1 else ''}.")
    return (arr[None] if arr.ndim == 1 else arr).astype(np.int64)


def check_ids(directory, x, *, name: str = "x") -> np.ndarray:
    """Token ids checked against ``vocab_size`` of the directory's ``config.json`` (:func:`token_ids`).

    Parameters
    ----------
    directory : str or os.PathLike
        A model directory.
    x : array_like of int or torch.Tensor, shape (T,) or (N, T)
    name : str, default "x"
        What the messages call ``x``.

    Returns
    -------
    ndarray of int64, shape (N, T)

    Raises
    ------
    TypeError, ValueError
        From :func:`token_ids` and :func:`model_config`.
    """
    return model_request(directory).with_ids(x, name=name).ids
