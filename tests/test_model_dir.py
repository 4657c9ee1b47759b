"""A ``save_pretrained`` directory of every registered family read offline and checked: ``inspect_model(DIR)`` and
``hiddenstate inspect DIR``.

Each family's tiny random model (``Family.tiny_config``, float32, seeded, no download) is saved
by transformers itself into ``tmp_path`` (one file, or shards with their index) and read back
by our loader: the weights must equal the model's bit for bit (transformers 5 renames and
splits some families' weights on saving, NemotronH's among them, so this checks that the
inversion is exact), and ``inspect_model`` of the directory must equal ``inspect_model`` of the
model. Damaged or hostile directories are refused in one line before a weight is read.
"""

from __future__ import annotations

import json
import os
import socket
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import directory  # noqa: E402
from hiddenstate.interop.families.directory import load_model_dir, open_model_dir  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TINY = [f for f in families.registered() if f.tiny_config is not None]


def tiny(family, seed=0):
    torch.manual_seed(seed)
    return getattr(transformers, family.classes[0])(family.tiny_config()).eval()


def saved(model, path, **kw):
    model.save_pretrained(path, **kw)
    return path


def ids_for(vocab, N=2, T=12, seed=1):
    return np.random.default_rng(seed).integers(0, vocab, (N, T))


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory):
    model = tiny(families.find_family("mamba"))
    return model, saved(model, tmp_path_factory.mktemp("m") / "mamba")


@pytest.fixture(scope="module")
def bamba_shards(tmp_path_factory):
    model = tiny(families.find_family("bamba"))
    return model, saved(model, tmp_path_factory.mktemp("b") / "bamba", max_shard_size="4KB")


def error_line(capsys):
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "falling back" not in line]
    assert len(err) == 1 and err[0].startswith("hiddenstate: error: "), err
    return err[0]


def test_every_registered_family_has_a_tiny_config_and_it_is_checked():
    assert [f.name for f in TINY] == [f.name for f in families.registered()]
    assert len(TINY) >= 18  # the ten Mamba families of issue 25 and the eight of issue 26
    fam = families.find_family("bamba")
    with pytest.raises(TypeError, match="tiny_config must be callable or None; got int"):
        families.Family(name="x", classes=("X",), kind="mamba", layers=fam.layers, to_block=fam.to_block, tiny_config=3)


@pytest.mark.parametrize("family", TINY, ids=lambda f: f.name)
def test_a_sharded_directory_of_each_family_loads_bit_for_bit_and_inspects_as_the_model(family, tmp_path):
    model = tiny(family)
    path = saved(model, tmp_path / family.name, max_shard_size="4KB")
    assert (path / directory.INDEX_FILE).is_file() and len(list(path.glob("model-*.safetensors"))) > 1
    loaded = load_model_dir(path)
    assert type(loaded) is type(model) and not loaded.training
    theirs, ours = model.state_dict(), loaded.state_dict()
    assert theirs.keys() == ours.keys()
    for k, v in theirs.items():
        assert ours[k].dtype == v.dtype and torch.equal(ours[k], v), k
    ids = ids_for(model.config.get_text_config().vocab_size)  # a multimodal model's: its text backbone's
    with torch.no_grad():  # the family's scores: the logits (JEV's decision head on every position)
        assert torch.equal(family.logits(loaded, torch.from_numpy(ids)), family.logits(model, torch.from_numpy(ids)))
    a, b = hs.inspect_model(model, ids), hs.inspect_model(path, ids)
    assert [la.layer for la in a.layers] == [la.layer for la in b.layers] and a.layer_map == b.layer_map
    assert [la.recomputed for la in a.layers] == [la.recomputed for la in b.layers]
    for x, y in zip(a.layers, b.layers):  # every array of the record (Mamba's ssm, the delta rule's recurrent, ...)
        assert x.record._fields == y.record._fields
        for field in x.record._fields:
            np.testing.assert_array_equal(getattr(x.record, field), getattr(y.record, field), err_msg=field)
    assert b.meta["model"] == f"transformers {family.classes[0]} from '{path}'"


def test_one_file_with_a_tied_head_round_trips_and_writes_the_report(mamba_dir, tmp_path):
    model, path = mamba_dir
    assert (path / "model.safetensors").is_file() and model.config.tie_word_embeddings
    loaded = load_model_dir(path)
    assert loaded.lm_head.weight is loaded.backbone.embeddings.weight  # the tie kept, the head read from it
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    ids = ids_for(50, N=1, T=10)[0]  # (T,) is one sequence
    an = hs.inspect_model(os.fspath(path), ids, out=tmp_path / "r.html", layers=[1])
    assert [la.layer for la in an.layers] == [1]
    report = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert f"transformers MambaForCausalLM from &#x27;{path}&#x27;: 1 of its 2 recurrent layer(s)" in report
    assert f"layer 1 recomputed: {an.layers[0].recomputed:.2g} of the model" in report
    ref = families.recompute_layers(model, ids[None], layers=[1])
    np.testing.assert_array_equal(an.layers[0].record.ssm, ref.records[0].ssm)


