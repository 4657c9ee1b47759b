"""Linear recurrences ``h_t = a_t * h_{t-1} + b_t`` over all T steps at once: the scans of minGRU and minLSTM.

A recurrence whose coefficients do not depend on the state (Feng et al. 2024: gates that read
the input only) is a composition of affine maps ``h -> a h + b``, and composing two of them,
``(a1, b1)`` then ``(a2, b2)``, gives ``(a1 a2, a2 b1 + b2)``: an associative operation, so every
prefix can be computed by a *scan* instead of a loop over time (Blelloch 1990). This module has

* :func:`linear_scan`: ``h_t`` for all t from ``h_{-1}``, either a per-step loop
  (``parallel=False``, the streaming reference) or a Brent-Kung scan (``parallel=True``): an
  up-sweep that composes neighbouring segments of length 1, 2, 4, ... and a down-sweep that turns
  the segment sums into prefixes, ``2 log2(C)`` vectorised passes and O(C) work per chunk of C
  steps. Only products of coefficients in [0, 1] and sums weighted by them are formed, so
  nothing can overflow (a product that underflows to 0 is the right limit);
* :func:`log_space_scan`: the same for positive ``b`` with the pairs in log space,
  ``(log a, log b)``, composed with ``logaddexp`` (the log-space scan of Heinsen 2023, here
  as a Brent-Kung scan rather than a cumulative sum, so no large cumulative log-products are
  subtracted from each other);
* :func:`recurrence_forward` / :func:`recurrence_backward`: padding and resets folded into the
  coefficients and the exact adjoint. The adjoint of ``h_t = a_t h_{t-1} + b_t`` is the
  reverse-time recurrence ``g_t = d_t + a_{t+1} g_{t+1}`` (``g_t = dL/dh_t``, ``d_t`` the gradient
  arriving at ``h_t`` from outside), which is again a linear recurrence and runs through the same
  scan backwards; then ``dL/da_t = g_t h_{t-1}`` and ``dL/db_t = g_t``.

Time is chunked (:data:`CHUNK` steps, the state carried from one chunk to the next), so the
scan's work space is O(CHUNK * N * H) whatever T is. Padding (a step past a row's length) is
``a = 1, b = 0`` (the state is carried); a reset (the row restarts from ``h0``) is ``a = 0,
b = a h0 + b``.

References
----------
G. E. Blelloch, "Prefix sums and their applications", CMU-CS-90-190, 1990.
R. P. Brent, H. T. Kung, "A regular layout for parallel adders", IEEE Trans. Computers C-31(3), 1982.
F. A. Heinsen, "Efficient parallelization of a ubiquitous sequential computation", arXiv:2311.06281, 2023.
L. Feng et al., "Were RNNs all we needed?", arXiv:2410.01201, 2024.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHUNK", "g", "g_prime", "linear_scan", "log_g", "log_space_scan", "recurrence_backward",
           "recurrence_forward", "sigmoid_parts"]

#: Steps per chunk of the parallel scans (the work space is O(CHUNK * N * H)).
CHUNK = 256


# --------------------------------------------------------------------------- elementwise pieces

@np.errstate(under="ignore")
def sigmoid_parts(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``sigmoid(k)``, ``sigmoid(-k)`` and ``softplus(-k) = -log sigmoid(k)``, each to full relative precision.

    Parameters
    ----------
    k : ndarray, floating
        Pre-activations (any shape, any strides).

    Returns
    -------
    s, s_minus, softplus_minus : ndarray, shape and dtype of ``k``
        ``1 / (1 + exp(-k))``, ``1 / (1 + exp(k))`` and ``log(1 + exp(-k))``, computed as
        ``softplus(-k) = max(-k, 0) + log1p(exp(-|k|))`` and ``s = exp(-softplus(-k))``,
        ``s_minus = exp(-softplus(-k) - k)``: neither gate is formed as ``1 - x`` (a gate near 0
        keeps its digits), nothing overflows, and there is no elementwise branch (``np.where``
        on a mask of random signs is several times slower than arithmetic).
    """
    sp = np.abs(k)
    np.negative(sp, out=sp)
    np.exp(sp, out=sp)
    np.log1p(sp, out=sp)
    sp += np.maximum(k, 0.0)
    sp -= k  # softplus(-k) = max(k, 0) - k + log1p(exp(-|k|))
    s = np.negative(sp)
    np.exp(s, out=s)
    s_minus = np.add(sp, k)
    np.negative(s_minus, out=s_minus)
    np.exp(s_minus, out=s_minus)
    return s, s_minus, sp


