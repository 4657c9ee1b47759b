"""What ``inspect_model(DIR, ...)`` and ``hiddenstate inspect DIR`` are asked, checked before the model is built.

The layers and the token ids are held to the directory's ``config.json`` (``num_hidden_layers``,
``vocab_size``) before a weight's header is read or a model is built (a real model takes tens of
seconds to build), each refusal one line naming the argument as the user gave it (``x`` or
``ids`` in Python, ``--ids FILE`` or ``--text FILE`` on the command line), the rule and the value.
The command line's summary and "not measured" lines speak of its flags; a directory that is no
run and no model directory is refused naming both. Tiny random models of the registered families,
saved by transformers into ``tmp_path``; never a download.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import directory  # noqa: E402
from hiddenstate.interop.families.directory import load_model_dir  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TINY = [f for f in families.registered() if f.tiny_config is not None]


def tiny(family, seed=0):
    torch.manual_seed(seed)
    return getattr(transformers, family.classes[0])(family.tiny_config()).eval()


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory):
    model = tiny(families.find_family("mamba"))
    path = tmp_path_factory.mktemp("m") / "mamba"
    model.save_pretrained(path)
    return model, path


@pytest.fixture
def nothing_built(monkeypatch):
    """Reading a weight's header, or building any model (on the meta device or for real), fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a weight header was read or a model was built before the request was checked")
    monkeypatch.setattr(directory, "weight_headers", refuse)
    monkeypatch.setattr(transformers.PreTrainedModel, "_from_config", classmethod(refuse))


def error_line(capsys):
    captured = capsys.readouterr()
    err = [line for line in captured.err.strip().splitlines() if "falling back" not in line]
    assert len(err) == 1 and err[0].startswith("hiddenstate: error: "), err
    assert "Traceback" not in captured.err
    return err[0]


def word_tokenizer(path, words):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=words, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(os.fspath(path / "tokenizer.json"))


def char_tokenizer(path, chars):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab={c: i for i, c in enumerate(chars)},
                                                           unk_token=chars[0]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    tok.save(os.fspath(path / "tokenizer.json"))


@pytest.mark.parametrize("family", TINY, ids=lambda f: f.name)
def test_config_json_counts_the_layers_of_the_layer_map_and_the_vocabulary_of_the_embedding(family, tmp_path):
    # the early checks read num_hidden_layers and vocab_size: they must be what the built model has
    from hiddenstate.interop.families.config_file import _count, model_config

    model = tiny(family)
    model.save_pretrained(tmp_path)
    config = model_config(tmp_path)  # transformers' config class, not the JSON: NemotronH's has no num_hidden_layers
    assert type(config) is type(model.config)
    text = config.get_text_config()  # a multimodal model's counts are its text backbone's (Qwen3.5's text_config)
    assert _count(config, "num_hidden_layers") == text.num_hidden_layers == len(family.layer_map(model))
    assert _count(config, "vocab_size") == text.vocab_size == model.get_input_embeddings().weight.shape[0]
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    assert cfg.get("num_hidden_layers", text.num_hidden_layers) == text.num_hidden_layers


@pytest.mark.parametrize("layers", [[5], 2, [0, 7], [-1]])
def test_layers_past_num_hidden_layers_are_refused_before_a_header_is_read(mamba_dir, nothing_built, layers):
    _, path = mamba_dir
    bad = ", ".join(str(i) for i in np.atleast_1d(layers) if not 0 <= i < 2)
    rule = re.escape(f"layers must be layer indices with 0 <= i < num_hidden_layers=2 (from '{path / 'config.json'}')"
                     f"; got {bad}.")
    with pytest.raises(ValueError, match=f"^{rule}$"):
        hs.inspect_model(path, np.zeros((1, 4), dtype=np.int64), layers=layers)
    with pytest.raises(ValueError, match=f"^{rule}$"):
        load_model_dir(path, layers=layers)


