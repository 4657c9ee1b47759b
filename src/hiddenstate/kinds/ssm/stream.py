"""Streamed runs of the two selective SSM blocks: :func:`mamba_stream` (kind ``"mamba"``) and :func:`mamba2_stream` (``"mamba2"``).

Each is a kind's ``stream`` (the contract of :mod:`hiddenstate.kinds.stream`): the block over a
whole sequence from zero states, every step's states handed to a
:class:`~hiddenstate.kinds.stream.StateSink` block by block, without a record. Time goes in
chunks of :data:`CHUNK_STEPS` steps; a chunk's (C, N, Di)-sized arrays (``x``, ``z``, ``dt``,
``B``, ``C``, the convolution's inputs) come from the kernels' own
:func:`~hiddenstate.kinds.ssm.mamba_kernel.prepare` (the next chunk starts from the
convolution's window), and what is (Di, S)-sized per step (Mamba's decay ``exp(dt A)``, the
input ``dt B x``, every state) is formed for a block of L steps at a time (:data:`BLOCK_BYTES`
of states, at most :data:`BLOCK_STEPS` steps), in a scratch used again by the next block::

    for every chunk of C steps:
        prepare(chunk)                                    in_proj, conv, SiLU, x_proj, norms, dt
        for every block of L steps:
            decay, b = discretize(block)                  scratch (L, N, Di, S), in place
            h_j = decay_j * h_{j-1} + b_j                 step by step, in the scratch of b
            y_block = C . h + D x                         one batched matrix product
            sink.put(start, {"ssm": h, "conv": windows})  the sink copies the steps it keeps
        out_chunk = readout(y_chunk)                      gate, norm, out_proj

The recurrence is the sequential loop; the block's own forward (a Brent-Kung scan by default)
gives the same states to round-off. Everything runs in ``u``'s dtype (float32 or float64), the
parameters cast to it once per call. The memory a call holds is the output (T, N, M), one
chunk's arrays, two blocks of scratch and the sink's kept states, whatever T.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.ssm import mamba2_kernel, mamba_kernel
from hiddenstate.shared import causal_conv
from hiddenstate.shared.ssd import ssd_forward

__all__ = ["BLOCK_BYTES", "BLOCK_STEPS", "CHUNK_STEPS", "mamba2_stream", "mamba_stream"]

#: The steps prepared at a time (C): ``in_proj``, the convolution, ``dt``, B, C of a chunk, then
#: its blocks of states, then its output; the next chunk starts from the convolution's window.
#: Measured at T = 1024, N = 1, one thread: C from 128 to 1024 within the noise (load 1).
CHUNK_STEPS = 256

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


class _Scan:
    """The state carried from block to block and one block's scratch: the time loop both kinds share.

    Parameters
    ----------
    N : int
    shape : tuple of int
        One sequence's SSM state, (Di, S) or (H, P, S).
    dtype : numpy dtype
    sink : StateSink or None
    L : int
        Steps per block.
    """

    def __init__(self, N, shape, dtype, sink, L):
        self.hs = np.empty((L, N) + shape, dtype=dtype)  # the block's states (first its inputs dt B x)
        self.h = np.zeros((N,) + shape, dtype=dtype)  # the state before the block
        self.sink, self.L = sink, L

    def _wants(self, start, stop) -> bool:
        return self.sink is not None and self.sink.wants(start, stop)

    @np.errstate(under="ignore")  # states that decay below the smallest normal number: 0 is the right limit
    def run(self, t0, xpad, K, run_block, skip=None):
        """Steps ``t0 .. t0 + n - 1`` of a chunk, n = ``len(xpad) - (K-1)``, in blocks of L, each handed to the sink.

        ``run_block(start, stop, h, hs)`` (``start``, ``stop`` within the chunk) fills ``hs``
        (stop - start, N, *shape) with the block's states from ``h``, the state before it. The
        convolution's windows (stop - start, N, Dc, K-1) are formed from the chunk's ``xpad``
        only for a block the sink keeps a step of. ``skip(start, stop, h)``, when given, runs
        the steps of blocks the sink keeps nothing of (all of them without a sink) without
        forming their states, ``h`` updated in place; the sink gets zero-strided placeholders.
        """
        n = xpad.shape[0] - (K - 1)
        start = 0
        while start < n:
            stop = min(start + self.L, n)
            wanted = self._wants(t0 + start, t0 + stop)
            if skip is not None and not wanted:  # as far as the next block the sink keeps a step of
                while stop < n and not self._wants(t0 + stop, t0 + min(stop + self.L, n)):
                    stop = min(stop + self.L, n)
                skip(start, stop, self.h)
                blk = np.broadcast_to(self.h, (stop - start,) + self.h.shape)
            else:
                blk = self.hs[:stop - start]
                run_block(start, stop, self.h, blk)
                np.copyto(self.h, blk[-1])
            if self.sink is not None:
                conv = (causal_conv.windows(xpad[start:stop + K - 1], K) if wanted else  # (L, N, Dc, K-1)
                        np.broadcast_to(np.zeros((), dtype=blk.dtype), blk.shape[:2] + (xpad.shape[2], K - 1)))
                self.sink.put(t0 + start, {"ssm": blk, "conv": conv})
            start = stop


def _recurrence(h, decay, hs, work) -> None:
    """``h_j = decay_j h_{j-1} + b_j`` over a block, in place: ``hs`` holds the inputs ``b_j``, then the states.

    ``h`` (N, ...) the state before the block, ``decay`` (L, N, ...) broadcasting against it,
    ``work`` where ``decay_j h_{j-1}`` goes: (L, N, ...) shaped like ``hs`` (``decay`` itself,
    overwritten) or one step's (N, ...).
    """
    prev = h
    for j in range(hs.shape[0]):
        w = work[j] if work.ndim == hs.ndim else work
        np.multiply(prev, decay[j], out=w)
        hs[j] += w
        prev = hs[j]


def _stream(block, u, sink, block_steps, chunk_steps, shape, channels, run_chunk):
    """A kind's stream: the time in chunks of C steps, each ``run_chunk(block, p, u_chunk, conv0, scan, t0)``.

    ``run_chunk`` prepares the chunk from the convolution's window before it ``conv0``
    (N, channels, K-1), runs its steps through ``scan`` and returns its output (C, N, M) and its
    ``xpad`` (K-1+C, N, channels), whose last K-1 rows are the next chunk's window.
    """
    ut, p = _time_major(block, u)
    T, N, _ = ut.shape
    K = block.d_conv
    scan = _Scan(N, shape, u.dtype, sink, _steps(block_steps, N * int(np.prod(shape)) * u.dtype.itemsize))
    C = CHUNK_STEPS if chunk_steps is None else chunk_steps
    out = np.empty((T, N, block.d_model), dtype=u.dtype)
    conv = np.zeros((N, channels, K - 1), dtype=u.dtype)
    for t0 in range(0, T, C):
        t1 = min(t0 + C, T)
        out[t0:t1], xpad = run_chunk(block, p, ut[t0:t1], conv, scan, t0)
        conv = np.ascontiguousarray(xpad[t1 - t0:].transpose(1, 2, 0))  # (N, channels, K-1)
    return np.ascontiguousarray(out.transpose(1, 0, 2))


def _mamba_chunk(block, p, u, conv0, scan, t0):
    """One chunk of :func:`mamba_stream`: its output (C, N, M) and ``xpad``."""
    s = mamba_kernel.prepare(p, u, conv0, norm_eps=None if block.bcdt_norm is None else block.norm_eps)
    y = np.empty(s.dt.shape, dtype=u.dtype)  # (C, N, Di)
    dA = np.empty_like(scan.hs)  # the block's decays, then decay * h_{t-1}

    def run_block(start, stop, h, hs):
        t = slice(start, stop)
        decay, _ = mamba_kernel.discretize(s.dt[t], s.a[t], s.A, s.B[t], out=(dA[:stop - start], hs))
        _recurrence(h, decay, hs, decay)
        y[t] = mamba_kernel.state_readout(hs, s.C[t], p["D"], s.a[t])

    scan.run(t0, s.xpad, block.d_conv, run_block)
    return mamba_kernel.readout(p, y, s.z)[0], s.xpad


def _mamba2_chunk(block, p, u, conv0, scan, t0):
    """One chunk of :func:`mamba2_stream`: its output (C, N, M) and ``xpad``."""
    mup = None if block.mup_vector is None else np.asarray(block.mup_vector, dtype=u.dtype)
    s = mamba2_kernel.prepare(p, u, conv0, n_groups=block.n_groups, dt_limit=block.time_step_limit, mup=mup,
                              in_multiplier=block.ssm_in_multiplier)
    y = np.empty(s.x.shape, dtype=u.dtype)  # (C, N, H, P)
    kept = np.empty_like(scan.h)  # decay_j h_{j-1}

    def run_block(start, stop, h, hs):
        t = slice(start, stop)
        mamba2_kernel.ssm_input(s.dt[t], s.x[t], s.Bh[t], out=hs)
        _recurrence(h, s.decay[t, :, :, None, None], hs, kept)  # a decay (L, N, H, 1, 1) per head
        y[t] = mamba2_kernel.state_readout(hs, s.Ch[t], p["D"], s.x[t])

    def skip(start, stop, h):  # SSD's chunked matrix form: y and the last state, no state of every step
        t = slice(start, stop)
        y_ssm, h_n, _ = ssd_forward(s.dt[t] * s.A, s.dt[t, :, :, None] * s.x[t], s.Bh[t], s.Ch[t], h)
        y[t] = y_ssm + p["D"][:, None] * s.x[t]
        np.copyto(h, h_n)

    scan.run(t0, s.xpad, block.d_conv, run_block, skip)
    out = mamba2_kernel.readout(p, y, s.z, eps=block.eps, n_groups=block.n_groups,
                                norm_before_gate=block.norm_before_gate)[0]
    return out, s.xpad


def mamba_stream(block, u, sink=None, *, block_steps=None, chunk_steps=None):
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
    chunk_steps : int, optional
        C, the steps prepared at a time; None: :data:`CHUNK_STEPS`.

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
    return _stream(block, u, sink, block_steps, chunk_steps, (block.d_inner, block.d_state), block.d_inner,
                   _mamba_chunk)


def mamba2_stream(block, u, sink=None, *, block_steps=None, chunk_steps=None):
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
    chunk_steps : int, optional
        C, the steps prepared at a time; None: :data:`CHUNK_STEPS`.

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
    return _stream(block, u, sink, block_steps, chunk_steps, (block.num_heads, block.head_dim, block.d_state),
                   block.conv_dim, _mamba2_chunk)
