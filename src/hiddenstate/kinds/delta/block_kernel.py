"""The gated delta rule's block (Qwen3-Next, OLMo-hybrid) and Kimi Delta Attention's: forward and exact backward.

A block maps a sequence ``u`` (T, N, M) to one of the same shape through two states, the delta
rule's matrix ``S`` (N, Hv, Dk, Dv) (:mod:`hiddenstate.kinds.delta.kernel`) and the causal
convolution's window (N, Dc, K-1). In transformers' names (Hk key heads of Dk channels, Hv
value heads of Dv channels, r = Hv / Hk value heads per key head, Dc = 2 Hk Dk + Hv Dv)::

    q, k, v, z, b, a = projections(u)                     layout-specific, all linear in u
    x_t   = silu(sum_j w[:, j] * [q k v]_{t-K+1+j})       causal depthwise conv1d (no bias), K taps
    q, k  = l2norm(q), l2norm(k)                          x / sqrt(sum x^2 + 1e-6) per head
    q     = q / sqrt(Dk);  value head h reads key head h // r
    beta  = sigmoid(b)      (x 2 with ``allow_neg_eigval``, OLMo-hybrid)
    g     = -exp(A_log) softplus(a + dt_bias)             log decay: per head (GDN) or per key channel (KDA)
    g     = lower_bound sigmoid(exp(A_log) (a + dt_bias)) KDA's "safe gate" instead (``lower_bound`` < 0 given)
    o, S  = delta rule(q, k, v, g, beta, S0)
    y     = norm.weight * o / sqrt(mean_Dv(o^2) + eps) * act(z)     per head; act silu (GDN) or sigmoid (KDA)
                                                          (a GDN with ``gate="sigmoid"``: Qwen4-Exp's output_gate_type)
    out   = out_proj(y)

Layouts (parameter names exactly as transformers' modules, so a state dict maps 1:1):

``"qwen3_next"`` (``Qwen3NextGatedDeltaNet``)
    ``in_proj_qkvz.weight`` (Hk (2 Dk + 2 r Dv), M), per key head the rows ``q (Dk), k (Dk),
    v (r Dv), z (r Dv)``; ``in_proj_ba.weight`` (2 Hv, M), per key head ``b (r), a (r)``;
    ``conv1d.weight`` (Dc, 1, K); ``dt_bias``, ``A_log`` (Hv,); ``norm.weight`` (Dv,);
    ``out_proj.weight`` (M, Hv Dv).
``"olmo_hybrid"`` (``OlmoHybridGatedDeltaNet``)
    ``q_proj``, ``k_proj`` (Hk Dk, M), ``v_proj``, ``g_proj`` (Hv Dv, M) (z), ``a_proj``,
    ``b_proj`` (Hv, M) (``.weight`` each), ``conv1d.weight``, ``A_log``, ``dt_bias`` (Hv,),
    ``o_norm.weight`` (Dv,), ``o_proj.weight`` (M, Hv Dv).
``"qwen3_5"`` (``Qwen3_5GatedDeltaNet``, ``Qwen3_5MoeGatedDeltaNet``, ``Qwen4ExpTextGatedDeltaNet``, ``LaraMiniGatedDeltaNet``)
    ``in_proj_qkv.weight`` (2 Hk Dk + Hv Dv, M), the rows ``q (Hk Dk), k (Hk Dk), v (Hv Dv)`` in
    that order (the convolution's channel order, not per key head); ``in_proj_z.weight`` (Hv Dv, M);
    ``in_proj_b.weight``, ``in_proj_a.weight`` (Hv, M); ``conv1d.weight``, ``dt_bias``,
    ``A_log``, ``norm.weight``, ``out_proj.weight`` as ``"qwen3_next"``.
``"kimi"`` (``KimiLinearDeltaAttention``; H = Hk = Hv heads, D = Dk = Dv)
    ``q_proj``, ``k_proj``, ``v_proj`` (H D, M), ``conv1d.weight`` (3 H D, 1, K),
    ``forget_gate.f_a_proj`` (D, M) then ``forget_gate.f_b_proj`` (H D, D) (a),
    ``forget_gate.dt_bias`` (H D,), ``forget_gate.A_log`` (1, 1, H, 1), ``b_proj`` (H, M),
    ``g_a_proj`` (D, M) then ``g_b_proj`` (H D, D) (z), ``o_norm.weight`` (D,), ``o_proj`` (M, H D).
``"glm5_next"`` (``Glm5NextTextLinearAttention``)
    As ``"kimi"`` but ``forget_gate.A_log`` (H,).
``"bailing_hybrid"`` (``BailingHybridDeltaAttention``)
    As ``"glm5_next"`` but full-rank gate projections: ``forget_gate.f_proj`` (H D, M) (a) and
    ``g_proj`` (H D, M) (z).

The safe gate (``spec.lower_bound``, GLM-5-Next's ``linear_lower_bound``, Bailing-hybrid's
``kda_lower_bound`` with ``kda_safe_gate``; fla's ``chunk_kda(safe_gate=True)``) bounds each
channel's log decay to ``(lower_bound, 0)``: ``g = lb s`` with ``s = sigmoid(A x)``, ``A =
exp(A_log)``, ``x = a + dt_bias``; its exact derivatives are ``dg/dx = lb s (1 - s) A`` and
``dg/dA_log = lb s (1 - s) A x`` (:func:`_log_decay`).

Kernel contract
---------------
``block_forward(p, u, S0, conv0, spec, *, chunk) -> (out, DeltaState, cache)``; ``block_backward(cache,
d_out, d_final) -> (grads, d_u, DeltaState)``; ``block_record(cache) -> DeltaRecord``. Nothing is
validated; ``u`` is (T, N, M) and every array has its dtype. ``block_forward`` is
``block_inputs(p, u, conv0, spec) -> BlockInputs`` (everything before the delta rule), the rule,
then ``block_output(p, o, z, spec) -> (out, parts)`` (everything after it): the streamed run
(:mod:`hiddenstate.kinds.delta.stream`) calls the same two on stretches of the sequence.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from hiddenstate.core.functional import sigmoid
from hiddenstate.kinds.delta.kernel import delta_backward, delta_forward, delta_states

__all__ = ["GATES", "KDA_LAYOUTS", "LAYOUTS", "BlockInputs", "BlockSpec", "DeltaRecord", "DeltaState", "block_backward",
           "block_forward", "block_inputs", "block_output", "block_record", "param_names"]

#: The block layouts and the transformers module each one matches.
LAYOUTS = {"qwen3_next": "Qwen3NextGatedDeltaNet", "olmo_hybrid": "OlmoHybridGatedDeltaNet",
           "qwen3_5": "Qwen3_5GatedDeltaNet", "kimi": "KimiLinearDeltaAttention",
           "glm5_next": "Glm5NextTextLinearAttention", "bailing_hybrid": "BailingHybridDeltaAttention"}

#: The output gate's activations ``act(z)`` a block computes (``BlockSpec.gate``).
GATES = ("silu", "sigmoid")

#: The layouts of Kimi Delta Attention (one decay per key channel, H = Hk = Hv, D = Dk = Dv).
KDA_LAYOUTS = ("kimi", "glm5_next", "bailing_hybrid")

#: transformers' l2norm epsilon (inside the square root).
L2_EPS = 1e-6


class DeltaState(NamedTuple):
    """The two states of a delta-rule block.

    Attributes
    ----------
    recurrent : ndarray of shape (N, Hv, Dk, Dv)
        The delta rule's matrix state ``S`` (transformers' ``recurrent_states``).
    conv : ndarray of shape (N, Dc, K-1)
        The last K - 1 inputs of the causal convolution, oldest first (transformers' cache keeps
        K, the oldest of which the next step never reads).
    """

    recurrent: np.ndarray
    conv: np.ndarray


class DeltaRecord(NamedTuple):
    """Every step of a delta-rule block's forward pass (time-major), from :func:`block_record`.

    Attributes
    ----------
    recurrent : ndarray of shape (T, N, Hv, Dk, Dv)
        The matrix state ``S_t`` after each step.
    conv : ndarray of shape (T, N, Dc, K-1)
        The convolution's window after each step.
    decay : ndarray of shape (T, N, Hv) or (T, N, Hv, Dk)
        ``exp(g_t)``: how much of its state each head (GDN) or key channel (KDA) keeps.
    beta : ndarray of shape (T, N, Hv)
        The write strength.
    q, k : ndarray of shape (T, N, Hv, Dk)
        What the rule reads: the L2-normalised (``q`` also scaled) query and key of every value head.
    v : ndarray of shape (T, N, Hv, Dv)
        The values.
    o : ndarray of shape (T, N, Hv, Dv)
        ``S_t^T q_t``, before the gated norm.
    gate : ndarray of shape (T, N, Hv, Dv)
        ``act(z_t)`` (silu for GDN, sigmoid for KDA).
    """

    recurrent: np.ndarray
    conv: np.ndarray
    decay: np.ndarray
    beta: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    gate: np.ndarray


class BlockSpec(NamedTuple):
    """The sizes and options of a block (what its parameters' shapes do not say).

    Attributes
    ----------
    layout : str
        One of :data:`LAYOUTS`.
    Hk, Hv, Dk, Dv, K : int
        Key heads, value heads, key and value channels per head, convolution taps.
    eps : float
        The gated norm's epsilon.
    allow_neg_eigval : bool
        ``beta = 2 sigmoid(b)`` (OLMo-hybrid's option).
    gate : {"silu", "sigmoid"}, default "silu"
        The output gate's activation ``act(z)`` (KDA's is always sigmoid).
    lower_bound : float or None, default None
        KDA's safe gate ``g = lower_bound sigmoid(exp(A_log) (a + dt_bias))`` (a negative float);
        None: ``g = -exp(A_log) softplus(a + dt_bias)``.
    """

    layout: str
    Hk: int
    Hv: int
    Dk: int
    Dv: int
    K: int
    eps: float
    allow_neg_eigval: bool
    gate: str = "silu"
    lower_bound: float | None = None


def _chains(spec):
    """The linear maps from u: {output: [weight names applied in order]}."""
    if spec.layout == "qwen3_next":
        return {"qkvz": ["in_proj_qkvz.weight"], "ba": ["in_proj_ba.weight"]}
    if spec.layout == "qwen3_5":
        return {"qkv": ["in_proj_qkv.weight"], "z": ["in_proj_z.weight"], "b": ["in_proj_b.weight"],
                "a": ["in_proj_a.weight"]}
    if spec.layout == "olmo_hybrid":
        return {"q": ["q_proj.weight"], "k": ["k_proj.weight"], "v": ["v_proj.weight"], "z": ["g_proj.weight"],
                "b": ["b_proj.weight"], "a": ["a_proj.weight"]}
    if spec.layout == "bailing_hybrid":
        return {"q": ["q_proj.weight"], "k": ["k_proj.weight"], "v": ["v_proj.weight"], "z": ["g_proj.weight"],
                "b": ["b_proj.weight"], "a": ["forget_gate.f_proj.weight"]}
    return {"q": ["q_proj.weight"], "k": ["k_proj.weight"], "v": ["v_proj.weight"],
            "z": ["g_a_proj.weight", "g_b_proj.weight"], "b": ["b_proj.weight"],
            "a": ["forget_gate.f_a_proj.weight", "forget_gate.f_b_proj.weight"]}


def _pieces(spec):
    """{piece: (chain output, column slice or None)}: where q, k, v, z, b, a sit in the chain outputs.

    The columns are those of the chain's last weight with its rows in :func:`_row_orders`' order.
    """
    Dq, Dv = spec.Hk * spec.Dk, spec.Hv * spec.Dv
    if spec.layout == "qwen3_5":  # q, k, v side by side in one projection, the rest one each
        return {"q": ("qkv", slice(0, Dq)), "k": ("qkv", slice(Dq, 2 * Dq)), "v": ("qkv", slice(2 * Dq, None)),
                "z": ("z", None), "b": ("b", None), "a": ("a", None)}
    if spec.layout != "qwen3_next":
        return {n: (n, None) for n in "qkvzba"}
    return {"q": ("qkvz", slice(0, Dq)), "k": ("qkvz", slice(Dq, 2 * Dq)), "v": ("qkvz", slice(2 * Dq, 2 * Dq + Dv)),
            "z": ("qkvz", slice(2 * Dq + Dv, None)), "b": ("ba", slice(0, spec.Hv)), "a": ("ba", slice(spec.Hv, None))}


def _row_orders(spec):
    """{chain output: row order of its last weight or None}: Qwen3-Next's rows regrouped piece by piece.

    ``in_proj_qkvz`` holds per key head the rows ``q, k, v, z`` and ``in_proj_ba`` per key head
    ``b, a``; taken in this order, each piece is one slice of the product (:func:`_pieces`), so
    nothing is gathered column by column.
    """
    if spec.layout != "qwen3_next":
        return {}
    Hk, Dk, Dv, r = spec.Hk, spec.Dk, spec.Dv, spec.Hv // spec.Hk
    base = np.arange(Hk)[:, None] * (2 * Dk + 2 * r * Dv)  # each key head's block of rows
    qkvz = [base + o + np.arange(n) for o, n in ((0, Dk), (Dk, Dk), (2 * Dk, r * Dv), (2 * Dk + r * Dv, r * Dv))]
    ba = [np.arange(Hk)[:, None] * 2 * r + o + np.arange(r) for o in (0, r)]
    return {"qkvz": np.concatenate([c.ravel() for c in qkvz]), "ba": np.concatenate([c.ravel() for c in ba])}


def param_names(spec) -> dict[str, str]:
    """The names of the non-projection parameters: conv, dt_bias, A_log, norm, out.

    Parameters
    ----------
    spec : BlockSpec

    Returns
    -------
    dict of str to str
    """
    if spec.layout in ("qwen3_next", "qwen3_5"):
        return {"conv": "conv1d.weight", "dt_bias": "dt_bias", "A_log": "A_log", "norm": "norm.weight",
                "out": "out_proj.weight"}
    if spec.layout == "olmo_hybrid":
        return {"conv": "conv1d.weight", "dt_bias": "dt_bias", "A_log": "A_log", "norm": "o_norm.weight",
                "out": "o_proj.weight"}
    return {"conv": "conv1d.weight", "dt_bias": "forget_gate.dt_bias", "A_log": "forget_gate.A_log",
            "norm": "o_norm.weight", "out": "o_proj.weight"}


def _silu(c):
    """``silu(c) = c sigmoid(c)`` and what its derivative needs; the sigmoid as ``1 / (1 + exp(-c))``, in place.

    Parameters
    ----------
    c : ndarray, floating

    Returns
    -------
    value : ndarray, shape and dtype of ``c``
    parts : pair of ndarray
        ``(c, sigmoid(c))``, for :func:`_silu_grad` (the derivative is formed only by a backward pass).
    """
    s = np.negative(c)
    with np.errstate(over="ignore"):  # exp(-c) overflows to inf for very negative c: s = 1 / inf = 0
        np.exp(s, out=s)
    s += 1.0
    np.reciprocal(s, out=s)
    return c * s, (c, s)


def _silu_grad(parts):
    """The derivative ``s (1 + c (1 - s))`` of silu from :func:`_silu`'s ``parts``."""
    c, s = parts
    d = 1.0 - s
    d *= c
    d += 1.0
    d *= s
    return d


def _mm(x, w):
    """``x @ w`` for x (..., A) and w (A, B) as one 2-D product (NumPy loops over the leading axes otherwise)."""
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(x.shape[:-1] + (w.shape[1],))


def _softplus(x):
    """``log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))`` (exact, and much faster than ``logaddexp``)."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _log_decay(A, x, lower_bound):
    """The log decay ``g`` from ``x = a + dt_bias`` and ``A = exp(A_log)``, and ``dg/dx``.

    Parameters
    ----------
    A : ndarray
        ``exp(A_log)``, broadcasting against ``x``.
    x : ndarray, floating
        The gate's pre-activation ``a + dt_bias``.
    lower_bound : float or None
        None: ``g = -A softplus(x)`` (Gated DeltaNet, KDA); a float: the safe gate
        ``g = lower_bound sigmoid(A x)``.

    Returns
    -------
    g, dg_dx : ndarray, shape and dtype of ``x``
        ``dL/dA_log = sum(dL/dg dg/dx x)`` for the safe gate and ``sum(dL/dg g)`` otherwise.
    """
    if lower_bound is None:
        return -A * _softplus(x), -A * sigmoid(x)
    s = sigmoid(A * x)
    return lower_bound * s, lower_bound * A * s * (1.0 - s)


def _final_taps(lengths, T, K):
    """Index of the K - 1 inputs each row's final window holds in ``xpad`` (K-1+T, N, Dc)."""
    if lengths is None:
        return (slice(T, None),)
    rows = lengths[None, :] + np.arange(K - 1)[:, None]  # (K-1, N): input t sits at t + K - 1
    return rows, np.arange(lengths.shape[0])[None, :]


def _l2norm(x):
    inv = 1.0 / np.sqrt((x * x).sum(axis=-1, keepdims=True) + L2_EPS)
    return x * inv, inv


def _l2norm_backward(xn, inv, d):
    return inv * (d - xn * (xn * d).sum(axis=-1, keepdims=True))


class BlockInputs(NamedTuple):
    """What the delta rule of a block reads, and what a backward pass needs of its making: :func:`block_inputs`.

    Time-major arrays of T steps, N rows, in ``u``'s dtype. The rule's inputs are ``qs``, ``ks``
    (T, N, Hv, Dk) (key head h // r repeated for value head h, ``qs`` scaled by 1/sqrt(Dk)), ``v``
    (T, N, Hv, Dv), ``g`` (T, N, Hv) or (T, N, Hv, Dk) and ``beta`` (T, N, Hv); ``z`` (T, N, Hv, Dv)
    is the output gate's pre-activation; ``xpad`` (K-1+T, N, Dc) the convolution's input after
    the initial window (the window after step t is ``xpad[t+1:t+K]``); ``keep`` (T, N) the valid
    steps or None. The rest (``hidden`` the low-rank chains' inner products, ``d_act`` silu's
    parts, q, k before and after the L2 norm and its inverse norms, ``sb`` sigmoid(b), ``A``,
    ``dt_pre`` and ``dg_dx``) is for :func:`block_backward`.
    """

    hidden: dict
    xpad: np.ndarray
    d_act: tuple
    q: np.ndarray
    k: np.ndarray
    qn: np.ndarray
    q_inv: np.ndarray
    kn: np.ndarray
    k_inv: np.ndarray
    sb: np.ndarray
    beta: np.ndarray
    A: np.ndarray
    dt_pre: np.ndarray
    g: np.ndarray
    dg_dx: np.ndarray
    qs: np.ndarray
    ks: np.ndarray
    v: np.ndarray
    z: np.ndarray
    keep: np.ndarray | None


def block_inputs(p, u, conv0, spec: BlockSpec, lengths=None) -> BlockInputs:
    """The block's projections, causal convolution, L2 norms and gates: what its delta rule reads.

    Parameters
    ----------
    p : dict of str to ndarray
        The parameters by their transformers names (see the module docstring), in ``u``'s dtype.
    u : ndarray of shape (T, N, M)
    conv0 : ndarray of shape (N, Dc, K-1)
        The convolution window before step 0, oldest first.
    spec : BlockSpec
    lengths : ndarray of int, shape (N,), optional
        Valid steps of each row: a padded step gets ``g = 0`` and ``beta = 0`` (the state is carried).

    Returns
    -------
    BlockInputs
    """
    T, N, _ = u.shape
    Hk, Hv, Dk, Dv, K = spec.Hk, spec.Hv, spec.Dk, spec.Dv, spec.K
    r, kimi = Hv // Hk, spec.layout in KDA_LAYOUTS
    names = param_names(spec)
    chains, hidden, orders, off = {}, {}, _row_orders(spec), {}
    single = {c: ws[0] for c, ws in _chains(spec).items() if len(ws) == 1}  # one product for all of these
    Ws = [p[w] if c not in orders else p[w][orders[c]] for c, w in single.items()]
    X = _mm(u, (np.concatenate(Ws) if len(Ws) > 1 else Ws[0]).T)
    start = 0
    for c, W in zip(single, Ws):
        off[c], chains[c] = start, X[..., start:start + W.shape[0]]
        start += W.shape[0]
    for out, ws in _chains(spec).items():  # the low-rank pairs (Kimi's gates)
        if len(ws) > 1:
            hidden[out] = _mm(u, p[ws[0]].T)
            chains[out] = _mm(hidden[out], p[ws[1]].T)
    pieces = _pieces(spec)
    pre = {n: (chains[c] if sl is None else chains[c][..., sl]) for n, (c, sl) in pieces.items()}
    at = [off.get(pieces[n][0], -1) + (0 if pieces[n][1] is None else pieces[n][1].start) for n in "qkv"]
    if at == [0, Hk * Dk, 2 * Hk * Dk]:  # q, k, v side by side at the start of the one product
        xqkv = X[..., :2 * Hk * Dk + Hv * Dv]
    else:
        xqkv = np.concatenate([pre["q"], pre["k"], pre["v"]], axis=-1)  # (T, N, Dc)
    xpad = np.concatenate([conv0.transpose(2, 0, 1), xqkv], axis=0)  # (K-1+T, N, Dc)
    w = np.ascontiguousarray(p[names["conv"]][:, 0, :].T)  # (K, Dc)
    c = xpad[:T] * w[0]
    tmp = np.empty_like(c)
    for j in range(1, K):
        c += np.multiply(w[j], xpad[j:j + T], out=tmp)
    act, d_act = _silu(c)
    q = act[..., :Hk * Dk].reshape(T, N, Hk, Dk)
    k = act[..., Hk * Dk:2 * Hk * Dk].reshape(T, N, Hk, Dk)
    v = act[..., 2 * Hk * Dk:].reshape(T, N, Hv, Dv)
    qn, q_inv = _l2norm(q)
    kn, k_inv = _l2norm(k)
    qs = np.repeat(qn, r, axis=2) / math.sqrt(Dk)  # (T, N, Hv, Dk)
    ks = np.repeat(kn, r, axis=2)
    sb = sigmoid(pre["b"])
    beta = sb * 2.0 if spec.allow_neg_eigval else sb
    A = np.exp(p[names["A_log"]].reshape(Hv, 1) if kimi else p[names["A_log"]])  # (Hv, 1) or (Hv,)
    if kimi:  # one decay per key channel
        dt_pre = pre["a"].reshape(T, N, Hv, Dk) + p[names["dt_bias"]].reshape(Hv, Dk)
    else:
        dt_pre = pre["a"] + p[names["dt_bias"]]
    g, dg_dx = _log_decay(A, dt_pre, spec.lower_bound)
    keep = None if lengths is None else np.arange(T)[:, None] < lengths[None, :]  # (T, N)
    if keep is not None:  # a padded step neither decays nor writes: the state is carried
        beta = np.where(keep[..., None], beta, 0.0)
        g = np.where(keep[..., None, None] if kimi else keep[..., None], g, 0.0)
    return BlockInputs(hidden, xpad, d_act, q, k, qn, q_inv, kn, k_inv, sb, beta, A, dt_pre, g, dg_dx, qs, ks, v,
                       pre["z"].reshape(T, N, Hv, Dv), keep)


def block_output(p, o, z, spec: BlockSpec, keep=None):
    """The block's output from its rule's readout: the gated norm and the output projection.

    Parameters
    ----------
    p : dict of str to ndarray
    o : ndarray of shape (T, N, Hv, Dv)
        The rule's readout ``S_t^T q_t``.
    z : ndarray of shape (T, N, Hv, Dv)
        The output gate's pre-activation (:attr:`BlockInputs.z`).
    spec : BlockSpec
    keep : ndarray of bool, shape (T, N), optional
        The valid steps: the others' outputs are 0.

    Returns
    -------
    out : ndarray of shape (T, N, M)
    parts : tuple
        ``(inv, y, gate, d_gate, n)``: the norm's inverse RMS, the normalised readout, ``act(z)``,
        silu's parts (None for a sigmoid gate) and the output projection's input, for
        :func:`block_backward`.
    """
    T, N, Hv, Dv = o.shape
    names = param_names(spec)
    inv = 1.0 / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + spec.eps)  # (T, N, Hv, 1)
    y = o * inv
    gate, d_gate = (sigmoid(z), None) if spec.layout in KDA_LAYOUTS or spec.gate == "sigmoid" else _silu(z)
    n = (p[names["norm"]] * y * gate).reshape(T, N, Hv * Dv)
    out = _mm(n, p[names["out"]].T)
    if keep is not None:
        out *= keep[..., None]
    return out, (inv, y, gate, d_gate, n)