def test_ids_out_of_the_vocabulary_are_refused_before_a_header_is_read_naming_x_ids_and_the_first_bad_one(
        mamba_dir, nothing_built):
    _, path = mamba_dir
    ids = np.arange(12).reshape(2, 6)
    ids[1, 2], ids[1, 4] = 50, 77  # vocab_size is 50: two ids out of range, the first at [1, 2]
    where = re.escape(f"(from '{path / 'config.json'}')")
    with pytest.raises(ValueError, match=rf"^x must hold token ids with 0 <= id < vocab_size=50 {where}; got 50 at "
                                         r"\[1, 2\] \(2 of 12 ids out of range\)\.$"):
        hs.inspect_model(path, ids)
    with pytest.raises(ValueError, match=rf"^ids must hold token ids with 0 <= id < vocab_size=50 {where}; got -3 at "
                                         r"\[4\]\.$"):
        load_model_dir(path, np.array([0, 1, 2, 3, -3]))


def test_the_tokens_of_a_text_are_held_to_the_vocabulary_naming_the_tokenizer(mamba_dir, tmp_path, nothing_built):
    import shutil

    _, path = mamba_dir
    d = shutil.copytree(path, tmp_path / "tok")
    word_tokenizer(d, {"[UNK]": 0, "the": 1, "cat": 61})  # a tokenizer of another model: ids past 50
    with pytest.raises(ValueError, match=re.escape(f"x, tokenised by '{d / 'tokenizer.json'}', must hold token ids "
                                                   "with 0 <= id < vocab_size=50") + r" .*; got 61 at \[0, 1\]\.$"):
        hs.inspect_model(d, "the cat")


def test_a_directory_without_config_json_says_what_it_lacks(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(FileNotFoundError, match=re.escape(f"got '{tmp_path}', which has no config.json.")):
        hs.inspect_model(tmp_path, np.zeros(4, dtype=np.int64))
    (tmp_path / "meta.json").write_text("{}")  # a training run's checkpoint directory
    with pytest.raises(FileNotFoundError, match=re.escape("it is a training run directory (meta.json): pass "
                                                          f"hiddenstate.train.load('{tmp_path}').model.")):
        hs.inspect_model(tmp_path, np.zeros(4, dtype=np.int64))


# -- the command line --------------------------------------------------------------------------

def test_the_cli_refuses_a_directory_that_is_neither_a_run_nor_a_model_directory(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("not a model")
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(d), "--out", os.fspath(out)]) == 2
    line = error_line(capsys)
    assert line == ("hiddenstate: error: CKPT must be a training run directory (meta.json in it or in its checkpoint/, "
                    "as `hiddenstate train --out` writes it) or a transformers model directory (config.json and "
                    f"model.safetensors, as save_pretrained writes them); got '{d}', which holds neither.")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize("value", ["abc", "0,x", "", "1,,2", "-1", "٣"])
def test_the_cli_refuses_layers_that_are_not_indices_in_its_own_one_line(mamba_dir, tmp_path, capsys, value):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", np.zeros(4, dtype=np.int64))
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy"), "--layers", value,
                 "--out", os.fspath(out)]) == 2
    assert error_line(capsys) == (f"hiddenstate: error: --layers must be comma-separated layer indices, e.g. 0,3; "
                                  f"got {value!r}.")
    assert not out.exists()


def test_the_cli_refuses_layers_and_ids_from_config_json_before_a_header_is_read(mamba_dir, tmp_path, capsys,
                                                                                 nothing_built):
    _, path = mamba_dir
    ids_file = tmp_path / "ids.npy"
    np.save(ids_file, np.array([3, 9, 50, 2]))
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(ids_file), "--layers", "1,4",
                 "--out", os.fspath(out)]) == 2
    assert error_line(capsys) == ("hiddenstate: error: --layers must be layer indices with 0 <= i < "
                                  f"num_hidden_layers=2 (from '{path / 'config.json'}'); got 4.")
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(ids_file), "--out", os.fspath(out)]) == 2
    assert error_line(capsys) == (f"hiddenstate: error: --ids '{ids_file}' must hold token ids with 0 <= id < "
                                  f"vocab_size=50 (from '{path / 'config.json'}'); got 50 at [0, 2].")
    assert not out.exists()


