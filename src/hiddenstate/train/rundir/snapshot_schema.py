"""The rules of a run checkpoint's contents: every entry of its ``meta.json`` and its arrays.

:class:`~hiddenstate.train.rundir.snapshot.Snapshot` reads a checkpoint through :func:`check_meta` and
:func:`check_weights` before anything is built from it, so a checkpoint that is not what
:func:`~hiddenstate.train.train` writes is refused with one ``ValueError`` naming the file and the
entry (``"'runs/gru/checkpoint/meta.json': field 'step' must be a non-negative integer; got str
'five'."``), never a KeyError, an OverflowError or a model with silently wrong values later.

The rules are those of the values themselves: the ``train`` entries use
:data:`hiddenstate.train.config.RULES` (the rules of ``TrainConfig`` and the CLI's flags), the
``model`` entries the rules of :class:`~hiddenstate.train.model.CharRNN`'s arguments, the
vocabulary :meth:`~hiddenstate.train.corpus.Vocabulary.from_json`; integers must fit in int64.
Entries that are written twice must agree (``model.hidden_size`` and ``train.hidden_size``, the
vocabulary's size and ``model.vocab_size``, the batcher's layout and ``train``).
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

from hiddenstate.core.validation import choice, drop_probability, nonnegative_int, positive_int, real
from hiddenstate.kinds.ssm.stack import D_CONV, D_STATE, EXPAND
from hiddenstate.train.config import DTYPES, RULES, TrainConfig
from hiddenstate.train.corpus import Vocabulary
from hiddenstate.train.model import CELLS
from hiddenstate.train.rundir.checkpoint_record import check_field

__all__ = ["BATCHER", "INT64_MAX", "MODEL", "RNG", "TEXT", "check_mamba_carry", "check_meta",
           "check_weights"]

#: The largest integer an entry may hold (every count ends up in an int64 array or a C loop).
INT64_MAX = 2**63 - 1
_UINT128 = 2**128


def _bounded(check, high: int = INT64_MAX):
    def rule(name: str, value) -> int:
        value = check(name, value)
        if value > high:
            raise ValueError(f"{name} must be at most {high}; got {value}.")
        return value
    return rule


def _optional(rule):
    return lambda name, value: None if value is None else rule(name, value)


def _string(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string; got {type(value).__name__} {value!r}.")
    return value


def _sha256(name: str, value) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"{name} must be a SHA-256 in 64 lowercase hex digits; got {value!r}.")
    return value


def _path(name: str, value) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty path string; got {value!r}.")
    return value


_count = _bounded(nonnegative_int)
_size = _bounded(positive_int)
_nonnegative = functools.partial(real, low=0.0)

#: ``meta["model"]`` (``CharRNN.config()``): key -> (rule, required).
MODEL = {
    "vocab_size": (_size, True),
    "hidden_size": (_size, True),
    "num_layers": (_size, False),
    "cell": (functools.partial(choice, options=CELLS), False),
    "embedding_dim": (_optional(_size), False),
    "dropout": (drop_probability, False),
    "weight_drop": (drop_probability, False),
    "dtype": (functools.partial(choice, options=DTYPES), True),
}
#: ``meta["batcher"]`` (``StreamBatcher.state_dict()``): key -> rule; all required.
BATCHER = {"batch_size": _size, "seq_len": _size, "num_tokens": _count, "epoch": _count, "batch_index": _count}
#: ``meta["text"]``: key -> rule; all required.
TEXT = {"chars": _count, "sha256": _sha256, "source": _string, "train_chars": _count, "val_chars": _count}
#: ``meta["rng"]`` (``PCG64().state``): key -> rule; all required.
RNG = {
    "bit_generator": functools.partial(choice, options=("PCG64",)),
    "state": None,  # {"state", "inc"}: 128-bit unsigned integers, checked below
    "has_uint32": _bounded(nonnegative_int, 1),
    "uinteger": _bounded(nonnegative_int, 2**32 - 1),
}
_OPTIONAL_TRAIN = frozenset(f.name for f in dataclasses.fields(TrainConfig) if f.default is None)
_TRAIN = {f.name: RULES.get(f.name) for f in dataclasses.fields(TrainConfig)}
_TRAIN.update(data=_optional(_path), out=_path, tune_initial_state=_optional(_path))
# int64-bounded: the sizes and counts (the seed is any non-negative integer, as numpy takes it)
_INTS = frozenset(name for name, rule in RULES.items() if rule in (positive_int, nonnegative_int)) - {"seed"}


def _train_rule(name: str):
    rule = _TRAIN[name]
    if rule is None:  # a field without a rule (added since): taken as it is
        return lambda _, value: value
    if name in _INTS:
        rule = _bounded(rule)
    return _optional(rule) if name in _OPTIONAL_TRAIN else rule


def _object(where: str, field: str, value, allowed, required=()) -> dict:
    """``value`` must be a dict with only ``allowed`` keys and every ``required`` one."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: field '{field}' must be a JSON object; got {type(value).__name__} {value!r:.80}.")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: field '{field}' has unknown entries {unknown}; allowed: {sorted(allowed)}. "
                         "It was written by another hiddenstate version, or edited.")
    missing = [key for key in required if key not in value]
    if missing:
        raise ValueError(f"{where}: field '{field}' must hold {list(required)}; missing {missing}.")
    return value


