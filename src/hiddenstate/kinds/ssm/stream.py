"""Streamed runs of the two selective SSM blocks: :func:`mamba_stream` (kind ``"mamba"``) and :func:`mamba2_stream` (``"mamba2"``).

Each is a kind's ``stream`` (the contract of :mod:`hiddenstate.kinds.stream`): the block over a
whole sequence from zero states, every step's states handed to a
:class:`~hiddenstate.kinds.stream.StateSink` block by block, without a record. What is
(T, N, Di)-sized per step (``x``, ``z``, ``dt``, ``B``, ``C``, the convolution's inputs) is formed
for the whole sequence by the kernels' own :func:`~hiddenstate.kinds.ssm.mamba_kernel.prepare`;
what is (T, N, Di, S)-sized (the decay ``exp(dt A)`` of Mamba, the input ``dt B x``, every state)
only for a block of L steps at a time (:data:`BLOCK_BYTES` of states, at most :data:`BLOCK_STEPS`
steps), in a scratch used again by the next block::

    for every block of L steps:
        decay, b = discretize(block's steps)          scratch (L, N, Di, S), in place
        h_j = decay_j * h_{j-1} + b_j                 step by step, in the scratch of b
        y_block = C . h + D x                         one batched matrix product
        sink.put(start, {"ssm": h, "conv": windows})  the sink copies the steps it keeps

then the gate, the norm and ``out_proj`` over the whole sequence
(:func:`~hiddenstate.kinds.ssm.mamba_kernel.readout`). The recurrence is the sequential loop;
the block's own forward (a Brent-Kung scan by default) gives the same states to round-off.
Everything runs in ``u``'s dtype (float32 or float64), the parameters cast to it once per call.
The memory a call holds is its (T, N, Di)-sized arrays, two blocks of scratch and the sink's
kept states, never (T, N, Di, S).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.ssm import mamba2_kernel, mamba_kernel
from hiddenstate.shared import causal_conv

__all__ = ["BLOCK_BYTES", "BLOCK_STEPS", "mamba2_stream", "mamba_stream"]

#: The most steps per block of scratch (L): each block's states are formed, read and handed out together.
BLOCK_STEPS = 64

#: The bytes of one block's states that set L (with :data:`BLOCK_STEPS` as its cap): a block that
#: stays in a core's cache. Measured at T = 1024, N = 1, one thread: L from 8 to 64 within 10%
#: of each other for Mamba (Di*S = 8192), 16 best for Mamba-2 float32 (H*P*S = 32768), 8 for float64.
BLOCK_BYTES = 2 ** 21


def _steps(block_steps, per_step: int) -> int:
    """L: ``block_steps``, or (None) :data:`BLOCK_BYTES` over the bytes of one step's states, in [1, BLOCK_STEPS]."""
    if block_steps is not None:
        return block_steps
    return max(1, min(BLOCK_STEPS, BLOCK_BYTES // max(per_step, 1)))


def _time_major(block, u):
    """``u`` (N, T, M) checked and made (T, N, M), and the block's parameters cast to its dtype."""
    if not isinstance(u, np.ndarray) or u.dtype not in (np.float32, np.float64):
        what = type(u).__name__ if not isinstance(u, np.ndarray) else f"an array of {u.dtype}"
        raise TypeError(f"u must be a float32 or float64 NumPy array; got {what}.")
    if u.ndim != 3 or u.shape[2] != block.d_model:
        raise ValueError(f"u must have shape (N, T, M={block.d_model}); got {u.shape}.")
    p = {k: np.asarray(v, dtype=u.dtype) for k, v in block.params.items()}
    return np.ascontiguousarray(u.transpose(1, 0, 2)), p


@np.errstate(under="ignore")  # states that decay below the smallest normal number: 0 is the right limit
def _scan_blocks(T, N, shape, dtype, sink, xpad, K, run_block, L):
    """The time loop: per block of L steps ``run_block(start, stop, h, hs)`` fills ``hs`` with the states, then the sink.

    ``h`` (N, *shape) is the state before the block; ``hs`` (stop - start, N, *shape) the
    block's scratch. The convolution's windows (stop - start, N, Dc, K-1) are formed from
    ``xpad`` only for a block the sink keeps a step of (a zero-strided placeholder else).
    """
    hs = np.empty((L, N) + shape, dtype=dtype)
    h = np.zeros((N,) + shape, dtype=dtype)
    for start in range(0, T, L):
        stop = min(start + L, T)
        blk = hs[:stop - start]
        run_block(start, stop, h, blk)
        np.copyto(h, blk[-1])
        if sink is not None:
            if sink.wants(start, stop):
                conv = causal_conv.windows(xpad[start:stop + K - 1], K)  # (L, N, Dc, K-1)
            else:
                conv = np.broadcast_to(np.zeros((), dtype=dtype), (stop - start, N, xpad.shape[2], K - 1))
            sink.put(start, {"ssm": blk, "conv": conv})


def mamba_stream(block, u, sink=None, *, block_steps=None):
    """A :class:`~hiddenstate.Mamba` block over ``u`` from zero states, every step's states to ``sink``.

    The equations of :mod:`hiddenstate.kinds.ssm.mamba_kernel` (Gu & Dao 2023, Algorithm 2), all
    the block's variants (``bcdt_norm``, ``num_heads``, biases).

    Parameters
    ----------
    block : Mamba
        With ``batch_first`` (its parameters are cast to ``u``'s dtype).
    u : ndarray of shape (N, T, M), float32 or float64
        The input; the dtype every step is computed in.
    sink : StateSink, optional
        Receives ``{"ssm": (L, N, Di, S), "conv": (L, N, Di, K-1)}`` for consecutive blocks of
        steps (the states after each step; the window oldest first). None: only the output.
    block_steps : int, optional
        L, the steps of each block of scratch; None: :data:`BLOCK_BYTES` of states, at most
        :data:`BLOCK_STEPS` steps.

    Returns
    -------
    out : ndarray of shape (N, T, M), ``u``'s dtype
        ``block.forward(u)[0]`` to round-off.

    Raises
    ------
    TypeError
        ``u`` not a float32/float64 NumPy array.
    ValueError
        ``u`` not of shape (N, T, M).
    """
    ut, p = _time_major(block, u)
    T, N, _ = ut.shape
    Di, S, K = block.d_inner, block.d_state, block.d_conv
    s = mamba_kernel.prepare(p, ut, np.zeros((N, Di, K - 1), dtype=u.dtype),
                             norm_eps=None if block.bcdt_norm is None else block.norm_eps)
    y = np.empty((T, N, Di), dtype=u.dtype)
    L = _steps(block_steps, N * Di * S * u.dtype.itemsize)
    dA = np.empty((L, N, Di, S), dtype=u.dtype)  # the block's decays, then decay * h_{t-1}

    def run_block(start, stop, h, hs):
        t = slice(start, stop)
        decay, _ = mamba_kernel.discretize(s.dt[t], s.a[t], s.A, s.B[t], out=(dA[:stop - start], hs))
        prev = h
        for j in range(stop - start):  # h_j = decay_j h_{j-1} + b_j, in place
            np.multiply(prev, decay[j], out=decay[j])
            hs[j] += decay[j]
            prev = hs[j]
        y[t] = mamba_kernel.state_readout(hs, s.C[t], p["D"], s.a[t])

    _scan_blocks(T, N, (Di, S), u.dtype, sink, s.xpad, K, run_block, L)
    out = mamba_kernel.readout(p, y, s.z)[0]  # (T, N, M)
    return np.ascontiguousarray(out.transpose(1, 0, 2))


def mamba2_stream(block, u, sink=None, *, block_steps=None):
    """A :class:`~hiddenstate.Mamba2` block over ``u`` from zero states, every step's states to ``sink``.

    The equations of :mod:`hiddenstate.kinds.ssm.mamba2_kernel` (Dao & Gu 2024), all the block's
    variants (``n_groups``, ``time_step_limit``, ``norm_before_gate``, the muP multipliers, no
    norm, biases).

    Parameters
    ----------
    block : Mamba2
        With ``batch_first`` (its parameters are cast to ``u``'s dtype).
    u : ndarray of shape (N, T, M), float32 or float64
        The input; the dtype every step is computed in.
    sink : StateSink, optional
        Receives ``{"ssm": (L, N, H, P, S), "conv": (L, N, Dc, K-1)}`` for consecutive blocks of
        steps. None: only the output.
    block_steps : int, optional
        L, the steps of each block of scratch; None: :data:`BLOCK_BYTES` of states, at most
        :data:`BLOCK_STEPS` steps.

    Returns
    -------
    out : ndarray of shape (N, T, M), ``u``'s dtype
        ``block.forward(u)[0]`` to round-off.

    Raises
    ------
    TypeError
        ``u`` not a float32/float64 NumPy array.
    ValueError
        ``u`` not of shape (N, T, M).
    """
    ut, p = _time_major(block, u)
    T, N, _ = ut.shape
    H, P, S, K, G = block.num_heads, block.head_dim, block.d_state, block.d_conv, block.n_groups
    mup = None if block.mup_vector is None else np.asarray(block.mup_vector, dtype=u.dtype)
    s = mamba2_kernel.prepare(p, ut, np.zeros((N, block.conv_dim, K - 1), dtype=u.dtype), n_groups=G,
                              dt_limit=block.time_step_limit, mup=mup, in_multiplier=block.ssm_in_multiplier)
    y = np.empty((T, N, H, P), dtype=u.dtype)
    kept = np.empty((N, H, P, S), dtype=u.dtype)  # decay_j h_{j-1}

    def run_block(start, stop, h, hs):
        t = slice(start, stop)
        mamba2_kernel.ssm_input(s.dt[t], s.x[t], s.Bh[t], out=hs)
        decay = s.decay[t, :, :, None, None]  # (L, N, H, 1, 1)
        prev = h
        for j in range(stop - start):  # h_j = decay_j h_{j-1} + b_j, in place
            np.multiply(prev, decay[j], out=kept)
            hs[j] += kept
            prev = hs[j]
        y[t] = mamba2_kernel.state_readout(hs, s.Ch[t], p["D"], s.x[t])

    L = _steps(block_steps, N * H * P * S * u.dtype.itemsize)
    _scan_blocks(T, N, (H, P, S), u.dtype, sink, s.xpad, K, run_block, L)
    out = mamba2_kernel.readout(p, y, s.z, eps=block.eps, n_groups=G, norm_before_gate=block.norm_before_gate)[0]
    return np.ascontiguousarray(out.transpose(1, 0, 2))