def test_no_network_is_touched(mamba_dir, monkeypatch):
    _, path = mamba_dir

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    an = hs.inspect_model(path, ids_for(50))
    assert len(an.layers) == 2
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"


def _config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def copy_dir(src, dst):
    import shutil

    return shutil.copytree(src, dst)


def test_an_unknown_model_type_custom_code_or_a_foreign_class_is_refused_in_one_line(mamba_dir, tmp_path):
    _, path = mamba_dir
    d = copy_dir(path, tmp_path / "d")
    _config(d, model_type="llama")
    with pytest.raises(ValueError, match=r"model_type of a registered recurrent family \(mamba, mamba2, bamba.*\); "
                                         r"got 'llama'"):
        load_model_dir(d)
    _config(d, model_type="mamba", auto_map={"AutoModel": "modeling_evil.Evil"})
    with pytest.raises(ValueError, match=r"asks for custom code \(auto_map .*trust_remote_code stays off"):
        hs.inspect_model(d, ids_for(50))
    cfg = json.loads((d / "config.json").read_text())
    del cfg["auto_map"]
    cfg["architectures"] = ["MambaForSequenceClassification"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"must name one of the mamba family's classes \(MambaForCausalLM, "
                                         r"MambaModel\) in its architectures"):
        load_model_dir(d)
    (d / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="config.json must be a JSON object; got .*a JSON list"):
        load_model_dir(d)


def _rewrite_header(path, edit):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def test_damaged_shards_are_refused_before_a_weight_is_read(bamba_shards, tmp_path):
    _, path = bamba_shards
    shards = sorted(path.glob("model-*.safetensors"))
    d = copy_dir(path, tmp_path / "lying")  # a header that claims more bytes than its tensor has
    first = d / shards[0].name

    def lie(h):
        k = next(k for k in h if k != "__metadata__")
        h[k]["data_offsets"][1] += 4
    _rewrite_header(first, lie)
    with pytest.raises(ValueError, match=r"must take \d+ bytes .*The file is damaged"):
        load_model_dir(d)
    d = copy_dir(path, tmp_path / "missing")
    (d / shards[-1].name).unlink()
    with pytest.raises(FileNotFoundError, match=rf"names the shard '{shards[-1].name}', which is missing"):
        load_model_dir(d)
    d = copy_dir(path, tmp_path / "fifo")  # a link to a FIFO is never opened (it would block)
    (d / shards[1].name).unlink()
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", d / shards[1].name)
    with pytest.raises(ValueError, match="must name a regular file; got .*a FIFO"):
        load_model_dir(d)
    (d / shards[1].name).unlink()
    os.symlink(d / shards[1].name, d / shards[1].name)  # a loop
    with pytest.raises(ValueError, match="a loop of symbolic links"):
        load_model_dir(d)
    d = copy_dir(path, tmp_path / "escape")
    index = json.loads((d / directory.INDEX_FILE).read_text())
    key = next(iter(index["weight_map"]))
    index["weight_map"][key] = "../../etc/model.safetensors"
    (d / directory.INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"must name its shards as .safetensors files in its own directory; got "
                                         r"'../../etc/model.safetensors'"):
        load_model_dir(d)
    d2 = copy_dir(path, tmp_path / "moved")  # a tensor that its index places in another shard
    right = json.loads((path / directory.INDEX_FILE).read_text())["weight_map"]
    key = next(k for k, v in right.items() if list(right.values()).count(v) > 1)  # its shard holds others too
    right[key] = shards[1].name if right[key] == shards[0].name else shards[0].name
    (d2 / directory.INDEX_FILE).write_text(json.dumps({"weight_map": right}))
    with pytest.raises(ValueError, match=rf"holds the tensor '{key}', which .* places in"):
        load_model_dir(d2)


def test_missing_unexpected_and_misshapen_weights_are_named(mamba_dir, tmp_path):
    from safetensors.torch import save_file

    model, path = mamba_dir
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    d = copy_dir(path, tmp_path / "d")
    cut = dict(state)
    del cut["backbone.layers.1.mixer.A_log"]
    save_file({**cut, "extra.weight": torch.zeros(2)}, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"must hold exactly the MambaForCausalLM's weights; missing: "
                                         r"backbone.layers.1.mixer.A_log; unexpected: extra.weight"):
        load_model_dir(d)
    bad = dict(state, **{"backbone.norm_f.weight": torch.zeros(3)})
    save_file(bad, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"\['backbone.norm_f.weight'\] must be a float32 tensor of shape \(8,\); got "
                                         r"F32 of shape \(3,\)"):
        load_model_dir(d)
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="must hold model.safetensors or model.safetensors.index.json"):
        load_model_dir(d)


