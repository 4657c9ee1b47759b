"""Reproduce the classic hidden-state experiments on a CPU, beside the papers' figures.

Each experiment trains a small network built from this library's layers (``layer.forward`` /
``layer.backward``), a linear readout and :class:`hiddenstate.train.optim.Adam` with global-norm
clipping (:mod:`hiddenstate.experiments.training`), then measures the quantity the paper
reports and draws a figure (Matplotlib, Agg canvas, PNG). :func:`run` is the entry point of
``hiddenstate reproduce NAME``.

==================  ====================================  =========================================
name                paper (module)                        what is reproduced
==================  ====================================  =========================================
``elman-xor``       Elman (1990), Fig. 3 (``elman``)      error low on every third (XOR) bit only
``elman-letters``   Elman (1990), Figs. 4-5 (``elman``)   error low on vowels; bit 1 vs bit 4
``elman-sentences`` Elman (1990), Fig. 7, Table 4         cosine to likelihood vectors; noun
                    (``elman``)                           clusters from mean hidden states; "zog"
``adding``          Arjovsky, Shah & Bengio (2016)        GRU solves T = 100, tanh RNN stays at 1/6
                    (``arjovsky``)
``copy``            Arjovsky, Shah & Bengio (2016)        GRU below the memoryless baseline
                    (``arjovsky``)
``flipflop``        Sussillo & Barak (2013), Fig. 3       8 stable fixed points (cube corners)
                    (``flipflop``)
==================  ====================================  =========================================

Every result is a dict with keys ``name``, ``title``, ``rows`` (a list of ``(quantity, ours,
paper)`` strings), ``metrics`` (numbers, for tests), ``settings``, ``seconds`` (wall time) and
``figure`` (path of the PNG), built by :func:`hiddenstate.experiments.harness.record`;
:func:`format_result` prints it as a table.

The settings and thresholds come from calibration runs recorded in the project's
``experiments.md``; the deviations from the papers (Adam instead of plain back-propagation,
tanh instead of logistic units, softmax/cross-entropy outputs, truncated BPTT windows) are
listed in each function's Notes.

References
----------
.. [1] J. L. Elman, "Finding structure in time", *Cognitive Science* 14(2):179-211, 1990.
.. [2] M. Arjovsky, A. Shah, Y. Bengio, "Unitary evolution recurrent neural networks",
   ICML 2016, arXiv:1511.06464.
.. [3] D. Sussillo, O. Barak, "Opening the black box: low-dimensional dynamics in
   high-dimensional recurrent neural networks", *Neural Computation* 25(3):626-649, 2013.
"""

from __future__ import annotations

from hiddenstate.experiments.arjovsky import reproduce_adding, reproduce_copy
from hiddenstate.experiments.elman import (
    reproduce_elman_letters,
    reproduce_elman_sentences,
    reproduce_elman_xor,
)
from hiddenstate.experiments.flipflop import reproduce_flipflop
from hiddenstate.experiments.harness import format_result
from hiddenstate.experiments.training import Readout

__all__ = [
    "EXPERIMENTS",
    "QUICK_SETTINGS",
    "Readout",
    "format_result",
    "reproduce_adding",
    "reproduce_copy",
    "reproduce_elman_letters",
    "reproduce_elman_sentences",
    "reproduce_elman_xor",
    "reproduce_flipflop",
    "run",
]

_FUNCTIONS = {
    "elman-xor": reproduce_elman_xor,
    "elman-letters": reproduce_elman_letters,
    "elman-sentences": reproduce_elman_sentences,
    "adding": reproduce_adding,
    "copy": reproduce_copy,
    "flipflop": reproduce_flipflop,
}

EXPERIMENTS: tuple[str, ...] = tuple(_FUNCTIONS)
"""Names accepted by :func:`run` (and ``hiddenstate reproduce NAME``), in the README's order."""

QUICK_SETTINGS: dict[str, dict] = {
    "elman-xor": {"passes": 300},
    "elman-letters": {"passes": 100},
    "elman-sentences": {},  # the full run takes seconds; fewer sentences fail the checks
    "adding": {"gru_steps": 400, "rnn_steps": 400, "short_len": 0, "lstm_steps": 0,
               "eval_every": 100},
    "copy": {"delay": 10, "gru_steps": 600, "rnn_steps": 300},
    "flipflop": {"steps": 400, "n_starts": 256},
}
"""Reduced settings used by ``run(name, quick=True)`` (and the test-suite)."""


def run(name: str, *, quick: bool = False, out_dir="reproduce", seed: int = 0, **overrides) -> dict:
    """Run one experiment by name: ``hiddenstate reproduce NAME``.

    Parameters
    ----------
    name : str
        One of :data:`EXPERIMENTS`.
    quick : bool, default False
        Use the reduced :data:`QUICK_SETTINGS` (seconds instead of minutes; the qualitative
        result, not the paper's numbers).
    out_dir : str or os.PathLike, default "reproduce"
        Directory for the figure ``NAME.png`` (created if needed).
    seed : int, default 0
        Seeds data and initial weights.
    **overrides
        Keyword arguments passed on to the experiment's ``reproduce_*`` function.

    Returns
    -------
    dict
        ``name``, ``title``, ``rows`` (list of ``(quantity, ours, paper)``), ``metrics``,
        ``settings``, ``seconds``, ``figure``. Print it with :func:`format_result`.

    Raises
    ------
    ValueError
        If ``name`` is not an experiment.
    """
    if name not in _FUNCTIONS:
        raise ValueError(f"name must be one of {', '.join(EXPERIMENTS)}; got {name!r}.")
    kwargs = dict(QUICK_SETTINGS[name]) if quick else {}
    kwargs.update(overrides)
    return _FUNCTIONS[name](seed=seed, out_dir=out_dir, **kwargs)
