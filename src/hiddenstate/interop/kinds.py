"""Cell kinds as the formats name them: kind names, a layer's kind, kinds told by weight shapes.

A layer's kind is read from its ``kind`` attribute (:func:`hiddenstate.cells.kind_of`); the gate
count G of each kind comes from :data:`hiddenstate.cells.KINDS`, so the kind of a recurrent
weight (G*H, H) is its rows over its columns. The layer class of each kind is read off the
classes' ``kind`` attributes (:data:`LAYERS`).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.cells import KINDS, CellKind, kind_of
from hiddenstate.layers import GRU, LSTM, RNN
from hiddenstate.recurrent import RecurrentLayer

__all__ = ["LAYERS", "gates_hint", "kind_from_weight_hh", "kind_name", "layer_kind", "with_article"]

#: The sequence layer class of every cell kind, by kind name (read off each class's ``kind``).
LAYERS: dict[str, type] = {cls.kind.name: cls for cls in (RNN, GRU, LSTM)}

_BY_GATES = {k.num_gates: name for name, k in KINDS.items()}
_ALIASES = {"SimpleRNN": "rnn"}  # Keras's name of the Elman RNN
_VOWEL_SOUND = "AEFHILMNORSX"  # initial letters whose spoken name starts with a vowel: "an RNN", "an LSTM"


def kind_name(name: str, kind) -> str:
    """Normalise a kind given as a string, a layer class or a :class:`~hiddenstate.cells.CellKind`.

    Parameters
    ----------
    name : str
        The argument's name, for the error message.
    kind : str, type or CellKind
        ``"rnn"`` (or Keras's ``"SimpleRNN"``), ``"gru"``, ``"lstm"`` in any case; one of the
        layer classes :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU`,
        :class:`~hiddenstate.LSTM`; or a registered cell kind (``hiddenstate.cells.KINDS["gru"]``).

    Returns
    -------
    str
        The kind's name, a key of :data:`hiddenstate.cells.KINDS`.

    Raises
    ------
    ValueError
        Anything else.
    """
    if isinstance(kind, type) and issubclass(kind, RecurrentLayer) and kind.kind is not None:
        return kind_of(kind).name
    if isinstance(kind, CellKind) and KINDS.get(kind.name) is kind:
        return kind.name
    if isinstance(kind, str):
        k = kind.lower().replace("_", "")
        k = {a.lower(): v for a, v in _ALIASES.items()}.get(k, k)
        if k in KINDS:
            return k
    names = ", ".join(repr(k) + "".join(f" (or {a!r})" for a, v in _ALIASES.items() if v == k) for k in KINDS)
    raise ValueError(f"{name} must be one of {names}; got {kind!r}.")


def layer_kind(layer) -> str:
    """The kind name of a sequence layer (``"rnn"``, ``"gru"``, ``"lstm"``), from its ``kind`` attribute.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        Any :class:`~hiddenstate.recurrent.RecurrentLayer` whose ``kind`` is registered.

    Returns
    -------
    str
        A key of :data:`hiddenstate.cells.KINDS`.

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


def with_article(kind: str) -> str:
    """The layer class of ``kind`` with its article, for messages.

    Parameters
    ----------
    kind : str
        A key of :data:`hiddenstate.cells.KINDS`.

    Returns
    -------
    str
        ``"an RNN"``, ``"a GRU"``, ``"an LSTM"``.
    """
    title = LAYERS[kind].__name__
    return ("an " if title[0] in _VOWEL_SOUND else "a ") + title

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
