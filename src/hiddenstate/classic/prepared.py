"""What a sequence layer's run is made of: its validated input, its caches, its final state by direction.

:class:`Prepared` is the result of :meth:`hiddenstate.classic.recurrent.RecurrentLayer.prepare` (the one
place a layer's inputs are validated, :func:`prepare_input`); :class:`LayerCache` and
:class:`DirectionCache` are what :meth:`~hiddenstate.classic.recurrent.RecurrentLayer.run` keeps for the
backward pass and for :func:`hiddenstate.probe.trace`; :class:`DirectionalState` names the two
halves of a bidirectional ``h_n``.

Nothing a run keeps is shared with the caller: the prepared input, states and masks are private
copies (changing ``x`` in place after ``forward`` does not change the gradients), the caches hold
copies of the weights the run used (``load_state_dict`` or an optimizer step between ``forward``
and ``backward`` does not mix old and new weights), and a cache knows the layer that made it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hiddenstate.core.validation import float_array, shape_str, state_array
from hiddenstate.core.validation import lengths as check_lengths

__all__ = ["CellCache", "DirectionCache", "DirectionalState", "LayerCache", "Prepared", "prepare_input", "private"]


class DirectionalState(NamedTuple):
    """A final state split by direction, so nobody has to index ``h_n[-2]`` / ``h_n[-1]`` by hand.

    Attributes
    ----------
    forward : ndarray of shape (L, N, H)
        Final state of the forward direction of every layer.
    backward : ndarray of shape (L, N, H) or None
        Final state of the backward direction (state after reading each row's first step),
        None for a unidirectional layer.
    """

    forward: np.ndarray
    backward: np.ndarray | None


class Prepared(NamedTuple):
    """A validated layer input, time-major, ready for :meth:`RecurrentLayer.run`.

    Attributes
    ----------
    x : ndarray of shape (T, N, I)
        C-contiguous, of the layer's dtype (unbatched input gets N = 1, batch_first is undone).
    state0 : ndarray of shape (L*D, N, H), or a pair of them (LSTM)
        The initial state of every layer and direction (a private copy).
    learned : tuple of bool
        For each part of the state (``(h,)``, or ``(h, c)`` for the LSTM): it is the layer's learned
        initial state (``learn_h0=True`` and that part not given), so its gradient goes to
        ``params["h0"]`` / ``params["c0"]``.
    lengths : ndarray of int64, shape (N,), or None
        Valid steps per column (None: every column has length T).
    keep : ndarray of bool, shape (T, N, 1), or None
        False at padded steps (None when nothing is padded).
    reset : ndarray of bool, shape (T, N), or None
        True where a column restarts from its initial state (None when it never does).
    unbatched : bool
        The input was (T, I); results drop the batch axis again.
    """

    x: np.ndarray
    state0: object
    learned: tuple
    lengths: np.ndarray | None
    keep: np.ndarray | None
    reset: np.ndarray | None
    unbatched: bool

    @property
    def mask(self) -> np.ndarray:
        """Valid steps, bool (T, N)."""
        T, N = self.x.shape[:2]
        return np.ones((T, N), dtype=bool) if self.keep is None else self.keep[:, :, 0].copy()


@dataclass(frozen=True)
class DirectionCache:
    """What one layer and direction of a run kept for the backward pass.

    Attributes
    ----------
    x : ndarray of shape (T, N, I_k)
        The input this direction read, in its processing order.
    kernel : object
        The cache of the kind's ``scan_forward`` (read it with ``kind.recorded``).
    weight_mask : ndarray of shape (G*H, H) or None
        The DropConnect mask applied to ``weight_hh`` (``weight_drop``), if any.
    reset : ndarray of bool, shape (T, N, 1), or None
        The reset mask in this direction's processing order.
    weight_ih : ndarray of shape (G*H, I_k) or None
        A copy of the ``weight_ih`` the run used (the backward's input gradient reads it).
    """

    x: np.ndarray
    kernel: object
    weight_mask: np.ndarray | None
    reset: np.ndarray | None
    weight_ih: np.ndarray | None = None


@dataclass(frozen=True)
class LayerCache:
    """Everything :meth:`RecurrentLayer.backward` needs from one :meth:`RecurrentLayer.run`.

    Attributes
    ----------
    directions : list of DirectionCache
        Index ``layer * D + direction`` (the order of ``h_n``'s first axis).
    dropout_masks : list of (ndarray or None)
        The inter-layer dropout mask applied to each layer's output (T, N, D*H).
    prepared : Prepared
        The input of the run.
    reverse : ndarray of int, shape (T, N), or None
        The time index of the backward direction (:func:`hiddenstate.core.ragged.reverse_index`).
    owner : weakref.ref or None
        The layer that made the cache (``backward`` refuses a cache of another layer).
    keys : tuple of str
        The parameter names of that layer at the time of the run, in order.
    """

    directions: list
    dropout_masks: list
    prepared: Prepared
    reverse: np.ndarray | None
    owner: weakref.ref | None = None
    keys: tuple = ()

    def check_owner(self, layer) -> None:
        """Raise unless this cache was made by ``layer``'s forward pass.

        Parameters
        ----------
        layer : RecurrentLayer
            The layer whose ``backward`` received the cache.

        Raises
        ------
        ValueError
            The cache belongs to another layer (even one of the same kind and shape: its
            gradients would belong to neither).
        """
        _check_owner(self.owner, layer, "layer")


class CellCache(NamedTuple):
    """What a one-step cell's ``forward`` keeps for its ``backward`` (:class:`hiddenstate.classic.cells.base.Cell`).

    Attributes
    ----------
    x : ndarray of shape (N, I)
        The input of the step (a private copy; N = 1 for unbatched input).
    kernel : object
        The cache of the kind's ``scan_forward`` for T = 1.
    unbatched : bool
        The input was (I,); gradients drop the batch axis again.
    weight_ih : ndarray of shape (G*H, I)
        A copy of the ``weight_ih`` the step used.
    owner : weakref.ref
        The cell that made the cache.
    keys : tuple of str
        The cell's parameter names, in order.
    """

    x: np.ndarray
    kernel: object
    unbatched: bool
    weight_ih: np.ndarray
    owner: weakref.ref
    keys: tuple

    def check_owner(self, cell) -> None:
        """Raise unless this cache was made by ``cell``'s forward pass.

        Parameters
        ----------
        cell : Cell
            The cell whose ``backward`` received the cache.

        Raises
        ------
        ValueError
            The cache belongs to another cell.
        """
        _check_owner(self.owner, cell, "cell")

    def upstream(self, d_out, hidden: int, dtype, pair: bool):
        """The cell backward's ``d_out`` validated against the step's new state, with the batch axis.

        Parameters
        ----------
        d_out : array_like, a tuple ``(dh, dc)`` (``pair``), or None
            Exactly the shape of the new state: (N, H), or (H,) for an unbatched step.
        hidden : int
            H.
        dtype : numpy.dtype
            The cell's dtype.
        pair : bool
            The state is ``(h, c)``: ``d_out`` must be a tuple (a stacked (2, H) array is refused).

        Returns
        -------
        ndarray of shape (N, H), a pair of them or None
            With parts None where given None.

        Raises
        ------
        TypeError
            Not a float array, or not a tuple for a pair.
        ValueError
            Another shape (never broadcast over the batch) or NaN/Inf.
        """
        N = self.x.shape[0]
        want, legend = ((hidden,), f"(H={hidden},)") if self.unbatched else ((N, hidden), f"(N={N}, H={hidden})")

        def one(name, d):
            if d is None:
                return None
            a = float_array(name, d, dtype=dtype)
            if a.shape != want:
                raise ValueError(f"{name} must have shape {legend}, the shape of the new state; got "
                                 f"{shape_str(a.shape)}. A gradient is never broadcast over the batch.")
            return a[None] if self.unbatched else a

        if not pair:
            return one("d_out", d_out)
        if d_out is not None and not (isinstance(d_out, tuple) and len(d_out) == 2):
            shown = "" if not hasattr(d_out, "shape") else " " + shape_str(np.shape(d_out))
            raise TypeError(f"d_out must be None or a pair (dh, dc) for an LSTM cell; got {type(d_out).__name__}{shown}.")
        return None if d_out is None else (one("d_out[0]", d_out[0]), one("d_out[1]", d_out[1]))


def _check_owner(owner, obj, what: str) -> None:
    made_by = None if owner is None else owner()
    if made_by is not obj:
        other = f"a {what} that no longer exists" if made_by is None else f"another {what} ({made_by!r})"
        raise ValueError(f"cache must come from this {what}'s forward ({obj!r}); got a cache of {other}. "
                         f"Call backward on the {what} whose forward returned the cache.")


def private(a: np.ndarray, given) -> np.ndarray:
    """``a`` C-contiguous and never the caller's memory: copied if it may share memory with ``given``.

    Parameters
    ----------
    a : ndarray
        A validated argument (possibly a view of, or ``given`` itself).
    given : object
        What the caller passed.

    Returns
    -------
    ndarray
        ``a`` itself when it is already a new, C-contiguous array; else a C-contiguous copy.
    """
    if isinstance(given, np.ndarray) and np.may_share_memory(a, given):
        return np.array(a, order="C", copy=True)
    return np.ascontiguousarray(a)


def prepare_input(net, x, h0=None, *, lengths=None, reset=None) -> Prepared:
    """The body of :meth:`~hiddenstate.classic.recurrent.RecurrentLayer.prepare` (see there): validate once, go time-major.

    Parameters
    ----------
    net : RecurrentLayer
        The layer whose input it is.
    x : array_like
        Input sequence, (T, N, I), (N, T, I) if ``batch_first``, or (T, I).
    h0 : array_like or pair, optional
        Initial state.
    lengths : array_like of int, optional
        Valid steps of each column.
    reset : ndarray of bool, optional
        Restart mask.

    Returns
    -------
    Prepared
        Every array a private copy (nothing shared with the caller's arrays).
    """
    given = x
    x = float_array("x", x, dtype=net.dtype)
    I, H = net.input_size, net.hidden_size
    LD = net.num_layers * net.num_directions
    if x.ndim == 2:
        unbatched = True
        if x.shape[1] != I:
            raise ValueError(f"x must have shape (T, I={I}) when unbatched; got {shape_str(x.shape)}.")
        x = x[:, None, :]
    elif x.ndim == 3:
        unbatched = False
        if x.shape[2] != I:
            legend = f"(N, T, I={I})" if net.batch_first else f"(T, N, I={I})"
            raise ValueError(f"x must have shape {legend}; got {shape_str(x.shape)}.")
        if net.batch_first:
            x = x.transpose(1, 0, 2)
    else:
        legend = "(N, T, I)" if net.batch_first else "(T, N, I)"
        raise ValueError(f"x must have shape {legend} or unbatched (T, I); got {shape_str(x.shape)}.")
    x = private(x, given)  # the backward reads it: never the caller's array
    T, N, _ = x.shape

    def state(name, value, learned_key):
        if value is None:
            if net.learn_h0:
                return np.repeat(net.params[learned_key][:, None, :], N, axis=1), True
            return np.zeros((LD, N, H), dtype=net.dtype), False
        if unbatched:
            a = state_array(name, value, None, H, net.dtype, lead=(LD,), legend=f"(L*D={LD}, H={H})")
            return a[:, None, :].copy(), False
        legend = f"(num_layers*num_directions={LD}, N={N}, H={H})"
        return state_array(name, value, N, H, net.dtype, lead=(LD,), legend=legend).copy(), False

    if net.is_lstm:
        if h0 is None:
            hc = (None, None)
        elif isinstance(h0, tuple) and len(h0) == 2:
            hc = h0
        else:
            raise TypeError(f"h0 must be None or a pair (h0, c0) for an LSTM; got {type(h0).__name__}.")
        (h, learned_h), (c, learned_c) = state("h0", hc[0], "h0"), state("c0", hc[1], "c0")
        state0, learned = (h, c), (learned_h, learned_c)
    else:
        state0, learned_h = state("h0", h0, "h0")
        learned = (learned_h,)

    keep = None
    lens = None
    if lengths is not None:
        if unbatched:
            raise ValueError("lengths must be None for unbatched (T, I) input; add a batch axis to use lengths.")
        lens = check_lengths(lengths, T, N)
        if (lens < T).any():
            keep = (np.arange(T)[:, None] < lens[None, :])[:, :, None]  # (T, N, 1)
    rmask = None
    if reset is not None:
        try:
            r = np.asarray(reset)
        except (ValueError, TypeError):  # ragged nested lists
            r = np.asarray(None)
        if r.dtype != bool:
            raise TypeError(f"reset must be a bool array; got dtype {r.dtype}.")
        want = (T,) if unbatched else ((N, T) if net.batch_first else (T, N))
        if r.shape != want:
            legend = "(T,)" if unbatched else ("(N, T)" if net.batch_first else "(T, N)")
            raise ValueError(f"reset must have shape {legend}={shape_str(want)}; got {shape_str(r.shape)}.")
        r = r[:, None] if unbatched else (r.T if net.batch_first else r)
        if keep is not None:
            r = r & keep[:, :, 0]
        if r.any():
            rmask = private(r, reset)
    return Prepared(x, state0, learned, lens, keep, rmask, unbatched)
