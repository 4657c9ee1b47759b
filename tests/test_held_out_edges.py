"""The edges a held-back corpus of bad inputs found (issue 34): each refused in one line naming what was given.

Each test failed on the commit before its fix: a hostile ``config.json`` in a model directory,
results that were silently wrong (a string ``"False"`` read as True, PCA ratios of tiny or huge
states, a negative layer count), raw errors naming nothing (a torch tensor that requires grad
given to a NumPy block, a junk cache, a NUL byte in a path, ...), and a tensor on the meta device.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.pca import pca

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hiddenstate.interop import load_safetensors, save_safetensors  # noqa: E402
from hiddenstate.interop.transformers_io import from_transformers, states_from_cache  # noqa: E402
from hiddenstate.kinds.lightning.block import LightningAttention  # noqa: E402
from hiddenstate.kinds.mlstm.block import MLSTMLayer  # noqa: E402
from hiddenstate.kinds.rglru.block import RGLRUBlock  # noqa: E402
from hiddenstate.kinds.rwkv.block import RWKVTimeMix  # noqa: E402
from hiddenstate.kinds.shortconv.block import ShortConv  # noqa: E402
from hiddenstate.kinds.ssm.lm import MambaLM  # noqa: E402
from hiddenstate.kinds.ssm.mamba import Mamba  # noqa: E402


def _rng():
    return np.random.default_rng(0)


# -- silently wrong ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["batch_first", "reset_after"])
def test_safetensors_metadata_with_a_string_bool_is_refused_by_name(tmp_path, option):
    from safetensors.numpy import load_file, save_file

    path = save_safetensors(hs.GRU(3, 4, rng=_rng()), tmp_path / "gru.safetensors")
    from hiddenstate.interop.safetensors_header import read_header

    meta = read_header(path).metadata
    cfg = json.loads(meta["hiddenstate"])
    cfg[option] = "False"
    save_file(load_file(path), path, metadata={**meta, "hiddenstate": json.dumps(cfg)})
    with pytest.raises(ValueError, match=f"metadata {option} must be a JSON bool \\(true or false\\); got 'False'"):
        load_safetensors(path)


@pytest.mark.parametrize("scale", [1e-170, 1e160])
def test_pca_ratios_do_not_depend_on_the_states_scale(scale):
    X = np.random.default_rng(0).normal(size=(50, 4)) * np.array([4.0, 2.0, 1.0, 0.5])
    want = pca(X).explained_variance_ratio
    for method in ("svd", "gram"):
        got = pca(X * scale, method=method).explained_variance_ratio
        np.testing.assert_allclose(got, want, rtol=1e-9)


@pytest.fixture(scope="module")
def mamba_cache():
    cfg = transformers.MambaConfig(vocab_size=20, hidden_size=8, state_size=4, num_hidden_layers=2, expand=2,
                                   conv_kernel=3)
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(cfg).eval()
    with torch.no_grad():
        out = model(torch.tensor([[1, 2, 3]]), use_cache=True)
    return getattr(out, "cache", None) or out.cache_params


@pytest.mark.parametrize("n", [-1, 0, 3])
def test_states_from_cache_refuses_a_layer_count_outside_the_cache(mamba_cache, n):
    assert len(states_from_cache(mamba_cache, 2)) == 2
    with pytest.raises(ValueError, match=f"num_layers must be in \\[1, 2\\] \\(the layers the cache holds\\); got {n}"):
        states_from_cache(mamba_cache, n)


# -- raw errors naming nothing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [None, "abc", 5], ids=["None", "str", "int"])
def test_states_from_cache_refuses_what_is_not_a_cache(cache):
    with pytest.raises(TypeError, match=f"cache must be a transformers cache with recurrent states .*; got "
                                        f"{type(cache).__name__}"):
        states_from_cache(cache, 2)


def test_states_from_cache_refuses_a_tensor():
    with pytest.raises(TypeError, match="cache must be a transformers cache with recurrent states .*; got Tensor"):
        states_from_cache(torch.zeros(3), 2)


BLOCKS = {
    "rglru": lambda: RGLRUBlock(4, 4, rng=_rng()),
    "lightning": lambda: LightningAttention(4, 2, rng=_rng()),
    "mlstm": lambda: MLSTMLayer(4, 2, rng=_rng()),
    "rwkv": lambda: RWKVTimeMix(4, 4, rng=_rng()),
    "shortconv": lambda: ShortConv(4, rng=_rng()),
}


@pytest.mark.parametrize("kind", sorted(BLOCKS))
@pytest.mark.parametrize("grad", [True, False])
def test_the_numpy_blocks_refuse_a_torch_tensor_by_one_rule(kind, grad):
    block = BLOCKS[kind]()
    u = torch.zeros(3, 2, 4, dtype=torch.float64, requires_grad=grad)
    suffix = " that requires grad" if grad else ""
    with pytest.raises(TypeError, match=f"u must be a NumPy array for {type(block).__name__} .*; got Tensor{suffix}. "
                                        "Convert it with .detach"):
        block.forward(u)
    out, _ = block(np.zeros((3, 2, 4)))  # a NumPy array (or a converted tensor) runs
    assert out.shape == (3, 2, 4)


@pytest.mark.parametrize("eps", [0, -1e-5, float("nan")])
def test_mamba_lm_refuses_an_eps_that_is_not_positive(eps):
    with pytest.raises(ValueError, match="eps must be a finite number > 0; got"):
        MambaLM(10, 4, 1, eps=eps, d_state=2, rng=_rng())


@pytest.fixture(scope="module")
def lm():
    return MambaLM(10, 4, 2, d_state=2, rng=_rng())


def test_mamba_lm_states_must_be_a_list(lm):
    with pytest.raises(TypeError, match="states must be a list of one state per layer \\(L=2\\), .*; got int"):
        lm.forward(np.zeros((1, 3), dtype=int), 7)


def test_mamba_lm_backward_refuses_a_junk_cache(lm):
    _, _, _ = lm.forward(np.zeros((1, 3), dtype=int))
    with pytest.raises(TypeError, match="cache must be the cache that this model's forward returned; got tuple of length 2"):
        lm.backward((1, 2), np.zeros((1, 3, 10)))


def test_mamba_lm_backward_refuses_a_short_d_states(lm):
    logits, _, cache = lm.forward(np.zeros((1, 3), dtype=int))
    with pytest.raises(ValueError, match="d_states_n must hold one entry per layer \\(L=2; None for no gradient\\); "
                                         "got length 1"):
        lm.backward(cache, np.zeros_like(logits), [None])


@pytest.mark.parametrize("limit", [0.5, 2])
def test_from_transformers_refuses_a_mamba2_time_step_limit_that_is_not_a_pair(limit):
    cfg = transformers.Mamba2Config(vocab_size=16, hidden_size=8, state_size=4, num_hidden_layers=1, expand=2,
                                    head_dim=4, n_groups=1, num_heads=4, conv_kernel=3)
    model = transformers.Mamba2ForCausalLM(cfg).eval()
    model.config.__dict__["time_step_limit"] = limit  # past the config class's own check (an older config)
    with pytest.raises(ValueError, match="model.config.time_step_limit must be a pair \\(lo, hi\\) with 0 <= lo <= hi"):
        from_transformers(model)


def test_mamba_of_a_huge_d_model_is_refused_by_the_memory_check():
    with pytest.raises(ValueError, match="Mamba\\(d_model=2000000000, .*\\) parameters needs about .* of memory; "
                                         "this machine allows"):
        Mamba(2_000_000_000)


# -- the meta device -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: hs.GRU(3, 4, rng=_rng()), lambda: hs.GRUCell(3, 4, rng=_rng())],
                         ids=["layer", "cell"])
def test_the_array_api_path_refuses_a_meta_tensor(make):
    x = torch.zeros(5, 3, device="meta") if isinstance(make(), hs.GRUCell) else torch.zeros(5, 2, 3, device="meta")
    with pytest.raises(ValueError, match="x must hold values .*; got a Tensor of shape .* on the meta device"):
        make()(x)


# -- the command line, the trainer's environment, a directory's max_bytes -----------------------------------------


def _one_error_line(capsys):
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "falling back" not in line]
    assert len(err) == 1 and err[0].startswith("hiddenstate: error: "), err
    return err[0]


@pytest.mark.parametrize("form", ["split", "joined"])
def test_an_out_with_a_nul_byte_is_one_line_naming_the_flag(tmp_path, capsys, form):
    from hiddenstate.cli import main

    out = str(tmp_path / "a\0b")
    argv = ["train", "--steps", "1", *(["--out", out] if form == "split" else [f"--out={out}"])]
    assert main(argv) == 2
    assert "--out must not hold a NUL byte" in _one_error_line(capsys)


@pytest.mark.parametrize("value", ["1e20", "1e-9"])
def test_the_dist_timeout_is_refused_outside_its_range_by_name(monkeypatch, value):
    from hiddenstate.train.distributed.world import timeout_s

    monkeypatch.setenv("HIDDENSTATE_DIST_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"HIDDENSTATE_DIST_TIMEOUT must be a number of seconds in \\[1, 2,592,000\\] "
                                         f".*; got '{value}'"):
        timeout_s()
    monkeypatch.setenv("HIDDENSTATE_DIST_TIMEOUT", "3")
    assert timeout_s() == 3.0


def test_resuming_the_shipped_pretrained_model_says_how_to_train_one(tmp_path, capsys):
    from hiddenstate.cli import main
    from hiddenstate.train.pretrained import pretrained_path

    assert main(["train", "--resume", str(pretrained_path()), "--steps", "1", "--out", str(tmp_path / "r")]) == 2
    line = _one_error_line(capsys)
    assert "the pretrained model keeps no optimizer state" in line
    assert "hiddenstate train --preset demo --out DIR" in line
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory):
    from hiddenstate.interop import families

    fam = families.find_family("mamba")
    torch.manual_seed(0)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    path = tmp_path_factory.mktemp("m") / "mamba"
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("max_bytes", [-5, float("nan")])
def test_a_negative_max_bytes_on_a_directory_is_refused_by_name(mamba_dir, max_bytes):
    from hiddenstate.interop.families.directory import load_model_dir

    with pytest.raises(ValueError, match="max_bytes must be a finite number >= 0; got"):
        hs.inspect_model(str(mamba_dir), np.array([[1, 2, 3]]), max_bytes=max_bytes)
    with pytest.raises(ValueError, match="max_bytes must be a finite number >= 0; got"):
        load_model_dir(mamba_dir, np.array([[1, 2, 3]]), max_bytes=max_bytes)


# -- a hostile config.json in a model directory --------------------------------------------------------------------


def _hostile(mamba_dir, tmp_path, **fields):
    import shutil

    d = tmp_path / "hostile"
    shutil.copytree(mamba_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(fields)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


HOSTILE = [
    ("hidden_size", -1, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got -1"),
    ("hidden_size", "8", TypeError, "must be an int \\(as the family's config class reads it\\); got a str '8'"),
    ("hidden_size", 8.5, TypeError, "must be an int .*; got a float 8.5"),
    ("hidden_size", True, TypeError, "must be an int .*; got a bool True"),
    ("hidden_size", 2**63, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got 9223372036854775808"),
    ("state_size", -4, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got -4"),
    ("state_size", "4", TypeError, "must be an int .*; got a str '4'"),
    ("state_size", 2**63, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got 9223372036854775808"),
    ("vocab_size", -50, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got -50"),
    ("vocab_size", "x", TypeError, "must be an int .*; got a str 'x'"),
    ("vocab_size", 50.0, TypeError, "must be an int .*; got a float 50.0"),
    ("vocab_size", False, TypeError, "must be an int .*; got a bool False"),
    ("vocab_size", 2**63, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got 9223372036854775808"),
    ("num_hidden_layers", -1, ValueError, "must be an int in \\[0, 2,147,483,647\\]; got -1"),
    ("num_hidden_layers", "2", TypeError, "must be an int .*; got a str '2'"),
    ("layer_norm_epsilon", {"__float__": "NaN"}, ValueError, "must be a finite number; got nan"),
    ("layer_norm_epsilon", -1e-5, ValueError, "must be a number > 0 \\(an epsilon\\); got -1e-05"),
    ("dtype", "bogus", ValueError, "must be one of auto, bfloat16, .*; got 'bogus'"),
    ("dtype", "__class__", ValueError, "must be one of auto, bfloat16, .*; got '__class__'"),
]


@pytest.mark.parametrize(("field", "value", "error", "message"), HOSTILE,
                         ids=[f"{f}={v!r}"[:40] for f, v, _, _ in HOSTILE])
def test_a_hostile_config_field_is_refused_by_name_before_anything_is_built(mamba_dir, tmp_path, monkeypatch, field,
                                                                            value, error, message):
    d = _hostile(mamba_dir, tmp_path, **{field: value})
    monkeypatch.setattr(transformers.MambaForCausalLM, "_from_config",
                        classmethod(lambda *a, **k: pytest.fail("a model was built")))
    with pytest.raises(error, match=f"config.json' field {field} {message}"):
        hs.inspect_model(str(d), np.array([[1, 2, 3]]))


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "layer_norm_epsilon", "dtype"])
def test_the_cli_refuses_a_hostile_config_in_one_line_with_exit_status_2(mamba_dir, tmp_path, capsys, field):
    from hiddenstate.cli import main

    d = _hostile(mamba_dir, tmp_path, **{field: {"hidden_size": "8", "num_hidden_layers": -1,
                                                 "layer_norm_epsilon": -1.0, "dtype": "bogus"}[field]})
    np.save(tmp_path / "ids.npy", np.array([1, 2, 3]))
    assert main(["inspect", str(d), "--ids", str(tmp_path / "ids.npy"), "--out", str(tmp_path / "o")]) == 2
    assert f"config.json' field {field} must be" in _one_error_line(capsys)


@pytest.mark.parametrize("layers", [2_000, 10_000_000])
def test_more_layers_than_the_weights_hold_are_refused_before_the_model_is_built(mamba_dir, tmp_path, monkeypatch,
                                                                                 layers):
    import time

    d = _hostile(mamba_dir, tmp_path, num_hidden_layers=layers)
    monkeypatch.setattr(transformers.MambaForCausalLM, "_from_config",
                        classmethod(lambda *a, **k: pytest.fail("a model was built")))
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=f"config.json' field num_hidden_layers must be at most the 2 layer\\(s\\) that "
                                         f"the weights in .* hold; got {layers:,}"):
        hs.inspect_model(str(d), np.array([[1, 2, 3]]))
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("text", ["", "the cat sat\n"], ids=["empty", "plain-text"])
def test_a_tokenizer_json_that_is_not_json_is_one_line(mamba_dir, tmp_path, text):
    d = _hostile(mamba_dir, tmp_path)
    (d / "tokenizer.json").write_text(text)
    with pytest.raises(ValueError, match="tokenizer.json must be a JSON object; got .*tokenizer.json', which is not JSON"):
        hs.inspect_model(str(d), "the cat")


def test_every_registered_familys_tiny_config_passes_the_field_checks():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from hiddenstate.interop import families
    from hiddenstate.interop.families.config_check import check_config_fields
    from hiddenstate.interop.families.config_file import special_floats

    for fam in families.registered():
        cfg = json.loads(fam.tiny_config().to_json_string())
        check_config_fields(special_floats(cfg), CONFIG_MAPPING[cfg["model_type"]], fam.name)


@pytest.mark.parametrize("eps", [float("nan"), -1e-5])
def test_a_model_objects_bad_norm_epsilon_is_refused_by_name(eps):
    from hiddenstate.interop import families

    fam = families.find_family("mamba")
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(fam.tiny_config()).eval()
    model.config.__dict__["layer_norm_epsilon"] = eps  # past the config class's own check, as a hand-built model
    with pytest.raises(ValueError, match=f"model.config.layer_norm_epsilon must be a number > 0 \\(an epsilon\\); "
                                         f"got {eps}"):
        hs.inspect_model(model, np.array([[1, 2, 3]]))


@pytest.mark.parametrize("fields", [{"sliding_window": -1}, {"rope_theta": 10**10}, {"seed": 2**40},
                                    {"attn_layer_offset": -1}])
def test_an_int_that_is_no_size_may_be_negative_or_large_as_real_configs_write_it(mamba_dir, tmp_path, fields):
    """``sliding_window: -1`` marks none in some configs, a ``rope_theta`` may be 1e10: read, not refused."""
    ids = np.array([[1, 2, 3]])
    plain = hs.inspect_model(str(mamba_dir), ids)
    odd = hs.inspect_model(str(_hostile(mamba_dir, tmp_path, **fields)), ids)
    assert np.array_equal(odd.layers[0].record.ssm, plain.layers[0].record.ssm)


@pytest.mark.parametrize(("field", "value"), [("conv_kernel", -1), ("time_step_rank", -2), ("expand", 2**40),
                                              ("max_position_embeddings", -1), ("intermediate_size", 2**31)])
def test_a_size_or_count_stays_in_0_to_max_int(mamba_dir, tmp_path, field, value):
    with pytest.raises(ValueError, match=f"field {field} must be an int in \\[0, 2,147,483,647\\]; got {value}"):
        hs.inspect_model(str(_hostile(mamba_dir, tmp_path, **{field: value})), np.array([[1, 2, 3]]))
