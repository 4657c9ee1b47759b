"""``inspect_model(DIR, ...)`` and ``hiddenstate inspect DIR`` read config.json, the layers and the ids once.

The path (the command line, the directory's loader, the family inspection) takes one checked
:class:`~hiddenstate.interop.families.config_file.ModelRequest` instead of reading and checking
the file again at each step (issue 31: it was parsed 7 times, the layers checked 3 times and the
ids 4 times). Counted here on a tiny Mamba saved by transformers into a temporary directory.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import config_file, directory  # noqa: E402
from hiddenstate.interop.families.config_file import ModelRequest, model_request  # noqa: E402
from hiddenstate.interop.families.directory import load_model_dir  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory):
    torch.manual_seed(0)
    family = families.find_family("mamba")
    model = getattr(transformers, family.classes[0])(family.tiny_config()).eval()
    path = tmp_path_factory.mktemp("m") / "mamba"
    model.save_pretrained(path)
    return path


@pytest.fixture
def counts(monkeypatch):
    """How often config.json is parsed (by anyone: every json.loads of an object with a model_type) and read,
    and how often the layers and the ids are checked against it."""
    seen = {"parsed": 0, "read": 0, "layers": 0, "ids": 0}
    loads, read_json = json.loads, config_file.read_json
    checked_layers, token_ids = config_file._checked_layers, config_file.token_ids

    def counting_loads(s, *args, **kwargs):
        obj = loads(s, *args, **kwargs)
        seen["parsed"] += isinstance(obj, dict) and "model_type" in obj
        return obj

    def counting_read(path, what):
        seen["read"] += what == "config.json"
        return read_json(path, what)

    def counting(key, f):
        def wrapped(*args, **kwargs):
            seen[key] += 1
            return f(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(json, "loads", counting_loads)
    monkeypatch.setattr(config_file, "read_json", counting_read)
    monkeypatch.setattr(directory, "read_json", counting_read)
    monkeypatch.setattr(config_file, "_checked_layers", counting("layers", checked_layers))
    monkeypatch.setattr(config_file, "token_ids", counting("ids", token_ids))
    return seen


def test_inspect_model_of_a_directory_reads_config_json_and_checks_layers_and_ids_once(mamba_dir, counts):
    ids = np.arange(12).reshape(1, 12) % 50
    an = hs.inspect_model(os.fspath(mamba_dir), ids, layers=[1])
    assert [la.layer for la in an.layers] == [1]
    assert counts == {"parsed": 1, "read": 1, "layers": 1, "ids": 1}


def test_the_cli_on_a_directory_reads_config_json_and_checks_layers_and_ids_once(mamba_dir, tmp_path, counts,
                                                                                capsys):
    np.save(tmp_path / "ids.npy", np.arange(10) % 50)
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(mamba_dir), "--ids", os.fspath(tmp_path / "ids.npy"), "--layers", "1,0",
                 "--out", os.fspath(out)]) == 0
    assert out.is_file() and capsys.readouterr().out.strip().splitlines()[-1] == f"report: {out}"
    assert counts == {"parsed": 1, "read": 1, "layers": 1, "ids": 1}


def test_the_request_is_one_frozen_checked_object_the_loader_takes(mamba_dir, counts):
    request = model_request(mamba_dir, [1, 1, 0])
    assert isinstance(request, ModelRequest) and request.family.name == "mamba"
    assert request.class_name == "MambaForCausalLM" and request.layers == (0, 1) and request.ids is None
    assert type(request.config).__name__ == "MambaConfig" and request.cfg["model_type"] == "mamba"
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.layers = (0,)
    with_ids = request.with_ids([3, 4, 5])
    assert with_ids.ids.dtype == np.int64 and with_ids.ids.tolist() == [[3, 4, 5]] and request.ids is None
    model = load_model_dir(with_ids)
    assert type(model).__name__ == "MambaForCausalLM"
    assert counts == {"parsed": 1, "read": 1, "layers": 1, "ids": 1}
    with pytest.raises(TypeError, match=r"^ids and layers must be None when directory is a ModelRequest \(it holds "
                                        r"the checked ids and layers\); got list, list\.$"):
        load_model_dir(with_ids, [1], layers=[0])


@pytest.mark.parametrize("layers", [0.5, [True], ["1"], np.array([0.0])])
def test_layers_that_are_not_ints_are_refused_by_the_request_as_the_model_refuses_them(mamba_dir, layers):
    # int() reads 0.5 as 0, True as 1 and "1" as 1: refused as recompute_layers refuses them, before a model is built
    with pytest.raises(TypeError, match=r"^layers must be a recurrent layer index \(an int\) or a list of them; got "):
        model_request(mamba_dir, layers)
    assert model_request(mamba_dir, np.array([1, 0])).layers == (0, 1)
    assert model_request(mamba_dir, np.int64(1)).layers == (1,)
