"""Data generators for the classic hidden-state experiments.

One function per task, each drawing every random number from an explicit
``numpy.random.Generator`` (same seed, same data). Sequence tasks are returned
time-major, ``(T, N, ...)``, the layout the layers use inside.

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
from dataclasses import dataclass

import numpy as np

from hiddenstate.validation import generator, positive_int

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


def one_hot(ids: np.ndarray, size: int, *, dtype=np.float64) -> np.ndarray:
    """One-hot encode integer ids.

    Parameters
    ----------
    ids : ndarray of int, any shape S
        Values in ``[0, size)``.
    size : int
        Length of each one-hot vector.
    dtype : dtype, default float64

    Returns
    -------
    ndarray of shape S + (size,), dtype ``dtype``

    Raises
    ------
    ValueError
        If an id lies outside ``[0, size)``.
    """
    ids = np.asarray(ids)
    size = positive_int("size", size)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"ids must be an integer array; got dtype {ids.dtype}.")
    if ids.size and (ids.min() < 0 or ids.max() >= size):
        raise ValueError(
            f"ids must lie in [0, size={size}); got values in [{ids.min()}, {ids.max()}]."
        )
    out = np.zeros(ids.shape + (size,), dtype=dtype)
    np.put_along_axis(out, ids[..., None], 1.0, axis=-1)
    return out


# ----------------------------------------------------------------------------------------------
# Elman (1990): temporal XOR
# ----------------------------------------------------------------------------------------------


def temporal_xor(n_triples: int, *, rng: np.random.Generator) -> np.ndarray:
    """Elman's temporal XOR stream: random ``(a, b, a XOR b)`` triples, concatenated.

    Elman (1990) [1]_ trained on 1,000 triples (3,000 bits) and a network predicting the
    next bit: only every third bit is predictable.

    Parameters
    ----------
    n_triples : int
        Number of triples (the stream has ``3 * n_triples`` bits).
    rng : numpy.random.Generator

    Returns
    -------
    bits : ndarray of shape (3 * n_triples,), int64, values in {0, 1}
        The *phase* of position ``t`` is ``t % 3``; at phase 2, ``bits[t] ==
        bits[t-2] ^ bits[t-1]``. For next-bit prediction (input ``bits[t]``, target
        ``bits[t+1]``) the target is predictable exactly when ``t % 3 == 1``.

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
    """Elman's letter stream: random consonants from {b, d, g} expanded to ba, dii, guuu.

    Elman (1990) [1]_, section "Structure in letter sequences": 1,000 random consonants,
    each replaced by its syllable (``dbg`` becomes ``diibaguuu``), giving about 3,000
    letters; each letter is coded by its 6 features (Table 1).

    Parameters
    ----------
    n_consonants : int
        Number of consonants (syllables) in the stream.
    rng : numpy.random.Generator

    Returns
    -------
    letters : ndarray of shape (M,), int64
        Index of each letter in :data:`LETTERS` (``b d g a i u`` = 0..5);
        ``M = 2*n_b + 3*n_d + 4*n_g``.
    features : ndarray of shape (M, 6), float64
        ``LETTER_FEATURES[letters]``: the network's inputs (and, shifted by one, targets).
    """
    n_consonants = positive_int("n_consonants", n_consonants)
    rng = generator(rng, required=True)
    consonants = rng.integers(0, 3, size=n_consonants)
    letters = np.fromiter(
        (c for k in consonants for c in _LETTER_EXPANSION[int(k)]), dtype=np.int64
    )
    return letters, LETTER_FEATURES[letters]


# ----------------------------------------------------------------------------------------------
# Elman (1990): simple sentences
# ----------------------------------------------------------------------------------------------

ELMAN_CATEGORIES: dict[str, tuple[str, ...]] = {
    "NOUN-HUM": ("man", "woman", "boy", "girl"),
    "NOUN-ANIM": ("cat", "mouse", "dog"),
    "NOUN-INANIM": ("book", "rock", "car"),
    "NOUN-AGRESS": ("dragon", "monster", "lion"),
    "NOUN-FRAG": ("glass", "plate"),
    "NOUN-FOOD": ("cookie", "bread", "sandwich"),
    "VERB-INTRAN": ("think", "sleep", "exist"),
    "VERB-TRAN": ("see", "chase", "like"),
    "VERB-AGPAT": ("move", "break"),
    "VERB-PERCEPT": ("smell", "see"),
    "VERB-DESTROY": ("break", "smash"),
    "VERB-EAT": ("eat",),
}
"""Elman (1990) Table 3 with the members read off Fig. 7 (12 categories, 29 words).

Disjoint version; ``see`` and ``break`` belong to two verb categories each, as in the
paper. See :func:`elman_sentences` for the inclusive reading.
"""

