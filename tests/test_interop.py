"""hiddenstate.interop, torch side: from_torch / to_torch, safetensors files; bad conversions raise with names."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hiddenstate import GRU, LSTM, RNN
from hiddenstate.interop import from_torch, load_safetensors, save_safetensors, to_torch
from tests._torch import require_torch

KINDS = ["rnn", "gru", "lstm"]


def torch_module(torch, kind, *args, **kwargs):
    torch.manual_seed(0)
    return getattr(torch.nn, kind.upper())(*args, dtype=torch.float64, **kwargs)


def our_layer(kind, *args, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    if kind == "gru":
        kwargs.setdefault("reset_after", True)
    return {"rnn": RNN, "gru": GRU, "lstm": LSTM}[kind](*args, rng=rng, **kwargs)


def assert_same_params(a: dict, b: dict):
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# -- torch modules --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, options", [
    ("rnn", {"nonlinearity": "relu"}),
    ("rnn", {"num_layers": 2, "bidirectional": True}),
    ("gru", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("gru", {"bias": False}),
    ("lstm", {"num_layers": 2, "bidirectional": True, "dropout": 0.25}),
])
def test_from_torch_module_copies_options_and_weights(kind, options):
    torch = require_torch()
    module = torch_module(torch, kind, 3, 4, **options)
    layer = from_torch(module, kind=kind)
    assert type(layer).__name__ == kind.upper()
    for name in ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "bidirectional", "dropout"):
        assert getattr(layer, name) == getattr(module, name), name
    if kind == "rnn":
        assert layer.nonlinearity == module.nonlinearity
    if kind == "gru":
        assert layer.reset_after is True
    assert_same_params(layer.params, {k: v.detach().numpy() for k, v in module.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((2, 5, 3) if layer.batch_first else (5, 2, 3))
    module.eval()
    with torch.no_grad():
        t_out, t_state = module(torch.tensor(x))
    out, state = layer(x)
    np.testing.assert_allclose(out, t_out.numpy(), rtol=0, atol=1e-13)
    for ours, theirs in zip(state if kind == "lstm" else [state], t_state if kind == "lstm" else [t_state]):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=1e-13)
    layer.params["weight_hh_l0"][0, 0] += 1.0  # copies: nothing is shared with torch
    assert layer.params["weight_hh_l0"][0, 0] != module.weight_hh_l0[0, 0].item()


@pytest.mark.parametrize("kind", KINDS)
def test_torch_round_trip_is_exact(kind):
    torch = require_torch()
    module = torch_module(torch, kind, 3, 5, num_layers=2, bidirectional=True)
    back = to_torch(from_torch(module))
    assert type(back) is type(module)
    a, b = module.state_dict(), back.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    layer = our_layer(kind, 2, 3, 2, bidirectional=True, batch_first=True)
    again = from_torch(to_torch(layer))
    assert_same_params(again.params, layer.params)
    assert again.batch_first and to_torch(layer).batch_first


def test_to_torch_float32_and_state_dict_of_tensors_or_arrays():
    torch = require_torch()
    layer = our_layer("lstm", 3, 4, dtype=np.float32)
    module = to_torch(layer)
    assert module.weight_ih_l0.dtype == torch.float32
    from_tensors = from_torch(module.state_dict(), dtype=np.float32)
    from_arrays = from_torch(layer.state_dict(), kind="lstm", dtype=np.float32)
    assert_same_params(from_tensors.params, layer.params)
    assert_same_params(from_arrays.params, layer.params)
    wide = from_torch(module.state_dict())  # float32 -> float64 is exact
    for k, v in layer.params.items():
        assert wide.params[k].dtype == np.float64
        np.testing.assert_array_equal(wide.params[k], v.astype(np.float64))


def test_from_torch_state_dict_infers_the_kind_and_sizes():
    layer = our_layer("gru", 3, 4, 3, bidirectional=True)
    built = from_torch(layer.state_dict(), batch_first=True)
    assert isinstance(built, GRU) and built.reset_after
    assert (built.input_size, built.hidden_size, built.num_layers, built.bidirectional, built.batch_first) == \
           (3, 4, 3, True, True)
    assert_same_params(built.params, layer.params)
    rnn = from_torch(our_layer("rnn", 2, 3, nonlinearity="relu").state_dict(), nonlinearity="relu")
    assert isinstance(rnn, RNN) and rnn.nonlinearity == "relu"
    learned = our_layer("lstm", 2, 3, learn_h0=True)
    learned.params["h0"][:] = 0.5
    assert_same_params(from_torch(learned.state_dict()).params, learned.params)


# -- conversions that do not fit ----------------------------------------------------------------------
def test_a_gru_state_dict_loaded_as_an_lstm_raises_with_key_and_shapes():
    state = our_layer("gru", 3, 4).state_dict()
    with pytest.raises(ValueError, match=r"state_dict\['weight_hh_l0'\] has shape \(12, 4\), the 3\*H rows of a GRU; "
                                         r"kind='lstm' needs shape \(4\*H=16, 4\)\. Load it as kind='gru'"):
        from_torch(state, kind="lstm")


@pytest.mark.parametrize("mutate, match", [
    (lambda s: s.pop("weight_ih_l1"), r"missing keys \['weight_ih_l1'\]"),
    (lambda s: s.pop("weight_hh_l0"), r"state_dict must contain 'weight_hh_l0'"),
    (lambda s: s.__setitem__("weight_ih_l1", np.zeros((12, 3))),
     r"state_dict\['weight_ih_l1'\] must have shape \(12, 4\) to load into GRU\(input_size=3, hidden_size=4, "
     r"\.\.\.\); got \(12, 3\)"),
    (lambda s: s.__setitem__("weight_hh_l1", np.zeros((16, 4))),
     r"'weight_hh_l1'\] must have shape \(12, 4\) .* got \(16, 4\), the 4\*H rows of an LSTM"),
    (lambda s: s.pop("bias_hh_l1"), r"missing keys \['bias_hh_l1'\]"),
    (lambda s: s.__setitem__("weight_hr_l0", np.zeros((2, 4))),
     r"unexpected key 'weight_hr_l0' of shape \(2, 4\) \(an LSTM with proj_size > 0"),
    (lambda s: s.__setitem__("weight_hh_l0", np.zeros((10, 4))), r"must have shape \(G\*H, H\) .* got \(10, 4\)"),
    (lambda s: s.__setitem__("bias_ih_l0", np.full(12, np.nan)), r"must be finite"),
])
def test_bad_state_dicts_raise_and_name_the_key(mutate, match):
    state = our_layer("gru", 3, 4, 2).state_dict()
    mutate(state)
    with pytest.raises(ValueError, match=match):
        from_torch(state, kind="gru")


def test_from_torch_module_mismatches_raise():
    torch = require_torch()
    with pytest.raises(ValueError, match="source is a torch.nn.GRU; kind='lstm' expects a torch.nn.LSTM"):
        from_torch(torch_module(torch, "gru", 2, 3), kind="lstm")
    with pytest.raises(ValueError, match="proj_size=2"):
        from_torch(torch_module(torch, "lstm", 2, 3, proj_size=2))
    with pytest.raises(ValueError, match="nonlinearity must match the module's; got 'relu', module has 'tanh'"):
        from_torch(torch_module(torch, "rnn", 2, 3), nonlinearity="relu")
    with pytest.raises(TypeError, match="source must be a torch.nn.RNN, GRU or LSTM, or a state dict; got Linear"):
        from_torch(torch.nn.Linear(2, 3))
    with pytest.raises(ValueError, match="kind must be one of"):
        from_torch({}, kind="transformer")


def test_to_torch_refuses_what_torch_cannot_compute():
    require_torch()
    # the Cho-form GRU is not refused any more: it becomes our ChoGRU module (tests/test_torch_modules.py)
    assert type(to_torch(GRU(2, 3, rng=np.random.default_rng(0)))).__name__ == "ChoGRU"
    with pytest.raises(ValueError, match="nonlinearity 'tanh' or 'relu' to become a torch.nn.RNN; got 'sigmoid'"):
        to_torch(our_layer("rnn", 2, 3, nonlinearity="sigmoid"))
    learned = our_layer("gru", 2, 3, learn_h0=True)
    with pytest.raises(ValueError, match=r"learned initial state \(params\['h0'\]\).*strict=True"):
        to_torch(learned)
    module = to_torch(learned, strict=False)
    assert "h0" not in module.state_dict()


# -- safetensors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, options", [
    ("rnn", {"nonlinearity": "relu", "batch_first": True}),
    ("rnn", {"nonlinearity": "sigmoid"}),
    ("gru", {"num_layers": 2, "bidirectional": True, "reset_after": False}),
    ("gru", {"dtype": np.float32, "dropout": 0.5, "num_layers": 2}),
    ("lstm", {"bidirectional": True, "learn_h0": True}),
    ("lstm", {"bias": False}),
])
def test_safetensors_round_trip_is_exact(kind, options, tmp_path):
    layer = our_layer(kind, 3, 4, **options)
    if layer.learn_h0:
        layer.params["h0"][:] = 0.25
    path = save_safetensors(layer, tmp_path / "layer.safetensors")
    assert os.listdir(tmp_path) == ["layer.safetensors"]  # no temporary file left behind
    built = load_safetensors(path, dtype=layer.dtype)
    assert type(built) is type(layer)
    for name in ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "bidirectional", "dropout",
                 "learn_h0", "reset_after", "nonlinearity"):
        assert getattr(built, name, None) == getattr(layer, name, None), name
    assert_same_params(built.params, layer.params)
    target = our_layer(kind, 3, 4, seed=9, **options)
    assert load_safetensors(path, target) is target
    assert_same_params(target.params, layer.params)


def test_safetensors_file_is_a_torch_state_dict_and_back(tmp_path):
    torch = require_torch()
    from safetensors.torch import load_file, save_file

    layer = our_layer("gru", 3, 4, 2, bidirectional=True)
    save_safetensors(layer, tmp_path / "ours.safetensors")
    module = torch_module(torch, "gru", 3, 4, num_layers=2, bidirectional=True)
    module.load_state_dict(load_file(tmp_path / "ours.safetensors"))  # strict: every key, every shape
    assert_same_params({k: v.detach().numpy() for k, v in module.state_dict().items()}, layer.params)
    lstm = torch_module(torch, "lstm", 2, 3)
    save_file(lstm.state_dict(), tmp_path / "torch.safetensors")
    built = load_safetensors(tmp_path / "torch.safetensors")  # no hiddenstate metadata: torch's conventions
    assert isinstance(built, LSTM)
    assert_same_params(built.params, {k: v.detach().numpy() for k, v in lstm.state_dict().items()})


def test_safetensors_overwrites_atomically_and_keeps_user_metadata(tmp_path):
    from safetensors import safe_open

    path = tmp_path / "m.safetensors"
    save_safetensors(our_layer("rnn", 2, 3), path)
    new = our_layer("rnn", 2, 3, seed=5)
    save_safetensors(new, path, metadata={"step": "10"})
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
    assert_same_params(load_safetensors(path).params, new.params)
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert meta["step"] == "10" and meta["format"] == "pt" and '"kind": "rnn"' in meta["hiddenstate"]
    with pytest.raises(ValueError, match=r"metadata must not use the reserved keys \['hiddenstate'\]"):
        save_safetensors(new, path, metadata={"hiddenstate": "x"})
    with pytest.raises(TypeError, match="metadata must be a mapping str -> str"):
        save_safetensors(new, path, metadata={"step": 10})


def test_safetensors_write_failure_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "dir.safetensors"
    target.mkdir()  # only a regular file is ever replaced: refused before anything is written
    with pytest.raises(ValueError, match="which is a directory; only a regular file is ever replaced"):
        save_safetensors(our_layer("rnn", 2, 3), target)
    assert sorted(os.listdir(tmp_path)) == ["dir.safetensors"]


def test_safetensors_loads_that_do_not_fit_raise_and_load_nothing(tmp_path):
    path = tmp_path / "gru.safetensors"
    save_safetensors(our_layer("gru", 3, 4, 2), path)
    lstm = our_layer("lstm", 3, 4, 2)
    before = lstm.state_dict()
    with pytest.raises(ValueError, match=r"holds a GRU \(weight_hh_l0 has shape \(12, 4\) = \(3\*H, H\)\); it cannot "
                                         r"load into an LSTM, whose weight_hh_l0 has shape \(16, 4\)"):
        load_safetensors(path, lstm)
    cho = our_layer("gru", 3, 4, 2, reset_after=False)
    with pytest.raises(ValueError, match="was saved with reset_after=True; the layer has reset_after=False"):
        load_safetensors(path, cho)
    wide = our_layer("gru", 3, 5, 2)
    with pytest.raises(ValueError, match=r"\['weight_ih_l0'\] must have shape \(15, 3\) .*got \(12, 3\)"):
        load_safetensors(path, wide)
    one_layer = our_layer("gru", 3, 4, 1)
    before_one = one_layer.state_dict()
    with pytest.raises(ValueError, match=r"unexpected keys \['bias_hh_l1 \(12,\)'.*Nothing was loaded"):
        load_safetensors(path, one_layer)
    assert_same_params(lstm.params, before)
    assert_same_params(one_layer.params, before_one)
    (tmp_path / "junk.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    with pytest.raises(ValueError, match="must be a valid safetensors file"):
        load_safetensors(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError):
        load_safetensors(tmp_path / "missing.safetensors")


# -- kinds come from the layers' kind attribute ----------------------------------------------------------
def test_kind_may_be_a_name_a_layer_class_or_a_cell_kind():
    from hiddenstate.classic.cells import KINDS

    state = our_layer("gru", 3, 4).state_dict()
    for kind in ("gru", "GRU", GRU, KINDS["gru"]):
        assert isinstance(from_torch(state, kind=kind), GRU)
    for kind in ("lstm", LSTM, KINDS["lstm"]):
        with pytest.raises(ValueError, match=r"the 3\*H rows of a GRU; kind='lstm' needs shape \(4\*H=16, 4\)"):
            from_torch(state, kind=kind)
    with pytest.raises(ValueError, match=r"kind must be one of 'rnn' \(or 'SimpleRNN'\), 'gru', 'lstm'; got <class"):
        from_torch(state, kind=dict)


def test_a_subclass_converts_as_its_kind_and_cells_or_other_objects_raise(tmp_path):
    from hiddenstate import GRUCell

    class Mine(GRU):
        pass

    layer = Mine(3, 4, reset_after=True, rng=np.random.default_rng(0))
    built = load_safetensors(save_safetensors(layer, tmp_path / "mine.safetensors"))
    assert type(built) is GRU and built.reset_after
    assert_same_params(built.params, layer.params)
    cell = GRUCell(3, 4, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"layer must be a hiddenstate RNN, GRU or LSTM layer; got GRUCell \(a one-step"):
        save_safetensors(cell, tmp_path / "cell.safetensors")
    with pytest.raises(TypeError, match="layer must be a hiddenstate RNN, GRU or LSTM layer; got dict"):
        to_torch({})
    assert not list(tmp_path.glob("cell*"))


@pytest.mark.parametrize("layer, options", [
    (GRU(2, 3, reset_after=False), {"reset_after": False}),
    (RNN(2, 3, nonlinearity="relu", batch_first=True), {"nonlinearity": "relu", "batch_first": True}),
    (LSTM(2, 3, dropout=0.5, num_layers=2), {"dropout": 0.5}),
])
def test_safetensors_metadata_holds_exactly_the_options_shapes_cannot_tell(layer, options, tmp_path):
    from safetensors import safe_open

    path = save_safetensors(layer, tmp_path / "m.safetensors")
    with safe_open(str(path), framework="numpy") as f:
        stored = json.loads(f.metadata()["hiddenstate"])
    kind = type(layer).__name__.lower()
    assert stored == {"kind": kind, "batch_first": False, "dropout": 0.0, "version": 1, **options}


def test_importing_interop_imports_neither_torch_nor_keras():
    code = "import sys, hiddenstate.interop; print(sorted(m for m in ('torch', 'keras') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_kinds_told_by_recurrent_weight_rows():
    from hiddenstate.interop.kinds import gates_hint, kind_from_weight_hh, with_article

    assert [kind_from_weight_hh(np.zeros((g * 4, 4))) for g in (1, 2, 3, 4, 5)] == ["rnn", None, "gru", "lstm", None]
    assert kind_from_weight_hh(np.zeros((12, 0))) is None and kind_from_weight_hh(np.zeros(12)) is None
    assert [with_article(k) for k in ("rnn", "gru", "lstm")] == ["an RNN", "a GRU", "an LSTM"]
    assert gates_hint(16, 4) == ", the 4*H rows of an LSTM" and gates_hint(10, 4) == "" and gates_hint(8, 4) == ""