def _same(where: str, field: str, value, other: str, expected) -> None:
    if value != expected:
        raise ValueError(f"{where}: field '{field}' must equal field '{other}' ({expected!r}); got {value!r}. "
                         "The checkpoint is inconsistent: it was not written by hiddenstate.train, or was edited.")


def _check_rng(where: str, value) -> None:
    _object(where, "rng", value, RNG, RNG)
    for key, rule in RNG.items():
        if rule is not None:
            check_field(where, f"rng.{key}", rule, value[key])
    inner = _object(where, "rng.state", value["state"], ("state", "inc"), ("state", "inc"))
    for key in ("state", "inc"):
        check_field(where, f"rng.state.{key}", _bounded(nonnegative_int, _UINT128 - 1), inner[key])
    try:
        np.random.PCG64().state = value
    except (TypeError, ValueError, OverflowError, KeyError) as error:  # pragma: no cover (checked above)
        raise ValueError(f"{where}: field 'rng' must be a PCG64 state; got: {error}.") from None


def check_meta(meta: dict, where: str) -> None:
    """Check every entry of a run's ``meta.json`` document (besides ``kind``) against its rule.

    Parameters
    ----------
    meta : dict
        The document (:data:`hiddenstate.train.rundir.snapshot.META` lists its entries), with every
        required entry present.
    where : str
        The file, for messages (e.g. ``"'runs/gru/checkpoint/meta.json'"``).

    Raises
    ------
    ValueError
        An entry of the wrong type or range, an unknown entry, or two entries that disagree:
        ``"<where>: field 'train.lr' must be a finite number > 0; got str 'fast'."``.
    """
    model = _object(where, "model", meta["model"], MODEL, [k for k, (_, req) in MODEL.items() if req])
    for key, value in model.items():
        check_field(where, f"model.{key}", MODEL[key][0], value)
    train = _object(where, "train", meta["train"], _TRAIN)
    for key, value in train.items():
        check_field(where, f"train.{key}", _train_rule(key), value)
    for key in ("cell", "hidden_size", "num_layers", "embedding_dim", "dropout", "weight_drop", "dtype"):
        if key in model and key in train:
            _same(where, f"model.{key}", model[key], f"train.{key}", train[key])
    vocab = _object(where, "vocab", meta["vocab"], ("chars",), ("chars",))
    try:
        size = Vocabulary.from_json(vocab).size
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: field 'vocab' must be Vocabulary.to_json() of a text; got: {error}") from None
    _same(where, "model.vocab_size", model["vocab_size"], "len(vocab.chars)", size)
    check_field(where, "step", _count, meta["step"])
    check_field(where, "val_loss", _optional(_nonnegative), meta["val_loss"])
    check_field(where, "elapsed_s", _nonnegative, meta["elapsed_s"])
    if "torch" in meta:
        check_field(where, "torch", _string, meta["torch"])
    batcher = _object(where, "batcher", meta["batcher"], BATCHER, BATCHER)
    for key, rule in BATCHER.items():
        check_field(where, f"batcher.{key}", rule, batcher[key])
    for key in ("batch_size", "seq_len"):
        if key in train:
            _same(where, f"batcher.{key}", batcher[key], f"train.{key}", train[key])
    text = _object(where, "text", meta["text"], TEXT, TEXT)
    for key, rule in TEXT.items():
        check_field(where, f"text.{key}", rule, text[key])
    _same(where, "text.chars", text["chars"], "text.train_chars + text.val_chars",
          text["train_chars"] + text["val_chars"])
    _same(where, "batcher.num_tokens", batcher["num_tokens"], "text.train_chars", text["train_chars"])
    _check_rng(where, meta["rng"])


