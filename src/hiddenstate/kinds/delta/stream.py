"""The delta-rule blocks' streamed run: every step's states handed to a sink block by block, :func:`stream`.

A record of a delta-rule block holds every step's matrix state, T N Hv Dk Dv numbers: 1024 steps
of a Qwen3-Next layer (Hv = 4, Dk = Dv = 64) are 64 MiB in float32, and a long prompt or a
batch is gigabytes. :func:`stream` runs the block without a record (the contract of
:mod:`hiddenstate.kinds.stream`) and forms the matrix states one stretch of steps at a time:

* time goes in segments of a few hundred steps: the block's own preparation of a segment
  (:func:`~hiddenstate.kinds.delta.block_kernel.block_inputs`: projections, the causal
  convolution carried on from the last segment's window, L2 norms, gates) and everything of the
  chunked form that does not depend on the state (:func:`~hiddenstate.kinds.delta.chunked.chunk_parts`),
  for all its chunks of Q = 64 steps at once;
* chunk by chunk, the state is carried (:func:`~hiddenstate.kinds.delta.chunked.chunk_carry`,
  three (Q, Dk) x (Dk, Dv) products per head) and gives the chunk's outputs and its writes
  ``u_i``;
* only where the sink keeps a step, states are formed: in each stretch of L <= Q steps, from
  its first kept step to its last, step by step, ``S_i = diag(exp(g_i)) S_{i-1} + k_i u_i^T``
  (:func:`~hiddenstate.kinds.delta.chunked.step_states`), from the state before the first
  (the last one formed, or reached in one product per head from the chunk's start,
  :func:`~hiddenstate.kinds.delta.chunked.state_at`), and for the value heads kept only, in a
  scratch that the sink copies what it keeps out of before the next stretch overwrites it; the
  convolution's windows are views of the segment's input;
* the segment's outputs go through the block's gated norm and output projection
  (:func:`~hiddenstate.kinds.delta.block_kernel.block_output`).

These are the operations of ``block.forward`` (the chunked form with chunks of 64 steps, the
states of ``forward(record=True)``), in the same order for float64 input: the same numbers to
round-off. The per-step delta rule (``P = a S``, ``u = beta (v - P^T k)``, ``S = P + k u^T``,
``o = S^T q``, batched over rows and heads, on the same scratch) is no faster where every state
is formed and slower where none is: on the bench's Qwen3-Next layer (M = 256, Hv = 4, Dk = Dv =
64, N = 1, T = 1024, float32, one thread, load 1 on 2 cores) 0.055 s against the chunked form's
0.058 s with every state formed (a sink that copies nothing), 0.049 s against 0.029 s with none
(and it cannot skip the steps a sink does not keep).

Memory: the states of one scratch (L N Hv Dk Dv numbers, at most :data:`SCRATCH_BYTES`), one
segment's prepared inputs and chunk matrices (at most about :data:`SEGMENT_BYTES`), the input
and the output: whatever T.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.delta.block_kernel import block_inputs, block_output
from hiddenstate.kinds.delta.chunked import chunk_carry, chunk_parts, state_at, step_states
from hiddenstate.kinds.delta.kernel import DELTA_CHUNK
from hiddenstate.kinds.stream import StateSink
from hiddenstate.xp.arrays import is_foreign

__all__ = ["SCRATCH_BYTES", "SEGMENT_BYTES", "stream"]

#: The most bytes of matrix states formed at once (the L-step scratch; L at least 1).
SCRATCH_BYTES = 8 << 20

#: About the most bytes one segment's prepared inputs and chunk matrices take (a segment is at least one chunk).
SEGMENT_BYTES = 16 << 20


def _segment_steps(block, N, itemsize) -> int:
    """Steps per segment: a multiple of the chunk, its arrays about :data:`SEGMENT_BYTES`."""
    s, Q = block.spec, DELTA_CHUNK
    # per step and row: the projections, the convolution's arrays, q k v and their copies per value head,
    # the decays, the chunk matrices (Q wide: decays, Gram, inverse, attention), the readout and its norm
    # (the traced peak of a segment of the bench's Qwen3-Next layer was 51 KB a step; this says 54)
    per_step = (6 * block.conv_dim + 6 * block.d_model + 8 * s.Hv * (s.Dk + s.Dv) + 7 * s.Hv * Q) * itemsize
    return Q * max(1, SEGMENT_BYTES // (per_step * max(N, 1) * Q))


def _scratch_steps(block, N, itemsize) -> int:
    """L: steps of matrix states formed at once, a divisor of the chunk (64, 32, ..., 1)."""
    s, L = block.spec, DELTA_CHUNK
    while L > 1 and L * N * s.Hv * s.Dk * s.Dv * itemsize > SCRATCH_BYTES:
        L //= 2
    return L


def _check(block, u, sink):
    if not isinstance(block, (GatedDeltaNet, KimiDeltaAttention)):
        raise TypeError(f"block must be a GatedDeltaNet or a KimiDeltaAttention; got {type(block).__name__}.")
    if is_foreign(u) or not isinstance(u, np.ndarray):
        raise TypeError(f"u must be a NumPy array (N, T, M); got {type(u).__name__}.")
    if u.dtype not in (np.float32, np.float64):
        raise TypeError(f"u must be float32 or float64 (the dtype the stream computes in); got {u.dtype}.")
    if u.ndim != 3 or u.shape[2] != block.d_model:
        raise ValueError(f"u must be of shape (N, T, M={block.d_model}); got {u.shape}.")
    if not np.isfinite(u).all():
        raise ValueError("u must be finite; got NaN or Inf.")
    if sink is not None and (getattr(sink, "T", None), getattr(sink, "N", None)) != (u.shape[1], u.shape[0]):
        raise ValueError(f"sink must be a StateSink for T={u.shape[1]} steps and N={u.shape[0]} sequences; got "
                         f"{type(sink).__name__} with T={getattr(sink, 'T', None)}, N={getattr(sink, 'N', None)}.")


def _windows(xpad, K):
    """The convolution's window after every step of a segment: (T+1, N, Dc, K-1), row t+1 after local step t."""
    if K == 1:
        return np.zeros((xpad.shape[0] + 1,) + xpad.shape[1:] + (0,), dtype=xpad.dtype)
    return np.lib.stride_tricks.sliding_window_view(xpad, K - 1, axis=0)


