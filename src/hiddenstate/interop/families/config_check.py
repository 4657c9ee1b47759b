"""A model directory's ``config.json`` checked field by field, and its layer count against the weights.

A hostile or damaged ``config.json`` used to reach transformers' or torch's own exceptions (a
negative ``hidden_size`` building a tensor of negative size, a string ``vocab_size``, a ``dtype``
of ``"bogus"``), or to hang the loader (``num_hidden_layers`` of 2,000 while the weights hold 2:
transformers' per-key weight conversion walks every module, so its cost grows with the square of
the layer count). Here every field is held, before anything is built, to the rules the family's
config class needs, each refusal one line naming the field, the rule and the value:

* a field that the family's config class declares ``int`` must be an int (not a bool, a float or
  a string), one it declares ``float`` a number (a union such as Mamba's ``time_step_rank: str |
  int`` takes what the class takes);
* an int that is a size or a count (a key naming a size, dim, number, heads, layers, vocab,
  rank, kernel, chunk, state, expand or experts, and ZAYA's convolution taps ``cca_time0``,
  ``cca_time1``) lies in ``[0, MAX_INT]``; a token id (a key ending in ``_id`` or ``_ids``) in ``[-MAX_INT, MAX_INT]``; any other int (``sliding_window: -1``
  marking none, a large integer ``rope_theta``, a seed) fits an int64, as torch reads it;
* every float is finite (inside a list, as in ``time_step_limit``, inf is allowed, NaN is not);
  an epsilon (a key holding ``eps`` or ``epsilon``) is a number > 0;
* ``dtype`` (and ``torch_dtype``) is one of :data:`DTYPES`;
* nested configs (``text_config`` ...) are checked by the same rules.

:func:`check_layer_count` holds the model's ``num_hidden_layers`` to the layers its weight
headers hold (the largest ``layers.<i>.`` / ``blocks.<i>.`` index), before the model is built.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

__all__ = ["DTYPES", "MAX_INT", "check_config_fields", "check_epsilons", "check_layer_count"]

#: The largest int a config field may hold (no size, count or id of a real model comes near it).
MAX_INT = 2**31 - 1
#: The ``dtype`` values a config may name (transformers' spellings of torch's floating dtypes).
DTYPES = ("auto", "bfloat16", "float16", "float32", "float64", "half", "float", "double")
#: An int field's key that names a size or a count: never negative, at most MAX_INT.
_SIZE_KEY = re.compile(r"size|dim|^n_|_n_|num_|_num|heads|layers|vocab|rank|kernel|chunk|state|expand|experts|"
                       r"intermediate|width|position|^d_|_d_|^cca_time", re.IGNORECASE)
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|blocks|layer|h)\.(\d+)\.")


@functools.lru_cache(maxsize=64)
def _field_types(config_class) -> dict:
    """``{field: int or float}``: the config class's fields declared exactly ``int`` or ``float`` (not a union)."""
    if not dataclasses.is_dataclass(config_class):
        return {}
    plain = {int: int, float: float, "int": int, "float": float}
    return {f.name: plain[f.type] for f in dataclasses.fields(config_class) if plain.get(f.type) is not None}


def _kind(value) -> str:
    return "a bool" if isinstance(value, bool) else f"a {type(value).__name__}"


