"""Generation: top-k and nucleus (top-p) sampling draw from the intended distribution; the stream
carries the hidden state exactly as one forward pass over the whole text does."""
import numpy as np
import pytest
from scipy import stats

from hiddenstate.train.corpus import Vocabulary
from hiddenstate.train.generate import Stream, draw, next_distribution
from hiddenstate.train.model import CharRNN

V = 7
LOGITS = np.array([0.3, 2.0, -1.0, 1.2, 1.2, -0.2, 0.9])  # ids 3 and 4 tie


def truncated(logits, temperature=1.0, top_k=None, top_p=None):
    """The reference: sorted by (-p, id) in plain Python, kept, renormalised."""
    z = [v / temperature for v in logits]
    m = max(z)
    e = [np.exp(v - m) for v in z]
    p = [v / sum(e) for v in e]
    ranked = sorted(range(len(p)), key=lambda i: (-p[i], i))
    if top_k is not None:
        ranked = ranked[:top_k]
    total = sum(p[i] for i in ranked)
    if top_p is not None:
        kept, mass = [], 0.0
        for i in ranked:
            kept.append(i)
            mass += p[i] / total
            if mass >= top_p - 1e-12:
                break
        ranked = kept
    out = np.zeros(len(p))
    for i in ranked:
        out[i] = p[i]
    return out / out.sum()


def constant_model(logits, cell="gru"):
    """A model whose next-character distribution is softmax(logits) after any input and state."""
    model = CharRNN(len(logits), 4, cell=cell, rng=np.random.default_rng(0))
    model.params["decoder.weight"][...] = 0.0
    model.params["decoder.bias"][...] = logits
    return model


@pytest.mark.parametrize("options", [
    dict(top_k=1), dict(top_k=2), dict(top_k=4), dict(top_k=7), dict(top_k=50),
    dict(top_p=0.3), dict(top_p=0.6), dict(top_p=0.9), dict(top_p=1.0),
    dict(top_k=3, top_p=0.5), dict(temperature=0.5, top_p=0.8), dict(temperature=2.0, top_k=3),
])
def test_next_distribution_equals_the_independent_truncation(options):
    expected = truncated(LOGITS, **options)
    got = next_distribution(LOGITS, **options)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15)
    assert got.sum() == pytest.approx(1.0, abs=1e-15)


def test_ties_at_the_cut_keep_the_lower_id_and_top_k_keeps_exactly_k():
    p = next_distribution(LOGITS, top_k=3)  # id 1 (2.0), then 3 and 4 (1.2 each)
    assert set(np.flatnonzero(p)) == {1, 3, 4}
    assert set(np.flatnonzero(next_distribution(LOGITS, top_k=2))) == {1, 3}  # the tie: the lower id
    assert set(np.flatnonzero(next_distribution(LOGITS, temperature=0, top_k=5))) == {1}


@pytest.mark.parametrize("options", [dict(top_k=3), dict(top_p=0.75), dict(top_k=4, top_p=0.7, temperature=1.5)])
def test_samples_follow_the_truncated_distribution(options):
    """Chi-square over many draws through CharRNN.sample (every step has the same distribution)."""
    expected = truncated(LOGITS, **options)
    kept = expected > 0
    assert 1 < kept.sum() < V  # the truncation does something and there is something to test
    ids = constant_model(LOGITS).sample([0], 6000, rng=np.random.default_rng(11), **options)
    counts = np.bincount(ids, minlength=V)
    assert counts[~kept].sum() == 0  # never a character outside the kept set
    result = stats.chisquare(counts[kept], ids.size * expected[kept])
    assert result.pvalue > 1e-3, (counts, ids.size * expected)
    # and the draws are not simply the untruncated softmax: that would be rejected
    full = truncated(LOGITS, temperature=options.get("temperature", 1.0))
    assert stats.chisquare(counts, ids.size * full).pvalue < 1e-6


def test_draw_uses_one_uniform_and_never_returns_a_zero_weight():
    p = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    assert draw(p, np.random.default_rng(0)) in (1, 3)

    class Edge:  # a uniform of 1 - 2**-53 times the total rounds up to the total
        def random(self):
            return np.nextafter(1.0, 0.0)

    assert draw(p, Edge()) == 3
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    draw(p, rng)
    again = np.random.default_rng(3)
    again.random()
    assert rng.bit_generator.state == again.bit_generator.state != before


@pytest.mark.parametrize("options", [dict(top_k=3), dict(top_p=0.8), dict(top_k=5, top_p=0.9, temperature=0.7)])
def test_same_seed_same_text_and_options_change_it(options):
    model = CharRNN(V, 8, cell="lstm", rng=np.random.default_rng(2))
    a = model.sample([1, 2], 80, rng=np.random.default_rng(5), **options)
    b = model.sample([1, 2], 80, rng=np.random.default_rng(5), **options)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, model.sample([1, 2], 80, rng=np.random.default_rng(5)))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(top_k=0), ValueError, "top_k must be a positive integer; got 0"),
    (dict(top_k=2.5), TypeError, "top_k must be"),
    (dict(top_k=True), TypeError, "top_k must be"),
    (dict(top_p=0.0), ValueError, r"top_p must be a number in \(0, 1\]; got 0.0"),
    (dict(top_p=1.5), ValueError, r"top_p must be a number in \(0, 1\]; got 1.5"),
    (dict(top_p=float("nan")), ValueError, "top_p must be"),
    (dict(top_p="0.9"), TypeError, "top_p must be a number"),
])
def test_bad_options_are_refused_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        constant_model(LOGITS).sample([0], 3, **kwargs)
    with pytest.raises(error, match=match):
        next_distribution(LOGITS, **kwargs)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn", "mingru"])
