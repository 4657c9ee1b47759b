"""Language models of Mamba blocks, as transformers' ``MambaForCausalLM`` and ``Mamba2ForCausalLM`` stack them.

:class:`MambaLM` (Mamba-1 blocks) and :class:`Mamba2LM` (Mamba-2 blocks): an embedding, then
per layer ``x = x + mixer(rms_norm(x))`` (a :class:`hiddenstate.kinds.ssm.mamba.Mamba` or
:class:`hiddenstate.kinds.ssm.mamba2.Mamba2` block behind an RMS norm, on a residual stream), a final RMS
norm and a linear head (tied to the embedding by default for Mamba-1, untied for Mamba-2, as
transformers' configurations default). The parameters are named as in the transformers model's
state dict without the ``backbone.`` prefix (``embeddings.weight``, ``layers.0.norm.weight``,
``layers.0.mixer.in_proj.weight``, ..., ``norm_f.weight``), so
:func:`hiddenstate.interop.transformers_io.from_transformers` copies them by name. Forward and
exact backward, every layer's states in and out, right-padded ragged batches (``lengths``) and
rows restarted mid-sequence (``reset``) as :meth:`hiddenstate.Mamba.forward` takes them.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import (
    bool_mask,
    boolean,
    float_array,
    float_dtype,
    generator,
    positive_int,
    real,
    shape_str,
)
from hiddenstate.core.validation import lengths as valid_lengths
from hiddenstate.kinds.ssm import mamba_kernel as kernel
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba2 import Mamba2

__all__ = ["Mamba2LM", "MambaLM"]


class _ResidualLM:
    """The stack both language models share; ``_block`` is the mixer's class."""

    _block = Mamba
    _shared_eps = False
    _ragged = True  # the blocks take lengths= and reset=

    def __init__(self, vocab_size, d_model, num_layers, *, eps=1e-5, tie_embeddings=True, batch_first=True,
                 dtype=np.float64, rng=None, **block):
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.d_model = positive_int("d_model", d_model)
        self.num_layers = positive_int("num_layers", num_layers)
        self.eps = real("eps", eps, low=0.0, low_open=True)  # 0 divides by zero on a zero row
        self.tie_embeddings = boolean("tie_embeddings", tie_embeddings)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        if self._shared_eps:  # the blocks' own (gated) norms take the model's epsilon
            block["eps"] = self.eps
        V, M = self.vocab_size, self.d_model
        check_memory(f"vocab_size={V} x d_model={M} embeddings", (1 if self.tie_embeddings else 2) * 8.0 * V * M,
                     "Use a smaller vocab_size or d_model.")  # float64 draws before the cast
        self.params = {"embeddings.weight": rng.normal(0.0, 0.02, size=(V, M)).astype(self.dtype)}
        self.layers = []
        for i in range(self.num_layers):
            blk = self._block(M, dtype=self.dtype, rng=rng, **block)
            if i == 0:  # every layer is the size of the first
                check_memory(f"num_layers={self.num_layers} blocks of {sum(v.nbytes for v in blk.params.values())} "
                             "bytes", self.num_layers * float(sum(v.nbytes for v in blk.params.values())),
                             "Use fewer layers or smaller blocks.")
            self.layers.append(blk)
            self.params[f"layers.{i}.norm.weight"] = np.ones(M, dtype=self.dtype)
            for k, v in blk.params.items():
                self.params[f"layers.{i}.mixer.{k}"] = v  # the same arrays
        self.params["norm_f.weight"] = np.ones(M, dtype=self.dtype)
        if not self.tie_embeddings:
            self.params["lm_head.weight"] = rng.normal(0.0, 0.02, size=(V, M)).astype(self.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vocab_size}, {self.d_model}, {self.num_layers}, {self.layers[0]!r})"

    @property
    def head(self) -> np.ndarray:
        """The output head's weight (V, M): the embedding when tied."""
        return self.params["embeddings.weight" if self.tie_embeddings else "lm_head.weight"]

    def _sync(self):
        for i, blk in enumerate(self.layers):  # params may have been replaced by hand: the blocks read the dict
            for k in blk.params:
                blk.params[k] = self.params[f"layers.{i}.mixer.{k}"]

    def _masks(self, lengths, reset, T, N):
        """The validated ``lengths`` (N,) or None, ``keep`` (T, N, 1) or None, and ``reset`` time-major (T, N) or None."""
        if not self._ragged and (lengths is not None or reset is not None):
            given = " and ".join(n for n, v in (("lengths", lengths), ("reset", reset)) if v is not None)
            raise ValueError(f"lengths and reset must be None for a {type(self).__name__} (its blocks take whole "
                             f"sequences: no padding, no restarts yet); got {given}. Run each sequence on its own.")
        lens = keep = None
        if lengths is not None:
            lens = valid_lengths(lengths, T, N)
            keep = (np.arange(T)[:, None] < lens[None, :])[:, :, None] if (lens < T).any() else None
        if reset is not None:
            reset = bool_mask("reset", reset, (N, T) if self.batch_first else (T, N))
            reset = np.ascontiguousarray(reset.T if self.batch_first else reset)  # (T, N)
        return lens, keep, reset

    def forward(self, ids, states=None, *, lengths=None, reset=None, record=False):
        """Logits for token ids, every layer's final states, and what :meth:`backward` needs.

        Parameters
        ----------
        ids : array_like of int, shape (N, T) (``batch_first``) or (T, N)
            Token ids in ``[0, V)`` (with ``lengths``: at every valid step; a padded step's id is
            never read and may be any integer, e.g. a pad id of -1).
        states : list of MambaState, optional
            One per layer (None: zeros); pass the previous call's ``states_n`` to carry them.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each row of a right-padded batch, each in [0, T]: the logits past a
            row's length are 0 (and take no gradient), and every layer's ``states_n`` is its
            state at the row's own last valid step (a length-0 row keeps its initial states), as
            :meth:`hiddenstate.Mamba.forward` does.
        reset : ndarray of bool, shape (N, T) (``batch_first``) or (T, N), optional
            Where True, the row starts that step from its initial states (``states``, or zeros) in
            every layer, both the SSM and the convolution state, and no gradient flows back across
            that boundary (ignored on padded steps).
        record : bool, default False
            Also return every layer's record (:class:`MambaRecord`; :class:`Mamba2Record` for :class:`Mamba2LM`).

        Returns
        -------
        logits : ndarray of shape (N, T, V) (``batch_first``) or (T, N, V)
        states_n : list of MambaState
            Every layer's final SSM and conv states.
        cache : tuple
            For :meth:`backward`.
        records : list of MambaRecord or Mamba2Record
            Only with ``record=True``.

        Raises
        ------
        ValueError
            Ids out of range or not 2-D, a wrong number of states, lengths out of [0, T] or not of
            shape (N,), a reset mask of another shape.
        TypeError
            Non-integer ids or lengths, a reset mask that is not bool, ``states`` not a list.
        """
        record = boolean("record", record)
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be an array of integer token ids; got dtype {ids.dtype}.")
        if ids.ndim != 2:
            raise ValueError(f"ids must have shape {'(N, T)' if self.batch_first else '(T, N)'}; got "
                             f"{shape_str(ids.shape)}.")
        tm = ids.T if self.batch_first else ids  # (T, N)
        lens, keep, reset = self._masks(lengths, reset, *tm.shape)
        if keep is not None:  # a padded step's id is never read: embed token 0 there
            tm = np.where(keep[:, :, 0], tm, 0)
        if tm.size and (tm.min() < 0 or tm.max() >= self.vocab_size):
            where = " at the valid steps" if lens is not None else ""
            raise ValueError(f"ids must lie in [0, V={self.vocab_size}){where}; got values in [{tm.min()}, {tm.max()}].")
        if states is not None and not isinstance(states, (list, tuple)):
            raise TypeError(f"states must be a list of one state per layer (L={self.num_layers}), as forward returns "
                            f"them; got {type(states).__name__}.")
        if states is not None and len(states) != self.num_layers:
            raise ValueError(f"states must hold one state per layer (L={self.num_layers}); got {len(states)}.")
        self._sync()
        x = self.params["embeddings.weight"][tm]  # (T, N, M)
        steps, finals, records = [], [], []
        for i, blk in enumerate(self.layers):
            w = self.params[f"layers.{i}.norm.weight"]
            xn, inv = kernel.rms_norm(x, w, self.eps)
            ragged = {} if lens is None and reset is None else {"lengths": lens, "reset": reset}
            res = blk.forward(xn, None if states is None else states[i], record=record, **ragged)
            steps.append((x, inv, res[2]))
            finals.append(res[1])
            if record:
                records.append(res[3])
            x = x + res[0]
        xf, inv_f = kernel.rms_norm(x, self.params["norm_f.weight"], self.eps)
        logits = xf @ self.head.T  # (T, N, V)
        if keep is not None:
            logits *= keep  # 0 past each row's length, as the block's output
        cache = (tm, steps, x, inv_f, xf, keep)
        logits = logits.transpose(1, 0, 2) if self.batch_first else logits
        return (logits, finals, cache, records) if record else (logits, finals, cache)

    def __call__(self, ids, states=None, *, lengths=None, reset=None):
        """``logits, states_n = model(ids, states)`` (see :meth:`forward`).

        Parameters
        ----------
        ids : array_like of int, shape (N, T) or (T, N)
        states : list of MambaState, optional
        lengths : array_like of int, shape (N,), optional
            Valid steps of each row of a right-padded batch.
        reset : ndarray of bool, shape (N, T) or (T, N), optional
            Where a row restarts from its initial states.

        Returns
        -------
        logits : ndarray
        states_n : list of MambaState
        """
        logits, finals, _ = self.forward(ids, states, lengths=lengths, reset=reset)
        return logits, finals

    def backward(self, cache, d_logits, d_states_n=None):
        """Exact gradients of a loss of the logits (and of the final states) for every parameter.

        Parameters
        ----------
        cache : tuple
            From :meth:`forward`.
        d_logits : ndarray shaped like the logits
        d_states_n : list of pairs, optional
            Gradients with respect to each layer's final states (entries may be None).

        Returns
        -------
        grads : dict of str to ndarray
            Same keys as :attr:`params`.
        d_states : list of MambaState
            Gradients with respect to each layer's initial states.

        Raises
        ------
        ValueError, TypeError
            ``d_logits`` not of the logits' shape, or not finite floats; a ``cache`` that is not
            this model's forward's; ``d_states_n`` not one entry per layer.
        """
        if not (isinstance(cache, tuple) and len(cache) == 6 and isinstance(cache[0], np.ndarray)
                and isinstance(cache[1], list) and len(cache[1]) == self.num_layers):
            raise TypeError(f"cache must be the cache that this model's forward returned; got {type(cache).__name__}"
                            f"{f' of length {len(cache)}' if isinstance(cache, (tuple, list)) else ''}.")
        tm, steps, x, inv_f, xf, keep = cache
        if d_states_n is not None and (not isinstance(d_states_n, (list, tuple)) or len(d_states_n) != self.num_layers):
            got = f"length {len(d_states_n)}" if isinstance(d_states_n, (list, tuple)) else type(d_states_n).__name__
            raise ValueError(f"d_states_n must hold one entry per layer (L={self.num_layers}; None for no gradient); "
                             f"got {got}.")
        d_logits = float_array("d_logits", d_logits, dtype=self.dtype)
        want = (tm.shape[1], tm.shape[0], self.vocab_size) if self.batch_first else tm.shape + (self.vocab_size,)
        if d_logits.shape != want:
            raise ValueError(f"d_logits must have the logits' shape {shape_str(want)}; got {shape_str(d_logits.shape)}.")
        d_logits = d_logits.transpose(1, 0, 2) if self.batch_first else d_logits  # (T, N, V)
        if keep is not None:
            d_logits = d_logits * keep  # padded logits are constants (0)
        V, M = self.vocab_size, self.d_model
        grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        head = "embeddings.weight" if self.tie_embeddings else "lm_head.weight"
        grads[head] += d_logits.reshape(-1, V).T @ xf.reshape(-1, M)
        d_xf = d_logits @ self.head
        d_x, grads["norm_f.weight"] = kernel.rms_norm_backward(x, self.params["norm_f.weight"], inv_f, d_xf)
        d_states = [None] * self.num_layers
        for i in range(self.num_layers - 1, -1, -1):
            x_in, inv, bc = steps[i]
            blk = self.layers[i]
            d_fin = None if d_states_n is None else d_states_n[i]
            g, d_xn, d_states[i] = blk.backward(bc, d_x, d_fin)
            for k, v in g.items():
                grads[f"layers.{i}.mixer.{k}"] = v
            d_in, grads[f"layers.{i}.norm.weight"] = kernel.rms_norm_backward(x_in, self.params[f"layers.{i}.norm.weight"],
                                                                              inv, d_xn)
            d_x = d_x + d_in
        np.add.at(grads["embeddings.weight"], tm.reshape(-1), d_x.reshape(-1, M))
        return grads, d_states


