"""Data generators for the classic hidden-state experiments.

One function per task, each drawing every random number from an explicit
``numpy.random.Generator`` (same seed, same data). Sequence tasks are returned
time-major, ``(T, N, ...)``, the layout the layers use inside. Elman's sentence corpus lives
in :mod:`hiddenstate.experiments.sentences` and :func:`one_hot` in
:mod:`hiddenstate.experiments.encoding`; both are re-exported here, so this module is the one
place to import a task from.

=====================  ==============================================  ==========================
task                   paper                                           generator
=====================  ==============================================  ==========================
temporal XOR           Elman (1990), section "Exclusive-OR"            :func:`temporal_xor`
letter sequences       Elman (1990), Table 1, Figs. 4-5                :func:`elman_letters`
simple sentences       Elman (1990), Tables 3-4, Figs. 7-9             :func:`elman_sentences`
adding problem         Arjovsky, Shah & Bengio (2016), section 4.2     :func:`adding_problem`
copying memory         Arjovsky, Shah & Bengio (2016), section 4.1     :func:`copy_memory`
3-bit flip-flop        Sussillo & Barak (2013), section 3.1            :func:`flipflop`
=====================  ==============================================  ==========================

References
----------
.. [1] J. L. Elman, "Finding structure in time", *Cognitive Science* 14(2):179-211, 1990.
   doi:10.1207/s15516709cog1402_1
.. [2] M. Arjovsky, A. Shah, Y. Bengio, "Unitary evolution recurrent neural networks",
   ICML 2016, arXiv:1511.06464.
.. [3] S. Hochreiter, J. Schmidhuber, "Long short-term memory", *Neural Computation*
   9(8):1735-1780, 1997.
.. [4] D. Sussillo, O. Barak, "Opening the black box: low-dimensional dynamics in
   high-dimensional recurrent neural networks", *Neural Computation* 25(3):626-649, 2013.
   doi:10.1162/NECO_a_00409
.. [5] M. D. Golub, D. Sussillo, "FixedPointFinder: a Tensorflow toolbox for identifying and
   characterizing fixed points in recurrent neural networks", JOSS 3(31):1003, 2018.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.validation import generator, positive_int, real
from hiddenstate.experiments.encoding import one_hot
from hiddenstate.experiments.sentences import (
    ELMAN_CATEGORIES,
    ELMAN_NOUN_GROUPS,
    ELMAN_TEMPLATES,
    ELMAN_VOCAB,
    SentenceCorpus,
    elman_sentences,
)

__all__ = [
    "ELMAN_CATEGORIES",
    "ELMAN_NOUN_GROUPS",
    "ELMAN_TEMPLATES",
    "ELMAN_VOCAB",
    "LETTERS",
    "LETTER_FEATURES",
    "LETTER_FEATURE_NAMES",
    "SentenceCorpus",
    "adding_problem",
    "copy_baseline",
    "copy_memory",
    "elman_letters",
    "elman_sentences",
    "flipflop",
    "one_hot",
    "temporal_xor",
]


# ----------------------------------------------------------------------------------------------
# Elman (1990): temporal XOR
# ----------------------------------------------------------------------------------------------


def temporal_xor(n_triples: int, *, rng: np.random.Generator) -> np.ndarray:
    """Draw Elman's temporal XOR stream: random ``(a, b, a XOR b)`` triples, concatenated.

    Elman (1990) [1]_ trained on 1,000 triples (3,000 bits) and a network predicting the
    next bit: only every third bit is predictable.

    Parameters
    ----------
    n_triples : int
        Number of triples (the stream has ``3 * n_triples`` bits).
    rng : numpy.random.Generator
        Source of every random draw (same seed, same data).

    Returns
    -------
    ndarray of shape (3 * n_triples,), int64, values in {0, 1}
        The bits. The *phase* of position ``t`` is ``t % 3``; at phase 2, ``bits[t] ==
        bits[t-2] ^ bits[t-1]``. For next-bit prediction (input ``bits[t]``, target
        ``bits[t+1]``) the target is predictable exactly when ``t % 3 == 1``.

    Raises
    ------
    TypeError
        If ``n_triples`` is not an integer, or ``rng`` is not a ``numpy.random.Generator``.
    ValueError
        If ``n_triples`` is not positive.

    Examples
    --------
    >>> bits = temporal_xor(4, rng=np.random.default_rng(0))
    >>> bool(np.all(bits[2::3] == bits[0::3] ^ bits[1::3]))
    True
    """
    n_triples = positive_int("n_triples", n_triples)
    rng = generator(rng, required=True)
    ab = rng.integers(0, 2, size=(n_triples, 2))  # (n, 2)
    triples = np.concatenate([ab, (ab[:, :1] ^ ab[:, 1:])], axis=1)  # (n, 3)
    return triples.reshape(-1).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# Elman (1990): letter sequences b -> ba, d -> dii, g -> guuu
# ----------------------------------------------------------------------------------------------

LETTERS: str = "bdgaiu"
"""The six letters of Elman's Table 1, in the row order of :data:`LETTER_FEATURES`."""