ELMAN_TEMPLATES: tuple[tuple[str, ...], ...] = (
    ("NOUN-HUM", "VERB-EAT", "NOUN-FOOD"),
    ("NOUN-HUM", "VERB-PERCEPT", "NOUN-INANIM"),
    ("NOUN-HUM", "VERB-DESTROY", "NOUN-FRAG"),
    ("NOUN-HUM", "VERB-INTRAN"),
    ("NOUN-HUM", "VERB-TRAN", "NOUN-HUM"),
    ("NOUN-HUM", "VERB-AGPAT", "NOUN-INANIM"),
    ("NOUN-HUM", "VERB-AGPAT"),
    ("NOUN-ANIM", "VERB-EAT", "NOUN-FOOD"),
    ("NOUN-ANIM", "VERB-TRAN", "NOUN-ANIM"),
    ("NOUN-ANIM", "VERB-AGPAT", "NOUN-INANIM"),
    ("NOUN-ANIM", "VERB-AGPAT"),
    ("NOUN-INANIM", "VERB-AGPAT"),
    ("NOUN-AGRESS", "VERB-DESTROY", "NOUN-FRAG"),
    ("NOUN-AGRESS", "VERB-EAT", "NOUN-HUM"),
    ("NOUN-AGRESS", "VERB-EAT", "NOUN-ANIM"),
    ("NOUN-AGRESS", "VERB-EAT", "NOUN-FOOD"),
)
"""Elman (1990) Table 4: the 16 sentence templates (the text says 15)."""

ELMAN_VOCAB: tuple[str, ...] = (
    "man", "woman", "boy", "girl",
    "cat", "mouse", "dog",
    "book", "rock", "car",
    "dragon", "monster", "lion",
    "glass", "plate",
    "cookie", "bread", "sandwich",
    "think", "sleep", "exist",
    "see", "chase", "like",
    "move", "break",
    "smell",
    "smash",
    "eat",
    "zog",
)
"""The 29 words (18 nouns first, then 11 verbs) plus the novel word ``zog`` (id 29).

Ids are positions in this tuple; one-hot inputs have 31 bits (id 30 is the second spare
bit, never used).
"""

ELMAN_NOUN_GROUPS: tuple[tuple[str, ...], ...] = (
    ("man", "woman", "boy", "girl"),
    ("cat", "mouse", "dog"),
    ("dragon", "monster", "lion"),
    ("book", "rock", "car"),
    ("cookie", "bread", "sandwich"),
    ("glass", "plate"),
)
"""The six noun groups of Elman's Fig. 7 (humans, small animals, aggressors,
inanimates, food, breakables); the first three are the animates."""

_N_NOUNS = 18
_N_WORDS = 29
_N_INPUTS = 31
_ZOG = 29

_INCLUSIVE_EXTRA = {
    "NOUN-ANIM": ("NOUN-HUM", "NOUN-AGRESS"),
    "NOUN-INANIM": ("NOUN-FRAG", "NOUN-FOOD"),
    "VERB-TRAN": ("VERB-PERCEPT", "VERB-DESTROY", "VERB-EAT"),
}


@dataclass(frozen=True)
class SentenceCorpus:
    """A stream of Elman sentences and what is known about each token.

    Attributes
    ----------
    words : ndarray of shape (M,), int64
        Word id of each token (index into :data:`ELMAN_VOCAB`); sentences are concatenated
        with no boundary marker.
    categories : ndarray of shape (M,), int64
        Category of each token, as the index into ``category_names`` of the template slot
        that produced it (``see`` is VERB-TRAN or VERB-PERCEPT depending on the template).
    sentence : ndarray of shape (M,), int64
        Index of the sentence each token belongs to.
    position : ndarray of shape (M,), int64
        Position of the token within its sentence (0, 1 or 2).
    templates : ndarray of shape (S,), int64
        Template (row of :data:`ELMAN_TEMPLATES`) of each sentence.
    likelihood : ndarray of shape (M, 31), float64
        Row ``t`` is the empirical distribution of the token at ``t + 1`` over all tokens of
        the corpus that end the same within-sentence prefix (the prefix is the sentence up
        to and including token ``t``). This is Elman's "likelihood vector" target for the
        prediction made at ``t``. The stream wraps around (token ``M-1`` is followed by token
        0). Each row sums to 1.
    category_names : tuple of str
        Names of the categories, in the order of :data:`ELMAN_CATEGORIES`.
    vocab : tuple of str
        :data:`ELMAN_VOCAB`.
    """

    words: np.ndarray
    categories: np.ndarray
    sentence: np.ndarray
    position: np.ndarray
    templates: np.ndarray
    likelihood: np.ndarray
    category_names: tuple[str, ...]
    vocab: tuple[str, ...]

    @property
    def n_inputs(self) -> int:
        """Size of the one-hot code: 31 (29 words, ``zog`` and one unused spare bit)."""
        return _N_INPUTS

    def one_hot(self) -> np.ndarray:
        """The token stream as one-hot rows, shape (M, 31), float64."""
        return one_hot(self.words, _N_INPUTS)