def check_weights(where: str, tensors: dict, dtype: str, what: str = "tensor") -> None:
    """Each array must be floating and finite once cast to the model's dtype.

    A float64 value of 1e300 is finite, but becomes inf in a float32 model; this is checked after
    the cast, so such a checkpoint is refused instead of loading infinite weights.

    Parameters
    ----------
    where : str
        The file, for messages (e.g. ``"'runs/gru/checkpoint/model.safetensors'"``).
    tensors : dict of str to ndarray
        The arrays, by name.
    dtype : {"float32", "float64"}
        The model's dtype (``meta["model"]["dtype"]``).
    what : str, default "tensor"
        What the messages call an array.

    Raises
    ------
    ValueError
        ``"<where>: tensor 'decoder.weight' must be finite as float32; got 3 value(s) that are or
        become inf or nan (largest magnitude 1e+300)."``, or an array that is not floating.
    """
    target = np.dtype(dtype)
    for key, value in tensors.items():
        if value.dtype.kind != "f":
            raise ValueError(f"{where}: {what} '{key}' must be a floating array; got dtype {value.dtype}.")
        with np.errstate(over="ignore", invalid="ignore"):
            bad = int(value.size - np.count_nonzero(np.isfinite(value.astype(target, copy=False))))
        if bad:
            finite = value[np.isfinite(value)]
            largest = f"; largest finite magnitude {float(np.abs(finite).max()):.3g}" if finite.size else ""
            raise ValueError(f"{where}: {what} '{key}' must be finite as {target}; got {bad} value(s) that are or "
                             f"become inf or nan{largest}. The checkpoint was written by another program or "
                             "with another dtype; it cannot be loaded into this model.")


def check_mamba_carry(where: str, carry: dict, model: dict, batch_size: int) -> None:
    """The carried state of a ``cell="mamba"`` run: both arrays, of their shapes, finite.

    Parameters
    ----------
    where : str
        The file, for messages.
    carry : dict of str to ndarray
        The ``carry.*`` arrays found.
    model : dict
        ``meta["model"]`` (already checked).
    batch_size : int
        N, ``meta["batcher"]["batch_size"]``.

    Raises
    ------
    ValueError
        Not exactly ``carry.ssm`` (L, N, Di, S) and ``carry.conv`` (L, N, Di, K-1) with
        ``Di = EXPAND * hidden_size``, ``S = D_STATE``, ``K = D_CONV``; non-finite values.
    """
    L, Di = model.get("num_layers", 1), EXPAND * model["hidden_size"]
    want = {"carry.ssm": (L, batch_size, Di, D_STATE), "carry.conv": (L, batch_size, Di, D_CONV - 1)}
    if set(carry) != set(want):
        raise ValueError(f"{where} must hold exactly {sorted(want)} for cell 'mamba'; got {sorted(carry)}.")
    for key, shape in want.items():
        if carry[key].shape != shape:
            raise ValueError(f"{where}: array '{key}' must have shape {shape} (L, N, Di, "
                             f"{'S' if key == 'carry.ssm' else 'K-1'}); got {carry[key].shape}.")
    check_weights(where, carry, model["dtype"], what="array")