def test_stream_fed_one_character_at_a_time_equals_one_forward(cell):
    model = CharRNN(V, 6, 2, cell=cell, embedding_dim=3 if cell == "rnn" else None, rng=np.random.default_rng(4))
    text = np.random.default_rng(1).integers(0, V, size=40)
    logits, h_n, _ = model.forward(text[:, None])  # (T, 1, V)
    e = np.exp(logits[:, 0] - logits[:, 0].max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    stream = Stream(model)
    for t, c in enumerate(text):
        probs, state = stream.feed(int(c))
        np.testing.assert_allclose(probs, expected[t], rtol=0, atol=1e-12)
    for got, want in zip(state if cell == "lstm" else (state,), h_n if cell == "lstm" else (h_n,)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_stream_from_a_carried_state_and_by_character():
    vocab = Vocabulary("abcdefg")
    model = CharRNN(vocab.size, 5, rng=np.random.default_rng(0))
    ids = vocab.encode("badcafe")
    _, h_mid, _ = model.forward(ids[:3, None])
    logits, h_end, _ = model.forward(ids[:, None])
    stream = Stream(model, h_mid, vocab=vocab)  # continue from the state after "bad"
    for ch in "cafe":
        probs, state = stream.feed(ch)
    np.testing.assert_allclose(stream.logits, logits[-1, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(state, h_end, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="char must lie in \\[0, V=7\\); got 7"):
        stream.feed(7)
    with pytest.raises(TypeError, match="char must be an integer id or a one-character str; got float"):
        stream.feed(1.0)
    with pytest.raises(ValueError, match="char must be a single character; got 'ab'"):
        stream.feed("ab")
    with pytest.raises(TypeError, match="no vocab"):
        Stream(model).feed("a")
    with pytest.raises(RuntimeError, match="feed or read a prime first"):
        Stream(model).generate(3)
    with pytest.raises(RuntimeError, match=r"nothing has been read yet, so there are no logits: feed a character first"):
        next_distribution(Stream(model).logits)
    fed = Stream(model)
    probs, _ = fed.feed(2)
    np.testing.assert_allclose(next_distribution(fed.logits), probs, rtol=0, atol=1e-12)  # then it works


def test_sample_is_a_stream_that_reads_the_prime_and_feeds_back_its_draws():
    model = CharRNN(V, 6, cell="gru", rng=np.random.default_rng(9))
    ids = model.sample([3, 1], 30, temperature=0.9, top_p=0.9, rng=np.random.default_rng(2))
    # replay: every drawn id had positive probability under the truncated distribution at its step
    stream = Stream(model)
    stream.read(np.array([3, 1]))
    rng = np.random.default_rng(2)
    for c in ids:
        p = next_distribution(stream.logits, temperature=0.9, top_p=0.9)
        assert p[c] > 0 and draw(p, rng) == c
        stream.feed(int(c))


# ---------------------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from hiddenstate.cli import main
    from hiddenstate.train.corpus import load_text

    data = tmp_path_factory.mktemp("data") / "small.txt"
    data.write_text(load_text()[:20_000], encoding="utf-8")
    out = tmp_path_factory.mktemp("runs") / "tiny"
    argv = ["train", "--data", str(data), "--steps", "10", "--out", str(out), "--hidden-size", "16",
            "--seq-len", "16", "--batch-size", "8", "--eval-every", "5", "--quiet"]
    assert main(argv) == 0
    return out


def test_cli_top_k_and_top_p(tiny_run, capsys):
    from hiddenstate.cli import main

    base = ["sample", str(tiny_run), "--prime", "KING:", "--length", "60"]
    assert main([*base, "--temperature", "0"]) == 0
    greedy = capsys.readouterr().out
    assert main([*base, "--top-k", "1", "--seed", "3"]) == 0  # one character kept: the greedy text
    assert capsys.readouterr().out == greedy
    assert main([*base, "--top-p", "0.7", "--top-k", "5", "--seed", "4"]) == 0
    first = capsys.readouterr().out
    assert main([*base, "--top-p", "0.7", "--top-k", "5", "--seed", "4"]) == 0
    assert capsys.readouterr().out == first != greedy and first.startswith("KING:")


@pytest.mark.parametrize("flag,value,needle", [
    ("--top-k", "0", "--top-k: must be a positive integer; got 0"),
    ("--top-k", "2.5", "--top-k: must be a positive integer; got str '2.5'"),
    ("--top-p", "0", "--top-p: must be a number in (0, 1]; got 0.0"),
    ("--top-p", "1.01", "--top-p: must be a number in (0, 1]; got 1.01"),
    ("--top-p", "most", "--top-p: must be a number; got str 'most'"),
])
def test_cli_bad_top_k_top_p_is_one_line_exit_2(tiny_run, capsys, flag, value, needle):
    from hiddenstate.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["sample", str(tiny_run), flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_stream_repr_counts_what_was_read_and_names_the_likeliest_next_characters():
    vocab = Vocabulary("abcdefg")
    model = CharRNN(vocab.size, 5, rng=np.random.default_rng(0))
    stream = Stream(model, vocab=vocab)
    assert repr(stream) == "Stream(GRU H=5, V=7, nothing read yet)"
    stream.read(vocab.encode("bad"))
    probs, _ = stream.feed("c")
    top = np.argsort(-probs, kind="stable")[:3]
    expected = ", ".join(f"{vocab.chars[i]!r} {probs[i]:.2f}" for i in top)
    assert repr(stream) == f"Stream(GRU H=5, V=7, 4 read, next: {expected})"