def block_forward(p, u, S0, conv0, spec: BlockSpec, *, chunk, lengths=None):
    """The block over all T steps (the module's equations): the forward kernel.

    :func:`block_inputs`, the delta rule (:func:`hiddenstate.kinds.delta.kernel.delta_forward`),
    :func:`block_output`.

    Parameters
    ----------
    p : dict of str to ndarray
        The parameters by their transformers names (see the module docstring).
    u : ndarray of shape (T, N, M)
    S0 : ndarray of shape (N, Hv, Dk, Dv)
        The initial matrix state.
    conv0 : ndarray of shape (N, Dc, K-1)
        The initial convolution window, oldest first.
    spec : BlockSpec
    chunk : int or None
        The delta rule's form: None the per-step loop, Q the chunked form.
    lengths : ndarray of int, shape (N,), optional
        Valid steps of each row of a right-padded batch: a padded step neither decays nor writes
        (``g = 0``, ``beta = 0``: both states are carried) and its output is 0.

    Returns
    -------
    out : ndarray of shape (T, N, M)
    final : DeltaState
    cache : tuple
        Opaque; for :func:`block_backward` and :func:`block_record`.
    """
    T = u.shape[0]
    (hidden, xpad, d_act, q, k, qn, q_inv, kn, k_inv, sb, beta, A, dt_pre, g, dg_dx, qs, ks, v, z,
     keep) = block_inputs(p, u, conv0, spec, lengths)
    o, S_T, kc = delta_forward(qs, ks, v, g, beta, S0, chunk=chunk)
    out, (inv, y, gate, d_gate, n) = block_output(p, o, z, spec, keep)
    final = DeltaState(S_T, np.ascontiguousarray(xpad[_final_taps(lengths, T, spec.K)].transpose(1, 2, 0)))
    cache = (p, u, spec, hidden, xpad, d_act, q, k, qn, q_inv, kn, k_inv, sb, beta, A, dt_pre, g, kc, o, inv, y,
             gate, d_gate, n, v, keep, lengths, dg_dx)
    return out, final, cache


