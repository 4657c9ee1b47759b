"""Long-range memory: the adding problem and the copying-memory task (Arjovsky et al. 2016).

Each run trains a :class:`~hiddenstate.experiments.training.Net` on fresh random batches
(:func:`~hiddenstate.experiments.training.fit_batches`) and records a validation measure on a
fixed set as it goes. A GRU (and an LSTM with forget-gate bias 1) learns where a tanh RNN stays
at the memoryless baseline, as in the paper's Figs. 1-2; the sequences are shorter than the
paper's (minutes on a CPU), and Adam replaces RMSProp.

References
----------
.. [1] M. Arjovsky, A. Shah, Y. Bengio, "Unitary evolution recurrent neural networks",
   ICML 2016, arXiv:1511.06464.
"""

from __future__ import annotations

import time

import numpy as np

from hiddenstate.core.functional import cross_entropy
from hiddenstate.experiments import tasks
from hiddenstate.experiments.harness import record, stream_rng
from hiddenstate.experiments.training import (
    Net,
    ce_loss,
    fit_batches,
    last_step_mse_loss,
)
from hiddenstate.report.figures import figure

__all__ = ["reproduce_adding", "reproduce_copy"]


# ----------------------------------------------------------------------------------------------
# The adding problem
# ----------------------------------------------------------------------------------------------


def _adding_run(cell, seq_len, hidden_size, steps, *, lr, clip, batch, n_val, eval_every, seed):
    """One network on the adding problem; the curve of (step, validation MSE)."""
    rng = stream_rng(seed, 10 + seq_len)
    xv, yv = tasks.adding_problem(n_val, seq_len, rng=stream_rng(seed, 20 + seq_len))
    net = Net(cell, 2, hidden_size, 1, rng=stream_rng(seed, 30 + seq_len))

    def evaluate():
        pred = net.readout(net.hidden(xv)[-1])[:, 0]
        return float(np.mean((pred - yv) ** 2))

    return fit_batches(net, lambda: tasks.adding_problem(batch, seq_len, rng=rng),
                       last_step_mse_loss, evaluate, steps=steps, lr=lr, clip=clip,
                       eval_every=eval_every, desc=f"adding: {cell} T={seq_len}")


