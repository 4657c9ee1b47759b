"""What the three cells share: parameters in torch's layout, validation, one-step forward/backward."""

from __future__ import annotations

import numpy as np

from hiddenstate.validation import boolean, float_array, float_dtype, generator, positive_int, shape_str, state_array


def uniform_init(rng: np.random.Generator, shape, hidden_size: int, dtype) -> np.ndarray:
    """PyTorch's default RNN initialisation U(-1/sqrt(H), 1/sqrt(H))."""
    k = 1.0 / np.sqrt(hidden_size)
    return rng.uniform(-k, k, size=shape).astype(dtype)


class Cell:
    """Base of :class:`RNNCell`, :class:`GRUCell` and :class:`LSTMCell` (one recurrence step)."""

    num_gates = 1
    is_lstm = False
    _kernel = None

    def __init__(self, input_size, hidden_size, *, bias=True, dtype=np.float64, rng=None):
        self.input_size = positive_int("input_size", input_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.bias = boolean("bias", bias)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        G, H, I = self.num_gates, self.hidden_size, self.input_size
        self.params = {
            "weight_ih": uniform_init(rng, (G * H, I), H, self.dtype),
            "weight_hh": uniform_init(rng, (G * H, H), H, self.dtype),
        }
        if self.bias:
            self.params["bias_ih"] = uniform_init(rng, (G * H,), H, self.dtype)
            self.params["bias_hh"] = uniform_init(rng, (G * H,), H, self.dtype)

    def _options(self):
        return {}

    def __repr__(self):
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size})"

    # -- state ---------------------------------------------------------------------------------
    def _state(self, h, batch, unbatched):
        H = self.hidden_size
        legend = f"(H={H},)" if unbatched else f"(N={batch}, H={H})"
        n = None if unbatched else batch

        def one(name, v):
            if v is None:
                return np.zeros((1 if unbatched else batch, H), dtype=self.dtype)
            a = state_array(name, v, n, H, self.dtype, legend=legend)
            return a[None] if unbatched else a

        if self.is_lstm:
            if h is None:
                return one("h", None), one("c", None)
            if not (isinstance(h, tuple) and len(h) == 2):
                raise TypeError(f"state must be a pair (h, c) for an LSTM cell; got {type(h).__name__}.")
            return one("h", h[0]), one("c", h[1])
        return one("h", h)

    # -- forward / backward ----------------------------------------------------------------------
    def forward(self, x, h=None):
        """One step: returns ``(h_new, cache)`` (LSTM: ``((h_new, c_new), cache)``).

        ``x`` of shape (N, I) or (I,); ``h`` of shape (N, H) or (H,), None meaning zeros
        (LSTM: a pair). Raises ValueError/TypeError for shapes, dtypes or NaN/Inf.
        """
        x = float_array("x", x, dtype=self.dtype)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"x must have shape (N, I={self.input_size}) or (I={self.input_size},); got {shape_str(x.shape)}."
            )
        unbatched = x.ndim == 1
        x2 = x[None] if unbatched else x
        state0 = self._state(h, x2.shape[0], unbatched)
        p = self.params
        xw = x2 @ p["weight_ih"].T  # (N, G*H)
        if self.bias:
            xw += p["bias_ih"]
        fwd, _ = self._kernel
        with np.errstate(under="ignore"):
            _, final, kcache = fwd(xw[None], state0, p["weight_hh"], p.get("bias_hh"), **self._options())
        if unbatched:
            final = tuple(s[0] for s in final) if self.is_lstm else final[0]
        return final, (x2, kcache, unbatched)

    def __call__(self, x, h=None):
        return self.forward(x, h)[0]

    def backward(self, cache, d_out):
        """Gradients of one step: returns ``(grads, dx, dh)`` (LSTM: ``dh`` is ``(dh, dc)``).

        ``d_out`` is the gradient with respect to the new state (LSTM: a pair, either part None).
        ``grads`` has the keys of :attr:`params`.
        """
        x2, kcache, unbatched = cache
        if unbatched:
            d_out = tuple(None if d is None else np.asarray(d)[None] for d in d_out) if self.is_lstm else np.asarray(d_out)[None]
        elif self.is_lstm and d_out is not None:
            d_out = tuple(d_out)
        _, bwd = self._kernel
        with np.errstate(under="ignore"):
            dxw, dw_hh, db_hh, dstate = bwd(kcache, None, d_out)
        dxw = dxw[0]  # (N, G*H)
        p = self.params
        grads = {"weight_ih": dxw.T @ x2, "weight_hh": dw_hh}
        if self.bias:
            grads["bias_ih"] = dxw.sum(axis=0)
            grads["bias_hh"] = db_hh
        dx = dxw @ p["weight_ih"]
        if unbatched:
            dx = dx[0]
            dstate = tuple(s[0] for s in dstate) if self.is_lstm else dstate[0]
        return grads, dx, dstate