def block_backward(cache, d_out, d_final):
    """Exact backward pass through :func:`block_forward` (the backward kernel).

    Parameters
    ----------
    cache : tuple
        From :func:`block_forward`.
    d_out : ndarray of shape (T, N, M) or None
        Gradient with respect to the output (None: zeros).
    d_final : pair (d_recurrent (N, Hv, Dk, Dv) or None, d_conv (N, Dc, K-1) or None) or None
        Gradients with respect to the final states.

    Returns
    -------
    grads : dict of str to ndarray
        Same keys and shapes as the parameters.
    d_u : ndarray of shape (T, N, M)
    d_state : DeltaState
        Gradients with respect to the initial matrix state and convolution window.
    """
    (p, u, spec, hidden, xpad, d_act, q, k, qn, q_inv, kn, k_inv, sb, beta, A, dt_pre, g, kc, o, inv, y, gate,
     d_gate, n, v, keep, lengths, dg_dx) = cache
    T, N, M = u.shape
    Hk, Hv, Dk, Dv, K = spec.Hk, spec.Hv, spec.Dk, spec.Dv, spec.K
    r, kimi = Hv // Hk, spec.layout in KDA_LAYOUTS
    names = param_names(spec)
    d_S_T, d_conv_T = (None, None) if d_final is None else d_final
    d_out = np.zeros((T, N, M), dtype=u.dtype) if d_out is None else d_out
    if keep is not None:
        d_out = d_out * keep[..., None]  # padded outputs are constants (0)
    grads = {names["out"]: d_out.reshape(-1, M).T @ n.reshape(-1, Hv * Dv)}
    d_n = _mm(d_out, p[names["out"]]).reshape(T, N, Hv, Dv)
    nw = p[names["norm"]]
    grads[names["norm"]] = (d_n * y * gate).reshape(-1, Dv).sum(axis=0)
    d_z = d_n * nw * y * (gate * (1.0 - gate) if d_gate is None else _silu_grad(d_gate))
    d_y = d_n * nw * gate
    d_o = inv * (d_y - y * np.mean(d_y * y, axis=-1, keepdims=True))
    d_qs, d_ks, d_v, d_g, d_beta, d_S0 = delta_backward(kc, d_o, d_S_T)
    if keep is not None:  # g and beta are constants on padded steps
        d_beta = np.where(keep[..., None], d_beta, 0.0)
        d_g = np.where(keep[..., None, None] if kimi else keep[..., None], d_g, 0.0)
    d_pre_a = d_g * dg_dx
    # dL/dA_log: g = -exp(A_log) sp(x) gives sum d_g g; the safe gate lb sigmoid(exp(A_log) x) sum d_x x
    d_A = (d_g * g if spec.lower_bound is None else d_pre_a * dt_pre).sum(axis=(0, 1))
    if kimi:
        grads[names["A_log"]] = d_A.sum(axis=-1).reshape(p[names["A_log"]].shape)
        grads[names["dt_bias"]] = d_pre_a.sum(axis=(0, 1)).reshape(Hv * Dk)
        d_pre_a = d_pre_a.reshape(T, N, Hv * Dk)
    else:
        grads[names["A_log"]] = d_A
        grads[names["dt_bias"]] = d_pre_a.sum(axis=(0, 1))
    d_b = d_beta * (2.0 if spec.allow_neg_eigval else 1.0) * sb * (1.0 - sb)
    d_qn = (d_qs / math.sqrt(Dk)).reshape(T, N, Hk, r, Dk).sum(axis=3)
    d_kn = d_ks.reshape(T, N, Hk, r, Dk).sum(axis=3)
    d_act_out = np.concatenate([_l2norm_backward(qn, q_inv, d_qn).reshape(T, N, Hk * Dk),
                                _l2norm_backward(kn, k_inv, d_kn).reshape(T, N, Hk * Dk),
                                d_v.reshape(T, N, Hv * Dv)], axis=-1)
    d_c = d_act_out * _silu_grad(d_act)  # (T, N, Dc)
    w = p[names["conv"]][:, 0, :]
    Dc = w.shape[0]
    d_w = np.empty_like(w)
    d_xpad = np.zeros_like(xpad)
    for j in range(K):
        d_w[:, j] = (d_c * xpad[j:j + T]).reshape(-1, Dc).sum(axis=0)
        d_xpad[j:j + T] += w[:, j] * d_c
    grads[names["conv"]] = d_w[:, None, :]
    if d_conv_T is not None:
        d_xpad[_final_taps(lengths, T, K)] += d_conv_T.transpose(2, 0, 1)  # each (row, column) once
    d_x = d_xpad[K - 1:]
    d_pre = {"q": d_x[..., :Hk * Dk], "k": d_x[..., Hk * Dk:2 * Hk * Dk], "v": d_x[..., 2 * Hk * Dk:],
             "z": d_z.reshape(T, N, Hv * Dv), "b": d_b, "a": d_pre_a}
    chains, orders = _chains(spec), _row_orders(spec)
    d_chain = {}
    for name, (c, sl) in _pieces(spec).items():
        if sl is None:
            d_chain[c] = d_pre[name]
        else:
            if c not in d_chain:
                d_chain[c] = np.zeros((T, N, p[chains[c][-1]].shape[0]), dtype=u.dtype)
            d_chain[c][..., sl] = d_pre[name]
    d_u = np.zeros_like(u)
    for c, ws in chains.items():
        d = d_chain[c]
        for i in range(len(ws) - 1, -1, -1):
            x_in = hidden[c] if i else u
            gw = d.reshape(-1, d.shape[-1]).T @ x_in.reshape(-1, x_in.shape[-1])
            if i == len(ws) - 1 and c in orders:  # rows back in the weight's own order
                grads[ws[i]] = np.empty_like(gw)
                grads[ws[i]][orders[c]] = gw
                d = _mm(d, p[ws[i]][orders[c]])
            else:
                grads[ws[i]] = gw
                d = _mm(d, p[ws[i]])
        d_u += d
    grads = {key: grads[key] for key in p}
    return grads, d_u, DeltaState(d_S0, np.ascontiguousarray(d_xpad[:K - 1].transpose(1, 2, 0)))