def reproduce_adding(
    *,
    seq_len: int = 100,
    short_len: int = 20,
    hidden_size: int = 32,
    gru_steps: int = 1000,
    rnn_steps: int = 1500,
    short_steps: int = 3000,
    lstm_steps: int = 1500,
    batch: int = 64,
    lr: float = 1e-2,
    clip: float = 1.0,
    n_val: int = 1000,
    eval_every: int = 50,
    seed: int = 0,
    out_dir="reproduce",
) -> dict:
    """The adding problem (Arjovsky, Shah & Bengio 2016 [1]_, Fig. 2).

    Up to four runs, each on fresh random batches with validation MSE on 1,000 fixed
    sequences: a GRU at ``seq_len`` (learns), a tanh RNN at ``seq_len`` (stays at the baseline
    1/6 of always answering 1, as the tanh RNN does in the paper), an LSTM with forget-gate
    bias 1 at ``seq_len`` (the paper's gated model; learns after a plateau) and a tanh RNN at
    ``short_len`` (learns: the failure is about length, not a broken cell).

    Parameters
    ----------
    seq_len : int, default 100
        T of the long runs (Arjovsky et al.: 100 to 750).
    short_len : int, default 20
        T of the control tanh run; ``0`` skips it.
    hidden_size : int, default 32
        H (Arjovsky et al.: 128).
    gru_steps, rnn_steps, short_steps, lstm_steps : int, default 1000, 1500, 3000, 1500
        Training steps of each run; ``lstm_steps=0`` skips the LSTM.
    batch : int, default 64
        N of the training batches.
    lr, clip : float, default 1e-2, 1.0
        Adam step size (paper: RMSProp 1e-3) and gradient-norm threshold.
    n_val, eval_every : int, default 1000, 50
        Validation sequences, and training steps between two validations.
    seed : int, default 0
        Seeds the data and the initial weights.
    out_dir : str or os.PathLike, default "reproduce"
        Where ``adding.png`` is written.

    Returns
    -------
    dict
        See :func:`hiddenstate.experiments.harness.record`. ``metrics``: ``gru``, ``rnn``,
        ``lstm``, ``rnn_short`` (final validation MSE, None for a skipped run), ``baseline``
        (1/6), and ``curves`` (run name to list of ``(step, val MSE)``).
    """
    started = time.perf_counter()
    kw = {"lr": lr, "clip": clip, "batch": batch, "n_val": n_val, "eval_every": eval_every,
          "seed": seed}
    with np.errstate(under="ignore"):
        curves = {
            f"GRU, T={seq_len}": _adding_run("gru", seq_len, hidden_size, gru_steps, **kw),
            f"tanh RNN, T={seq_len}": _adding_run("rnn", seq_len, hidden_size, rnn_steps, **kw),
        }
        if lstm_steps:
            curves[f"LSTM, T={seq_len}"] = _adding_run("lstm", seq_len, hidden_size,
                                                       lstm_steps, **kw)
        if short_len:
            curves[f"tanh RNN, T={short_len}"] = _adding_run("rnn", short_len, hidden_size,
                                                             short_steps, **kw)
    finals = [c[-1][1] for c in curves.values()]
    lstm = finals[2] if lstm_steps else None
    short = finals[-1] if short_len else None
    metrics = {
        "gru": finals[0],
        "rnn": finals[1],
        "lstm": lstm,
        "rnn_short": short,
        "baseline": 1 / 6,
        "curves": curves,
    }

    def draw():
        fig, ax = figure(6.4, 3.8)
        for (label, curve), marker in zip(curves.items(), ("o-", "s-", "d-", "^-")):
            s, v = np.array(curve).T
            ax.semilogy(s, v, marker, ms=2.5, lw=1, label=label)
        ax.axhline(1 / 6, color="grey", ls="--", lw=1, label="baseline 1/6 (always answer 1)")
        ax.set_xlabel(f"training step (batch {batch})")
        ax.set_ylabel("validation MSE")
        ax.set_title("Adding problem, cf. Arjovsky et al. (2016) Fig. 2")
        ax.legend(fontsize=8)
        return fig

    rows = [
        (f"GRU val MSE, T={seq_len} ({gru_steps} steps)",
         f"{finals[0]:.4f} ({finals[0] * 6:.3f} x baseline)",
         "(GRU not run; gated LSTM well below 1/6)"),
        (f"tanh RNN val MSE, T={seq_len} ({rnn_steps} steps)",
         f"{finals[1]:.4f} ({finals[1] * 6:.3f} x baseline)", "stays at 1/6 = 0.167"),
    ]
    if lstm_steps:
        rows.append((f"LSTM val MSE, T={seq_len} ({lstm_steps} steps)",
                     f"{lstm:.4f} ({lstm * 6:.3f} x baseline)", "well below 1/6"))
    if short_len:
        rows.append((f"tanh RNN val MSE, T={short_len} ({short_steps} steps)",
                     f"{short:.4f} ({short * 6:.3f} x baseline)", "(control, not in paper)"))
    settings = {"seq_len": seq_len, "short_len": short_len, "hidden_size": hidden_size,
                "gru_steps": gru_steps, "rnn_steps": rnn_steps, "short_steps": short_steps,
                "lstm_steps": lstm_steps, **kw}
    return record("adding", "Adding problem (Arjovsky, Shah & Bengio 2016)", rows=rows,
                  metrics=metrics, settings=settings, draw=draw, out_dir=out_dir, started=started)


# ----------------------------------------------------------------------------------------------
# Copying memory
# ----------------------------------------------------------------------------------------------


def _copy_run(cell, delay, hidden_size, steps, *, lr, clip, batch, n_val, eval_every, seed):
    """One network on the copy task; the curve of (step, (CE / baseline, copy accuracy))."""
    rng = stream_rng(seed, 40)
    xv, yv = tasks.copy_memory(n_val, delay, rng=stream_rng(seed, 41))
    xv1 = tasks.one_hot(xv, 10)  # (T+20, n_val, 10)
    net = Net(cell, 10, hidden_size, 9, rng=stream_rng(seed, 42))
    base = tasks.copy_baseline(delay)

    def evaluate():
        logits = net.readout(net.hidden(xv1))  # (T+20, n_val, 9)
        loss, _ = cross_entropy(logits.reshape(-1, 9), yv.reshape(-1))
        acc = float(np.mean(logits[-10:].argmax(axis=-1) == yv[-10:]))
        return loss / base, acc

    def make_batch():
        x, y = tasks.copy_memory(batch, delay, rng=rng)
        return tasks.one_hot(x, 10), y

    return fit_batches(net, make_batch, ce_loss, evaluate, steps=steps, lr=lr, clip=clip,
                       eval_every=eval_every, desc=f"copy: {cell} T={delay}")