LETTER_FEATURE_NAMES: tuple[str, ...] = (
    "Consonant", "Vowel", "Interrupted", "High", "Back", "Voiced",
)
"""Names of the six feature bits (columns of :data:`LETTER_FEATURES`)."""

LETTER_FEATURES: np.ndarray = np.array(
    [
        # Cons Vowel Interr High Back Voiced
        [1, 0, 1, 0, 0, 1],  # b
        [1, 0, 1, 1, 0, 1],  # d
        [1, 0, 1, 0, 1, 1],  # g
        [0, 1, 0, 0, 1, 1],  # a
        [0, 1, 0, 1, 0, 1],  # i
        [0, 1, 0, 1, 1, 1],  # u
    ],
    dtype=np.float64,
)
"""Elman (1990) Table 1: 6-bit feature vector of each letter, shape (6, 6), float64."""
LETTER_FEATURES.setflags(write=False)

_LETTER_EXPANSION = {0: (0, 3), 1: (1, 4, 4), 2: (2, 5, 5, 5)}  # b->ba, d->dii, g->guuu


def elman_letters(n_consonants: int, *, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw Elman's letter stream: random consonants from {b, d, g} expanded to ba, dii, guuu.

    Elman (1990) [1]_, section "Structure in letter sequences": 1,000 random consonants,
    each replaced by its syllable (``dbg`` becomes ``diibaguuu``), giving about 3,000
    letters; each letter is coded by its 6 features (Table 1).

    Parameters
    ----------
    n_consonants : int
        Number of consonants (syllables) in the stream.
    rng : numpy.random.Generator
        Source of every random draw (same seed, same data).

    Returns
    -------
    letters : ndarray of shape (M,), int64
        Index of each letter in :data:`LETTERS` (``b d g a i u`` = 0..5);
        ``M = 2*n_b + 3*n_d + 4*n_g``.
    features : ndarray of shape (M, 6), float64
        ``LETTER_FEATURES[letters]``: the network's inputs (and, shifted by one, targets).

    Raises
    ------
    TypeError
        If ``n_consonants`` is not an integer, or ``rng`` is not a ``numpy.random.Generator``.
    ValueError
        If ``n_consonants`` is not positive.
    """
    n_consonants = positive_int("n_consonants", n_consonants)
    rng = generator(rng, required=True)
    consonants = rng.integers(0, 3, size=n_consonants)
    letters = np.fromiter(
        (c for k in consonants for c in _LETTER_EXPANSION[int(k)]), dtype=np.int64
    )
    return letters, LETTER_FEATURES[letters]




# ----------------------------------------------------------------------------------------------
# Long-range memory benchmarks
# ----------------------------------------------------------------------------------------------


def adding_problem(
    n: int, seq_len: int, *, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The adding problem in the form of Arjovsky, Shah & Bengio (2016) [2]_.

    Each sequence has two channels: values ``x_t ~ U[0, 1]`` and a marker that is 1 at
    exactly two steps, one drawn uniformly from the first half ``[0, T//2)`` and one from
    the second half ``[T//2, T)``, 0 elsewhere. The target, read after the last step, is the
    sum of the two marked values. Predicting the constant 1 gives the baseline mean squared
    error ``Var(U + U) = 1/6``. (Hochreiter & Schmidhuber 1997 [3]_, Experiment 4, used
    values in [-1, 1] and variable lengths; this is the modern variant.)

    Parameters
    ----------
    n : int
        Number of sequences N.
    seq_len : int
        Sequence length T (at least 2).
    rng : numpy.random.Generator
        Source of every random draw (same seed, same data).

    Returns
    -------
    x : ndarray of shape (T, N, 2), float64
        ``x[..., 0]`` the values, ``x[..., 1]`` the markers.
    y : ndarray of shape (N,), float64
        Sum of the two marked values, in [0, 2].

    Raises
    ------
    TypeError
        If ``n`` or ``seq_len`` is not an integer, or ``rng`` is not a ``numpy.random.Generator``.
    ValueError
        If ``n`` or ``seq_len`` is not positive, or ``seq_len < 2``.
    """
    n = positive_int("n", n)
    seq_len = positive_int("seq_len", seq_len)
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2 (one marker per half); got {seq_len}.")
    rng = generator(rng, required=True)
    half = seq_len // 2
    values = rng.uniform(0.0, 1.0, size=(seq_len, n))  # (T, N)
    first = rng.integers(0, half, size=n)
    second = rng.integers(half, seq_len, size=n)
    markers = np.zeros((seq_len, n))
    cols = np.arange(n)
    markers[first, cols] = 1.0
    markers[second, cols] = 1.0
    x = np.stack([values, markers], axis=-1)  # (T, N, 2)
    y = values[first, cols] + values[second, cols]  # (N,)
    return x, y


def copy_baseline(delay: int, *, n_symbols: int = 8, n_copy: int = 10) -> float:
    """Cross-entropy of the memoryless strategy on :func:`copy_memory`, in nats per step.

    Predict "blank" (certain) for the first ``delay + n_copy`` steps and uniform over the
    ``n_symbols`` message symbols for the last ``n_copy``:
    ``n_copy * ln(n_symbols) / (delay + 2 * n_copy)`` (Arjovsky et al. 2016 [2]_;
    ``10 ln 8 / (T + 20)``, e.g. 0.173 at T = 100).

    Parameters
    ----------
    delay : int
        The T of :func:`copy_memory`.
    n_symbols, n_copy : int
        Message alphabet size and message length.

    Returns
    -------
    float
        Nats per step.

    Raises
    ------
    TypeError
        If a size is not an integer.
    ValueError
        If a size is not positive.
    """
    delay = positive_int("delay", delay)
    n_symbols = positive_int("n_symbols", n_symbols)
    n_copy = positive_int("n_copy", n_copy)
    return n_copy * math.log(n_symbols) / (delay + 2 * n_copy)


def copy_memory(
    n: int,
    delay: int,
    *,
    rng: np.random.Generator,
    n_symbols: int = 8,
    n_copy: int = 10,
) -> tuple[np.ndarray, np.ndarray]:
    """The copying-memory task of Arjovsky, Shah & Bengio (2016) [2]_.

    Alphabet of ``n_symbols + 2`` tokens: message symbols ``0 .. n_symbols-1``, blank
    ``n_symbols`` and delimiter ``n_symbols + 1`` (a0..a7, a8, a9 in the paper). Input:
    ``n_copy`` message symbols drawn uniformly with replacement, ``delay - 1`` blanks, the
    delimiter, ``n_copy`` blanks (length ``delay + 2*n_copy``). Target: ``delay + n_copy``
    blanks, then the message in order. The loss is the mean cross-entropy over all steps;
    the memoryless baseline is :func:`copy_baseline`.

    Parameters
    ----------
    n : int
        Number of sequences N.
    delay : int
        T, the number of steps between the end of the message and the end of the delimiter.
    rng : numpy.random.Generator
        Source of every random draw (same seed, same data).
    n_symbols : int, default 8
        Size of the message alphabet.
    n_copy : int, default 10
        Length of the message.

    Returns
    -------
    x : ndarray of shape (delay + 2*n_copy, N), int64
        Input token ids in ``[0, n_symbols + 2)`` (one-hot them with :func:`one_hot`).
    y : ndarray of shape (delay + 2*n_copy, N), int64
        Target token ids in ``[0, n_symbols]``.

    Raises
    ------
    TypeError
        If a size is not an integer, or ``rng`` is not a ``numpy.random.Generator``.
    ValueError
        If a size is not positive.
    """
    n = positive_int("n", n)
    delay = positive_int("delay", delay)
    n_symbols = positive_int("n_symbols", n_symbols)
    n_copy = positive_int("n_copy", n_copy)
    rng = generator(rng, required=True)
    blank, delim = n_symbols, n_symbols + 1
    length = delay + 2 * n_copy
    message = rng.integers(0, n_symbols, size=(n_copy, n))  # (n_copy, N)
    x = np.full((length, n), blank, dtype=np.int64)
    x[:n_copy] = message
    x[n_copy + delay - 1] = delim
    y = np.full((length, n), blank, dtype=np.int64)
    y[delay + n_copy:] = message
    return x, y


# ----------------------------------------------------------------------------------------------
# Sussillo & Barak (2013): 3-bit flip-flop
# ----------------------------------------------------------------------------------------------


def flipflop(
    n_trials: int,
    seq_len: int = 64,
    *,
    rng: np.random.Generator,
    n_bits: int = 3,
    p: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """The n-bit flip-flop task of Sussillo & Barak (2013) [4]_, in Golub's form [5]_.

    Each of ``n_bits`` input channels carries a pulse (+1 or -1, equally likely) at each
    step with probability ``p``, and a pulse at step 0 on every channel. Output channel
    ``i`` must equal the sign of the most recent pulse on input ``i`` and hold it between
    pulses. Golub & Sussillo's FixedPointFinder example uses 3 bits, 64 steps, ``p = 0.5``.

    Parameters
    ----------
    n_trials : int
        Number of trials N.
    seq_len : int, default 64
        Steps per trial T.
    rng : numpy.random.Generator
        Source of every random draw (same seed, same data).
    n_bits : int, default 3
        Number of input and output channels (the memory is ``n_bits`` bits).
    p : float, default 0.5
        Per-step, per-channel pulse probability, in [0, 1].

    Returns
    -------
    inputs : ndarray of shape (T, N, n_bits), float64, values in {-1, 0, 1}
        The pulses.
    targets : ndarray of shape (T, N, n_bits), float64, values in {-1, 1}
        ``targets[t, n, i]`` is the sign of the last nonzero ``inputs[s, n, i]``, ``s <= t``.

    Raises
    ------
    TypeError
        If a size is not an integer, ``p`` is not a number, or ``rng`` is not a
        ``numpy.random.Generator``.
    ValueError
        If a size is not positive, or ``p`` is NaN or outside [0, 1].
    """
    n_trials = positive_int("n_trials", n_trials)
    seq_len = positive_int("seq_len", seq_len)
    n_bits = positive_int("n_bits", n_bits)
    p = real("p", p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1]; got {p}. It is a per-step pulse probability.")
    rng = generator(rng, required=True)
    shape = (seq_len, n_trials, n_bits)
    pulses = rng.random(shape) < p
    pulses[0] = True
    signs = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    inputs = np.where(pulses, signs, 0.0)  # (T, N, n_bits)
    # Index of the last pulse at or before t, then read its sign.
    t_idx = np.where(pulses, np.arange(seq_len)[:, None, None], 0)
    last = np.maximum.accumulate(t_idx, axis=0)  # (T, N, n_bits)
    targets = np.take_along_axis(inputs, last, axis=0)
    return inputs, targets
