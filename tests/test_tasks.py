"""Known properties of the task generators in hiddenstate.tasks."""
import math

import numpy as np
import pytest

from hiddenstate.experiments import encoding, sentences, tasks

# ---------------------------------------------------------------------------- common behaviour


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: tasks.temporal_xor(50, rng=rng),
        lambda rng: tasks.elman_letters(50, rng=rng),
        lambda rng: tasks.elman_sentences(50, rng=rng).likelihood,
        lambda rng: tasks.adding_problem(8, 20, rng=rng),
        lambda rng: tasks.copy_memory(8, 5, rng=rng),
        lambda rng: tasks.flipflop(8, 16, rng=rng),
    ],
)
def test_same_seed_same_data_and_seed_matters(make):
    a = make(np.random.default_rng(1))
    b = make(np.random.default_rng(1))
    c = make(np.random.default_rng(2))
    flat = lambda v: np.concatenate([np.ravel(u) for u in (v if isinstance(v, tuple) else (v,))])
    np.testing.assert_array_equal(flat(a), flat(b))
    assert not np.array_equal(flat(a), flat(c))


@pytest.mark.parametrize(
    "call",
    [
        lambda: tasks.temporal_xor(3, rng=0),
        lambda: tasks.adding_problem(2, 10, rng=np.random.RandomState(0)),
        lambda: tasks.flipflop(2, rng=None),
    ],
)
def test_rng_must_be_a_generator(call):
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        call()


def test_sizes_are_validated(rng):
    with pytest.raises(ValueError, match="n_triples must be a positive integer; got 0"):
        tasks.temporal_xor(0, rng=rng)
    with pytest.raises(TypeError, match="n must be a positive integer"):
        tasks.adding_problem(2.0, 10, rng=rng)
    with pytest.raises(ValueError, match="seq_len must be at least 2"):
        tasks.adding_problem(2, 1, rng=rng)
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\]; got 1.5"):
        tasks.flipflop(2, rng=rng, p=1.5)


def test_one_hot(rng):
    ids = np.array([[0, 3], [2, 1]])
    out = tasks.one_hot(ids, 4)
    assert out.shape == (2, 2, 4) and out.dtype == np.float64
    np.testing.assert_array_equal(out.argmax(-1), ids)
    np.testing.assert_array_equal(out.sum(-1), 1.0)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, size=4\); got values in \[0, 4\]"):
        tasks.one_hot(np.array([0, 4]), 4)
    with pytest.raises(TypeError, match="ids must be an integer array"):
        tasks.one_hot(np.array([0.0]), 4)


# ---------------------------------------------------------------------------- temporal XOR


def test_xor_third_bit_is_xor_of_previous_two(rng):
    bits = tasks.temporal_xor(1000, rng=rng)
    assert bits.shape == (3000,) and bits.dtype == np.int64
    assert set(np.unique(bits)) == {0, 1}
    np.testing.assert_array_equal(bits[2::3], bits[0::3] ^ bits[1::3])
    # The free bits are fair coins and independent of each other.
    assert abs(bits[0::3].mean() - 0.5) < 0.06
    assert abs((bits[0::3] == bits[1::3]).mean() - 0.5) < 0.06


def test_xor_other_phases_do_not_obey_the_rule(rng):
    bits = tasks.temporal_xor(1000, rng=rng)
    # bit at phase 0 is not the xor of the two bits before it (a fresh coin flip)
    agree = (bits[3::3] == (bits[1:-2:3] ^ bits[2:-1:3])).mean()
    assert 0.4 < agree < 0.6


# ---------------------------------------------------------------------------- letters


def test_letter_table_matches_elman_table_1():
    f = tasks.LETTER_FEATURES
    assert f.shape == (6, 6)
    assert tasks.LETTERS == "bdgaiu"
    # Consonant and Vowel bits are complementary; everything is voiced.
    np.testing.assert_array_equal(f[:, 0] + f[:, 1], 1.0)
    np.testing.assert_array_equal(f[:, 5], 1.0)
    # All six letters are distinct; d is the only High consonant.
    assert len({tuple(r) for r in f}) == 6
    np.testing.assert_array_equal(f[:3, 3], [0, 1, 0])
    with pytest.raises(ValueError):
        f[0, 0] = 0.0  # read-only


def test_letter_stream_is_ba_dii_guuu(rng):
    letters, feats = tasks.elman_letters(1000, rng=rng)
    text = "".join(tasks.LETTERS[i] for i in letters)
    assert text[0] in "bdg"
    syllables = text.replace("ba", "B ").replace("dii", "D ").replace("guuu", "G ").split()
    assert "".join(syllables) == "".join(s for s in syllables if s in "BDG")  # nothing left over
    assert len(syllables) == 1000
    np.testing.assert_array_equal(feats, tasks.LETTER_FEATURES[letters])
    assert 2900 < len(letters) < 3100  # about 3 letters per consonant


# ---------------------------------------------------------------------------- sentences


