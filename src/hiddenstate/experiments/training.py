"""The small model and training loops the paper reproductions share.

A :class:`Net` is one of this library's recurrent layers (``layer.forward`` /
``layer.backward``, full BPTT) plus a linear :class:`Readout`; a loss builder turns targets into
a function of the outputs returning the loss and its gradient; :func:`train_step` is one update
with global-norm clipping (Pascanu, Mikolov & Bengio 2013) and
:class:`hiddenstate.train.optim.Adam`. Two loops cover every experiment: :func:`fit_stream`
(stateful truncated BPTT on one long stream, Elman's presentation) and :func:`fit_batches`
(fresh random batches, the long-memory benchmarks).

Shapes: T steps, N sequences, I inputs, H hidden units, V outputs; time-major ``(T, N, ...)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hiddenstate.classic.layers import GRU, LSTM, RNN
from hiddenstate.core.functional import cross_entropy, sigmoid
from hiddenstate.core.progress import progress
from hiddenstate.core.validation import generator, positive_int
from hiddenstate.train.optim import Adam, clip_grad_norm

__all__ = [
    "CELLS",
    "Net",
    "Readout",
    "bce_loss",
    "ce_loss",
    "fit_batches",
    "fit_stream",
    "last_step_mse_loss",
    "loss_and_grads",
    "mse_loss",
    "train_step",
]

CELLS: tuple[str, ...] = ("rnn", "gru", "lstm")
"""Recurrent layers a :class:`Net` can have: tanh :class:`~hiddenstate.RNN`, GRU, LSTM."""

#: A loss function: outputs y of shape (T, N, V) -> (mean loss, dL/dy of shape (T, N, V)).
LossFn = Callable[[np.ndarray], tuple]


class Readout:
    """Linear readout ``y = h W_hy^T + b_y`` applied at every step.

    Parameters
    ----------
    hidden_size : int
        H.
    output_size : int
        V.
    rng : numpy.random.Generator
        Draws ``W_hy`` from U(-1/sqrt(H), 1/sqrt(H)) (PyTorch's ``nn.Linear`` bound);
        ``b_y`` starts at zero.

    Attributes
    ----------
    params : dict
        ``"W_hy"`` of shape (V, H) and ``"b_y"`` of shape (V,), float64.

    Raises
    ------
    TypeError
        If a size is not an integer or ``rng`` is not a Generator.
    ValueError
        If a size is not positive.
    """

    def __init__(self, hidden_size: int, output_size: int, *, rng: np.random.Generator):
        hidden_size = positive_int("hidden_size", hidden_size)
        output_size = positive_int("output_size", output_size)
        rng = generator(rng, required=True)
        bound = 1.0 / math.sqrt(hidden_size)
        self.params = {
            "W_hy": rng.uniform(-bound, bound, size=(output_size, hidden_size)),
            "b_y": np.zeros(output_size),
        }

    def __call__(self, h: np.ndarray) -> np.ndarray:
        """Map states to outputs.

        Parameters
        ----------
        h : ndarray of shape (..., H)
            Hidden states.

        Returns
        -------
        ndarray of shape (..., V)
            ``h W_hy^T + b_y``.
        """
        return h @ self.params["W_hy"].T + self.params["b_y"]

    def backward(self, h: np.ndarray, dy: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Backpropagate ``dy`` through the readout at states ``h``.

        Parameters
        ----------
        h : ndarray of shape (..., H)
            The states the outputs were read from.
        dy : ndarray of shape (..., V)
            Gradient of the loss with respect to the outputs.

        Returns
        -------
        grads : dict
            ``"W_hy"`` (V, H) and ``"b_y"`` (V,).
        dh : ndarray of shape (..., H)
            Gradient of the loss with respect to ``h``.
        """
        H = h.shape[-1]
        V = dy.shape[-1]
        h2, dy2 = h.reshape(-1, H), dy.reshape(-1, V)  # (M, H), (M, V)
        grads = {"W_hy": dy2.T @ h2, "b_y": dy2.sum(axis=0)}
        return grads, dy @ self.params["W_hy"]


class Net:
    """One recurrent layer of this library plus a :class:`Readout`, with one parameter dict.

    Parameters
    ----------
    cell : {"rnn", "gru", "lstm"}
        A tanh :class:`hiddenstate.RNN`, a :class:`hiddenstate.GRU` or a
        :class:`hiddenstate.LSTM` (one layer, one direction).
    input_size, hidden_size, output_size : int
        I, H, V.
    rng : numpy.random.Generator
        Initial weights of the layer, then of the readout.
    forget_bias : float, default 1.0
        LSTM only: ``bias_ih`` of the forget gate is set to it and ``bias_hh`` to zero.

    Attributes
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
    readout : Readout
    params : dict
        The layer's parameters (torch names, e.g. ``weight_hh_l0``) and the readout's, the
        same arrays (an update through ``params`` is seen by both).

    Raises
    ------
    ValueError
        If ``cell`` is not one of :data:`CELLS`.
    """

    def __init__(self, cell: str, input_size: int, hidden_size: int, output_size: int, *,
                 rng: np.random.Generator, forget_bias: float = 1.0):
        if cell == "rnn":
            self.layer = RNN(input_size, hidden_size, nonlinearity="tanh", rng=rng)
        elif cell == "gru":
            self.layer = GRU(input_size, hidden_size, rng=rng)
        elif cell == "lstm":
            self.layer = LSTM(input_size, hidden_size, rng=rng)
            H = hidden_size  # gate order i, f, g, o: total forget bias = forget_bias
            self.layer.params["bias_ih_l0"][H:2 * H] = forget_bias
            self.layer.params["bias_hh_l0"][H:2 * H] = 0.0
        else:
            raise ValueError(f"cell must be one of {', '.join(CELLS)}; got {cell!r}.")
        self.cell = cell
        self.hidden_size = hidden_size
        self.readout = Readout(hidden_size, output_size, rng=rng)
        self.params = {**self.layer.params, **self.readout.params}  # same arrays, one dict

    def zero_state(self, n: int):
        """The zero initial state for ``n`` sequences.

        Parameters
        ----------
        n : int
            N.

        Returns
        -------
        ndarray of shape (1, N, H), or a pair of them (h, c) for the LSTM
            Zeros, float64.
        """
        h = np.zeros((1, n, self.hidden_size))
        return (h, h.copy()) if self.cell == "lstm" else h

    def hidden(self, x: np.ndarray, h0=None) -> np.ndarray:
        """Hidden states for inputs ``x`` of shape (T, N, I), no cache kept.

        Parameters
        ----------
        x : ndarray of shape (T, N, I)
            Inputs, time-major.
        h0 : ndarray of shape (1, N, H) or (h, c) pair, optional
            Default :meth:`zero_state`.

        Returns
        -------
        ndarray of shape (T, N, H)
            The layer's output at every step.
        """
        out, _ = self.layer(x, self.zero_state(x.shape[1]) if h0 is None else h0)
        return out

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copy every parameter, for :meth:`restore`.

        Returns
        -------
        dict
            Same keys as ``params``, arrays copied.
        """
        return {k: v.copy() for k, v in self.params.items()}

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        """Copy a :meth:`snapshot` back into the parameter arrays (in place).

        Parameters
        ----------
        snap : dict
            From :meth:`snapshot`.
        """
        for k, v in snap.items():
            self.params[k][...] = v


def bce_loss(targets: np.ndarray) -> LossFn:
    """Sigmoid outputs, binary cross-entropy summed over units, mean over steps and sequences.

    Parameters
    ----------
    targets : ndarray of shape (T, N, V), values in [0, 1]
        Target bits.

    Returns
    -------
    callable
        ``y (T, N, V) -> (loss, dy)`` with ``loss = sum(log(1 + e^y) - targets*y) / (T*N)``.
    """

    def loss_fn(y):
        p = sigmoid(y)
        m = y.shape[0] * y.shape[1]
        loss = float(np.sum(np.logaddexp(0.0, y) - targets * y)) / m
        return loss, (p - targets) / m

    return loss_fn


def ce_loss(targets: np.ndarray) -> LossFn:
    """Softmax outputs, mean cross-entropy against integer targets.

    Parameters
    ----------
    targets : ndarray of shape (T, N), int
        Class ids in [0, V).

    Returns
    -------
    callable
        ``y (T, N, V) -> (loss, dy)``, :func:`hiddenstate.core.functional.cross_entropy` over all
        T*N rows.
    """

    def loss_fn(y):
        V = y.shape[-1]
        loss, dy = cross_entropy(y.reshape(-1, V), targets.reshape(-1))
        return loss, dy.reshape(y.shape)

    return loss_fn


def mse_loss(targets: np.ndarray) -> LossFn:
    """Mean squared error over every step, sequence and unit.

    Parameters
    ----------
    targets : ndarray of shape (T, N, V)
        Target outputs.

    Returns
    -------
    callable
        ``y (T, N, V) -> (mean((y - targets)**2), dy)``.
    """

    def loss_fn(y):
        diff = y - targets
        return float(np.mean(diff * diff)), 2.0 * diff / diff.size

    return loss_fn


def last_step_mse_loss(targets: np.ndarray) -> LossFn:
    """Mean squared error of the last step's first output (the answer of the adding problem).

    Parameters
    ----------
    targets : ndarray of shape (N,)
        Target answer of each sequence.

    Returns
    -------
    callable
        ``y (T, N, V) -> (mean((y[-1, :, 0] - targets)**2), dy)``; ``dy`` is zero except at
        ``[-1, :, 0]``.
    """

    def loss_fn(y):
        diff = y[-1, :, 0] - targets  # (N,)
        dy = np.zeros_like(y)
        dy[-1, :, 0] = 2.0 * diff / diff.size
        return float(np.mean(diff * diff)), dy

    return loss_fn


def loss_and_grads(net: Net, x: np.ndarray, h0, loss_fn: LossFn):
    """Forward, loss and full BPTT through one window.

    Parameters
    ----------
    net : Net
        The network (its layer and readout).
    x : ndarray of shape (T, N, I)
        Inputs of the window.
    h0 : ndarray of shape (1, N, H), or an (h, c) pair for the LSTM
        Initial state of the window.
    loss_fn : callable
        From a loss builder (:func:`bce_loss`, :func:`ce_loss`, ...).

    Returns
    -------
    loss : float
        Mean loss of the window.
    grads : dict
        Same keys and shapes as ``net.params``.
    h_n : ndarray of shape (1, N, H), or an (h, c) pair
        Final state (the next window's ``h0``).
    """
    out, h_n, cache = net.layer.forward(x, h0)  # (T, N, H)
    y = net.readout(out)  # (T, N, V)
    loss, dy = loss_fn(y)
    g_out, d_out = net.readout.backward(out, dy)  # d_out (T, N, H)
    g_layer, _, _ = net.layer.backward(cache, d_out)
    return loss, {**g_layer, **g_out}, h_n


def train_step(net: Net, opt: Adam, x: np.ndarray, h0, loss_fn: LossFn, clip: float):
    """One update: gradients, global-norm clipping (Pascanu et al. 2013) to ``clip``, Adam.

    Parameters
    ----------
    net : Net
        The network to update (in place).
    opt : hiddenstate.train.optim.Adam
        Over ``net.params``.
    x : ndarray of shape (T, N, I)
        Inputs of the window.
    h0 : ndarray of shape (1, N, H), or an (h, c) pair for the LSTM
        Initial state of the window.
    loss_fn : callable
        From a loss builder.
    clip : float
        Gradient-norm threshold.

    Returns
    -------
    loss : float
        Before the update.
    h_n : ndarray of shape (1, N, H), or an (h, c) pair
        Final state of the window.
    """
    loss, grads, h_n = loss_and_grads(net, x, h0, loss_fn)
    clip_grad_norm(grads, clip)
    opt.step(grads)
    return loss, h_n


def _map_state(f, state):
    return tuple(f(s) for s in state) if isinstance(state, tuple) else f(state)


def fit_stream(net: Net, opt: Adam, x: np.ndarray, target: np.ndarray,
               make_loss: Callable[[np.ndarray], LossFn], *, n_chunks: int, window: int,
               passes: int, clip: float, desc: str | None = None) -> list[float]:
    """Stateful truncated BPTT on one long stream that wraps around (Elman's presentation).

    The stream of M steps is cut into ``n_chunks`` equal chunks processed in parallel as a
    batch; each chunk is trained in windows of ``window`` steps, the final state of one window
    being the initial state of the next (no gradient crosses windows). After a pass, chunk k
    continues from chunk k-1's final state, which is where the wrapped stream would be.

    Parameters
    ----------
    net : Net
        The network to train (in place).
    opt : hiddenstate.train.optim.Adam
        Over ``net.params``; one step per window.
    x : ndarray of shape (M, I)
        The stream's inputs.
    target : ndarray of shape (M, ...)
        Target at each step (the next element of the stream).
    make_loss : callable
        A loss builder, applied to each window's targets.
    n_chunks, window, passes : int
        N, the BPTT window (steps) and the passes through the stream.
    clip : float
        Gradient-norm threshold.
    desc : str, optional
        Label of a progress bar on stderr (shown on a terminal only, see
        :func:`hiddenstate.core.progress.progress`); None: no bar.

    Returns
    -------
    list of float
        Mean training loss of each pass.
    """
    L = x.shape[0] // n_chunks
    xs = x[: L * n_chunks].reshape((n_chunks, L) + x.shape[1:]).swapaxes(0, 1)  # (L, N, I)
    ts = target[: L * n_chunks].reshape((n_chunks, L) + target.shape[1:]).swapaxes(0, 1)
    h = net.zero_state(n_chunks)
    history = []
    with progress(passes * len(range(0, L, window)), desc) as bar:
        for _ in range(passes):
            losses = []
            for s in range(0, L, window):
                loss, h = train_step(net, opt, xs[s:s + window], h, make_loss(ts[s:s + window]), clip)
                losses.append(loss)
                bar.update()
            h = _map_state(lambda a: np.roll(a, 1, axis=1), h)
            history.append(float(np.mean(losses)))
            bar.set_postfix(loss=f"{history[-1]:.4f}", refresh=False)
    return history


def fit_batches(net: Net, make_batch: Callable, make_loss: Callable[[np.ndarray], LossFn],
                evaluate: Callable, *, steps: int, lr: float, clip: float,
                eval_every: int, desc: str | None = None) -> list:
    """Adam on a fresh random batch each step, from the zero state; evaluate as it goes.

    Parameters
    ----------
    net : Net
        The network to train (in place).
    make_batch : callable
        ``make_batch() -> (x, y)`` with ``x`` of shape (T, N, I) and the targets ``y`` for
        ``make_loss``.
    make_loss : callable
        A loss builder.
    evaluate : callable
        ``evaluate() -> value`` (any validation measure), called before training, every
        ``eval_every`` steps and after the last.
    steps : int
        Number of updates.
    lr, clip : float
        Adam step size and gradient-norm threshold.
    eval_every : int
        Updates between two evaluations.
    desc : str, optional
        Label of a progress bar on stderr (shown on a terminal only, see
        :func:`hiddenstate.core.progress.progress`); None: no bar.

    Returns
    -------
    list of (int, value)
        ``(step, evaluate())``, starting with step 0.
    """
    opt = Adam(net.params, lr=lr)
    curve = [(0, evaluate())]
    with progress(steps, desc) as bar:
        for step in range(1, steps + 1):
            x, y = make_batch()
            train_step(net, opt, x, net.zero_state(x.shape[1]), make_loss(y), clip)
            if step % eval_every == 0 or step == steps:
                curve.append((step, evaluate()))
                value = curve[-1][1]
                bar.set_postfix(val=" ".join(f"{v:.4g}" for v in np.atleast_1d(value)), refresh=False)
            bar.update()
    return curve
