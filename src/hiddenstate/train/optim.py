"""Optimizers that update a dict of NumPy parameters in place, and global gradient-norm clipping.

Parameters and gradients are dicts with the same keys (``layer.params`` and the ``grads`` that
``layer.backward`` returns). The update rules follow ``torch.optim.Adam`` and ``torch.optim.SGD``
operation by operation, so a float64 run matches PyTorch to rounding (see ``tests/test_optim.py``).

Examples
--------
>>> import numpy as np
>>> params = {"w": np.ones(3)}
>>> opt = Adam(params, lr=0.1)
>>> opt.step({"w": np.array([1.0, -1.0, 0.0])})
>>> params["w"]                               # moved against the gradient's sign by lr
array([0.9, 1.1, 1. ])
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.nesting import as_array
from hiddenstate.core.validation import real

__all__ = ["SGD", "Adam", "ExponentialMovingAverage", "clip_grad_norm"]


def _check_arrays(arrays, name: str = "params") -> dict[str, np.ndarray]:
    """Validate a dict of arrays that will be updated in place (once, at the boundary)."""
    if not isinstance(arrays, dict):
        raise TypeError(f"{name} must be a dict of str -> ndarray; got {type(arrays).__name__}.")
    if not arrays:
        raise ValueError(f"{name} must not be empty; got {{}}. Pass layer.params or its grads.")
    for key, value in arrays.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise TypeError(f"{name}['{key}'] must be a floating ndarray; got {kind}.")
        if not value.flags.writeable:
            raise ValueError(
                f"{name}['{key}'] must be writeable (updated in place); got a read-only array. "
                "Pass a copy."
            )
    return arrays


def _check_grads(grads, params: dict[str, np.ndarray]) -> None:
    """Same keys and shapes as the parameters (cheap; run every step)."""
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of str -> ndarray; got {type(grads).__name__}.")
    if grads.keys() != params.keys():
        missing = sorted(params.keys() - grads.keys())
        extra = sorted(grads.keys() - params.keys())
        raise ValueError(
            f"grads must have the same keys as params; missing {missing}, unexpected {extra}. "
            "Pass the grads dict that backward returned for these parameters."
        )
    for key, grad in grads.items():
        shape = as_array(f"grads['{key}']", grad).shape
        if shape != params[key].shape:
            raise ValueError(
                f"grads['{key}'] must have shape {params[key].shape}; got {shape}."
            )


def _load_buffers(
    state, params: dict[str, np.ndarray], prefixes: tuple[str, ...]
) -> tuple[int, dict[str, dict[str, np.ndarray]]]:
    """Validate a flat optimizer state dict fully before anything is changed; return copies."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(); got {type(state).__name__}.")
    expected = {"step"} | {f"{p}.{k}" for p in prefixes for k in params}
    if state.keys() != expected:
        raise ValueError(
            f"state must have keys 'step' and {', '.join(repr(p + '.<name>') for p in prefixes)} "
            f"for every parameter; missing {sorted(expected - state.keys())}, unexpected "
            f"{sorted(state.keys() - expected)}. Load a state saved for the same parameters."
        )
    step = as_array("state['step']", state["step"])
    if step.shape != () or not np.issubdtype(step.dtype, np.integer) or int(step) < 0:
        raise ValueError(f"state['step'] must be a non-negative integer; got {state['step']!r}.")
    buffers = {}
    for prefix in prefixes:
        buffers[prefix] = {}
        for key, param in params.items():
            value = as_array(f"state['{prefix}.{key}']", state[f"{prefix}.{key}"])
            if value.shape != param.shape or value.dtype != param.dtype:
                raise ValueError(
                    f"state['{prefix}.{key}'] must have shape {param.shape} and dtype "
                    f"{param.dtype}; got {value.shape} {value.dtype}."
                )
            buffers[prefix][key] = value.copy()
    return int(step), buffers


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) with PyTorch's L2 ``weight_decay``, updating in place.

    For every parameter ``p`` with gradient ``g``, at step ``t = 1, 2, ...``::

        g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g            # first moment, torch's exp_avg
        v = beta2 * v + (1 - beta2) * g * g        # second moment, torch's exp_avg_sq
        p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    which is ``torch.optim.Adam`` (not AdamW: the decay goes through the moments), written in the
    same order of operations.

    Parameters
    ----------
    params : dict of str to ndarray
        Floating, writeable arrays, updated in place. The dict itself is kept: arrays are looked
        up by key at every step.
    lr : float, default 2e-3
        Step size, positive. (char-rnn's default; ``torch.optim.Adam`` defaults to 1e-3.)
    betas : tuple of float, default (0.9, 0.999)
        Moment decay rates, each in ``[0, 1)``.
    eps : float, default 1e-8
        Added to the denominator, non-negative.
    weight_decay : float, default 0.0
        L2 penalty coefficient, non-negative.

    Attributes
    ----------
    step_count : int
        Steps taken so far (``t`` after the last step).

    Raises
    ------
    TypeError
        If ``params`` is not a dict of floating ndarrays, or a hyperparameter is not a number.
    ValueError
        If ``params`` is empty or holds a read-only array, or a hyperparameter is out of range.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = _check_arrays(params)
        self.lr = real("lr", lr, low=0.0, low_open=True)
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise TypeError(f"betas must be a pair of floats; got {betas!r}.")
        self.betas = tuple(real(f"betas[{i}]", beta, low=0.0, high=1.0, high_open=True)
                           for i, beta in enumerate(betas))
        self.eps = real("eps", eps, low=0.0)
        self.weight_decay = real("weight_decay", weight_decay, low=0.0)
        self.step_count = 0
        self.exp_avg = {k: np.zeros_like(p) for k, p in params.items()}
        self.exp_avg_sq = {k: np.zeros_like(p) for k, p in params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> None:
        """Apply one update from ``grads``.

        Parameters
        ----------
        grads : dict of str to ndarray
            Same keys and shapes as ``params``; not modified.

        Raises
        ------
        TypeError, ValueError
            If ``grads`` is not a dict with exactly the parameter keys and shapes.
        """
        _check_grads(grads, self.params)
        beta1, beta2 = self.betas
        self.step_count += 1
        bias_correction1 = 1 - beta1**self.step_count
        bias_correction2_sqrt = (1 - beta2**self.step_count) ** 0.5
        step_size = self.lr / bias_correction1
        for key, param in self.params.items():
            grad = grads[key]
            if self.weight_decay != 0:
                grad = grad + self.weight_decay * param
            m, v = self.exp_avg[key], self.exp_avg_sq[key]
            m *= beta1
            m += (1 - beta1) * grad
            v *= beta2
            v += (1 - beta2) * grad * grad
            denom = np.sqrt(v) / bias_correction2_sqrt + self.eps
            param -= step_size * m / denom

    def state_dict(self) -> dict[str, np.ndarray]:
        """Return copies of the moments and the step count as a flat dict of arrays.

        Keys are ``"step"`` (0-d int64), ``"exp_avg.<name>"`` and ``"exp_avg_sq.<name>"``, so the
        dict can go straight into ``save_checkpoint(..., arrays=opt.state_dict())``. The
        hyperparameters are not included; keep them with the run's configuration.

        Returns
        -------
        dict of str to ndarray
        """
        state = {"step": np.array(self.step_count, dtype=np.int64)}
        for key in self.params:
            state[f"exp_avg.{key}"] = self.exp_avg[key].copy()
            state[f"exp_avg_sq.{key}"] = self.exp_avg_sq[key].copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore moments and step count from :meth:`state_dict` (copied; unchanged on error).

        Parameters
        ----------
        state : dict of str to ndarray
            From :meth:`state_dict` of an Adam over parameters of the same keys, shapes and dtypes.

        Raises
        ------
        TypeError
            If ``state`` is not a dict, or a value is ragged nested lists (named by key).
        ValueError
            If keys differ from :meth:`state_dict`'s, or a shape or dtype does not match.
        """
        step, buffers = _load_buffers(state, self.params, ("exp_avg", "exp_avg_sq"))
        self.step_count = step
        self.exp_avg, self.exp_avg_sq = buffers["exp_avg"], buffers["exp_avg_sq"]


class SGD:
    """Stochastic gradient descent with optional heavy-ball momentum (``torch.optim.SGD``).

    For every parameter ``p`` with gradient ``g``::

        b = momentum * b + g        # b starts at 0, so the first step is b = g, as in PyTorch
        p -= lr * b                 # with momentum == 0 this is p -= lr * g

    Parameters
    ----------
    params : dict of str to ndarray
        Floating, writeable arrays, updated in place.
    lr : float
        Step size, positive.
    momentum : float, default 0.0
        In ``[0, 1)``.

    Raises
    ------
    TypeError
        If ``params`` is not a dict of floating ndarrays, or ``lr``/``momentum`` is not a number.
    ValueError
        If ``params`` is empty or read-only, ``lr`` is not positive, or ``momentum`` not in [0, 1).
    """

    def __init__(self, params, lr, momentum=0.0):
        self.params = _check_arrays(params)
        self.lr = real("lr", lr, low=0.0, low_open=True)
        self.momentum = real("momentum", momentum, low=0.0, high=1.0, high_open=True)
        self.step_count = 0
        self.momentum_buffer = {k: np.zeros_like(p) for k, p in params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> None:
        """Apply one update from ``grads``.

        Parameters
        ----------
        grads : dict of str to ndarray
            Same keys and shapes as ``params``; not modified.

        Raises
        ------
        TypeError, ValueError
            If ``grads`` is not a dict with exactly the parameter keys and shapes.
        """
        _check_grads(grads, self.params)
        self.step_count += 1
        for key, param in self.params.items():
            if self.momentum == 0:
                param -= self.lr * grads[key]
                continue
            buf = self.momentum_buffer[key]
            buf *= self.momentum
            buf += grads[key]
            param -= self.lr * buf

    def state_dict(self) -> dict[str, np.ndarray]:
        """Return copies of the momentum buffers and the step count.

        Returns
        -------
        dict of str to ndarray
            ``{"step": 0-d int64, "momentum_buffer.<name>": copy, ...}``.
        """
        state = {"step": np.array(self.step_count, dtype=np.int64)}
        for key in self.params:
            state[f"momentum_buffer.{key}"] = self.momentum_buffer[key].copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict` (copies; nothing changes on error).

        Parameters
        ----------
        state : dict of str to ndarray
            From :meth:`state_dict` of an SGD over parameters of the same keys, shapes and dtypes.

        Raises
        ------
        TypeError
            If ``state`` is not a dict, or a value is ragged nested lists (named by key).
        ValueError
            If keys differ from :meth:`state_dict`'s, or a shape or dtype does not match.
        """
        step, buffers = _load_buffers(state, self.params, ("momentum_buffer",))
        self.step_count = step
        self.momentum_buffer = buffers["momentum_buffer"]


class ExponentialMovingAverage:
    """An exponential moving average of parameters, for evaluating and sampling with smoother weights.

    After every optimizer step, :meth:`update` moves the averages towards the current weights::

        n = 0:   avg = p                                  # the first update copies
        n > 0:   avg = avg + (1 - decay) * (p - avg)      # = decay * avg + (1 - decay) * p

    which is ``torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))``
    (its ``lerp`` form, ``n_averaged`` counting the updates) and Keras's ``use_ema=True``. Averaging
    the iterates of a stochastic optimizer goes back to Polyak & Juditsky (1992, "Acceleration of
    stochastic approximation by averaging"); the exponential form weights the last ``1 / (1 - decay)``
    steps most. The averages do not feed back into training.

    Parameters
    ----------
    params : dict of str to ndarray
        The live parameters (kept by reference and read at every :meth:`update`).
    decay : float, default 0.999
        In ``(0, 1)``; the weight kept by the old average at each update.

    Attributes
    ----------
    average : dict of str to ndarray
        The averages, same keys, shapes and dtypes as ``params`` (zeros before the first update).
    n_averaged : int
        Updates so far.

    Raises
    ------
    TypeError
        If ``params`` is not a dict of floating ndarrays or ``decay`` is not a number.
    ValueError
        If ``params`` is empty or ``decay`` is not in (0, 1).

    Examples
    --------
    >>> params = {"w": np.array([0.0])}
    >>> ema = ExponentialMovingAverage(params, decay=0.5)
    >>> ema.update(); params["w"] += 1.0; ema.update()
    >>> ema.average["w"]
    array([0.5])
    """

    def __init__(self, params, decay=0.999):
        self.params = _check_arrays(params)
        self.decay = real("decay", decay, low=0.0, high=1.0, low_open=True, high_open=True)
        self.n_averaged = 0
        self.average = {k: np.zeros_like(p) for k, p in params.items()}

    def update(self) -> None:
        """Fold the current values of ``params`` into the averages."""
        weight = 1.0 - self.decay
        for key, param in self.params.items():
            avg = self.average[key]
            if self.n_averaged == 0:
                np.copyto(avg, param)
            else:
                avg += weight * (param - avg)
        self.n_averaged += 1

    def state_dict(self) -> dict[str, np.ndarray]:
        """Return copies of the averages and the update count.

        Returns
        -------
        dict of str to ndarray
            ``{"step": 0-d int64 n_averaged, "average.<name>": copy, ...}``.
        """
        state = {"step": np.array(self.n_averaged, dtype=np.int64)}
        for key in self.params:
            state[f"average.{key}"] = self.average[key].copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from :meth:`state_dict` (copies; nothing changes on error).

        Parameters
        ----------
        state : dict of str to ndarray
            From :meth:`state_dict` of an average over parameters of the same keys, shapes and dtypes.

        Raises
        ------
        TypeError
            If ``state`` is not a dict, or a value is ragged nested lists (named by key).
        ValueError
            If keys differ from :meth:`state_dict`'s, or a shape or dtype does not match.
        """
        step, buffers = _load_buffers(state, self.params, ("average",))
        self.n_averaged = step
        self.average = buffers["average"]


def clip_grad_norm(grads: dict[str, np.ndarray], max_norm: float, *, eps: float = 1e-6) -> float:
    """Rescale gradients in place so that their global L2 norm is at most about ``max_norm``.

    The global norm treats all gradients as one vector (Pascanu, Mikolov & Bengio 2013, "On the
    difficulty of training recurrent neural networks", Algorithm 1)::

        total_norm = sqrt(sum over keys of sum(g**2))
        if total_norm > max_norm:
            g *= max_norm / (total_norm + eps)      # for every g

    The comparison is strict: a gradient exactly at ``max_norm`` is left alone. Above the threshold
    the scale is PyTorch's (``torch.nn.utils.clip_grad_norm_``, with its ``eps``), so clipped
    gradients match it to rounding. PyTorch always multiplies by ``min(1, max_norm / (total_norm
    + eps))``, which also shrinks a norm within ``eps`` below ``max_norm`` by a relative ``eps /
    max_norm`` at most; here such gradients are untouched. Sums are accumulated in float64.

    Parameters
    ----------
    grads : dict of str to ndarray
        Floating, writeable gradients (modified in place).
    max_norm : float
        Positive threshold.
    eps : float, default 1e-6
        Added to ``total_norm`` in the scale, as in PyTorch.

    Returns
    -------
    float
        The global norm before clipping (log it: spikes show exploding gradients).

    Raises
    ------
    TypeError
        If ``grads`` is not a dict of floating ndarrays.
    ValueError
        If ``grads`` is empty or read-only, ``max_norm`` is not positive and finite, or the norm
        is not finite (the message names the gradients holding inf or nan).
    """
    _check_arrays(grads, "grads")
    max_norm = real("max_norm", max_norm, low=0.0, low_open=True)
    eps = real("eps", eps, low=0.0)
    squares = []
    with np.errstate(over="ignore", invalid="ignore"):  # a non-finite norm is reported below
        for grad in grads.values():
            flat = grad.reshape(-1).astype(np.float64, copy=False)
            squares.append(float(np.dot(flat, flat)))
    total_norm = math.sqrt(sum(squares))
    if not math.isfinite(total_norm):
        bad = [k for k, g in grads.items() if not np.isfinite(g).all()]
        raise ValueError(
            f"grads must be finite to clip; got a total norm of {total_norm} (non-finite values "
            f"in {bad if bad else 'none: the sum of squares overflowed'}). Lower the learning "
            "rate or check the loss for overflow."
        )
    if total_norm > max_norm:
        scale = max_norm / (total_norm + eps)
        for grad in grads.values():
            grad *= scale
    return total_norm