def test_lexicon_has_29_words_in_12_categories():
    assert len(tasks.ELMAN_CATEGORIES) == 12
    words = {w for ws in tasks.ELMAN_CATEGORIES.values() for w in ws}
    assert len(words) == 29
    assert set(tasks.ELMAN_VOCAB[:29]) == words and tasks.ELMAN_VOCAB[29] == "zog"
    assert len(tasks.ELMAN_TEMPLATES) == 16
    assert sum(len(t) == 3 for t in tasks.ELMAN_TEMPLATES) == 12
    nouns = {w for c, ws in tasks.ELMAN_CATEGORIES.items() if c.startswith("NOUN") for w in ws}
    assert set(tasks.ELMAN_VOCAB[:18]) == nouns
    assert {w for g in tasks.ELMAN_NOUN_GROUPS for w in g} == nouns


def test_sentences_obey_the_templates(rng):
    corpus = tasks.elman_sentences(2000, rng=rng)
    m = corpus.words.shape[0]
    for arr in (corpus.categories, corpus.sentence, corpus.position):
        assert arr.shape == (m,) and arr.dtype == np.int64
    # About 2.75 words per sentence (12 of the 16 templates have 3 words).
    assert abs(m / 2000 - 2.75) < 0.05
    for s in range(2000):
        idx = np.flatnonzero(corpus.sentence == s)
        template = tasks.ELMAN_TEMPLATES[corpus.templates[s]]
        assert len(idx) == len(template)
        np.testing.assert_array_equal(corpus.position[idx], np.arange(len(template)))
        for t, cat in zip(idx, template):
            assert corpus.category_names[corpus.categories[t]] == cat
            assert corpus.vocab[corpus.words[t]] in tasks.ELMAN_CATEGORIES[cat]
    assert set(np.unique(corpus.templates)) == set(range(16))
    assert corpus.one_hot().shape == (m, 31)


def test_full_corpus_size_matches_the_paper():
    corpus = tasks.elman_sentences(10_000, rng=np.random.default_rng(0))
    assert 27_300 < corpus.words.shape[0] < 27_700  # paper: 27,534 (also 27,354 / 27,454)
    assert len(np.unique(corpus.words)) == 29


