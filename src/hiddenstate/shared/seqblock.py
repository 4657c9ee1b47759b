"""What every block of a modern recurrent family shares: validation, state handling, forward/backward plumbing.

:class:`SequenceBlock` is the base of :class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`,
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention`, :class:`~hiddenstate.kinds.rglru.block.RGLRUBlock`,
:class:`~hiddenstate.kinds.lightning.block.LightningAttention`, :class:`~hiddenstate.kinds.shortconv.block.ShortConv`,
:class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer`, :class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix` and (through
:class:`~hiddenstate.kinds.ssm.block.SelectiveSSMBlock`) :class:`~hiddenstate.Mamba` and :class:`~hiddenstate.Mamba2`:
a block maps ``u`` (T, N, M) to ``out`` (T, N, M) through named states (a NamedTuple of
arrays, each with its shape per batch row), with its parameters in transformers' names. A
subclass declares its parameter shapes (:meth:`SequenceBlock.shapes`), its state type and
shapes, and its kernels; this class validates the inputs once at the boundary and runs them.

One rule for arrays of other libraries: the blocks compute in NumPy and take NumPy arrays (or
lists) only; a torch tensor (with or without ``requires_grad``), a CuPy array or any other
array-API array given as ``u``, a state or ``d_out`` is refused in one line (TypeError) that says
how to convert it, rather than converted silently (a tensor that requires grad would lose its
graph). :class:`~hiddenstate.Mamba` alone runs such arrays, through its array-API path
(:mod:`hiddenstate.kinds.ssm.reference`).
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.functional import FloatGuard
from hiddenstate.core.params import check_param_memory, check_params, load_into
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import bool_mask, boolean, float_array, positive_int, shape_str
from hiddenstate.core.validation import lengths as valid_lengths
from hiddenstate.xp.arrays import is_foreign

__all__ = ["BlockCache", "SequenceBlock"]


class BlockCache:
    """What :meth:`SequenceBlock.backward` needs from one forward call (opaque).

    Parameters
    ----------
    kernel_cache : tuple
        The kernel's cache.
    shape : tuple of int
        (T, N, M) of the call (time-major).
    batch_first : bool
        The layout of the call's input and output.
    owner : SequenceBlock
        The layer that made it.
    """

    __slots__ = ("batch_first", "kernel", "owner", "shape")

    def __init__(self, kernel_cache, shape, batch_first, owner):
        self.kernel = kernel_cache
        self.shape = shape
        self.batch_first = batch_first
        self.owner = owner


class SequenceBlock:
    """Base class: ``out, state_n, cache = block.forward(u, state)`` and its exact ``backward``.

    Subclasses set ``d_model``, ``dtype``, ``batch_first``, ``params`` and implement
    ``shapes()``, ``_state_shapes(N)``, ``_forward(p, x, states, lengths, reset)``,
    ``_backward(kernel_cache, d_out, d_final)`` and ``_recorded(kernel_cache)``; the class
    attributes ``state_type`` (a NamedTuple) and ``supports`` (``{"lengths", "reset"}`` or a
    subset) say what the block offers. ``_check_call(T, N, record)`` may refuse a call that
    cannot fit in memory once the input and states are checked, before the kernel runs.
    """

    state_type: type = tuple
    supports: frozenset = frozenset()

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        raise NotImplementedError

    def _state_shapes(self, N):  # list of (shape, legend) per field of state_type
        raise NotImplementedError

    def _check_sizes(self, **sizes) -> None:
        """Refuse sizes whose parameters cannot fit in memory (once the sizes and dtype are set, before drawing)."""
        check_param_memory(type(self).__name__, sizes, self.shapes(), self.dtype)

    def _check_state_memory(self, N) -> None:
        """Refuse ``N`` rows of states that cannot fit in memory (before they are allocated)."""
        nbytes = float(sum(math.prod(shape) for shape, _ in self._state_shapes(N))) * self.dtype.itemsize
        check_memory(f"{type(self).__name__} states of batch_size={N} rows", nbytes,
                     "Use fewer rows per call.")

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters by their transformers names.

        Returns
        -------
        dict of str to ndarray
        """
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state) -> None:
        """Copy ``state`` into :attr:`params` in place (every key and shape must match).

        Parameters
        ----------
        state : mapping of str to array_like
            Exactly the keys of :attr:`params`.

        Raises
        ------
        ValueError, TypeError
            As :func:`hiddenstate.core.params.load_into`.
        """
        load_into(self.params, state, type(self).__name__)

    def initial_state(self, batch_size: int):
        """Zero states for ``batch_size`` sequences.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        NamedTuple
            The layer's state type, zeros of the layer's dtype.
        """
        N = positive_int("batch_size", batch_size)
        self._check_state_memory(N)
        return self.state_type(*(np.zeros(s, dtype=self.dtype) for s, _ in self._state_shapes(N)))

    def _states(self, state, N, name):
        """Validated private copies of every state array (None parts: zeros if ``zeros`` else None)."""
        fields = self.state_type._fields
        if not (isinstance(state, tuple) and len(state) == len(fields)):
            raise TypeError(f"{name} must be {self._state_kind(name)}; got "
                            f"{type(state).__name__}{'' if not isinstance(state, tuple) else f' of length {len(state)}'}.")
        out = []
        for field, value, (want, legend) in zip(fields, state, self._state_shapes(N)):
            if value is None:
                out.append(None)
                continue
            a = float_array(f"{name}.{field}", self._numpy_only(f"{name}.{field}", value), dtype=self.dtype)
            if a.shape != want:
                raise ValueError(f"{name}.{field} must have shape {legend}; got {shape_str(a.shape)}. A state is never "
                                 f"broadcast over the batch.")
            out.append(np.array(a, copy=True))
        return out

    def _state_kind(self, name):
        """What ``name`` (``"state"`` or ``"d_state_n"``) must be, as the messages say it."""
        return f"a {self.state_type.__name__} ({', '.join(self.state_type._fields)})"

    def forward(self, u, state=None, *, lengths=None, reset=None, record=False):
        """Run the block over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
            The input; cast to the layer's dtype.
        state : NamedTuple of the layer's state type, optional
            The initial states; None: zeros. Pass the previous call's ``state_n`` to carry it.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each row of a right-padded batch, each in [0, T]: outputs past a row's
            length are 0 and ``state_n`` is its state at its own last valid step.
        reset : ndarray of bool, shape (T, N) ((N, T) with ``batch_first``), optional
            Document starts, as the layer defines them (see the layer's docstring).
        record : bool, default False
            Also return every step's states (time-major, whatever ``batch_first``).

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : NamedTuple
            The final states.
        cache : BlockCache
            Pass it to :meth:`backward`.
        record : NamedTuple
            Only with ``record=True``: every step's states and gates.

        Raises
        ------
        ValueError
            ``u`` not of shape (T, N, M), a state of another shape, NaN/Inf, lengths out of range,
            ``lengths`` or ``reset`` for a layer that does not support them.
        TypeError
            Non-float input, an array of another library (torch, CuPy: see the module docstring),
            a state that is not the layer's state type, non-integer lengths, a non-bool ``reset``
            or ``record``.
        """
        record = boolean("record", record)
        name = type(self).__name__
        for opt, value in (("lengths", lengths), ("reset", reset)):
            if value is not None and opt not in self.supports:
                raise ValueError(f"{opt} must be None for {name}; got {type(value).__name__}. {self._refusal(opt)}")
        x = float_array("u", self._numpy_only("u", u), dtype=self.dtype)
        legend = "(N, T, M)" if self.batch_first else "(T, N, M)"
        if x.ndim != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"u must have shape {legend} with M={self.d_model}; got {shape_str(x.shape)}.")
        x = np.array(x.transpose(1, 0, 2) if self.batch_first else x, copy=True)  # (T, N, M), the cache's own
        T, N, _ = x.shape
        zero = self.initial_state(N) if N else self.state_type(*(np.zeros(s, self.dtype) for s, _ in self._state_shapes(0)))
        s = zero if state is None else [z if v is None else v for v, z in zip(self._states(state, N, "state"), zero)]
        lengths = None if lengths is None else valid_lengths(lengths, T, N)
        if reset is not None:
            reset = bool_mask("reset", reset, (N, T) if self.batch_first else (T, N))
            reset = np.ascontiguousarray(reset.T if self.batch_first else reset)  # (T, N)
        self._check_call(T, N, record)
        check_params(self.params, self.shapes(), self.dtype, name)
        p = {k: v.copy() for k, v in self.params.items()}
        with FloatGuard() as guard:
            out, final, kc = self._forward(p, x, list(s), lengths, reset)
        guard.check("the forward pass", (("out", out),) + tuple(zip(final._fields, final)),
                    "Scale the input or the weights down.", always=True)
        cache = BlockCache(kc, (T, N, self.d_model), self.batch_first, self)
        out = out.transpose(1, 0, 2) if self.batch_first else out
        if record:  # the record's own arithmetic (every step's state) may underflow too, as the forward pass does
            with FloatGuard() as guard:
                rec = self._recorded(kc)
            arrays = tuple((f, a) for f, a in zip(getattr(rec, "_fields", ()), rec) if isinstance(a, np.ndarray))
            guard.check("the record", arrays, "Scale the input or the weights down.", always=True)
            return out, final, cache, rec
        return out, final, cache

    def _check_call(self, T, N, record) -> None:
        """Refuse a call of ``T`` steps of ``N`` rows (``record`` or not) that cannot fit in memory (none here)."""

    def _numpy_only(self, name, value):
        """``value`` itself, unless it is an array of another library (torch, CuPy, ...): then one TypeError."""
        if is_foreign(value):
            grad = " that requires grad" if getattr(value, "requires_grad", False) else ""
            raise TypeError(f"{name} must be a NumPy array for {type(self).__name__} (the blocks compute in NumPy; "
                            f"Mamba alone runs other libraries' arrays); got {type(value).__name__}{grad}. Convert it "
                            f"with .detach().cpu().numpy() first.")
        return value

    def _refusal(self, opt):
        return "Split the batch into rows of equal length and call once per document instead."

    def __call__(self, u, state=None):
        """``out, state_n = block(u, state)`` (see :meth:`forward`).

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
        state : NamedTuple of the layer's state type, optional

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : NamedTuple
        """
        out, final, _ = self.forward(u, state)
        return out, final

    def backward(self, cache: BlockCache, d_out, d_state_n=None):
        """Exact BPTT through one :meth:`forward` call.

        Parameters
        ----------
        cache : BlockCache
            From this layer's :meth:`forward`.
        d_out : ndarray shaped like that call's output, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_state_n : NamedTuple of the layer's state type, optional
            Gradient with respect to the final states (any part None).

        Returns
        -------
        grads : dict of str to ndarray
            Same keys and shapes as :attr:`params`.
        d_u : ndarray shaped like the input
        d_state : NamedTuple
            Gradients with respect to the initial states.

        Raises
        ------
        TypeError
            A cache from something else, ``d_state_n`` that is not a tuple of the state's length.
        ValueError
            A cache of another layer, gradients of the wrong shape or with NaN/Inf.
        """
        name = type(self).__name__
        if not isinstance(cache, BlockCache):
            raise TypeError(f"cache must be what {name}.forward returned; got {type(cache).__name__}.")
        if cache.owner is not self:
            raise ValueError(f"cache must come from this layer's forward; got the cache of another "
                             f"{type(cache.owner).__name__} layer.")
        T, N, M = cache.shape
        if d_out is not None:
            d_out = float_array("d_out", self._numpy_only("d_out", d_out), dtype=self.dtype)
            want = (N, T, M) if cache.batch_first else (T, N, M)
            if d_out.shape != want:
                raise ValueError(f"d_out must have the output's shape {shape_str(want)}; got {shape_str(d_out.shape)}.")
            d_out = np.ascontiguousarray(d_out.transpose(1, 0, 2) if cache.batch_first else d_out)
        d_final = None if d_state_n is None else self._states(d_state_n, N, "d_state_n")
        with FloatGuard() as guard:
            grads, d_u, d_state = self._backward(cache.kernel, d_out, d_final)
        parts = tuple((f"d_state[{i}]", a) for i, a in enumerate(d_state))
        guard.check("the backward pass", (*grads.items(), ("d_u", d_u), *parts),
                    "The upstream gradients, the input or the weights are too large; scale them down.", always=True)
        return grads, (d_u.transpose(1, 0, 2) if cache.batch_first else d_u), d_state