def test_text_is_tokenised_only_by_the_directorys_tokenizer(mamba_dir, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    model, path = mamba_dir
    with pytest.raises(ValueError, match="has no tokenizer.json to tokenise the text with; pass token ids instead "
                                         r"\(--ids FILE.npy"):
        open_model_dir(path, "the cat")
    d = copy_dir(path, tmp_path / "tok")
    words = ["[UNK]", "the", "cat", "sat", "on", "mat"]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(os.fspath(d / "tokenizer.json"))
    _, ids, _ = open_model_dir(d, "the cat sat on the mat dog")
    np.testing.assert_array_equal(ids, [[1, 2, 3, 4, 1, 5, 0]])
    an = hs.inspect_model(d, "the cat sat on the mat")
    ref = families.recompute_layers(model, np.array([[1, 2, 3, 4, 1, 5]]))
    np.testing.assert_array_equal(an.layers[0].record.ssm, ref.records[0].ssm)


def test_the_records_estimate_is_checked_before_the_model_is_built(mamba_dir, monkeypatch):
    _, path = mamba_dir
    built = []
    monkeypatch.setattr(transformers.MambaForCausalLM, "_from_config",
                        classmethod(lambda cls, config, **kw: built.append(torch.get_default_device()) or
                                    transformers.PreTrainedModel._from_config.__func__(cls, config, **kw)))
    ids = ids_for(50, N=1, T=64)
    per = families.estimate_bytes(tiny(families.find_family("mamba")), 64, 1)
    with pytest.raises(ValueError, match=r"recording layers \[0, 1\] of the MambaForCausalLM in .* on T=64 tokens of "
                                         r"N=1 sequence\(s\) would take about .*: record fewer layers \(--layers 0 "
                                         r"on the command line, layers=\[0\] in Python\) or give fewer tokens"):
        hs.inspect_model(path, ids, max_bytes=sum(per.values()))
    assert len(built) == 1  # the meta shell only: the model itself was never built
    an = hs.inspect_model(path, ids, layers=[1], max_bytes=2 * per[1])
    assert [la.layer for la in an.layers] == [1]


def test_the_cli_inspects_a_directory_with_ids_and_layers(mamba_dir, tmp_path, capsys):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", ids_for(50, N=1, T=16)[0])
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy"), "--layers", "1",
                 "--out", os.fspath(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"report: {out}" and out.is_file()
    layer_lines = [line for line in lines if line.startswith("layer ")]
    assert len(layer_lines) == 1 and layer_lines[0].startswith("layer 1: ") and "recomputed: " in layer_lines[0]


@pytest.mark.parametrize("flags, message", [
    (["--layers", "0,x"], r"--layers must be comma-separated layer indices, e.g. 0,3; got '0,x'\."),
    (["--layers", "5"], r"--layers must be layer indices with 0 <= i < num_hidden_layers=2 \(from .*\); got 5\."),
    ([], r"--ids FILE.npy .* or --text FILE .* must give the model directory .* its input; got neither"),
    (["--text", "T"], "has no tokenizer.json to tokenise the text with; pass token ids instead"),
    (["--kind", "gru"], "--kind applies to a .safetensors state dict only; got the model directory"),
    (["--fixed-point-starts", "4"], "--fixed-point-starts applies to models of rnn, gru, lstm"),
    (["--ids", "BIG"], r"would take about .*: record fewer layers \(--layers 0 on the command line"),
    (["--ids", "FLOAT"], r"--ids must hold integer token ids of shape \(T,\) or \(N, T\), T, N >= 1; got dtype float64"),
])
def test_the_cli_refuses_in_one_line_with_exit_status_2(mamba_dir, tmp_path, capsys, flags, message):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", ids_for(50, N=1, T=8)[0])
    if "BIG" in flags:
        np.save(tmp_path / "big.npy", np.zeros(2_100_000, dtype=np.int64))  # 2.1M steps of 2 layers: over 4 GiB
    np.save(tmp_path / "float.npy", np.zeros(5))
    (tmp_path / "t.txt").write_text("the cat", encoding="utf-8")
    subst = {"BIG": tmp_path / "big.npy", "FLOAT": tmp_path / "float.npy", "T": tmp_path / "t.txt"}
    flags = [os.fspath(subst.get(f, f)) for f in flags]
    if "--ids" not in flags and "--text" not in flags and flags[:1] != []:
        flags += ["--ids", os.fspath(tmp_path / "ids.npy")]
    assert main(["inspect", os.fspath(path), *flags, "--out", os.fspath(tmp_path / "r.html")]) == 2
    import re

    assert re.search(message, error_line(capsys)), message
    assert not (tmp_path / "r.html").exists()


def test_ids_and_layers_apply_to_a_model_directory_only(tmp_path, capsys):
    np.save(tmp_path / "ids.npy", np.zeros(4, dtype=np.int64))
    (tmp_path / "x.safetensors").write_bytes(b"")
    assert main(["inspect", os.fspath(tmp_path / "x.safetensors"), "--layers", "0", "--out",
                 os.fspath(tmp_path / "r.html")]) == 2
    assert "--layers applies to a save_pretrained model directory (config.json and safetensors weights) only" in \
        error_line(capsys)