def test_likelihood_vectors_are_distributions_over_possible_next_words(rng):
    corpus = tasks.elman_sentences(3000, rng=rng)
    lik = corpus.likelihood
    assert lik.shape == (corpus.words.shape[0], 31)
    np.testing.assert_allclose(lik.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (lik >= 0).all() and (lik[:, 29:] == 0).all()
    nxt = np.roll(corpus.words, -1)
    # The actual next word always has positive likelihood.
    assert (lik[np.arange(len(nxt)), nxt] > 0).all()
    # After a full 3-word sentence the next word starts a sentence: some noun.
    end3 = corpus.position == 2
    assert (lik[end3][:, 18:] == 0).all()
    # After "<NOUN-HUM> eat" only food follows (template 1).
    eat = tasks.ELMAN_VOCAB.index("eat")
    hum_eat = (corpus.words == eat) & (np.roll(corpus.words, 1) < 4) & (corpus.position == 1)
    food = [tasks.ELMAN_VOCAB.index(w) for w in tasks.ELMAN_CATEGORIES["NOUN-FOOD"]]
    np.testing.assert_allclose(lik[hum_eat][:, food].sum(axis=1), 1.0)
    assert (lik[hum_eat][:, food] > 0).all()
    # The same prefix always gets the same likelihood vector.
    first = corpus.position == 0
    for w in range(29):
        rows = lik[first & (corpus.words == w)]
        if len(rows):
            np.testing.assert_array_equal(rows, rows[:1].repeat(len(rows), axis=0))


def test_inclusive_categories_and_zog(rng):
    incl = tasks.elman_sentences(3000, rng=rng, inclusive=True)
    anim = tasks.ELMAN_CATEGORIES["NOUN-ANIM"]
    slots = incl.categories == incl.category_names.index("NOUN-ANIM")
    drawn = {incl.vocab[w] for w in incl.words[slots]}
    assert set(anim) < drawn and "man" in drawn and "lion" in drawn
    z = tasks.elman_sentences(500, rng=np.random.default_rng(3), zog=True)
    plain = tasks.elman_sentences(500, rng=np.random.default_rng(3))
    man = tasks.ELMAN_VOCAB.index("man")
    np.testing.assert_array_equal(z.words == 29, plain.words == man)
    assert not (z.words == man).any()


# ---------------------------------------------------------------------------- adding


def test_adding_has_one_marker_per_half_and_target_is_their_sum(rng):
    n, t = 500, 31
    x, y = tasks.adding_problem(n, t, rng=rng)
    assert x.shape == (t, n, 2) and y.shape == (n,)
    assert x.dtype == np.float64 and y.dtype == np.float64
    values, markers = x[..., 0], x[..., 1]
    assert ((values >= 0) & (values <= 1)).all()
    assert set(np.unique(markers)) == {0.0, 1.0}
    np.testing.assert_array_equal(markers[: t // 2].sum(axis=0), 1.0)
    np.testing.assert_array_equal(markers[t // 2:].sum(axis=0), 1.0)
    np.testing.assert_allclose(y, (values * markers).sum(axis=0), rtol=0, atol=1e-15)


def test_adding_constant_one_predictor_has_mse_one_sixth():
    _, y = tasks.adding_problem(200_000, 4, rng=np.random.default_rng(0))
    assert abs(np.mean((y - 1.0) ** 2) - 1 / 6) < 3e-3


# ---------------------------------------------------------------------------- copy


@pytest.mark.parametrize(
    "delay, expected",
    [(10, 0.693), (20, 0.520), (50, 0.297), (100, 0.173), (200, 0.0945), (500, 0.0400)],
)
def test_copy_baseline_values_from_the_paper(delay, expected):
    assert tasks.copy_baseline(delay) == pytest.approx(expected, abs=6e-4)
    assert tasks.copy_baseline(delay) == pytest.approx(10 * math.log(8) / (delay + 20))


def test_copy_layout(rng):
    delay, n = 7, 64
    x, y = tasks.copy_memory(n, delay, rng=rng)
    assert x.shape == y.shape == (delay + 20, n) and x.dtype == np.int64
    assert (x[:10] < 8).all()
    np.testing.assert_array_equal(x[10:10 + delay - 1], 8)
    np.testing.assert_array_equal(x[10 + delay - 1], 9)  # delimiter
    np.testing.assert_array_equal(x[10 + delay:], 8)
    np.testing.assert_array_equal(y[: delay + 10], 8)
    np.testing.assert_array_equal(y[delay + 10:], x[:10])  # the message, in order


def test_copy_baseline_is_the_memoryless_cross_entropy(rng):
    delay = 30
    _x, y = tasks.copy_memory(256, delay, rng=rng)
    # blank with certainty for the first T+10 steps, uniform over 8 symbols after
    probs = np.zeros(y.shape + (10,))
    probs[: delay + 10, :, 8] = 1.0
    probs[delay + 10:, :, :8] = 1 / 8
    ce = -np.log(np.take_along_axis(probs, y[..., None], axis=-1)).mean()
    assert ce == pytest.approx(tasks.copy_baseline(delay), rel=1e-12)


# ---------------------------------------------------------------------------- flip-flop


def test_flipflop_targets_hold_the_last_pulse(rng):
    inputs, targets = tasks.flipflop(32, 40, rng=rng)
    assert inputs.shape == targets.shape == (40, 32, 3)
    assert set(np.unique(inputs)) == {-1.0, 0.0, 1.0}
    assert set(np.unique(targets)) == {-1.0, 1.0}
    assert (inputs[0] != 0).all()  # a pulse on every channel at t = 0
    # Reference loop.
    state = np.zeros((32, 3))
    for t in range(40):
        state = np.where(inputs[t] != 0, inputs[t], state)
        np.testing.assert_array_equal(targets[t], state)
    assert abs((inputs[1:] != 0).mean() - 0.5) < 0.03


def test_flipflop_pulse_probability(rng):
    inputs, _ = tasks.flipflop(64, 50, rng=rng, p=0.1, n_bits=2)
    assert inputs.shape == (50, 64, 2)
    assert abs((inputs[1:] != 0).mean() - 0.1) < 0.02


# ---------------------------------------------------------------------------- layout and checks


def test_tasks_re_exports_the_sentence_corpus_and_one_hot():
    """tasks is the one place to import a task from; the objects are the same, not copies."""
    assert tasks.one_hot is encoding.one_hot
    for name in sentences.__all__:
        assert getattr(tasks, name) is getattr(sentences, name)
    assert set(sentences.__all__) | set(encoding.__all__) <= set(tasks.__all__)


def test_sentence_flags_and_pulse_probability_are_checked(rng):
    with pytest.raises(TypeError, match="zog must be a bool; got str 'yes'"):
        tasks.elman_sentences(5, rng=rng, zog="yes")
    with pytest.raises(TypeError, match="inclusive must be a bool; got int 1"):
        tasks.elman_sentences(5, rng=rng, inclusive=1)
    with pytest.raises(TypeError, match="p must be a number; got bool True"):
        tasks.flipflop(2, rng=rng, p=True)
    with pytest.raises(ValueError, match="p must be a finite number; got nan"):
        tasks.flipflop(2, rng=rng, p=float("nan"))
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\]; got -0.1"):
        tasks.flipflop(2, rng=rng, p=-0.1)


def test_flipflop_pulse_probability_bounds_are_allowed(rng):
    never, _ = tasks.flipflop(4, 6, rng=rng, p=0.0)
    always, _ = tasks.flipflop(4, 6, rng=rng, p=1)
    assert (never[1:] == 0).all() and (never[0] != 0).all()  # only the pulse at t = 0
    assert (always != 0).all()
