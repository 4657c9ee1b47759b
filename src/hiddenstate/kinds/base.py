"""The kind protocol: :class:`Kind`, :class:`RecordView`, :class:`LagNorms` and the diagonal recurrences' lag norms.

See :mod:`hiddenstate.kinds` for what each field means to the registry and the analyses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from hiddenstate.core.validation import positive_int

__all__ = ["Kind", "LagNorms", "RecordView", "diagonal_lag_norms", "head_products", "record_forward", "resolve"]


class LagNorms(NamedTuple):
    """The norms of the exact Jacobian products ``dS_T/dS_{T-k}``, k = 0 .. K-1, averaged over the N sequences.

    Attributes
    ----------
    spectral : ndarray of shape (K,)
        The spectral norm of the whole state's product (for a diagonal one, its largest entry).
    rms : ndarray of shape (K,)
        ``||J||_F / sqrt(F)``: what the product keeps of a gradient spread evenly over the F state
        entries (for a diagonal one, the root mean square of its entries).
    heads : ndarray of shape (K, H), or None
        Per head, the spectral norm of its block (None for a kind without heads).
    """

    spectral: np.ndarray
    rms: np.ndarray
    heads: np.ndarray | None = None


class RecordView(NamedTuple):
    """What the analyses read of one layer's record, whatever the kind (time-major, T steps, N sequences).

    Attributes
    ----------
    state : ndarray of shape (T, N, F)
        The recurrent state after every step, every entry a feature.
    keep : ndarray of shape (T', N, G), or None
        The keep gate in (0, 1] per gate unit (Mamba: per state entry; Mamba-2 and the gated
        delta rule: per head; KDA: per head and key channel; RG-LRU: per channel, without its
        document starts, so T' <= T); None for a kind whose state no gate keeps (a short
        convolution's window): no decay statistics and no time constants.
    keep_shape : tuple of int
        How the G gate units unfold (``(Di, S)``, ``(H,)``, ``(Hv, Dk)``): the time constants' shape.
    keep_name : str
        What the keep gate is called in the layer's gate statistics (``"decay"``, ``"head decay"``).
    lag_norms : callable
        ``lag_norms(max_lag) -> LagNorms`` for k = 0 .. min(max_lag, T).
    units : ndarray of shape (T, N, U)
        Each unit's activation: a channel's readout (Mamba's ``y``, the delta rule's ``o`` per
        head-channel).
    unit_keep : ndarray of shape (T, N, U), or None
        Each unit's keep gate, in [0, 1] (None where ``keep`` is None).
    out_gate : ndarray of shape (T, N, U), or None
        The output gate's (0, 1) part (``sigmoid(z)``); None when the kind's output gate is not a
        (0, 1) gate.
    matrix : ndarray of shape (T, N, H, Dk, Dv), or None
        A matrix state per head (for the effective rank per step); None for the other kinds.
    out_gate_name : str, default "sigmoid(z)"
        What the output gate is called (the gate statistics' name, the explorer's button).
    """

    state: np.ndarray
    keep: np.ndarray
    keep_shape: tuple
    keep_name: str
    lag_norms: Callable
    units: np.ndarray
    unit_keep: np.ndarray
    out_gate: np.ndarray | None = None
    matrix: np.ndarray | None = None
    out_gate_name: str = "sigmoid(z)"


def record_forward(block, u, **forward):
    """The default :attr:`Kind.run`: ``out, _, _, record = block.forward(u, record=True, **forward)``.

    Parameters
    ----------
    block : a block of the kind
    u : ndarray of shape (N, T, M)
        With ``batch_first=True`` blocks (what the registry's ``to_block`` builds).
    **forward
        More keywords of the block's ``forward``: what a family's ``hooked`` read off the model's
        call (RecurrentGemma's ``reset`` at ``position_ids == 0``, (N, T)).

    Returns
    -------
    out : ndarray of shape (N, T, M)
    record : NamedTuple
        The block's record, time-major (T, N, ...).
    """
    out, _, _, rec = block.forward(u, record=True, **forward)
    return out, rec


def resolve(ref):
    """What a lazy reference names: ``"package.module:NAME"`` imported on first use, anything else as it is.

    Parameters
    ----------
    ref : str, object or None
        ``"hiddenstate.kinds.ssm.mamba_analysis:MAMBA"`` (a module and a name in it, separated by
        a colon), or the object itself, or None.

    Returns
    -------
    object
        The named object (``ref`` itself when it is not a str).

    Raises
    ------
    ValueError
        A str without exactly one ``":"``.
    ImportError, AttributeError
        No such module, or no such name in it.
    """
    if not isinstance(ref, str):
        return ref
    module, sep, name = ref.partition(":")
    if not sep or not module or not name or ":" in name:
        raise ValueError(f"ref must be 'package.module:NAME'; got {ref!r}.")
    return getattr(importlib.import_module(module), name)


def _is_ref(value) -> bool:
    return value is None or isinstance(value, str) or callable(value) or hasattr(value, "_fields")


@dataclass(frozen=True, repr=False)
class Kind:
    """One kind of recurrent block: everything the package needs of it, in one record.

    The block, its view and its states are imported with the kind (they stand on the core floor);
    its analysis and its report card stand on the probe and report floors, so the record names
    them lazily (``"hiddenstate.kinds.ssm.mamba_analysis:MAMBA"``), resolved on first use by
    :meth:`layer_kind` and :meth:`report_card`: ``import hiddenstate.kinds`` stays NumPy only.

    Attributes
    ----------
    name : str
        The kind's name, what a family's ``kind`` says (``"mamba2"``, ``"gated_delta"``).
    block : type
        The block class (a family's ``to_block`` must return one).
    view : callable
        ``view(record) -> RecordView``.
    states : callable
        ``states(record) -> dict of str to ndarray (T, N, ...)``: every step's states by name, in
        the order of the block's state tuple (``{"ssm": ..., "conv": ...}``).
    run : callable, default :func:`record_forward`
        ``run(block, u, **forward) -> (out, record)``: the block on ``u`` (N, T, M) with every
        step recorded (``forward``: the keywords a family's ``hooked`` gives, such as ``reset``).
    description : str, default ""
        One line: the state and its keep gate, for the docs.
    analysis : str or LayerKind, optional
        The kind's :class:`~hiddenstate.probe.layer_loop.LayerKind` (what the shared layer loop
        needs of its records), or a lazy ``"module:NAME"`` reference to it. None: the kind has
        no analysis.
    card : str or KindCard, optional
        The kind's :class:`~hiddenstate.report.cards.KindCard` (what the family page says of
        it), or a lazy reference. None: the page's generic card (the analysis's ``card_rows``).
    analyze : str or callable, optional
        The kind's own analysis entry point for one of our blocks or models
        (``analyze_mamba(model, x, states=None, *, max_lag, model_name, text, tokens)``), or a
        lazy reference. None: the generic one, :func:`hiddenstate.probe.block_analysis.analyze_block`.
    title : str, default ""
        The kind's name in prose (``"Mamba"``, ``"Mamba-2"``), for a report's title; default ``name``.
    share : callable, optional
        ``share(block, record) -> float``: the state-dependent part's share of the layer's
        readout (:func:`hiddenstate.kinds.agreement.readout_share`; Mamba's ``var(C h) /
        var(C h + D x)``). None: the kind reads all of its output out of the state (share 1).
    skip : tuple of str, default ()
        The block's parameters that carry the direct term (Mamba's ``("D",)``), under the
        names the model's mixer gives them too: the state-part check runs the layer again with
        them set to 0, in the model's own mixer and in our block
        (:mod:`hiddenstate.kinds.agreement`).
    stream : str or callable, optional
        ``stream(block, u, sink=None) -> out``: the block over ``u`` (N, T, M) without a record,
        in ``u``'s dtype, every step's states handed to a
        :class:`~hiddenstate.kinds.stream.StateSink` block by block (the contract is in
        :mod:`hiddenstate.kinds.stream`), or a lazy reference to it. None: the kind has no
        streamed run; states are cut out of its records.
    """

    name: str
    block: type
    view: Callable[[Any], RecordView]
    states: Callable[[Any], dict]
    run: Callable = record_forward
    description: str = ""
    analysis: Any = None
    card: Any = None
    analyze: Any = None
    title: str = ""
    share: Callable | None = None
    skip: tuple = ()
    stream: Any = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str; got {self.name!r}.")
        if not isinstance(self.block, type):
            raise TypeError(f"block must be a class; got {type(self.block).__name__}.")
        for what in ("view", "states", "run"):
            if not callable(getattr(self, what)):
                raise TypeError(f"{what} must be callable; got {type(getattr(self, what)).__name__}.")
        for what in ("analysis", "card", "analyze", "stream"):
            if not _is_ref(getattr(self, what)):
                raise TypeError(f"{what} must be None, a 'module:NAME' str or the object; got "
                                f"{type(getattr(self, what)).__name__}.")
        if not isinstance(self.title, str):
            raise TypeError(f"title must be a str; got {type(self.title).__name__}.")
        if self.share is not None and not callable(self.share):
            raise TypeError(f"share must be callable or None; got {type(self.share).__name__}.")
        if not isinstance(self.skip, tuple) or not all(isinstance(k, str) and k for k in self.skip):
            raise TypeError(f"skip must be a tuple of parameter names (str); got {self.skip!r:.80}.")

    def __repr__(self) -> str:
        return f"Kind({self.name!r}, block={self.block.__name__})"

    def layer_kind(self):
        """The kind's :class:`~hiddenstate.probe.layer_loop.LayerKind` (its lazy reference resolved).

        Returns
        -------
        LayerKind

        Raises
        ------
        ValueError
            The kind has no analysis.
        """
        if self.analysis is None:
            raise ValueError(f"kind {self.name!r} must have an analysis to be analysed; got analysis=None.")
        return resolve(self.analysis)

    def report_card(self):
        """The kind's :class:`~hiddenstate.report.cards.KindCard`, or None for the page's generic card.

        Returns
        -------
        KindCard or None
        """
        return resolve(self.card)

    def analyzer(self):
        """The kind's own analysis entry point, or None (the generic one applies).

        Returns
        -------
        callable or None
        """
        return resolve(self.analyze)

    def streamer(self):
        """The kind's streamed run (its lazy reference resolved), or None.

        Returns
        -------
        callable or None
        """
        return resolve(self.stream)

    @property
    def display(self) -> str:
        """The kind's name in prose: ``title``, or ``name`` without one.

        Returns
        -------
        str
        """
        return self.title or self.name


def diagonal_lag_norms(decay, max_lag: int) -> tuple[np.ndarray, np.ndarray]:
    """Norms of ``dS_T/dS_{T-k} = diag(product of the last k decays)``, k = 0 .. max_lag, for a diagonal recurrence.

    Parameters
    ----------
    decay : ndarray of shape (T, N, ...)
        The decay of every state entry (or of a group of entries that share it) at every step.
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    spectral : ndarray of shape (K,)
        The largest entry of the product (its spectral norm), averaged over the N sequences.
    rms : ndarray of shape (K,)
        The root mean square of its entries, averaged over the N sequences; ``K = min(max_lag, T)
        + 1``; both are 1 at k = 0.
    """
    T, N = decay.shape[:2]
    K = min(positive_int("max_lag", max_lag), T) + 1
    prod = np.ones(decay.shape[1:], dtype=np.float64)
    spectral, rms = np.empty(K), np.empty(K)
    with np.errstate(under="ignore"):  # a product that vanishes below the smallest float is 0: the gradient is gone
        for k in range(K):
            if k:
                prod *= decay[T - k]
            flat = prod.reshape(N, -1)
            spectral[k] = flat.max(axis=1).mean()
            rms[k] = np.sqrt((flat ** 2).mean(axis=1)).mean()
    return spectral, rms


def head_products(decay, max_lag: int) -> np.ndarray:
    """Each head's product of its last k decays (T, N, H) -> (K, H), k = 0 .. max_lag, averaged over N.

    Parameters
    ----------
    decay : ndarray of shape (T, N, H)
        One decay per head and step.
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    ndarray of shape (K, H)
        ``K = min(max_lag, T) + 1``; row 0 is 1.
    """
    T = decay.shape[0]
    K = min(positive_int("max_lag", max_lag), T) + 1
    rev = np.concatenate([np.ones((1,) + decay.shape[1:]), decay[::-1][:K - 1]], axis=0)  # (K, N, H)
    return np.cumprod(rev, axis=0).mean(axis=1)