def block_record(cache) -> DeltaRecord:
    """Every step's states and gates from a :func:`block_forward` cache.

    Parameters
    ----------
    cache : tuple
        From :func:`block_forward`.

    Returns
    -------
    DeltaRecord
        Time-major arrays.
    """
    (p, u, spec, hidden, xpad, d_act, q, k, qn, q_inv, kn, k_inv, sb, beta, A, dt_pre, g, kc, o, inv, y, gate,
     d_gate, n, v, keep, lengths, dg_dx) = cache
    T = u.shape[0]
    N = u.shape[1]
    start = np.arange(1, T + 1)[:, None] * np.ones(N, dtype=np.int64)  # (T, N): the window after step t
    if lengths is not None:  # past its length a row's window is carried
        start = np.minimum(start, lengths[None, :])
    rows = start[..., None] + np.arange(spec.K - 1)  # (T, N, K-1)
    conv = np.ascontiguousarray(xpad[rows, np.arange(N)[None, :, None]].transpose(0, 1, 3, 2))  # (T, N, Dc, K-1)
    r = spec.Hv // spec.Hk
    with np.errstate(under="ignore"):
        decay = np.exp(g)
    return DeltaRecord(recurrent=delta_states(kc), conv=conv, decay=decay, beta=beta,
                       q=np.repeat(qn, r, axis=2) / math.sqrt(spec.Dk), k=np.repeat(kn, r, axis=2), v=v, o=o, gate=gate)
