"""Vocabulary, text loading, the train/validation split and the truncated-BPTT batcher."""
import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiddenstate.train.corpus import StreamBatcher, Vocabulary, load_text, train_val_split

SHAKESPEARE_SHA256 = "e300c8120febe2a414753ed22efe9722dd136c8c83eaae50e644024556eba478"


@pytest.fixture(scope="module")
def shakespeare():
    return load_text()


# ---------------------------------------------------------------- load_text


def test_embedded_corpus_is_the_documented_file(shakespeare):
    assert len(shakespeare) == 987_291
    assert hashlib.sha256(shakespeare.encode("utf-8")).hexdigest() == SHAKESPEARE_SHA256


def test_load_text_reads_utf8_exactly(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("caf\u00e9\r\nna\u00efve\n".encode("utf-8"))
    assert load_text(path) == "caf\u00e9\r\nna\u00efve\n"  # no newline translation
    assert load_text(str(path)) == load_text(path)


def test_load_text_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"path must name an existing.*nope\.txt"):
        load_text(tmp_path / "nope.txt")


def test_load_text_directory(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"which is a directory"):
        load_text(tmp_path)


def test_load_text_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"non-empty text file; got '.*empty\.txt'"):
        load_text(tmp_path / "empty.txt")


def test_load_text_not_utf8(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9".encode("latin-1"))
    with pytest.raises(ValueError, match=r"UTF-8.*latin1\.txt.*0xe9 at offset 3"):
        load_text(tmp_path / "latin1.txt")


def test_load_text_rejects_other_types():
    with pytest.raises(TypeError, match=r"path must be a str, an os.PathLike or None; got int"):
        load_text(3)


# ---------------------------------------------------------------- Vocabulary


def test_vocabulary_is_sorted_unique_chars(shakespeare):
    vocab = Vocabulary(shakespeare)
    assert vocab.size == len(vocab) == 63
    assert vocab.chars == "".join(sorted(set(shakespeare)))
    assert vocab.chars[0] == "\n"


def test_encode_decode_round_trip(shakespeare):
    vocab = Vocabulary(shakespeare)
    ids = vocab.encode(shakespeare)
    assert ids.dtype == np.int64 and ids.shape == (len(shakespeare),)
    assert ids.min() == 0 and ids.max() == vocab.size - 1
    assert vocab.decode(ids) == shakespeare
    # Reference: a plain dict lookup.
    stoi = {c: i for i, c in enumerate(vocab.chars)}
    assert ids[:2000].tolist() == [stoi[c] for c in shakespeare[:2000]]


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=50))
def test_round_trip_any_unicode(text):
    vocab = Vocabulary(text)
    assert vocab.decode(vocab.encode(text)) == text
    assert vocab.encode(vocab.chars).tolist() == list(range(vocab.size))


def test_encode_empty_and_decode_empty():
    vocab = Vocabulary("ab")
    assert vocab.encode("").shape == (0,)
    assert vocab.decode(np.zeros(0, dtype=np.int64)) == ""


def test_encode_unknown_characters_are_named():
    vocab = Vocabulary("abc")
    with pytest.raises(ValueError, match=r"2 unknown character\(s\): 'Z', '\u00e9'\. Build"):
        vocab.encode("abZc\u00e9Z")
    with pytest.raises(ValueError, match=r"1 unknown character\(s\): '\\u200b'"):
        vocab.encode("a\u200bb")  # invisible characters are shown escaped
    with pytest.raises(ValueError, match=r"unknown character\(s\): '\\x00'"):
        Vocabulary("b").encode("\x00")  # below the smallest code point
    with pytest.raises(TypeError, match=r"text must be a str; got bytes"):
        vocab.encode(b"abc")


def test_decode_errors():
    vocab = Vocabulary("abc")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V=3\); got \[3, -1\]"):
        vocab.decode([0, 3, -1])
    with pytest.raises(TypeError, match=r"integer token ids; got dtype float64"):
        vocab.decode(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"ids must be 1-D"):
        vocab.decode(np.zeros((2, 2), dtype=np.int64))


def test_vocabulary_constructor_errors():
    with pytest.raises(ValueError, match=r"text must contain at least one character"):
        Vocabulary("")
    with pytest.raises(TypeError, match=r"text must be a str; got list"):
        Vocabulary(["a", "b"])


