"""The textbook step functions (Elman, GRU, LSTM) in row-vector form (``x @ W_xh``, ``W_xh`` of shape (D, H)).

These are the textbook equations one step at a time, written for reading and teaching, in the
form of the worked examples this package started from (its "seeds").
The sequence layers (:mod:`hiddenstate.classic.layers`) compute the same maps in PyTorch's layout
(``weight_ih`` of shape (G*H, I)) and fused for speed; tests check that both agree.

Symbols: N batch, D input features, H hidden units. Every function accepts a single example
(``x`` of shape (D,), ``h`` of shape (H,)) or a batch (``x`` (N, D), ``h`` (N, H)).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hiddenstate.core.functional import FloatGuard, gru_blend, sigmoid
from hiddenstate.core.validation import float_array, shape_str

__all__ = [
    "candidate",
    "elman_step",
    "gru_step",
    "hidden_state_update",
    "lstm_step",
    "reset_gate",
    "update_gate",
]


def hidden_state_update(z_t: np.ndarray, h_prev: np.ndarray, h_tilde: np.ndarray) -> np.ndarray:
    """GRU hidden state update ``h_t = z_t * h_prev + (1 - z_t) * h_tilde`` (Cho et al. 2014, Eq. 7).

    A convex, elementwise blend of the previous state and the candidate: ``z = 1`` keeps the
    old state ("memory mode"), ``z = 0`` replaces it by the candidate.

    Parameters
    ----------
    z_t : ndarray of shape (H,) or (N, H), float
        Update gate, every value in [0, 1].
    h_prev : ndarray, same shape as ``z_t``, float
        Previous hidden state h_{t-1}.
    h_tilde : ndarray, same shape as ``z_t``, float
        Candidate state.

    Returns
    -------
    ndarray, same shape, float64
        A new array (float32 inputs are promoted to float64).

    Raises
    ------
    TypeError
        An input is not a floating-point array (bool, complex, object, strings; integer arrays
        are promoted to float64).
    ValueError
        Shapes differ, rank is not 1 or 2, a value is NaN or Inf, or a gate lies outside [0, 1].

    Examples
    --------
    The seed's worked example (exact):

    >>> hidden_state_update(np.array([0.8, 0.2, 0.6, 0.1]), np.array([1.0, -0.5, 0.3, 2.0]),
    ...                     np.array([-0.4, 0.9, 0.7, -1.0]))
    array([ 0.72,  0.62,  0.46, -0.7 ])
    """
    z = float_array("z_t", z_t, dtype=np.float64)
    h = float_array("h_prev", h_prev, dtype=np.float64)
    n = float_array("h_tilde", h_tilde, dtype=np.float64)
    if z.ndim not in (1, 2):
        raise ValueError(f"z_t must have shape (H,) or (N, H); got {shape_str(z.shape)}.")
    for name, arr in (("h_prev", h), ("h_tilde", n)):
        if arr.shape != z.shape:
            raise ValueError(
                f"{name} must have the same shape as z_t {shape_str(z.shape)}; got "
                f"{shape_str(arr.shape)}. The three arrays are combined elementwise, never broadcast."
            )
    _gate("z_t", z)
    return _computed("hidden_state_update", lambda: gru_blend(z, h, n))


def _gate(name: str, g: np.ndarray) -> None:
    """A gate's values lie in [0, 1] (a sigmoid's range, its limits included: a saturated gate)."""
    if g.size and (g.min() < 0.0 or g.max() > 1.0):
        raise ValueError(f"{name} must lie in [0, 1] (it is a sigmoid gate); got values in [{g.min()}, {g.max()}].")


def _batched(name: str, arr, feature_dim: int | None, feature_sym: str, source: str = "") -> np.ndarray:
    a = float_array(name, arr)
    where = f" ({feature_sym}={feature_dim} from {source})" if feature_dim is not None and source else ""
    if a.ndim not in (1, 2):
        raise ValueError(
            f"{name} must have shape ({feature_sym},) or (N, {feature_sym}); got {shape_str(a.shape)}. A single "
            f"example is ({feature_sym},), a batch (N, {feature_sym}){where}."
        )
    if feature_dim is not None and a.shape[-1] != feature_dim:
        legend = f"({feature_sym}={feature_dim},)" if a.ndim == 1 else f"(N={a.shape[0]}, {feature_sym}={feature_dim})"
        raise ValueError(
            f"{name} must have last dimension {feature_sym}={feature_dim}; got {shape_str(a.shape)}. Its shape must "
            f"be {legend}{where}."
        )
    return a


def _computed(name: str, compute):
    """``compute()`` with overflow noted, not raised: a saturated gate is exact, a result left NaN/Inf is an error."""
    with FloatGuard() as guard:
        out = compute()
    if guard.tripped:  # only then are the results read again
        guard.check(name, zip(("h_t", "c_t"), out if isinstance(out, tuple) else (out,)),
                    "The inputs or weights are too large for float64; scale them down.")
    return out


def _weights(name: str, w, rows: int | None, cols: int | None, legend: str, hint: str = "") -> np.ndarray:
    a = float_array(name, w)
    if a.ndim != 2 or (rows is not None and a.shape[0] != rows) or (cols is not None and a.shape[1] != cols):
        raise ValueError(f"{name} must have shape {legend}; got {shape_str(a.shape)}.{hint}")
    return a


def _affine(x, h, W, U, b, wname: str, uname: str, bname: str, hname: str = "h_prev"):
    """Validate and return ``x W + h U + b`` for the row-vector form."""
    W = _weights(wname, W, None, None, "(D, H)")
    D, H = W.shape
    src = f"{wname} {shape_str(W.shape)}"
    U = _weights(uname, U, H, H, f"(H, H)=({H}, {H})", f" H={H} is the number of columns of {src}.")
    b = float_array(bname, b)
    if b.shape != (H,):
        raise ValueError(f"{bname} must have shape (H,)=({H},); got {shape_str(b.shape)}. H={H} is the number of "
                         f"columns of {src}.")
    x = _batched("x_t", x, D, "D", src)
    h = _batched(hname, h, H, "H", src)
    if x.ndim != h.ndim or (x.ndim == 2 and x.shape[0] != h.shape[0]):
        legend = f"(H={H},)" if x.ndim == 1 else f"(N={x.shape[0]}, H={H})"
        raise ValueError(
            f"x_t and {hname} must both be single examples or both batches of the same N, so {hname} must have "
            f"shape {legend}; got x_t {shape_str(x.shape)} and {hname} {shape_str(h.shape)}."
        )
    return x, h, x @ W + h @ U + b


def elman_step(x_t, h_prev, W_xh, W_hh, b) -> np.ndarray:
    """One Elman (1990) step: ``h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)``.

    Parameters
    ----------
    x_t : ndarray of shape (D,) or (N, D), float
    h_prev : ndarray of shape (H,) or (N, H), float
    W_xh : ndarray of shape (D, H)
    W_hh : ndarray of shape (H, H)
    b : ndarray of shape (H,)

    Returns
    -------
    ndarray of shape (H,) or (N, H)
        The new state; every entry in (-1, 1).

    Raises
    ------
    TypeError, ValueError
        Non-float arrays, NaN/Inf, or shapes that do not match the symbols above.

    Notes
    -----
    The seed's worked example prints h_1 = [0.1685, -0.4219, 0.2070] for pre-activations
    [0.17, -0.45, 0.21]; those are rounded and the 4th decimal is off (tanh(0.17) = 0.168381...).
    This function returns the exact math.
    """
    return _computed("elman_step", lambda: np.tanh(_affine(x_t, h_prev, W_xh, W_hh, b, "W_xh", "W_hh", "b")[2]))


def update_gate(x_t, h_prev, W_z, U_z, b_z) -> np.ndarray:
    """GRU update gate ``z_t = sigmoid(x_t W_z + h_{t-1} U_z + b_z)`` (Cho et al. 2014, Eq. 6).

    Parameters
    ----------
    x_t : ndarray of shape (D,) or (N, D), float
        Input of the step.
    h_prev : ndarray of shape (H,) or (N, H), float
        Previous state ``h_{t-1}`` (a single example or the same N as ``x_t``).
    W_z : ndarray of shape (D, H)
        Input weights.
    U_z : ndarray of shape (H, H)
        Recurrent weights.
    b_z : ndarray of shape (H,)
        Bias.

    Returns
    -------
    ndarray of shape (H,) or (N, H)
        The gate, values in [0, 1] (in (0, 1) for moderate pre-activations).

    Raises
    ------
    TypeError, ValueError
        Non-float arrays, NaN/Inf, or shapes that do not match the symbols above.
    """
    return _computed("update_gate", lambda: sigmoid(_affine(x_t, h_prev, W_z, U_z, b_z, "W_z", "U_z", "b_z")[2]))


def reset_gate(x_t, h_prev, W_r, U_r, b_r) -> np.ndarray:
    """GRU reset gate ``r_t = sigmoid(x_t W_r + h_{t-1} U_r + b_r)`` (Cho et al. 2014, Eq. 5).

    Parameters
    ----------
    x_t : ndarray of shape (D,) or (N, D), float
        Input of the step.
    h_prev : ndarray of shape (H,) or (N, H), float
        Previous state ``h_{t-1}`` (a single example or the same N as ``x_t``).
    W_r : ndarray of shape (D, H)
        Input weights.
    U_r : ndarray of shape (H, H)
        Recurrent weights.
    b_r : ndarray of shape (H,)
        Bias.

    Returns
    -------
    ndarray of shape (H,) or (N, H)
        The gate, values in [0, 1] (in (0, 1) for moderate pre-activations).

    Raises
    ------
    TypeError, ValueError
        Non-float arrays, NaN/Inf, or shapes that do not match the symbols above.
    """
    return _computed("reset_gate", lambda: sigmoid(_affine(x_t, h_prev, W_r, U_r, b_r, "W_r", "U_r", "b_r")[2]))


def candidate(x_t, h_prev, r_t, W_h, U_h, b_h) -> np.ndarray:
    """GRU candidate ``h~_t = tanh(x_t W_h + (r_t * h_{t-1}) U_h + b_h)`` (Cho et al. 2014, Eq. 8).

    The reset gate multiplies ``h_{t-1}`` *before* the recurrent matrix product (the paper's
    form; PyTorch's ``reset_after`` form instead computes ``r * (h U_h + b)``).

    Parameters
    ----------
    x_t : ndarray of shape (D,) or (N, D)
        Input of the step.
    h_prev : ndarray of shape (H,) or (N, H)
        Previous state ``h_{t-1}``.
    r_t : ndarray, same shape as ``h_prev``, values in [0, 1]
        Reset gate (:func:`reset_gate`).
    W_h : ndarray of shape (D, H)
        Input weights.
    U_h : ndarray of shape (H, H)
        Recurrent weights, applied to ``r_t * h_prev``.
    b_h : ndarray of shape (H,)
        Bias.

    Returns
    -------
    ndarray of shape (H,) or (N, H), values in [-1, 1]
        The candidate state ``h~_t``.

    Raises
    ------
    TypeError, ValueError
        Non-float arrays, NaN/Inf, or shapes that do not match the symbols above (``r_t`` must
        have the shape of ``h_prev``); ``r_t`` outside [0, 1] (a sigmoid's range).
    """
    h = float_array("h_prev", h_prev)
    r = float_array("r_t", r_t)
    if r.shape != h.shape:
        legend = "(H,)" if h.ndim == 1 else "(N, H)"
        raise ValueError(f"r_t must have the shape of h_prev {shape_str(h.shape)}; got {shape_str(r.shape)}. The gate "
                         f"is elementwise: {legend} like h_prev, never broadcast.")
    _gate("r_t", r)  # a reset gate of 5 would amplify h_{t-1}, no GRU computes that
    return _computed("candidate", lambda: np.tanh(_affine(x_t, r * h, W_h, U_h, b_h, "W_h", "U_h", "b_h")[2]))


_GRU_KEYS = ("W_z", "U_z", "b_z", "W_r", "U_r", "b_r", "W_h", "U_h", "b_h")
_LSTM_KEYS = tuple(f"{m}_{g}" for g in "ifgo" for m in ("W", "U", "b"))


def _need(params: Mapping, keys, what: str) -> None:
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of {what} weights; got {type(params).__name__}.")
    missing = [k for k in keys if k not in params]
    if missing:
        raise ValueError(f"params is missing {what} key(s) {missing}; expected keys {list(keys)}.")


def gru_step(x_t, h_prev, params: Mapping[str, np.ndarray]) -> np.ndarray:
    """One GRU step of Cho et al. (2014): update gate, reset gate, candidate, then blend.

    ``z = sigmoid(x W_z + h U_z + b_z)``, ``r = sigmoid(x W_r + h U_r + b_r)``,
    ``h~ = tanh(x W_h + (r * h) U_h + b_h)``, ``h_t = hidden_state_update(z, h, h~)``.

    Parameters
    ----------
    x_t : ndarray of shape (D,) or (N, D)
    h_prev : ndarray of shape (H,) or (N, H)
    params : mapping
        Keys ``W_z, U_z, b_z, W_r, U_r, b_r, W_h, U_h, b_h`` with W (D, H), U (H, H), b (H,).

    Returns
    -------
    ndarray of shape (H,) or (N, H), float64
    """
    _need(params, _GRU_KEYS, "GRU")
    p = params
    z = update_gate(x_t, h_prev, p["W_z"], p["U_z"], p["b_z"])
    r = reset_gate(x_t, h_prev, p["W_r"], p["U_r"], p["b_r"])
    n = candidate(x_t, h_prev, r, p["W_h"], p["U_h"], p["b_h"])
    return hidden_state_update(z, float_array("h_prev", h_prev), n)


def lstm_step(x_t, h_prev, c_prev, params: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step (Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000).

    ``i = sigmoid(x W_i + h U_i + b_i)``, ``f = sigmoid(x W_f + h U_f + b_f)``,
    ``g = tanh(x W_g + h U_g + b_g)``, ``o = sigmoid(x W_o + h U_o + b_o)``,
    ``c_t = f * c_{t-1} + i * g``, ``h_t = o * tanh(c_t)``.

    Parameters
    ----------
    x_t : ndarray of shape (D,) or (N, D)
    h_prev, c_prev : ndarray of shape (H,) or (N, H)
        The LSTM state is a pair: hidden state h and cell state c.
    params : mapping
        Keys ``W_i, U_i, b_i, W_f, U_f, b_f, W_g, U_g, b_g, W_o, U_o, b_o``.

    Returns
    -------
    (h_t, c_t) : pair of ndarrays of shape (H,) or (N, H)
    """
    _need(params, _LSTM_KEYS, "LSTM")
    p = params
    c = float_array("c_prev", c_prev)
    h = float_array("h_prev", h_prev)
    if c.shape != h.shape:
        legend = "(H,)" if h.ndim == 1 else "(N, H)"
        raise ValueError(f"c_prev must have the shape of h_prev {shape_str(h.shape)}; got {shape_str(c.shape)}. The "
                         f"state (h, c) is two arrays of one shape, {legend}.")

    def step():
        pre = {g: _affine(x_t, h, p[f"W_{g}"], p[f"U_{g}"], p[f"b_{g}"], f"W_{g}", f"U_{g}", f"b_{g}")[2] for g in "ifgo"}
        i, f, o = sigmoid(pre["i"]), sigmoid(pre["f"]), sigmoid(pre["o"])
        c_t = f * c + i * np.tanh(pre["g"])
        return o * np.tanh(c_t), c_t

    return _computed("lstm_step", step)
