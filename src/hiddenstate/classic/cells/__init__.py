"""The cell kinds, one module each (Elman RNN, GRU, LSTM, minGRU, minLSTM), and the registry that names them.

Each module declares its :class:`~hiddenstate.classic.cells.base.CellKind` once (gate blocks, scan
kernels, recorded gates, step Jacobian, options, reachable box) and its one-step cell class;
the sequence layers (:mod:`hiddenstate.classic.layers`) and every analysis tool read the kind from a
layer's ``kind`` attribute. To add a kind, write a module like :mod:`~hiddenstate.classic.cells.gru`
and add its ``KIND`` to :data:`KINDS`.
"""

from hiddenstate.classic.cells import gru, lstm, mingru, minlstm, rnn
from hiddenstate.classic.cells.base import Cell, CellKind, Record, Step
from hiddenstate.classic.cells.gru import GRUCell
from hiddenstate.classic.cells.lstm import LSTMCell
from hiddenstate.classic.cells.mingru import MinGRUCell
from hiddenstate.classic.cells.minlstm import MinLSTMCell
from hiddenstate.classic.cells.rnn import RNNCell

#: Every cell kind by name.
KINDS: dict[str, CellKind] = {k.name: k for k in (rnn.KIND, gru.KIND, lstm.KIND, mingru.KIND, minlstm.KIND)}


def kind_of(obj) -> CellKind:
    """The :class:`CellKind` of a layer or cell of this package (its ``kind`` attribute).

    Parameters
    ----------
    obj : hiddenstate layer or cell
        An :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU`, :class:`~hiddenstate.LSTM`,
        :class:`~hiddenstate.MinGRU`, :class:`~hiddenstate.MinLSTM`, a cell, or anything else whose ``kind`` attribute is a registered :class:`CellKind`.

    Returns
    -------
    CellKind

    Raises
    ------
    TypeError
        If ``obj`` has no registered cell kind.
    """
    kind = getattr(obj, "kind", None)
    if not isinstance(kind, CellKind) or KINDS.get(kind.name) is not kind:
        raise TypeError(f"layer must be a hiddenstate RNN, GRU or LSTM (or MinGRU, MinLSTM) layer or cell; "
                        f"got {type(obj).__name__}.")
    return kind


__all__ = ["KINDS", "Cell", "CellKind", "GRUCell", "LSTMCell", "MinGRUCell", "MinLSTMCell", "RNNCell", "Record", "Step",
           "kind_of"]
