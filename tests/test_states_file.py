"""States out (issue 35): every recorded step's states to safetensors and back, from Python and from the CLI.

What the saved states are held to comes from the model itself: the final recurrent and
convolution states its own cache holds after the same ids (``use_cache=True``), and the records
the analysis holds (which tests/test_families*.py hold to the model's output).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.states_file import FORMAT, load_states, save_states  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def qwen3_next():
    torch.manual_seed(0)
    fam = families.family_of("qwen3_next")
    return transformers.Qwen3NextForCausalLM(fam.tiny_config()).eval()


def ids_for(N=2, T=20):
    return np.random.default_rng(1).integers(3, 50, (N, T))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_next")
    qwen3_next().save_pretrained(path)
    return path


def test_the_cli_saves_every_step_and_the_last_equals_the_models_own_cache(model_dir, tmp_path, capsys):
    ids = ids_for()
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "s.safetensors"
    assert main(["inspect", str(model_dir), "--ids", str(tmp_path / "ids.npy"), "--out", str(tmp_path / "r.html"),
                 "--save-states", str(out), "--states-dtype", "float64"]) == 0
    assert f"states: {out}" in capsys.readouterr().out
    saved = load_states(out)
    assert saved.kind == "gated_delta" and sorted(saved.states) == [0, 2] and saved.heads is None
    np.testing.assert_array_equal(saved.steps, np.arange(20))
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        cache = model(torch.from_numpy(ids), use_cache=True).cache
    for layer in (0, 2):
        rec = saved.states[layer]["recurrent"]  # (T, N, Hv, Dk, Dv)
        assert rec.shape == (20, 2, 4, 8, 6) and rec.dtype == np.float64
        S = cache.get_recurrent_state(layer).double().numpy()  # (N, Hv, Dk, Dv)
        assert np.abs(rec[-1] - S).max() <= 1e-5 * np.abs(S).max()
        conv = cache.get_conv_state(layer).double().numpy()  # (N, C, K): ours keeps the last K - 1 inputs
        assert np.abs(saved.states[layer]["conv"][-1] - conv[..., 1:]).max() <= 1e-5 * np.abs(conv).max()


def test_a_window_stride_heads_and_float32_select_exactly_those_entries(model_dir, tmp_path):
    model = qwen3_next()
    an = hs.inspect_model(model, ids_for(), out=None)
    out = save_states(an, tmp_path / "w.safetensors", layers=[2], heads=[1, 3], window=(4, 17), stride=5)
    saved = load_states(out)
    np.testing.assert_array_equal(saved.steps, [4, 9, 14])
    assert sorted(saved.states) == [2] and saved.heads == (1, 3)
    rec = an.layers[[la.layer for la in an.layers].index(2)].record
    got = saved.states[2]["recurrent"]
    assert got.dtype == np.float32 and got.shape == (3, 2, 2, 8, 6)
    np.testing.assert_array_equal(got, rec.recurrent[[4, 9, 14]][:, :, [1, 3]].astype(np.float32))
    # the header says what each tensor is, for any safetensors reader
    from safetensors import safe_open

    with safe_open(str(out), framework="numpy") as f:
        meta = f.metadata()
        assert meta["format"] == FORMAT and meta["kind"] == "gated_delta" and meta["dtype"] == "float32"
        index = json.loads(meta["index"])
        assert index["layer2.recurrent"] == {"layer": 2, "state": "recurrent", "steps": [4, 9, 14], "heads": [1, 3]}
        np.testing.assert_array_equal(f.get_tensor("layer2.conv"), rec.conv[[4, 9, 14]][:, :, [1, 3]].astype(np.float32))


def test_nothing_of_the_users_is_replaced_and_bad_choices_name_the_rule(tmp_path):
    an = hs.inspect_model(qwen3_next(), ids_for(T=8), out=None)
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    with pytest.raises(ValueError, match="another file, which is never replaced"):
        save_states(an, mine)
    assert mine.read_text() == "keep me"
    first = save_states(an, tmp_path / "s.safetensors")
    with pytest.raises(ValueError, match="a states file that exists. Pass overwrite=True"):
        save_states(an, first)
    save_states(an, first, overwrite=True, layers=[0])
    assert sorted(load_states(first).states) == [0]
    with pytest.raises(ValueError, match=r"layers must be recorded layers of the analysis, \[0, 2\]; got \[1\]"):
        save_states(an, tmp_path / "x.safetensors", layers=[1])
    with pytest.raises(ValueError, match="heads must be indices below 4"):
        save_states(an, tmp_path / "x.safetensors", heads=[4])
    with pytest.raises(ValueError, match=r"window must satisfy 0 <= start < stop <= T=8"):
        save_states(an, tmp_path / "x.safetensors", window=(3, 9))
    with pytest.raises(ValueError, match="dtype must be one of"):
        save_states(an, tmp_path / "x.safetensors", dtype="float16")
    with pytest.raises(TypeError, match="analysis must be an analysis of recurrent layers"):
        save_states(np.zeros(3), tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
    with pytest.raises(ValueError, match="must be a states file written by save_states"):
        hs_file = tmp_path / "plain.safetensors"
        from safetensors.numpy import save_file

        save_file({"a": np.zeros(2)}, str(hs_file))
        load_states(hs_file)


def test_the_cli_refuses_states_flags_where_they_do_not_apply(model_dir, tmp_path, capsys):
    np.save(tmp_path / "ids.npy", ids_for(T=6))
    args = ["inspect", str(model_dir), "--ids", str(tmp_path / "ids.npy"), "--out", str(tmp_path / "r.html")]
    assert main([*args, "--states-window", "0:3"]) == 2
    assert "--states-window needs --save-states FILE" in capsys.readouterr().err
    assert main([*args, "--save-states", str(tmp_path / "s.safetensors"), "--states-window", "3-5"]) == 2
    assert "--states-window must be START:STOP" in capsys.readouterr().err
    assert main(["inspect", "--pretrained", "--save-states", str(tmp_path / "s.safetensors"),
                 "--out", str(tmp_path / "p.html")]) == 2
    assert "--save-states applies to a save_pretrained model directory" in capsys.readouterr().err
    assert not (tmp_path / "s.safetensors").exists() and not (tmp_path / "r.html").exists()


def test_lag_norms_that_vanish_below_the_smallest_float_are_zero_not_an_error():
    # found by the CLI test above under the suite's np.seterr(all="raise"): (prod ** 2) underflowed
    from hiddenstate.kinds.base import diagonal_lag_norms
    from hiddenstate.kinds.delta.view import delta_lag_norms

    T, N, H, Dk = 12, 1, 1, 2
    decay = np.full((T, N, H), 1e-40)  # each step keeps 1e-40: after 8 steps the product is 1e-320, after 9 0
    k = np.zeros((T, N, H, Dk))
    beta = np.zeros((T, N, H))
    lag = delta_lag_norms(decay, beta, k, 10)
    assert lag.spectral[1] == pytest.approx(1e-40) and lag.spectral[10] == 0.0 and lag.rms[10] == 0.0
    spectral, rms = diagonal_lag_norms(np.full((T, N, 3), 1e-40), 10)
    assert spectral[1] == pytest.approx(1e-40) and spectral[10] == 0.0 and rms[10] == 0.0