def test_vocabulary_json_round_trip(shakespeare):
    vocab = Vocabulary(shakespeare)
    data = vocab.to_json()
    text = json.dumps(data)
    assert Vocabulary.from_json(json.loads(text)) == vocab
    assert Vocabulary.from_json(text) == vocab
    assert repr(vocab).startswith("Vocabulary(size=63")


def test_vocabulary_from_json_errors():
    with pytest.raises(ValueError, match=r"sorted distinct characters; got 'ba'"):
        Vocabulary.from_json({"chars": "ba"})
    with pytest.raises(ValueError, match=r"sorted distinct characters; got 'aab'"):
        Vocabulary.from_json({"chars": "aab"})
    with pytest.raises(ValueError, match=r"non-empty string under 'chars'; got None"):
        Vocabulary.from_json({})
    with pytest.raises(ValueError, match=r"JSON text from Vocabulary.to_json"):
        Vocabulary.from_json("{not json")
    with pytest.raises(TypeError, match=r"dict from Vocabulary.to_json; got list"):
        Vocabulary.from_json(["a"])


# ---------------------------------------------------------------- train_val_split


def test_split_takes_the_last_tenth():
    ids = np.arange(1000)
    train, val = train_val_split(ids)
    assert train.dtype == val.dtype == np.int64
    np.testing.assert_array_equal(train, np.arange(900))
    np.testing.assert_array_equal(val, np.arange(900, 1000))


@pytest.mark.parametrize(("n", "fraction", "n_val"), [(100, 0.29, 29), (7, 0.5, 4), (10, 0.0, 0)])
def test_split_rounds_the_validation_size(n, fraction, n_val):
    train, val = train_val_split(np.arange(n), fraction)
    assert (train.size, val.size) == (n - n_val, n_val)
    np.testing.assert_array_equal(np.concatenate([train, val]), np.arange(n))


def test_split_errors():
    with pytest.raises(ValueError, match=r"val_fraction must be a number in \[0, 1\); got 1.0"):
        train_val_split(np.arange(10), 1.0)
    with pytest.raises(TypeError, match=r"val_fraction must be a number; got str"):
        train_val_split(np.arange(10), "0.1")
    with pytest.raises(ValueError, match=r"at least one validation token; got 0"):
        train_val_split(np.arange(4), 0.1)
    with pytest.raises(ValueError, match=r"at least one training token; got 1 token"):
        train_val_split(np.arange(1), 0.9)
    with pytest.raises(TypeError, match=r"integer token ids; got dtype <U1"):
        train_val_split(np.array(list("abc")))


# ---------------------------------------------------------------- StreamBatcher


def test_batches_are_time_major_rows_of_the_stream():
    ids = np.arange(103)  # N=4 rows of R=25 tokens; 3 tokens dropped
    batcher = StreamBatcher(ids, 4, 6)
    assert batcher.batches_per_epoch == (25 - 1) // 6 == 4
    rows = ids[:100].reshape(4, 25)
    for k in range(batcher.batches_per_epoch):
        assert batcher.at_epoch_start == (k == 0)
        inputs, targets = batcher.next_batch()
        assert inputs.shape == targets.shape == (6, 4)
        assert inputs.dtype == targets.dtype == np.int64
        np.testing.assert_array_equal(inputs, rows[:, 6 * k : 6 * k + 6].T)
        np.testing.assert_array_equal(targets, rows[:, 6 * k + 1 : 6 * k + 7].T)
    assert (batcher.epoch, batcher.batch_index, batcher.at_epoch_start) == (1, 0, True)


def test_consecutive_batches_continue_each_row():
    ids = np.random.default_rng(1).integers(0, 50, size=5000)
    batcher = StreamBatcher(ids, 8, 16)
    _, previous_targets = batcher.next_batch()
    for _ in range(batcher.batches_per_epoch - 1):
        inputs, targets = batcher.next_batch()
        # The last target of a batch is the first input of the next one, row by row.
        np.testing.assert_array_equal(inputs[0], previous_targets[-1])
        np.testing.assert_array_equal(targets[:-1], inputs[1:])
        previous_targets = targets


def test_wraps_to_the_first_batch_of_the_next_epoch():
    batcher = StreamBatcher(np.arange(200), 3, 5)
    first = [batcher.next_batch() for _ in range(batcher.batches_per_epoch)]
    second = [batcher.next_batch() for _ in range(batcher.batches_per_epoch)]
    assert batcher.epoch == 2
    for (a_in, a_tg), (b_in, b_tg) in zip(first, second):
        np.testing.assert_array_equal(a_in, b_in)
        np.testing.assert_array_equal(a_tg, b_tg)


