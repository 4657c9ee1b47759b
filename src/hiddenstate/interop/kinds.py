"""Cell kinds as the formats name them: kind names, a layer's kind, kinds told by weight shapes.

A layer's kind is read from its ``kind`` attribute (:func:`hiddenstate.classic.cells.kind_of`); the gate
count G of each kind comes from :data:`hiddenstate.classic.cells.KINDS`, so the kind of a recurrent
weight (G*H, H) is its rows over its columns. The layer class of each kind is read off the
classes' ``kind`` attributes (:data:`LAYERS`). torch, Keras and ONNX know only the kinds with
recurrent weights (:data:`RECURRENT`); minGRU and minLSTM (``CellKind.recurrent`` False) are
named by :func:`kind_name` only where a caller allows them (safetensors files) and refused with a
message everywhere else (:func:`convertible_kind`).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells import KINDS, CellKind, kind_of
from hiddenstate.classic.layers import GRU, LSTM, RNN, MinGRU, MinLSTM
from hiddenstate.classic.recurrent import RecurrentLayer

__all__ = ["LAYERS", "RECURRENT", "convertible_kind", "gates_hint", "kind_from_weight_hh", "kind_name", "layer_kind",
           "with_article"]

#: The sequence layer class of every cell kind, by kind name (read off each class's ``kind``).
LAYERS: dict[str, type] = {cls.kind.name: cls for cls in (RNN, GRU, LSTM, MinGRU, MinLSTM)}

#: The kinds with recurrent weights ``weight_hh`` (those torch, Keras and ONNX have), in registry order.
RECURRENT = tuple(name for name, k in KINDS.items() if k.recurrent)

_BY_GATES = {KINDS[name].num_gates: name for name in RECURRENT}
_ALIASES = {"SimpleRNN": "rnn"}  # Keras's name of the Elman RNN
_VOWEL_SOUND = "AEFHILMNORSX"  # initial letters whose spoken name starts with a vowel: "an RNN", "an LSTM"


def kind_name(name: str, kind, *, linear: bool = False) -> str:
    """Normalise a kind given as a string, a layer class or a :class:`~hiddenstate.classic.cells.CellKind`.

    Parameters
    ----------
    name : str
        The argument's name, for the error message.
    kind : str, type or CellKind
        ``"rnn"`` (or Keras's ``"SimpleRNN"``), ``"gru"``, ``"lstm"`` in any case; one of the
        layer classes :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU`,
        :class:`~hiddenstate.LSTM`; or a registered cell kind (``hiddenstate.classic.cells.KINDS["gru"]``).
    linear : bool, default False
        Also accept the kinds without recurrent weights (``"mingru"``, ``"minlstm"``, their
        classes and cell kinds); otherwise they raise, naming the format's limit.

    Returns
    -------
    str
        The kind's name, a key of :data:`hiddenstate.classic.cells.KINDS`.

    Raises
    ------
    ValueError
        Anything else, and a kind without recurrent weights unless ``linear``.
    """
    found = None
    if isinstance(kind, type) and issubclass(kind, RecurrentLayer) and kind.kind is not None:
        found = kind_of(kind).name
    elif isinstance(kind, CellKind) and KINDS.get(kind.name) is kind:
        found = kind.name
    elif isinstance(kind, str):
        k = kind.lower().replace("_", "")
        k = {a.lower(): v for a, v in _ALIASES.items()}.get(k, k)
        if k in KINDS:
            found = k
    if found is not None and (linear or found in RECURRENT):
        return found
    if found is not None:
        raise ValueError(f"{name} must be a kind with recurrent weights ({', '.join(map(repr, RECURRENT))}); got "
                         f"{kind!r}: {with_article(found)} has no weight_hh (its gates read the input only), so "
                         f"torch, Keras and ONNX have no layer for it. Save it with save_safetensors.")
    allowed = KINDS if linear else RECURRENT
    names = ", ".join(repr(k) + "".join(f" (or {a!r})" for a, v in _ALIASES.items() if v == k) for k in allowed)
    raise ValueError(f"{name} must be one of {names}; got {kind!r}.")


def layer_kind(layer) -> str:
    """The kind name of a sequence layer (``"rnn"``, ``"gru"``, ``"lstm"``), from its ``kind`` attribute.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        Any :class:`~hiddenstate.classic.recurrent.RecurrentLayer` whose ``kind`` is registered.

    Returns
    -------
    str
        A key of :data:`hiddenstate.classic.cells.KINDS`.

    Raises
    ------
    TypeError
        ``layer`` is not a sequence layer of this package (a one-step cell included: it has no
        ``_l{k}`` parameters to convert).
    """
    if not isinstance(layer, RecurrentLayer):
        cell = " (a one-step cell; build a one-layer sequence layer with its weights)" if isinstance(
            getattr(layer, "kind", None), CellKind) else ""
        raise TypeError(f"layer must be a hiddenstate RNN, GRU or LSTM layer; got {type(layer).__name__}{cell}.")
    return kind_of(layer).name


def convertible_kind(layer, target: str) -> str:
    """:func:`layer_kind`, for a conversion to a format that knows only the kinds with recurrent weights.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        The layer to convert.
    target : str
        What it would become, for the message (``"a torch module"``).

    Returns
    -------
    str
        A key of :data:`RECURRENT`.

    Raises
    ------
    TypeError
        As :func:`layer_kind`.
    ValueError
        A :class:`~hiddenstate.MinGRU` or :class:`~hiddenstate.MinLSTM` (no recurrent weights).
    """
    kind = layer_kind(layer)
    if kind not in RECURRENT:
        raise ValueError(f"layer must be an RNN, GRU or LSTM to become {target}; got {with_article(kind)}, which "
                         f"has no weight_hh (its gates read the input only) and no counterpart there. Save it with "
                         f"save_safetensors (torch's parameter names; load_safetensors rebuilds it).")
    return kind


def with_article(kind: str) -> str:
    """The layer class of ``kind`` with its article, for messages.

    Parameters
    ----------
    kind : str
        A key of :data:`hiddenstate.classic.cells.KINDS`.

    Returns
    -------
    str
        ``"an RNN"``, ``"a GRU"``, ``"an LSTM"``, ``"a MinGRU"``.
    """
    title = LAYERS[kind].__name__
    word = len(title) > 1 and title[1].islower()  # "MinGRU" is read as a word, "RNN" letter by letter
    return ("an " if title[0] in ("AEIOU" if word else _VOWEL_SOUND) else "a ") + title

def kind_from_weight_hh(w_hh: np.ndarray) -> str | None:
    """The kind a recurrent weight belongs to, from its rows: G = rows / H.

    Parameters
    ----------
    w_hh : ndarray of shape (G*H, H)
        A ``weight_hh_l{k}``.

    Returns
    -------
    str or None
        The name of the kind with G gate blocks, or None if the shape fits no kind.
    """
    if w_hh.ndim != 2 or w_hh.shape[1] == 0 or w_hh.shape[0] % w_hh.shape[1]:
        return None
    return _BY_GATES.get(w_hh.shape[0] // w_hh.shape[1])


def gates_hint(rows: int, H: int) -> str:
    """What a row count would mean for another kind, to append to a shape error.

    Parameters
    ----------
    rows : int
        The rows (or, for Keras, columns) of a recurrent weight that did not fit.
    H : int
        The hidden size.

    Returns
    -------
    str
        ``", the 3*H rows of a GRU"`` when ``rows`` is G*H for some kind's G, else ``""``.
    """
    if H and rows % H == 0 and rows // H in _BY_GATES:
        return f", the {rows // H}*H rows of {with_article(_BY_GATES[rows // H])}"
    return ""