def test_the_cli_summary_counts_the_recorded_of_the_recurrent_layers_and_gives_flags_not_python(
        mamba_dir, tmp_path, capsys):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 50, 16))
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy"), "--layers", "1",
                 "--out", os.fspath(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(f"transformers MambaForCausalLM from '{path}': 1 of 2 recurrent layers, state ")
    missing = [line for line in lines if line.startswith("not measured: unit features and the explorer: ")]
    assert len(missing) == 1 and "text=" not in missing[0] and "inspect_model" not in missing[0]
    assert "give --text FILE instead of --ids, tokenised by the model directory's tokenizer.json (this one has none)" \
        in missing[0]
    report = out.read_text(encoding="utf-8")  # the report says the same
    assert "give --text FILE instead of --ids" in report and "pass text=" not in report


def test_the_summary_of_a_hybrid_counts_its_recurrent_layers_among_all():
    family = families.find_family("bamba")
    model = tiny(family)
    roles = [e.role for e in family.layer_map(model)]
    recurrent = [i for i, r in enumerate(roles) if r == "recurrent"]
    assert len(recurrent) < len(roles)  # a hybrid: attention layers too
    an = hs.inspect_model(model, np.random.default_rng(0).integers(0, model.config.vocab_size, (1, 12)),
                          layers=recurrent[:1])
    assert an.summary().splitlines()[0].startswith(
        f"transformers BambaForCausalLM: 1 of {len(recurrent)} recurrent layers ({len(roles)} layers in all), ")


def test_the_cli_text_of_a_character_tokenizer_gives_the_unit_features(mamba_dir, tmp_path, capsys):
    import shutil

    model, path = mamba_dir
    d = shutil.copytree(path, tmp_path / "chars")
    chars = "? abcdefghijklmnopqrstuvwxyz.,"
    char_tokenizer(d, chars)
    text = "the cat sat on the mat. the dog sat on the log, and the cat ran."
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(d), "--text", os.fspath(tmp_path / "t.txt"), "--out", os.fspath(out)]) == 0
    printed = capsys.readouterr().out
    assert "unit features and the explorer" not in printed
    stepped = text  # the tokenizer's pieces: one character per step
    ref = families.recompute_layers(model, np.array([[chars.index(c) for c in stepped]]))
    an = hs.inspect_model(model, np.array([[chars.index(c) for c in stepped]]), text=stepped, max_lag=None)  # the CLI's
    assert an.text == stepped and an.explore is not None
    np.testing.assert_array_equal(an.layers[0].record.ssm, ref.records[0].ssm)
    assert [line for line in printed.splitlines() if line.startswith("layer ")] == \
        [line for line in an.summary().splitlines() if line.startswith("layer ")]


def test_the_cli_text_of_a_word_tokenizer_reads_its_tokens_as_the_units_of_text(mamba_dir, tmp_path, capsys):
    import json
    import re
    import shutil

    _, path = mamba_dir
    d = shutil.copytree(path, tmp_path / "words")
    word_tokenizer(d, {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3})
    (tmp_path / "t.txt").write_text("the cat sat", encoding="utf-8")
    assert main(["inspect", os.fspath(d), "--text", os.fspath(tmp_path / "t.txt"), "--out",
                 os.fspath(tmp_path / "r.html")]) == 0
    # once refused ("the tokens ... are not single characters"): the tokens are the explorer's units of text
    assert "not measured: unit features and the explorer" not in capsys.readouterr().out
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="ex-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert data["tokens"] is True and data["text"] == ["the", "cat", "sat"]