def reproduce_copy(
    *,
    delay: int = 20,
    hidden_size: int = 64,
    gru_steps: int = 3000,
    rnn_steps: int = 2000,
    batch: int = 64,
    lr: float = 1e-2,
    clip: float = 1.0,
    n_val: int = 500,
    eval_every: int = 100,
    seed: int = 0,
    out_dir="reproduce",
) -> dict:
    """The copying-memory task (Arjovsky, Shah & Bengio 2016 [1]_, Fig. 1).

    Remember 10 symbols out of 8 over a delay of T blanks and reproduce them after a
    delimiter. The memoryless strategy scores ``10 ln 8 / (T + 20)`` nats per step (the
    plateau where the paper's tanh RNN and LSTM stay); a GRU goes below it while a tanh RNN
    does not leave it.

    Parameters
    ----------
    delay : int, default 20
        T (Arjovsky et al.: 100 to 500; too long for minutes on a CPU).
    hidden_size : int, default 64
        H.
    gru_steps, rnn_steps : int, default 3000, 2000
        Training steps of each run.
    batch : int, default 64
        N of the training batches.
    lr, clip : float, default 1e-2, 1.0
        Adam step size and gradient-norm threshold.
    n_val, eval_every : int, default 500, 100
        Validation sequences, and training steps between two validations.
    seed : int, default 0
        Seeds the data and the initial weights.
    out_dir : str or os.PathLike, default "reproduce"
        Where ``copy.png`` is written.

    Returns
    -------
    dict
        ``metrics``: ``gru_ratio`` / ``rnn_ratio`` (validation cross-entropy divided by the
        baseline), ``gru_accuracy`` / ``rnn_accuracy`` (symbols copied correctly; chance
        1/8), ``baseline`` (nats), ``curves``.
    """
    started = time.perf_counter()
    kw = {"lr": lr, "clip": clip, "batch": batch, "n_val": n_val, "eval_every": eval_every,
          "seed": seed}
    with np.errstate(under="ignore"):
        curves = {
            "GRU": _copy_run("gru", delay, hidden_size, gru_steps, **kw),
            "tanh RNN": _copy_run("rnn", delay, hidden_size, rnn_steps, **kw),
        }
    (g_ratio, g_acc), (r_ratio, r_acc) = curves["GRU"][-1][1], curves["tanh RNN"][-1][1]
    metrics = {
        "gru_ratio": g_ratio,
        "gru_accuracy": g_acc,
        "rnn_ratio": r_ratio,
        "rnn_accuracy": r_acc,
        "baseline": tasks.copy_baseline(delay),
        "curves": curves,
    }

    def draw():
        fig, (ax1, ax2) = figure(9.0, 3.6, ncols=2)
        for label, curve in curves.items():
            s = [c[0] for c in curve]
            ax1.plot(s, [c[1][0] for c in curve], "o-", ms=2.5, lw=1,
                     label=f"{label}, H={hidden_size}")
            ax2.plot(s, [c[1][1] for c in curve], "o-", ms=2.5, lw=1, label=label)
        ax1.axhline(1.0, color="grey", ls="--", lw=1, label="memoryless baseline")
        ax1.set_ylim(0, 1.6)
        ax1.set_xlabel("training step")
        ax1.set_ylabel("cross-entropy / baseline")
        ax1.set_title(f"Copy memory, T={delay}, cf. Arjovsky et al. Fig. 1", fontsize=9)
        ax1.legend(fontsize=8)
        ax2.axhline(1 / 8, color="grey", ls="--", lw=1, label="chance 1/8")
        ax2.set_xlabel("training step")
        ax2.set_ylabel("copied symbols correct")
        ax2.legend(fontsize=8)
        return fig

    rows = [
        (f"GRU CE / baseline, T={delay} ({gru_steps} steps)",
         f"{g_ratio:.3f} (copy acc. {g_acc:.2f})", "LSTM, tanh: 1.0 plateau; uRNN -> 0 (T>=100)"),
        (f"tanh RNN CE / baseline, T={delay} ({rnn_steps} steps)",
         f"{r_ratio:.3f} (copy acc. {r_acc:.2f})", "1.0 (stays at baseline)"),
        ("baseline 10 ln 8 / (T+20), nats", f"{metrics['baseline']:.4f}",
         f"{metrics['baseline']:.4f}"),
    ]
    settings = {"delay": delay, "hidden_size": hidden_size, "gru_steps": gru_steps,
                "rnn_steps": rnn_steps, **kw}
    return record("copy", "Copying memory (Arjovsky, Shah & Bengio 2016)", rows=rows,
                  metrics=metrics, settings=settings, draw=draw, out_dir=out_dir, started=started)
