"""Elman's simple-sentence corpus: 29 words, 16 templates, no sentence boundaries.

The tables are Elman (1990) [1]_ Tables 3-4 with the category members read off Fig. 7;
:func:`elman_sentences` draws a corpus and its likelihood vectors (the empirical next-word
distribution, the paper's target for measuring the trained network). Also available from
:mod:`hiddenstate.experiments.tasks` with the other task generators.

References
----------
.. [1] J. L. Elman, "Finding structure in time", *Cognitive Science* 14(2):179-211, 1990.
   doi:10.1207/s15516709cog1402_1
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import boolean, generator, positive_int
from hiddenstate.experiments.encoding import one_hot

__all__ = [
    "ELMAN_CATEGORIES",
    "ELMAN_NOUN_GROUPS",
    "ELMAN_TEMPLATES",
    "ELMAN_VOCAB",
    "SentenceCorpus",
    "elman_sentences",
]

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
        """Size of the one-hot code: 31 (29 words, ``zog`` and one unused spare bit).

        Returns
        -------
        int
            31.
        """
        return _N_INPUTS

    def one_hot(self) -> np.ndarray:
        """Encode the token stream one-hot.

        Returns
        -------
        ndarray of shape (M, 31), float64
            One row per token.
        """
        return one_hot(self.words, _N_INPUTS)


def elman_sentences(
    n_sentences: int,
    *,
    rng: np.random.Generator,
    inclusive: bool = False,
    zog: bool = False,
) -> SentenceCorpus:
    """Draw Elman's simple-sentence corpus: random 2- and 3-word sentences from 16 templates.

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
        Source of every random draw (same seed, same corpus).
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

    Raises
    ------
    TypeError
        If ``n_sentences`` is not an integer, ``rng`` is not a ``numpy.random.Generator``, or
        ``inclusive`` / ``zog`` is not a bool.
    ValueError
        If ``n_sentences`` is not positive.
    """
    n_sentences = positive_int("n_sentences", n_sentences)
    rng = generator(rng, required=True)
    inclusive = boolean("inclusive", inclusive)
    zog = boolean("zog", zog)
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