def g(p: np.ndarray, sig: np.ndarray | None = None) -> np.ndarray:
    """The positive activation of the log-space minGRU/minLSTM: ``p + 1/2`` for ``p >= 0``, ``sigmoid(p)`` below.

    Continuous and increasing, with values in (0, inf) (Feng et al. 2024, App. B.3).

    Parameters
    ----------
    p : ndarray, floating
        Pre-activation of the candidate.
    sig : ndarray, optional
        ``sigmoid(p)`` if already computed.

    Returns
    -------
    ndarray, shape and dtype of ``p``
    """
    s = sigmoid_parts(p)[0] if sig is None else sig
    return np.where(p >= 0, p + 0.5, s)


def log_g(p: np.ndarray, softplus_minus: np.ndarray | None = None) -> np.ndarray:
    """``log g(p)``: ``log(p + 1/2)`` for ``p >= 0``, ``-softplus(-p)`` below, without forming ``g``.

    Parameters
    ----------
    p : ndarray, floating
        Pre-activation of the candidate.
    softplus_minus : ndarray, optional
        ``softplus(-p)`` if already computed (:func:`sigmoid_parts`).

    Returns
    -------
    ndarray, shape and dtype of ``p``
    """
    sp = sigmoid_parts(p)[2] if softplus_minus is None else softplus_minus
    return np.where(p >= 0, np.log(np.maximum(p, 0.0) + 0.5), -sp)


def g_prime(p: np.ndarray, sig: np.ndarray, sig_minus: np.ndarray) -> np.ndarray:
    """``dg/dp``: 1 for ``p >= 0`` (the right derivative at 0, as autograd takes it), ``sigmoid(p) sigmoid(-p)`` below.

    Parameters
    ----------
    p : ndarray, floating
        Pre-activation of the candidate.
    sig, sig_minus : ndarray
        ``sigmoid(p)`` and ``sigmoid(-p)``.

    Returns
    -------
    ndarray, shape and dtype of ``p``
    """
    return np.where(p >= 0, 1.0, sig * sig_minus)


# --------------------------------------------------------------------------- the two scans

def _brent_kung(A, B, tmp, log_space: bool) -> None:
    """Inclusive scan of the pairs (A[t], B[t]) along axis 0, in place: B[t] becomes the prefix's b.

    Up-sweep: for d = 1, 2, 4, ... the pair at index ``2d k + 2d - 1`` absorbs the one at ``d``
    before it (segments of length 2d end there). Down-sweep: for d = P/2, ..., 1 (P the largest
    power of two <= n) the pair at ``2d k + 3d - 1`` absorbs the full prefix ending ``d`` before
    it. ``(A1, B1)`` then ``(A2, B2)`` is ``(A1 A2, A2 B1 + B2)``, or in log space
    ``(A1 + A2, logaddexp(A2 + B1, B2))``. The down-sweep needs no A: a finished prefix is only
    ever a left operand.
    """
    n = A.shape[0]

    def absorb(right, left, with_a):
        ar, br = A[right], B[right]
        m = ar.shape[0]
        if m == 0:
            return
        t = tmp[:m]
        if log_space:
            np.add(ar, B[left][:m], out=t)
            np.logaddexp(t, br, out=br)
            if with_a:
                ar += A[left][:m]
        else:
            np.multiply(ar, B[left][:m], out=t)
            br += t
            if with_a:
                ar *= A[left][:m]

    d = 1
    while 2 * d <= n:
        absorb(slice(2 * d - 1, None, 2 * d), slice(d - 1, None, 2 * d), 2 * d * 2 <= n)
        d *= 2
    d //= 2
    while d >= 1:
        absorb(slice(3 * d - 1, None, 2 * d), slice(2 * d - 1, None, 2 * d), False)
        d //= 2