class MambaLM(_ResidualLM):
    """A stack of Mamba blocks with RMS norms and residuals, as transformers' ``MambaForCausalLM``.

    ``x = embed(ids)``; per layer ``x = x + mixer_l(rms_norm_l(x))``; ``logits = lm_head(norm_f(x))``.

    Parameters
    ----------
    vocab_size : int
        V.
    d_model : int
        M.
    num_layers : int
        L.
    eps : float, default 1e-5
        The RMS norms' epsilon (``layer_norm_epsilon``).
    tie_embeddings : bool, default True
        The head's weight is the embedding's (one array, ``embeddings.weight``).
    batch_first : bool, default True
        Token ids (N, T) and logits (N, T, V), as transformers takes them; False: (T, N).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
    **block
        Options of every :class:`Mamba` block (``d_state``, ``d_conv``, ``expand``, ``dt_rank``,
        ``bias``, ``conv_bias``, ``scan``, ``bcdt_norm``, ``norm_eps``, ``num_heads``;
        ``bcdt_norm="rms"`` makes it transformers' ``FalconMambaForCausalLM``).

    Attributes
    ----------
    layers : list of Mamba
        The mixers (their parameters are also in :attr:`params` as ``layers.{l}.mixer.<name>``).
    params : dict of str to ndarray
        ``embeddings.weight`` (V, M), ``layers.{l}.norm.weight`` (M,), ``layers.{l}.mixer.*``,
        ``norm_f.weight`` (M,), and ``lm_head.weight`` (V, M) when not tied.

    Raises
    ------
    TypeError, ValueError
        As :class:`Mamba`, and ``eps`` not a positive number.
    """

    _block = Mamba

    def __init__(self, vocab_size, d_model, num_layers, *, eps=1e-5, tie_embeddings=True, batch_first=True,
                 dtype=np.float64, rng=None, **block):
        super().__init__(vocab_size, d_model, num_layers, eps=eps, tie_embeddings=tie_embeddings,
                         batch_first=batch_first, dtype=dtype, rng=rng, **block)