def elman_sentences(
    n_sentences: int,
    *,
    rng: np.random.Generator,
    inclusive: bool = False,
    zog: bool = False,
) -> SentenceCorpus:
    """Elman's simple-sentence corpus: random 2- and 3-word sentences from 16 templates.

    Elman (1990) [1]_, section "Discovering the notion 'word'"/"lexical classes": 10,000
    sentences, each made by choosing a template (Table 4) uniformly and then each word
    uniformly from its category (Table 3), concatenated with no sentence boundaries
    (about 27,500 words). The network predicts the next word; its hidden states,
    averaged per word, cluster into nouns/verbs, animates/inanimates, ... (Fig. 7).

    Parameters
    ----------
    n_sentences : int
        Number of sentences.
    rng : numpy.random.Generator
    inclusive : bool, default False
        The paper says some categories "may be included in others". With ``inclusive=True``
        a slot of NOUN-ANIM may also draw from NOUN-HUM and NOUN-AGRESS, NOUN-INANIM from
        NOUN-FRAG and NOUN-FOOD, and VERB-TRAN from VERB-PERCEPT, VERB-DESTROY and VERB-EAT
        (our reading). Default: the disjoint table :data:`ELMAN_CATEGORIES`.
    zog : bool, default False
        Replace every ``man`` by the novel word ``zog`` (id 29, the first spare input bit),
        as in Elman's Fig. 8 test of a frozen network.

    Returns
    -------
    SentenceCorpus
        Token ids, categories, positions and likelihood vectors (see its attributes).
    """
    n_sentences = positive_int("n_sentences", n_sentences)
    rng = generator(rng, required=True)
    names = tuple(ELMAN_CATEGORIES)
    word_id = {w: i for i, w in enumerate(ELMAN_VOCAB)}
    members = {c: [word_id[w] for w in ws] for c, ws in ELMAN_CATEGORIES.items()}
    if inclusive:
        for c, extra in _INCLUSIVE_EXTRA.items():
            members[c] = sorted(set(members[c]).union(*(members[e] for e in extra)))
    templates = rng.integers(0, len(ELMAN_TEMPLATES), size=n_sentences)
    words, cats, sent, pos = [], [], [], []
    for s, k in enumerate(templates):
        for p, cat in enumerate(ELMAN_TEMPLATES[int(k)]):
            choices = members[cat]
            words.append(choices[int(rng.integers(0, len(choices)))])
            cats.append(names.index(cat))
            sent.append(s)
            pos.append(p)
    words = np.asarray(words, dtype=np.int64)
    if zog:
        words[words == word_id["man"]] = _ZOG
    position = np.asarray(pos, dtype=np.int64)
    likelihood = _likelihood_vectors(words, position)
    return SentenceCorpus(
        words=words,
        categories=np.asarray(cats, dtype=np.int64),
        sentence=np.asarray(sent, dtype=np.int64),
        position=position,
        templates=templates.astype(np.int64),
        likelihood=likelihood,
        category_names=names,
        vocab=ELMAN_VOCAB,
    )


def _likelihood_vectors(words: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Empirical next-word distribution given the within-sentence prefix, shape (M, 31)."""
    m = words.shape[0]
    nxt = np.roll(words, -1)  # wraps: the last token is followed by the first
    # Encode each prefix (w0, ..., wt) as an integer key, base 32, length <= 3.
    key = np.empty(m, dtype=np.int64)
    running = 0
    for t in range(m):
        running = (words[t] + 1) if position[t] == 0 else running * 32 + (words[t] + 1)
        key[t] = running
    uniq, inverse = np.unique(key, return_inverse=True)
    counts = np.zeros((uniq.shape[0], _N_INPUTS), dtype=np.float64)
    np.add.at(counts, (inverse, nxt), 1.0)
    counts /= counts.sum(axis=1, keepdims=True)
    return counts[inverse]


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

    Returns
    -------
    x : ndarray of shape (T, N, 2), float64
        ``x[..., 0]`` the values, ``x[..., 1]`` the markers.
    y : ndarray of shape (N,), float64
        Sum of the two marked values, in [0, 2].
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
    n_symbols : int, default 8
    n_copy : int, default 10

    Returns
    -------
    x : ndarray of shape (delay + 2*n_copy, N), int64
        Input token ids in ``[0, n_symbols + 2)`` (one-hot them with :func:`one_hot`).
    y : ndarray of shape (delay + 2*n_copy, N), int64
        Target token ids in ``[0, n_symbols]``.
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
    n_bits : int, default 3
    p : float, default 0.5
        Per-step, per-channel pulse probability, in [0, 1].

    Returns
    -------
    inputs : ndarray of shape (T, N, n_bits), float64, values in {-1, 0, 1}
    targets : ndarray of shape (T, N, n_bits), float64, values in {-1, 1}
        ``targets[t, n, i]`` is the sign of the last nonzero ``inputs[s, n, i]``, ``s <= t``.
    """
    n_trials = positive_int("n_trials", n_trials)
    seq_len = positive_int("seq_len", seq_len)
    n_bits = positive_int("n_bits", n_bits)
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"p must lie in [0, 1]; got {p}.")
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