def _kept_span(sink, start, b, e):
    """The first and last of the steps ``start + b .. start + e - 1`` the sink keeps (one at least), by bisection."""
    lo, hi = b, e - 1
    while lo < hi:  # the first: the smallest f with a kept step in b..f
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if sink.wants(start + b, start + mid + 1) else (mid + 1, hi)
    first, hi = lo, e - 1
    while lo < hi:  # the last: the largest l with a kept step in l..e-1
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sink.wants(start + mid, start + e) else (lo, mid - 1)
    return first, lo


def _skipped(sink, start, n, shapes, dtype):
    """``put`` for n steps no state of which is kept: zero-strided placeholders, nothing formed."""
    if n > 0:
        sink.put(start, {name: np.broadcast_to(np.zeros((), dtype), (n,) + shape) for name, shape in shapes.items()})


def _kept_heads(sink, Hv):
    """The value heads whose matrix states a :class:`~hiddenstate.kinds.stream.StateSink` keeps: a slice, indices or None (all)."""
    idx = sink.heads.get("recurrent") if isinstance(sink, StateSink) else None
    if idx is None or np.unique(idx).size == Hv:
        return None
    idx = np.unique(idx)  # sorted: the sink picks its own order out of them
    return slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == idx.size else idx


def _hand_out(sink, start, m, L, parts, c, S, U, wins, scratch, heads):
    """Chunk ``c``'s states (m steps from global step ``start``, entered with ``S``) put into the sink.

    Per stretch of L steps the sink keeps any of, the states from its first kept step to its
    last are formed (:func:`~hiddenstate.kinds.delta.chunked.step_states`) from the state before
    it: the stretch before's last, or reached in one product (:func:`~hiddenstate.kinds.delta.chunked.state_at`);
    the steps between go as placeholders. ``heads`` (:func:`_kept_heads`): where the sink keeps
    some value heads only, only theirs are formed (the others' entries of the scratch are left
    as they are: the sink does not read them). ``wins`` (m+1, N, Dc, K-1): the windows, row t+1
    after step t. Returns the scratch (allocated here at the first kept step).
    """
    dtype, hs = S.dtype, slice(None) if heads is None else heads
    if scratch.shape[0] == 0 and sink.wants(start, start + m):
        scratch = np.empty((L,) + S.shape, dtype=dtype)
    shapes = {"recurrent": S.shape, "conv": wins.shape[1:]}
    done, prev = 0, None  # steps put so far; the kept heads' state after step done - 1 where it was formed
    for b in range(0, m, L):
        e = min(b + L, m)
        if not sink.wants(start + b, start + e):
            continue
        f, l = _kept_span(sink, start, b, e)
        _skipped(sink, start + done, f - done, shapes, dtype)
        if f == 0 or prev is None or done != f:
            before = (S if f == 0 else state_at(parts, c, S, U, f - 1))[:, hs]
        else:
            before = prev
        n = l + 1 - f
        states = scratch[:n, :, hs] if isinstance(hs, slice) else np.empty((n,) + before.shape, dtype=dtype)
        step_states(np.moveaxis(np.exp(parts.gc[:, hs, c, f:l + 1]), 2, 0),
                    np.moveaxis(parts.kc[:, hs, c, f:l + 1], 2, 0), np.moveaxis(U[:, hs, f:l + 1], 2, 0), before, states)
        if not isinstance(hs, slice):  # scattered heads: formed side by side, then set in place
            scratch[:n, :, hs] = states
        sink.put(start + f, {"recurrent": scratch[:n], "conv": wins[f + 1:l + 2]})
        done, prev = l + 1, states[n - 1]
    _skipped(sink, start + done, m - done, shapes, dtype)
    return scratch


