"""Kinds of recurrent block and the view the analyses read of their records: :class:`Kind`, :class:`RecordView`.

A *kind* is one of our recurrent blocks as the family registry
(:mod:`hiddenstate.interop.families`) and the analyses (:mod:`hiddenstate.probe.layer_loop`)
use it: which block class a family's ``to_block`` returns, how the block is run with every step
recorded, which of its record's arrays are its states, and the :class:`RecordView` of a record,
the few arrays every analysis reads whatever the kind:

==============  ================================================================================
``state``       the state after every step flattened to its entries, (T, N, F): PCA, the memory
                curve, the explorer's state norm
``keep``        the keep gate (decay or forget gate) in (0, 1], (T, N, G), one column per gate
                unit as the kind defines it (a state entry, a head, a key channel); its time
                constants ``1 / (1 - mean)`` are shaped ``keep_shape``; None for a kind
                without one (a short convolution's window)
``lag_norms``   ``lag_norms(max_lag) -> LagNorms``: the norms of the exact Jacobian products
                ``dS_T/dS_{T-k}`` against the lag k
``units``       each unit's activation (a channel's readout), (T, N, U), with its keep gate
                ``unit_keep`` and the output gate's (0, 1) part ``out_gate`` (None where the kind's
                output gate is not one): the unit features and the explorer
``matrix``      a matrix state (T, N, H, Dk, Dv) for the effective rank per step, or None
==============  ================================================================================

Each kind's folder (``kinds/<kind>/``) holds its kernels, block, view, analysis and report card,
and its ``view`` module its :class:`Kind` record(s): the block, the view, the states, how it is
run, and lazy references to its analysis (a :class:`~hiddenstate.probe.layer_loop.LayerKind`) and
its card (a :class:`~hiddenstate.report.cards.KindCard`). The records are registered once, on one
line below; the registry (:data:`KINDS`, :func:`get_kind`, :func:`kind_of_block`) is the only
table keyed by a kind's name: the layer loop, the family page, the family inspection and the
recomputation of a transformers model's layers find everything of a kind through its record.

Registered: ``"mamba"``, ``"mamba2"`` (:mod:`hiddenstate.kinds.ssm`), ``"gated_delta"``, ``"kda"``
(:mod:`hiddenstate.kinds.delta`), ``"rglru"``, ``"lightning"``, ``"shortconv"`` and ``"cca"``
(ZAYA's CCA projection, in the short convolution's folder, whose output is the attention's queries,
keys and values: its block's ``d_out`` gives that width), ``"mlstm"`` and ``"rwkv"`` (each in its
folder). Another kind is one :func:`register_kind` call: its block's
``forward(u, state=None, *, record=True)`` returns ``(out, state_n, cache, record)`` (or give
``run``), and its ``view`` maps a record to a :class:`RecordView`;
:func:`unregister_kind` takes it out again.
"""

from __future__ import annotations

from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms, head_products, record_forward
from hiddenstate.kinds.delta import view as _delta_view
from hiddenstate.kinds.lightning import view as _lightning_view
from hiddenstate.kinds.mlstm import view as _mlstm_view
from hiddenstate.kinds.rglru import view as _rglru_view
from hiddenstate.kinds.rwkv import view as _rwkv_view
from hiddenstate.kinds.shortconv import view as _shortconv_view
from hiddenstate.kinds.ssm import view as _ssm_view

__all__ = ["BLOCKS", "KINDS", "Kind", "LagNorms", "RecordView", "diagonal_lag_norms", "get_kind", "head_products",
           "kind_of_block", "record_forward", "register_kind", "unregister_kind"]

#: The registered kinds by name.
KINDS: dict[str, Kind] = {}

#: Each registered kind's block class (the registry's ``Family.to_block`` must return one); kept equal to KINDS.
BLOCKS: dict[str, type] = {}


def register_kind(kind: Kind) -> Kind:
    """Add ``kind`` to :data:`KINDS` and its block to :data:`BLOCKS` (its name must be new).

    Parameters
    ----------
    kind : Kind

    Returns
    -------
    Kind
        ``kind``.

    Raises
    ------
    TypeError
        Not a Kind.
    ValueError
        A kind of that name is registered already.
    """
    if not isinstance(kind, Kind):
        raise TypeError(f"kind must be a Kind; got {type(kind).__name__}.")
    if kind.name in KINDS:
        raise ValueError(f"kind.name must be new; {kind.name!r} is registered already.")
    KINDS[kind.name] = kind
    BLOCKS[kind.name] = kind.block
    return kind


def get_kind(name: str) -> Kind:
    """The registered kind ``name``, or a one-line ValueError naming the registered ones.

    Parameters
    ----------
    name : str

    Returns
    -------
    Kind

    Raises
    ------
    ValueError
        No kind of that name.
    """
    if not isinstance(name, str) or name not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)} (our blocks); got {name!r}.")
    return KINDS[name]



def unregister_kind(name: str) -> Kind:
    """Take the kind ``name`` out of :data:`KINDS` and :data:`BLOCKS` (a test's toy kind, say).

    Parameters
    ----------
    name : str

    Returns
    -------
    Kind
        The record taken out.

    Raises
    ------
    ValueError
        No kind of that name.
    """
    kind = get_kind(name)
    del KINDS[name], BLOCKS[name]
    return kind


def kind_of_block(block) -> Kind | None:
    """The registered kind whose block class ``block`` is an instance of (the most derived one), or None.

    Parameters
    ----------
    block : object

    Returns
    -------
    Kind or None
    """
    found = [k for k in KINDS.values() if isinstance(block, k.block)]
    for k in found:  # a subclass's own kind wins over its base's
        if not any(o is not k and issubclass(o.block, k.block) and o.block is not k.block for o in found):
            return k
    return None


# the registry: every kind's folder gives its record(s), registered here once
for _kind in (*_ssm_view.KINDS, *_delta_view.KINDS, *_rglru_view.KINDS, *_lightning_view.KINDS,
              *_shortconv_view.KINDS, *_mlstm_view.KINDS, *_rwkv_view.KINDS):
    register_kind(_kind)
