"""Sussillo & Barak (2013): a 3-bit flip-flop RNN and the fixed points of its dynamics.

A tanh :class:`hiddenstate.RNN` with a linear readout (a
:class:`~hiddenstate.experiments.training.Net`) learns to hold three bits; then the zero-input
map ``h -> F(h)`` of that layer and its Jacobian come from
:func:`hiddenstate.probe.fixedpoints.layer_map` (the cell's own step, nothing rewritten here)
and :func:`hiddenstate.probe.fixedpoints.find_fixed_points` finds and classifies its fixed
points, as in the paper's Fig. 3.

References
----------
.. [1] D. Sussillo, O. Barak, "Opening the black box: low-dimensional dynamics in
   high-dimensional recurrent neural networks", *Neural Computation* 25(3):626-649, 2013.
.. [2] M. D. Golub, D. Sussillo, "FixedPointFinder", JOSS 3(31):1003, 2018.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from hiddenstate.core.progress import progress
from hiddenstate.experiments import tasks
from hiddenstate.experiments.harness import record, stream_rng
from hiddenstate.experiments.training import Net, Readout, mse_loss, train_step
from hiddenstate.probe.fixedpoints import FixedPoint, find_fixed_points, layer_map
from hiddenstate.report.figures import figure
from hiddenstate.train.optim import Adam

__all__ = ["reproduce_flipflop", "saddle_links"]


def reproduce_flipflop(
    *,
    hidden_size: int = 16,
    steps: int = 2000,
    n_train: int = 512,
    n_val: int = 128,
    seq_len: int = 64,
    batch: int = 128,
    lr: float = 1e-2,
    clip: float = 1.0,
    n_starts: int = 1024,
    noise: float = 0.5,
    seed: int = 0,
    out_dir="reproduce",
) -> dict:
    """3-bit flip-flop and its fixed points (Sussillo & Barak 2013 [1]_, Fig. 3).

    A tanh RNN (Golub & Sussillo's [2]_ settings: 16 units, 512 training trials of 64 steps,
    pulse probability 0.5, batch 128) learns to hold the sign of the last pulse on each of 3
    channels. Then the fixed points of the zero-input map ``F(h) = tanh(W_hh h + b_ih + b_hh)``
    (:func:`~hiddenstate.probe.fixedpoints.layer_map` of the trained layer) are found with
    :func:`~hiddenstate.probe.fixedpoints.find_fixed_points`, from ``n_starts`` states visited
    on validation trials plus Gaussian noise (``noise`` times the per-unit standard deviation
    of the states). The paper's picture: 8 stable points at the corners of a cube (one per
    memory), saddles on the edges and faces between them, 26 points in all.

    Parameters
    ----------
    hidden_size : int, default 16
        H.
    steps : int, default 2000
        Adam steps on batches drawn from the fixed training set.
    n_train, n_val, seq_len, batch : int, default 512, 128, 64, 128
        Training and validation trials, T, and N of a training batch.
    lr, clip : float, default 1e-2, 1.0
        Adam step size and gradient-norm threshold.
    n_starts : int, default 1024
        Starting states of the fixed-point search.
    noise : float, default 0.5
        Standard deviation of the noise added to the starting states, per unit, in units of
        that unit's standard deviation over the validation states.
    seed : int, default 0
        Seeds the data, the initial weights, the batches and the starting states.
    out_dir : str or os.PathLike, default "reproduce"
        Where ``flipflop.png`` is written.

    Returns
    -------
    dict
        See :func:`hiddenstate.experiments.harness.record`. ``metrics``: ``accuracy`` (sign of
        the outputs vs the targets, all validation steps); ``n_fixed``; ``n_stable``;
        ``unstable_counts`` (number of points with 0, 1, 2, ... unstable directions);
        ``stable_patterns`` (distinct sign patterns of the readout at the stable points);
        ``max_q``; ``saddle_link_bits`` (:func:`saddle_links` of the saddles with one unstable
        direction: 1 when a saddle separates neighbouring corners); ``points`` (the
        :class:`~hiddenstate.probe.fixedpoints.FixedPoint` list); ``train_loss`` (final).
    """
    started = time.perf_counter()
    x_tr, y_tr = tasks.flipflop(n_train, seq_len, rng=stream_rng(seed, 50))
    x_va, y_va = tasks.flipflop(n_val, seq_len, rng=stream_rng(seed, 51))
    net = Net("rnn", 3, hidden_size, 3, rng=stream_rng(seed, 52))
    opt = Adam(net.params, lr=lr)
    pick = stream_rng(seed, 53)
    with np.errstate(under="ignore"), progress(steps, "flipflop") as bar:
        for _ in range(steps):
            idx = pick.choice(n_train, size=batch, replace=False)
            loss, _ = train_step(net, opt, x_tr[:, idx], net.zero_state(batch),
                                 mse_loss(y_tr[:, idx]), clip)
            bar.update()
        states = net.hidden(x_va)  # (T, N, H)
        out = net.readout(states)
    accuracy = float(np.mean(np.sign(out) == y_va))

    F, jac = layer_map(net.layer)  # input held at zero
    flat = states.reshape(-1, hidden_size)  # (T*N, H)
    srng = stream_rng(seed, 54)
    starts = flat[srng.choice(len(flat), size=n_starts, replace=len(flat) < n_starts)]
    starts = starts + noise * flat.std(axis=0) * srng.standard_normal(starts.shape)
    with np.errstate(under="ignore"):
        points = find_fixed_points(F, jac, starts)
    n_unstable = np.array([p.n_unstable for p in points], dtype=int)
    stable = [p for p in points if p.is_stable]
    patterns = {tuple(np.sign(net.readout(p.h)).astype(int)) for p in stable}
    link_bits = saddle_links([p for p in points if p.n_unstable == 1], F, net.readout)
    counts = np.bincount(n_unstable, minlength=4) if len(points) else np.zeros(4, int)
    metrics = {
        "accuracy": accuracy,
        "n_fixed": len(points),
        "n_stable": len(stable),
        "unstable_counts": counts,
        "stable_patterns": len(patterns),
        "max_q": max((p.q for p in points), default=float("nan")),
        "saddle_link_bits": link_bits,
        "train_loss": float(loss),
        "points": points,
    }

    rows = [
        ("sign accuracy on validation trials", f"{accuracy:.4f}", "(task solved)"),
        ("stable fixed points", f"{len(stable)} ({len(patterns)} distinct memories)",
         "8 (cube corners)"),
        ("fixed points in all", str(len(points)), "26 (Fig. 3, per Golub & Sussillo)"),
        ("points with 1 / 2 / 3 unstable modes",
         " / ".join(str(int(c)) for c in counts[1:4]),
         "saddles between the memories (Fig. 3)"),
        ("1-mode saddles between memories 1 bit apart",
         f"{sum(b == 1 for b in link_bits)} of {len(link_bits)}",
         "unstable modes point to the attractors"),
    ]
    settings = {"hidden_size": hidden_size, "steps": steps, "n_train": n_train, "n_val": n_val,
                "seq_len": seq_len, "batch": batch, "lr": lr, "clip": clip, "n_starts": n_starts,
                "noise": noise, "seed": seed}
    return record("flipflop", "3-bit flip-flop fixed points (Sussillo & Barak 2013, Fig. 3)",
                  rows=rows, metrics=metrics, settings=settings, out_dir=out_dir,
                  started=started, draw=lambda: _flipflop_figure(states, points))


def saddle_links(saddles: list[FixedPoint], F: Callable[[np.ndarray], np.ndarray],
                 readout: Readout, *, eps: float = 1e-3, n_iter: int = 3000) -> list[int]:
    """How many bits apart the memories are that each 1-mode saddle separates.

    Each saddle is nudged by ``±eps`` along its unstable direction and the map is iterated
    ``n_iter`` times from either side (Sussillo & Barak 2013 [1]_, section 3); the readout's
    sign patterns at the two end states are compared.

    Parameters
    ----------
    saddles : list of FixedPoint
        Points with one unstable direction (``n_unstable == 1``).
    F : callable
        The map, ``F(h) -> ndarray (H,)`` for ``h`` of shape (H,), float64.
    readout : Readout
        Maps a state (H,) to the outputs (V,) whose signs are the memory.
    eps : float, default 1e-3
        Size of the nudge.
    n_iter : int, default 3000
        Iterations of the map from either side.

    Returns
    -------
    list of int
        Per saddle, the Hamming distance between the two end patterns (1 when the saddle sits
        between two memories one bit apart, 0 when both sides fall into the same one).
    """
    bits = []
    for p in saddles:
        v = np.real(p.unstable_directions()[:, 0])
        v /= np.linalg.norm(v)
        ends = []
        for side in (1.0, -1.0):
            h = p.h + side * eps * v
            for _ in range(n_iter):
                h = F(h)
            ends.append(np.sign(readout(h)))
        bits.append(int(np.sum(ends[0] != ends[1])))
    return bits


def _flipflop_figure(states, points):
    """Four validation trajectories and the fixed points, in the states' top 3 PCs (3-D)."""
    flat = states.reshape(-1, states.shape[-1])  # (T*N, H)
    mean = flat.mean(axis=0)
    _, _, vt = np.linalg.svd(flat - mean, full_matrices=False)

    def proj(h):
        return (h - mean) @ vt[:3].T

    fig, _ = figure(6.0, 5.6, ncols=0)
    ax = fig.add_subplot(projection="3d")
    for n in range(min(4, states.shape[1])):
        tr = proj(states[:, n])
        ax.plot(tr[:, 0], tr[:, 1], tr[:, 2], color="0.6", lw=0.5, alpha=0.6)
    colours = {0: ("k", "stable"), 1: ("C3", "1 unstable mode"), 2: ("C1", "2 unstable modes")}
    for k in sorted({p.n_unstable for p in points}):
        pts = np.array([proj(p.h) for p in points if p.n_unstable == k])
        c, lab = colours.get(k, ("C4", f"{k} unstable modes"))
        ax.scatter(pts[:, 0], pts[:, 1], pts[:, 2], color=c, s=30 if k == 0 else 14, label=lab,
                   depthshade=False)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_zlabel("PC 3")
    ax.set_title("3-bit flip-flop: trajectories and fixed points\n"
                 "(cf. Sussillo & Barak 2013 Fig. 3)")
    ax.legend(fontsize=8, loc="upper left")
    return fig