class Mamba2LM(_ResidualLM):
    """A stack of Mamba-2 blocks with RMS norms and residuals, as transformers' ``Mamba2ForCausalLM``.

    ``x = embed(ids)``; per layer ``x = x + mixer_l(rms_norm_l(x))``; ``logits = lm_head(norm_f(x))``,
    every mixer a :class:`hiddenstate.kinds.ssm.mamba2.Mamba2` whose gated norm takes the same ``eps``.
    The methods are :class:`MambaLM`'s; the states are ``(ssm (N, H, P, S), conv (N, Dc, K-1))``
    per layer and the records :class:`~hiddenstate.kinds.ssm.mamba2_kernel.Mamba2Record`.

    Parameters
    ----------
    vocab_size : int
        V.
    d_model : int
        M.
    num_layers : int
        L.
    eps : float, default 1e-5
        The RMS norms' epsilon (``layer_norm_epsilon``), the blocks' gated norms included.
    tie_embeddings : bool, default False
        The head's weight is the embedding's (one array, ``embeddings.weight``); untied by
        default, as ``Mamba2Config`` defaults.
    batch_first : bool, default True
        Token ids (N, T) and logits (N, T, V), as transformers takes them; False: (T, N).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
    **block
        Options of every :class:`~hiddenstate.kinds.ssm.mamba2.Mamba2` block (``d_state``, ``d_conv``,
        ``expand``, ``head_dim``, ``n_groups``, ``bias``, ``conv_bias``, ``scan``).

    Attributes
    ----------
    layers : list of Mamba2
        The mixers (their parameters are also in :attr:`params` as ``layers.{l}.mixer.<name>``).
    params : dict of str to ndarray
        ``embeddings.weight`` (V, M), ``layers.{l}.norm.weight`` (M,), ``layers.{l}.mixer.*``,
        ``norm_f.weight`` (M,), and ``lm_head.weight`` (V, M) when not tied.

    Raises
    ------
    TypeError, ValueError
        As :class:`~hiddenstate.kinds.ssm.mamba2.Mamba2`, and ``eps`` not a positive number.
    """

    _block = Mamba2
    _shared_eps = True
    _ragged = False  # Mamba2 blocks take whole sequences

    def __init__(self, vocab_size, d_model, num_layers, *, eps=1e-5, tie_embeddings=False, batch_first=True,
                 dtype=np.float64, rng=None, **block):
        super().__init__(vocab_size, d_model, num_layers, eps=eps, tie_embeddings=tie_embeddings,
                         batch_first=batch_first, dtype=dtype, rng=rng, **block)
