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

Registered here: ``"mamba"`` (:class:`~hiddenstate.Mamba`, a keep gate per state entry) and
``"mamba2"`` (:class:`~hiddenstate.Mamba2`, per head); :mod:`hiddenstate.delta_views` adds
``"gated_delta"`` (:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`) and ``"kda"``
(:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention`); :mod:`hiddenstate.kinds.recurrences` adds
``"rglru"`` (:class:`~hiddenstate.kinds.rglru.block.RGLRUBlock`, a keep gate per channel), ``"lightning"``
(:class:`~hiddenstate.kinds.lightning.block.LightningAttention`, a matrix state, a constant decay per head)
and ``"shortconv"`` (:class:`~hiddenstate.kinds.shortconv.block.ShortConv`, a window: no keep gate);
:mod:`hiddenstate.kinds.mlstm.view` adds ``"mlstm"`` (:class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer`, a forget gate per
head, a matrix memory) and :mod:`hiddenstate.kinds.rwkv.view` ``"rwkv"`` (:class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix`,
a fixed decay per channel). Another kind is one
:func:`register_kind` call: its block's ``forward(u, state=None, *, record=True)`` returns
``(out, state_n, cache, record)`` (or give ``run``), and its ``view`` maps a record to a
:class:`RecordView`.
"""

from __future__ import annotations

from hiddenstate.kinds import recurrences
from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms, head_products, record_forward
from hiddenstate.kinds.delta import view as _delta_view
from hiddenstate.kinds.mlstm import view as _mlstm_view
from hiddenstate.kinds.rwkv import view as _rwkv_view
from hiddenstate.kinds.ssm import view as _ssm_view

__all__ = ["BLOCKS", "KINDS", "Kind", "LagNorms", "RecordView", "diagonal_lag_norms", "get_kind", "head_products",
           "record_forward", "register_kind"]

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



for _kind in (*_ssm_view.KINDS, *_delta_view.KINDS, *recurrences.KINDS, *_mlstm_view.KINDS, *_rwkv_view.KINDS):
    register_kind(_kind)