@np.errstate(under="ignore")  # a decay below the smallest float is 0: what it multiplies is gone
def stream(block, u, sink=None):
    """A delta-rule block over ``u`` without a record, every step's states handed to ``sink`` (the stream contract).

    Parameters
    ----------
    block : GatedDeltaNet or KimiDeltaAttention
        Any layout (Qwen3-Next's, OLMo-hybrid's, Qwen3.5's and its kin's; Kimi's, GLM-5-Next's,
        Bailing-hybrid's), as a family's ``to_block`` builds it; its parameters are cast to
        ``u``'s dtype once. ``u`` is (N, T, M) whatever its ``batch_first``.
    u : ndarray of shape (N, T, M), float32 or float64
        The input; everything is computed in its dtype. The initial states are zeros.
    sink : StateSink, optional
        Gets ``put(start, {"recurrent": (L, N, Hv, Dk, Dv), "conv": (L, N, Dc, K-1)})`` for
        consecutive blocks of L steps (L <= 64, fewer when one step's states of all N rows are
        large: at most :data:`SCRATCH_BYTES` per block), the states after each step, as
        ``block.forward(u, record=True)``'s record holds them (``kind.states(record)``). Steps
        it keeps none of (:meth:`~hiddenstate.kinds.stream.StateSink.wants`) are neither
        formed nor read: zero-strided placeholders of their shape go to ``put``; value heads a
        :class:`~hiddenstate.kinds.stream.StateSink` does not keep (its ``heads["recurrent"]``)
        are not formed (their entries of the array are left as they were). None: no states
        (an output-only run).

    Returns
    -------
    out : ndarray of shape (N, T, M), ``u``'s dtype
        ``block.forward(u)[0]`` to round-off.

    Raises
    ------
    TypeError
        ``block`` not a delta-rule block, ``u`` not a NumPy array or not float32/float64.
    ValueError
        ``u`` not (N, T, M) with the block's M, NaN or Inf in ``u``, a sink made for another T or N.

    References
    ----------
    S. Yang, J. Kautz, A. Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with delta rule",
    arXiv:2412.06464, 2024 (the rule); S. Yang et al., arXiv:2406.06484, 2024 (the chunked form).
    """
    _check(block, u, sink)
    dtype, spec = u.dtype, block.spec
    N, T, M = u.shape
    Hv, Dk, Dv, K, Q = spec.Hv, spec.Dk, spec.Dv, spec.K, DELTA_CHUNK
    p = {name: w.astype(dtype, copy=False) for name, w in block.params.items()}
    out = np.empty((N, T, M), dtype=dtype)
    S = np.zeros((N, Hv, Dk, Dv), dtype=dtype)
    window = np.zeros((N, block.conv_dim, K - 1), dtype=dtype)
    P, L = _segment_steps(block, N, dtype.itemsize), _scratch_steps(block, N, dtype.itemsize)
    scratch = np.empty((0, N, Hv, Dk, Dv), dtype=dtype)  # allocated at the first kept step
    heads = _kept_heads(sink, Hv)
    for s0 in range(0, T, P):
        n = min(P, T - s0)
        bi = block_inputs(p, u[:, s0:s0 + n].transpose(1, 0, 2), window, spec)
        parts = chunk_parts(bi.qs, bi.ks, bi.v, bi.g, bi.beta, Q)
        o = np.empty((n, N, Hv, Dv), dtype=dtype)
        wins = None if sink is None else _windows(bi.xpad, K)
        for c in range(parts.qc.shape[2]):
            t0, m = c * Q, min(Q, n - c * Q)  # the chunk's first local step and its steps
            U, O, S_next = chunk_carry(parts, c, S)
            o[t0:t0 + m] = np.moveaxis(O, 2, 0)[:m]
            if sink is not None:
                scratch = _hand_out(sink, s0 + t0, m, L, parts, c, S, U, wins[t0:t0 + m + 1], scratch, heads)
            S = S_next
        out[:, s0:s0 + n] = block_output(p, o, bi.z, spec)[0].transpose(1, 0, 2)
        window = np.ascontiguousarray(bi.xpad[n:].transpose(1, 2, 0))
        del bi, parts, o, wins  # before the next segment's are made: one segment's arrays at a time
    return out