def test_iter_epoch_leaves_the_position_alone():
    batcher = StreamBatcher(np.arange(200), 3, 5)
    batcher.next_batch()
    batches = list(batcher.iter_epoch())
    assert len(batches) == batcher.batches_per_epoch
    assert (batcher.epoch, batcher.batch_index) == (0, 1)
    np.testing.assert_array_equal(batches[1][0], batcher.next_batch()[0])


def test_batches_are_copies():
    ids = np.arange(100)
    batcher = StreamBatcher(ids, 2, 4)
    inputs, _ = batcher.batch(0)
    inputs[:] = -1
    ids[:] = -1
    assert batcher.batch(0)[0].min() >= 0


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    t=st.integers(1, 9),
    extra=st.integers(0, 60),
)
def test_one_epoch_reads_each_row_contiguously(n, t, extra):
    ids = np.arange(n * (t + 1) + extra)
    batcher = StreamBatcher(ids, n, t)
    batches = list(batcher.iter_epoch())
    inputs = np.concatenate([b[0] for b in batches])  # (K*T, N)
    targets = np.concatenate([b[1] for b in batches])
    row_len = ids.size // n
    for row in range(n):
        start = row * row_len
        np.testing.assert_array_equal(inputs[:, row], ids[start : start + inputs.shape[0]])
        np.testing.assert_array_equal(targets[:, row], ids[start + 1 : start + 1 + inputs.shape[0]])


def test_resume_from_state_dict_gives_the_same_batches():
    ids = np.random.default_rng(2).integers(0, 65, size=3000)
    reference = StreamBatcher(ids, 4, 10)
    expected = [reference.next_batch() for _ in range(3 * reference.batches_per_epoch)]

    run = StreamBatcher(ids, 4, 10)
    for _ in range(reference.batches_per_epoch + 5):
        run.next_batch()
    state = json.loads(json.dumps(run.state_dict()))  # it must survive JSON
    resumed = StreamBatcher(ids, 4, 10)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == run.state_dict()
    for inputs, targets in expected[reference.batches_per_epoch + 5 :]:
        got_inputs, got_targets = resumed.next_batch()
        np.testing.assert_array_equal(got_inputs, inputs)
        np.testing.assert_array_equal(got_targets, targets)


def test_load_state_dict_rejects_another_layout():
    batcher = StreamBatcher(np.arange(500), 4, 10)
    state = batcher.state_dict()
    with pytest.raises(ValueError, match=r"state\['seq_len'\] must match this batcher \(10\); got 12"):
        batcher.load_state_dict({**state, "seq_len": 12})
    with pytest.raises(ValueError, match=r"state\['num_tokens'\] must match this batcher \(501\); got 500"):
        StreamBatcher(np.arange(501), 4, 10).load_state_dict(state)
    with pytest.raises(ValueError, match=r"state\['batch_index'\] must be an int in \[0, 12\); got 12"):
        batcher.load_state_dict({**state, "batch_index": 12})
    with pytest.raises(ValueError, match=r"state\['epoch'\] must be a non-negative integer; got -1"):
        batcher.load_state_dict({**state, "epoch": -1})
    with pytest.raises(ValueError, match=r"missing \['epoch'\]"):
        batcher.load_state_dict({k: v for k, v in state.items() if k != "epoch"})
    with pytest.raises(TypeError, match=r"state must be a dict"):
        batcher.load_state_dict([])
    assert batcher.state_dict() == state  # nothing changed


def test_batcher_errors():
    with pytest.raises(ValueError, match=r"at least batch_size\*\(seq_len\+1\)=12 tokens .* got 11"):
        StreamBatcher(np.arange(11), 3, 3)
    with pytest.raises(ValueError, match=r"seq_len must be a positive integer; got 0"):
        StreamBatcher(np.arange(100), 3, 0)
    with pytest.raises(TypeError, match=r"batch_size must be a positive integer; got float"):
        StreamBatcher(np.arange(100), 3.0, 4)
    with pytest.raises(ValueError, match=r"k must be in \[0, 2\); got 2"):
        StreamBatcher(np.arange(12), 1, 5).batch(2)
    # Exactly one batch: N * (T + 1) tokens.
    batcher = StreamBatcher(np.arange(12), 3, 3)
    assert batcher.batches_per_epoch == 1