@np.errstate(under="ignore")
def linear_scan(a, b, h, *, out=None, parallel: bool = True, chunk: int = CHUNK) -> np.ndarray:
    """``h_t = a_t * h_{t-1} + b_t`` for ``t = 0 .. T-1`` from ``h_{-1} = h``.

    Parameters
    ----------
    a, b : ndarray of shape (T, ...)
        Coefficients and inputs (any strides, e.g. time-reversed views). For ``parallel`` the
        products of ``a`` over up to ``chunk`` steps are formed, so ``|a| <= 1`` keeps them
        bounded (the gates of minGRU/minLSTM lie in [0, 1]).
    h : ndarray of shape (...)
        The state before step 0.
    out : ndarray of shape (T, ...), optional
        Where to write the states; may be ``b`` itself (then ``b`` is overwritten). Default: a
        new array.
    parallel : bool, default True
        True: a Brent-Kung scan per chunk (no Python loop over the steps of a chunk); False: the
        per-step loop ``h = a[t] * h + b[t]``.
    chunk : int, default CHUNK
        Steps per chunk of the parallel scan.

    Returns
    -------
    ndarray of shape (T, ...)
        ``out``, holding every ``h_t``.
    """
    if out is None:
        out = np.array(b, copy=True)
    elif out is not b:
        out[...] = b
    T = out.shape[0]
    if T == 0:
        return out
    tmp = np.empty(((min(chunk, T) + 1) // 2,) + out.shape[1:], dtype=out.dtype)
    prev = h
    if not parallel:
        for t in range(T):
            np.multiply(a[t], prev, out=tmp[0])
            out[t] += tmp[0]
            prev = out[t]
        return out
    work = np.empty((min(chunk, T),) + out.shape[1:], dtype=out.dtype)
    for s in range(0, T, chunk):
        n = min(chunk, T - s)
        A, B = work[:n], out[s:s + n]
        A[...] = a[s:s + n]
        np.multiply(A[0], prev, out=tmp[0])  # fold the carried state into the chunk's first step
        B[0] += tmp[0]
        _brent_kung(A, B, tmp, False)
        prev = B[n - 1]
    return out


@np.errstate(under="ignore")
def log_space_scan(la, lb, h, keep=None, reset=None, h0=None, *, chunk: int = CHUNK) -> np.ndarray:
    """``h_t = a_t * h_{t-1} + b_t`` for positive ``b``, with ``(log a, log b)`` scanned in log space.

    The part of ``h_t`` that comes from the inputs, ``s_t = a_t s_{t-1} + b_t`` from ``s = 0``, is
    positive and is computed as ``exp`` of a Brent-Kung scan of ``(log a, log b)`` pairs
    composed with ``logaddexp`` (Heinsen 2023's log-space scan). The part that comes from the
    state carried into a chunk (or from ``h0`` after a reset) need not be positive and is added
    in linear space: ``exp(sum of log a since then) * state``, a cumulative sum.

    Parameters
    ----------
    la, lb : ndarray of shape (T, N, H)
        ``log a`` (finite, <= 0) and ``log b`` of every step, before padding and resets.
    h : ndarray of shape (N, H)
        The state before step 0.
    keep : ndarray of bool, shape (T, N, 1), or None
        False at padded steps (``a = 1``, ``b = 0``).
    reset : ndarray of bool, shape (T, N, 1), or None
        True where the step restarts from ``h0`` (``a = 0``, ``b = a h0 + b``); only at valid steps.
    h0 : ndarray of shape (N, H), optional
        The state a reset restarts from (needed with ``reset``).
    chunk : int, default CHUNK
        Steps per chunk.

    Returns
    -------
    ndarray of shape (T, N, H)
        Every ``h_t``.
    """
    T = la.shape[0]
    out = np.empty(la.shape, dtype=la.dtype)
    if T == 0:
        return out
    la_c = la if keep is None else np.where(keep, la, 0.0)  # log a, 0 at padding (a = 1)
    lb_c = lb if keep is None else np.where(keep, lb, -np.inf)  # b = 0 at padding
    n0 = min(chunk, T)
    LA = np.empty((n0,) + la.shape[1:], dtype=la.dtype)
    LB = np.empty_like(LA)
    tmp = np.empty(((n0 + 1) // 2,) + la.shape[1:], dtype=la.dtype)
    steps = np.arange(n0).reshape(-1, 1, 1)
    prev = h
    for s in range(0, T, chunk):
        n = min(chunk, T - s)
        A, B = LA[:n], LB[:n]
        r = None if reset is None else reset[s:s + n]
        np.copyto(A, la_c[s:s + n])
        if r is not None:
            A[np.broadcast_to(r, A.shape)] = -np.inf  # a reset cuts the inputs before it
        np.copyto(B, lb_c[s:s + n])
        _brent_kung(A, B, tmp, True)
        o = out[s:s + n]
        np.exp(B, out=o)  # the inputs' part, from s = 0 at the chunk start
        cum = np.cumsum(la_c[s:s + n], axis=0)  # (n, N, H): log of the products of a since the chunk start
        if r is None or not r.any():
            o += np.exp(cum) * prev
        else:  # since the last reset (inclusive) the carried state is a_r h0, else the chunk's state
            last = np.maximum.accumulate(np.where(r, steps[:n], -1), axis=0)  # (n, N, 1)
            base = np.concatenate([np.zeros_like(cum[:1]), cum[:-1]], axis=0)  # log product before step j
            origin = np.take_along_axis(base, np.maximum(last, 0), axis=0)
            o += np.exp(cum - np.where(last >= 0, origin, 0.0)) * np.where(last >= 0, h0, prev)
        prev = o[n - 1]
    return out


# --------------------------------------------------------------------------- padding, resets, adjoint

def _coefficients(a, keep, reset):
    """``a`` with resets (0) and padding (1) folded in."""
    if reset is not None:
        a = np.where(reset, 0.0, a)
    if keep is not None:
        a = np.where(keep, a, 1.0)
    return a


@np.errstate(under="ignore")
def recurrence_forward(a, b, h0, keep=None, reset=None, *, parallel: bool = True, log_ab=None) -> np.ndarray:
    """Every state of ``h_t = a_t h_{t-1} + b_t`` from ``h0``, with padding and resets.

    Parameters
    ----------
    a, b : ndarray of shape (T, N, H)
        The keep gate (in [0, 1]) and the input term of every step. Not modified.
    h0 : ndarray of shape (N, H)
        The initial state (also the state a reset restarts from).
    keep : ndarray of bool, shape (T, N, 1), or None
        False at padded steps: the state is carried unchanged.
    reset : ndarray of bool, shape (T, N, 1), or None
        True where the step starts from ``h0`` instead of the previous state (ignored on padded
        steps).
    parallel : bool, default True
        A chunked scan; False: the per-step loop.
    log_ab : pair of ndarray, optional
        ``(log a, log b)`` for ``b > 0``: the parallel scan then runs in log space
        (:func:`log_space_scan`).

    Returns
    -------
    ndarray of shape (T, N, H)
        ``hs[t] = h_t`` (at a padded step, the carried state).
    """
    if reset is not None and keep is not None:
        reset = reset & keep
    if parallel and log_ab is not None:
        return log_space_scan(log_ab[0], log_ab[1], h0, keep, reset, h0)
    bb = b if reset is None else np.where(reset, a * h0 + b, b)
    bb = np.array(bb, copy=True) if keep is None else np.where(keep, bb, 0.0)
    return linear_scan(_coefficients(a, keep, reset), bb, h0, out=bb, parallel=parallel)


def previous_states(hs, h0, reset=None) -> np.ndarray:
    """``h_{t-1}`` as each step read it: ``h0`` at step 0 and after a reset, else ``hs[t-1]``.

    Parameters
    ----------
    hs : ndarray of shape (T, N, H)
        From :func:`recurrence_forward`.
    h0 : ndarray of shape (N, H)
        The initial state.
    reset : ndarray of bool, shape (T, N, 1), or None
        The reset mask.

    Returns
    -------
    ndarray of shape (T, N, H)
    """
    hp = np.empty_like(hs)
    if hs.shape[0]:
        hp[0] = h0
        hp[1:] = hs[:-1]
    return hp if reset is None else np.where(reset, h0, hp)


@np.errstate(under="ignore")
def recurrence_backward(a, hs, h0, keep, reset, d_hs, d_final, *, parallel: bool = True):
    """The exact adjoint of :func:`recurrence_forward`: gradients of ``a``, ``b`` and ``h0``.

    ``g_t = dL/dh_t = d_t + a_{t+1} g_{t+1}`` (with ``d_{T-1}`` including ``d_final``) runs through
    :func:`linear_scan` backwards in time; then ``dL/da_t = g_t h_{t-1}``, ``dL/db_t = g_t`` at
    valid steps (0 at padding, where ``a`` and ``b`` are not used), and ``h0`` collects
    ``a_0 g_0`` (padding at step 0: ``g_0``) and ``a_r g_r`` of every reset step ``r``.

    Parameters
    ----------
    a : ndarray of shape (T, N, H)
        The keep gate the forward used.
    hs : ndarray of shape (T, N, H)
        The forward's states.
    h0 : ndarray of shape (N, H)
        The initial state.
    keep, reset : ndarray of bool, shape (T, N, 1), or None
        The forward's masks.
    d_hs : ndarray of shape (T, N, H) or None
        Gradient with respect to ``hs``.
    d_final : ndarray of shape (N, H) or None
        Gradient with respect to the final state ``hs[T-1]``.
    parallel : bool, default True
        A chunked scan; False: the per-step loop.

    Returns
    -------
    d_a, d_b : ndarray of shape (T, N, H)
    d_h0 : ndarray of shape (N, H)
    """
    T = hs.shape[0]
    if reset is not None and keep is not None:
        reset = reset & keep
    a_eff = _coefficients(a, keep, reset)
    G = np.zeros_like(hs) if d_hs is None else np.array(d_hs, dtype=hs.dtype, copy=True)
    if T == 0:
        d_h0 = np.zeros_like(h0) if d_final is None else np.array(d_final, dtype=h0.dtype, copy=True)
        return G, G.copy(), d_h0
    if d_final is not None:
        G[T - 1] += d_final
    if T > 1:
        rev = G[T - 2::-1]  # g_{T-2}, ..., g_0: each gets a_{t+1} g_{t+1}
        linear_scan(a_eff[:0:-1], rev, G[T - 1], out=rev, parallel=parallel)
    d_h0 = a_eff[0] * G[0]
    if reset is not None:
        d_h0 += np.where(reset, a * G, 0.0).sum(axis=0)
    d_b = G if keep is None else np.where(keep, G, 0.0)
    d_a = d_b * previous_states(hs, h0, reset)
    return d_a, d_b, d_h0