def _check_scalar(key: str, value, declared, where: str, *, shown: str, in_list: bool = False) -> None:
    """One field's value held to its declared type and to the int/float/epsilon rules."""
    name = f"{where} field {shown}"
    if declared is int and value is not None and (
            isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{name} must be an int (as the family's config class reads it); got {_kind(value)} "
                        f"{value!r:.60}. Fix config.json.")
    if declared is float and value is not None and (isinstance(value, bool) or
                                                             not isinstance(value, (int, float))):
        raise TypeError(f"{name} must be a number (as the family's config class reads it); got {_kind(value)} "
                        f"{value!r:.60}. Fix config.json.")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    eps = "eps" in key.lower() or "epsilon" in key.lower()
    if isinstance(value, int):
        if key.endswith(("_id", "_ids")):
            low, high = -MAX_INT, MAX_INT
        elif _SIZE_KEY.search(key):
            low, high = 0, MAX_INT
        else:  # no size: a flag value such as sliding_window -1, or a large rope_theta
            low, high = -(2**63), 2**63 - 1
        if not low <= value <= high:
            raise ValueError(f"{name} must be an int in [{low:,}, {high:,}]; got {value}. Fix config.json.")
        if eps and value <= 0:
            raise ValueError(f"{name} must be a number > 0 (an epsilon); got {value}. Fix config.json.")
        return
    if math.isnan(value) or (math.isinf(value) and not in_list):
        raise ValueError(f"{name} must be a finite number; got {value}. Fix config.json.")
    if eps and not value > 0:
        raise ValueError(f"{name} must be a number > 0 (an epsilon); got {value}. Fix config.json.")


def _check_fields(cfg: dict, types: dict, where: str, prefix: str = "") -> None:
    for key, value in cfg.items():
        if not isinstance(key, str) or key == "quantization_config":  # not read by the model (GPTQ's group_size -1)
            continue
        declared = types.get(key)
        shown = prefix + key
        if isinstance(value, dict):
            _check_fields(value, {}, where, shown + ".")  # a nested config: the generic rules
        elif isinstance(value, list):
            for item in value:
                if not isinstance(item, (dict, list)):
                    _check_scalar(key, item, None, where, shown=shown, in_list=True)
        else:
            _check_scalar(key, value, declared, where, shown=shown)
            if key in ("dtype", "torch_dtype") and value is not None and value not in DTYPES:
                raise ValueError(f"{where} field {shown} must be one of {', '.join(DTYPES)}; got {value!r:.60}. "
                                 "Fix config.json.")


def check_config_fields(cfg: dict, config_class, where: str) -> None:
    """Refuse a ``config.json`` whose fields the family's config class cannot read as a model's.

    Parameters
    ----------
    cfg : dict
        The parsed ``config.json`` (its special floats read back).
    config_class : type
        The family's transformers config class (its declared field types).
    where : str
        How the messages name the file (``"'DIR/config.json'"``).

    Raises
    ------
    TypeError
        A field declared ``int`` given as a bool, float or string (or a number field given
        as something else).
    ValueError
        A size or count outside ``[0, MAX_INT]``, a token id outside ``[-MAX_INT, MAX_INT]``,
        another int outside int64, a float that is NaN or
        infinite (inf is allowed inside a list), an epsilon that is not > 0, a ``dtype`` that is
        not one of :data:`DTYPES`.
    """
    _check_fields(cfg, _field_types(config_class), where)


def check_epsilons(config, where: str = "model.config") -> None:
    """Refuse a model object's config whose epsilons (``layer_norm_epsilon``, ``rms_norm_eps`` ...) are not > 0.

    A model built in Python never passed through ``config.json``: a NaN or negative epsilon would
    make its norms NaN, refused later as "u must be finite", naming nothing the user set.

    Parameters
    ----------
    config : transformers config or None
        The model's config (None: nothing to check).
    where : str, default "model.config"
        How the messages name it.

    Raises
    ------
    ValueError
        An epsilon field (nested configs included) that is NaN, infinite or not > 0.
    """
    fields = config.to_dict() if callable(getattr(config, "to_dict", None)) else {}
    stack = [("", fields)]
    while stack:
        prefix, d = stack.pop()
        for key, value in d.items():
            if isinstance(value, dict) and key != "quantization_config":
                stack.append((f"{prefix}{key}.", value))
            elif isinstance(key, str) and ("eps" in key.lower() or "epsilon" in key.lower()) and isinstance(
                    value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{where}.{prefix}{key} must be a number > 0 (an epsilon); got {value}. Set it on "
                                 "the config (and the norms) before running the model.")


def _count(config, key: str):
    value = getattr(config, key, None)
    if value is None and callable(getattr(config, "get_text_config", None)):
        value = getattr(config.get_text_config(), key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_layer_count(config, names, where: str, source: str) -> None:
    """Refuse a ``num_hidden_layers`` above the layers the weights hold, before a model of that many is built.

    Parameters
    ----------
    config : transformers config
        The model's config (a composite's text config gives the count).
    names : iterable of str
        The tensor names of the weight headers.
    where : str
        How the messages name ``config.json``.
    source : str
        How the messages name the weights.

    Raises
    ------
    ValueError
        ``num_hidden_layers`` is larger than one plus the largest ``layers.<i>.`` (``blocks``,
        ``layer``, ``h``) index among the names (nothing is refused when no name has one).
    """
    n = _count(config, "num_hidden_layers")
    held = max((int(m.group(1)) + 1 for name in names for m in _LAYER_INDEX.finditer(name)), default=None)
    if n is not None and held is not None and n > held:
        raise ValueError(f"{where} field num_hidden_layers must be at most the {held} layer(s) that the weights in "
                         f"{source} hold; got {n:,}. Fix config.json (or copy the whole model directory).")
