"""hiddenstate.inspect_model: models trained in torch or Keras inspected in one call; CLI inspect of a state dict.

The oracles: torch's and Keras's own outputs (every step of every layer's state, float64, 1e-10),
and the analysis of the layer converted by hand (``from_torch``/``from_keras_weights`` +
``analyze_model``), which ``inspect_model`` must reproduce exactly.
"""
import os
import re

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.interop import from_keras_weights, from_torch
from hiddenstate.interop.statedict_file import load_state_dict_file
from hiddenstate.probe.analysis import analyze_model
from tests._torch import require_torch
from tests.test_interop_keras import keras  # noqa: F401 - the float64 Keras fixture

TOL = 1e-10
FAST = {"n_fixed_point_starts": 4, "max_lag": 8}
SECTIONS = ("Gate saturation", "Gradient flow over time", "Memory curve", "Trajectory in principal components",
            "Fixed points")


def torch_states(module, x, lengths=None):
    """Every layer's and direction's states from torch itself: run the stack one layer at a time."""
    torch = require_torch()
    L, D, H = module.num_layers, 2 if module.bidirectional else 1, module.hidden_size
    xt = torch.as_tensor(x)
    if module.batch_first:
        xt = xt.transpose(0, 1)
    per_layer, inp = [], xt
    for k in range(L):
        kind = type(module).__name__
        one = getattr(torch.nn, kind)(inp.shape[-1], H, bidirectional=D == 2, dtype=torch.float64,
                                      **({"nonlinearity": module.nonlinearity} if kind == "RNN" else {}))
        sd = {n.replace(f"_l{k}", "_l0"): p for n, p in module.state_dict().items() if f"_l{k}" in n}
        one.load_state_dict(sd)
        inp, _ = one(inp)
        per_layer.append(inp.detach().numpy())  # (T, N, D*H)
    full, _ = module(torch.as_tensor(x))
    full = full.detach().numpy()
    return per_layer, full.transpose(1, 0, 2) if module.batch_first else full


def assert_sections(page, gated=True):
    """The report's measurement sections are all there (an Elman RNN has no gates to show)."""
    found = re.findall(r"<h2[^>]*>([^<]*)</h2>", page)
    assert set(SECTIONS[0 if gated else 1:]) <= set(found), found
    assert gated == ("Gate saturation" in found)


def assert_same_analysis(a, b):
    """Two analyses with the same numbers (bit for bit: same layer, same input, same rng)."""
    np.testing.assert_array_equal(a.trace.output, b.trace.output)
    for la, lb in zip(a.trace.layers, b.trace.layers):
        np.testing.assert_array_equal(la.h, lb.h)
    assert [g.name for g in a.gates] == [g.name for g in b.gates]
    for ga, gb in zip(a.gates, b.gates):
        np.testing.assert_array_equal(ga.mean, gb.mean)
    np.testing.assert_array_equal(a.memory.score, b.memory.score)
    np.testing.assert_array_equal(a.pca.explained_variance, b.pca.explained_variance)
    assert len(a.fixed_points) == len(b.fixed_points)
    for fa, fb in zip(a.fixed_points, b.fixed_points):
        np.testing.assert_array_equal(fa.h, fb.h)
    assert a.skipped == b.skipped


TORCH_CASES = [("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
               ("GRU", {"num_layers": 2}),
               ("RNN", {"nonlinearity": "relu", "batch_first": True}),
               ("GRU", {"bidirectional": True})]


@pytest.mark.parametrize("name, options", TORCH_CASES, ids=lambda c: str(c))
def test_a_torch_module_is_inspected_like_the_layer_converted_by_hand(name, options, tmp_path):
    torch = require_torch()
    torch.manual_seed(0)
    module = getattr(torch.nn, name)(3, 6, dtype=torch.float64, **options)
    T, N = 24, 3
    x = np.random.default_rng(1).standard_normal((N, T, 3) if module.batch_first else (T, N, 3))
    an = hs.inspect_model(module, torch.tensor(x), out=tmp_path / "report.html", **FAST)
    by_hand = analyze_model(from_torch(module), x, **FAST)
    assert_same_analysis(an, by_hand)
    per_layer, full = torch_states(module, x)
    np.testing.assert_allclose(an.trace.output, full, rtol=0, atol=TOL)  # (T, N, D*H), time-major
    D, H = 2 if module.bidirectional else 1, 6
    for k, states in enumerate(per_layer):
        for d in range(D):
            np.testing.assert_allclose(an.trace[k, d].h, states[..., d * H:(d + 1) * H], rtol=0, atol=TOL)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert_sections(page, gated=name != "RNN")
    assert f"torch.nn.{name}" in page and an.meta["model"] == f"torch.nn.{name}"


def test_h0_lengths_and_a_float32_module(tmp_path):
    torch = require_torch()
    torch.manual_seed(2)
    module = torch.nn.LSTM(4, 5, num_layers=2)  # float32: converted exactly to float64
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.standard_normal((12, 3, 4)), dtype=torch.float32)
    h0 = torch.tensor(rng.standard_normal((2, 3, 5)), dtype=torch.float32)
    c0 = torch.tensor(rng.standard_normal((2, 3, 5)), dtype=torch.float32)
    lengths = torch.tensor([12, 7, 3])
    an = hs.inspect_model(module, x, h0=(h0, c0), lengths=lengths, **FAST)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x.double(), lengths, enforce_sorted=False)
    ref, _ = torch.nn.utils.rnn.pad_packed_sequence(module.double()(packed, (h0.double(), c0.double()))[0])
    np.testing.assert_allclose(an.trace.output, ref.detach().numpy(), rtol=0, atol=TOL)
    assert an.trace.output.dtype == np.float64


def our_keras_output(keras, layer, x):  # noqa: F811
    out = layer(keras.ops.convert_to_tensor(x))
    out = out[0] if isinstance(out, (list, tuple)) else out
    return out.detach().numpy().transpose(1, 0, 2)  # (T, N, D*H)


KERAS_CASES = [("GRU", {"reset_after": False}), ("GRU", {"reset_after": True}), ("LSTM", {}),
               ("SimpleRNN", {"activation": "relu"}), ("Bidirectional", {"reset_after": False}),
               ("Bidirectional-LSTM", {})]


@pytest.mark.parametrize("name, options", KERAS_CASES, ids=[c[0] + str(c[1]) for c in KERAS_CASES])
def test_a_keras_layer_is_inspected_like_its_own_outputs(keras, name, options, tmp_path):  # noqa: F811
    keras.utils.set_random_seed(0)
    common = {"return_sequences": True, "dtype": "float64"}
    if name.startswith("Bidirectional"):
        inner = (keras.layers.LSTM(5, **common) if name.endswith("LSTM")
                 else keras.layers.GRU(5, **common, **options))
        layer = keras.layers.Bidirectional(inner, dtype="float64")
    else:
        layer = getattr(keras.layers, name)(5, **common, **options)
    N, T, I = 3, 15, 4
    layer.build((None, None, I))
    x = np.random.default_rng(4).standard_normal((N, T, I))  # Keras's (N, T, I)
    an = hs.inspect_model(layer, x, out=tmp_path / "k.html", **FAST)
    np.testing.assert_allclose(an.trace.output, our_keras_output(keras, layer, x), rtol=0, atol=TOL)
    kind = {"SimpleRNN": "rnn", "GRU": "gru", "LSTM": "lstm"}.get(name, "lstm" if name.endswith("LSTM") else "gru")
    bidirectional = name.startswith("Bidirectional")
    by_hand = from_keras_weights(kind, [v.value for v in layer.weights], bidirectional=bidirectional, batch_first=True,
                                 nonlinearity=options.get("activation", "tanh"))
    assert_same_analysis(an, analyze_model(by_hand, x, **FAST))
    page = (tmp_path / "k.html").read_text(encoding="utf-8")
    assert_sections(page, gated=kind != "rnn")


def test_keras_initial_state_list_is_read_as_keras_gives_it(keras):  # noqa: F811
    layer = keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True, dtype="float64"), dtype="float64")
    layer.build((None, None, 2))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 2))
    init = [rng.standard_normal((2, 3)) for _ in range(4)]  # [h_f, c_f, h_b, c_b]
    an = hs.inspect_model(layer, x, h0=init, n_fixed_point_starts=0, max_lag=2)
    ref = layer(keras.ops.convert_to_tensor(x), initial_state=[keras.ops.convert_to_tensor(s) for s in init])
    np.testing.assert_allclose(an.trace.output, ref.detach().numpy().transpose(1, 0, 2), rtol=0, atol=TOL)


@pytest.mark.parametrize("make, needle", [
    (lambda k: k.layers.GRU(4, go_backwards=True), "go_backwards must be False"),
    (lambda k: k.layers.GRU(4, activation="relu"), "activation='tanh'"),
    (lambda k: k.layers.LSTM(4, recurrent_activation="hard_sigmoid"), "recurrent_activation='sigmoid'"),
    (lambda k: k.layers.SimpleRNN(4, activation="elu"), "activation must be one of"),
    (lambda k: k.layers.LSTM(4, stateful=True), "stateful must be False"),
    (lambda k: k.layers.Bidirectional(k.layers.GRU(4), backward_layer=k.layers.GRU(5, go_backwards=True)),
     "same units"),
])
def test_keras_options_our_layers_cannot_compute_are_refused(keras, make, needle):  # noqa: F811
    layer = make(keras)
    layer.build((2, None, 3))
    with pytest.raises(ValueError, match=needle):
        hs.inspect_model(layer, np.zeros((2, 5, 3)))


def test_a_keras_model_of_one_recurrent_layer_is_inspected_as_that_layer(keras):  # noqa: F811
    keras.utils.set_random_seed(0)
    N, T, I = 2, 9, 4
    model = keras.Sequential([keras.Input((None, I), dtype="float64"),
                              keras.layers.GRU(5, return_sequences=True, dtype="float64"),
                              keras.layers.Dense(2, dtype="float64")], name="net")
    x = np.random.default_rng(1).standard_normal((N, T, I))
    an = hs.inspect_model(model, x, **FAST)
    np.testing.assert_allclose(an.trace.output, our_keras_output(keras, model.layers[0], x), rtol=0, atol=TOL)
    assert_same_analysis(an, hs.inspect_model(model.layers[0], x, **FAST))
    assert an.meta["model"] == "keras GRU (layers[0] of keras Sequential 'net')"
    with pytest.raises(ValueError, match="I = 4"):  # the layer's input size must match x
        hs.inspect_model(model, np.zeros((N, T, 3)))
    inp = keras.Input((None, I), dtype="float64")
    functional = keras.Model(inp, keras.layers.LSTM(3, dtype="float64")(keras.layers.Dense(6, dtype="float64")(inp)))
    with pytest.raises(TypeError, match=r"does not read the model's input \(it comes after model.layers\[1\] "
                                        r"\(Dense\), which change it\): pass model.layers\[2\] itself"):
        hs.inspect_model(functional, x)
    two = keras.Sequential([keras.Input((None, I)), keras.layers.GRU(3, return_sequences=True), keras.layers.LSTM(2)])
    with pytest.raises(TypeError, match=r"holds 2 recurrent layers \(model.layers\[0\] \(GRU\), model.layers\[1\] "
                                        r"\(LSTM\)\): pass one of them"):
        hs.inspect_model(two, x)
    with pytest.raises(TypeError, match="holds no recurrent layer"):
        hs.inspect_model(keras.Sequential([keras.Input((None, I)), keras.layers.Dense(2)]), x)


def test_an_unbuilt_keras_layer_is_refused(keras):  # noqa: F811
    with pytest.raises(ValueError, match="must be built"):
        hs.inspect_model(keras.layers.GRU(4), np.zeros((2, 5, 3)))


def test_bad_models_and_inputs_give_clear_errors(tmp_path):
    torch = require_torch()
    with pytest.raises(TypeError, match=r"got the torch module torch\.nn\.modules\.linear\.Linear"):
        hs.inspect_model(torch.nn.Linear(3, 4), np.zeros((5, 2, 3)))
    with pytest.raises(TypeError, match="model must be"):
        hs.inspect_model("gru", np.zeros((5, 2, 3)))
    module = torch.nn.GRU(3, 4, batch_first=True)
    with pytest.raises(ValueError, match=r"x must have shape \(N, T, I\) \(or \(T, I\)\) with I = 3.*got \(5, 2, 7\)"):
        hs.inspect_model(module, np.zeros((5, 2, 7)))
    with pytest.raises(TypeError, match="PackedSequence"):
        packed = torch.nn.utils.rnn.pack_padded_sequence(torch.zeros(2, 5, 3), [5, 2], batch_first=True)
        hs.inspect_model(module, packed)
    with pytest.raises(ValueError, match="proj_size"):
        hs.inspect_model(torch.nn.LSTM(3, 4, proj_size=2), np.zeros((5, 2, 3)))
    mine = tmp_path / "notes.html"
    mine.write_text("my own notes")
    with pytest.raises(ValueError, match="exists and is something else"):
        hs.inspect_model(module, np.zeros((2, 5, 3)), out=mine)
    assert mine.read_text() == "my own notes"
    with pytest.raises(ValueError, match="vocab must be None unless model is a CharRNN"):
        hs.inspect_model(module, np.zeros((2, 5, 3)), vocab="abc")


def test_our_layers_and_a_character_model_with_text(tmp_path):
    rng = np.random.default_rng(6)
    layer = hs.MinGRU(3, 5, rng=rng)
    x = rng.standard_normal((20, 2, 3))
    assert_same_analysis(hs.inspect_model(layer, x, **FAST), analyze_model(layer, x, **FAST))
    chars = " abcdefgh\n"
    model = hs.CharRNN(len(chars), 8, cell="gru", rng=rng)
    text = "a bad cafe\nhead bed fade\na bag\n" * 2
    an = hs.inspect_model(model, text, vocab=chars, out=tmp_path / "c.html", **FAST)
    ids = np.array([chars.index(c) for c in text])
    assert_same_analysis(an, analyze_model(model.rnn, model.embed(ids[:, None]), tokens=ids[:, None], text=text,
                                           fixed_point_input=model.embed(np.array([0]))[0], **FAST))
    assert an.text == text and an.units  # the character views: units that track text features
    same = hs.inspect_model(model, ids, vocab=list(chars), **FAST)  # ids + vocab: the text is decoded
    assert same.text == text
    with pytest.raises(ValueError, match="vocab must be given to read x as text"):
        hs.inspect_model(model, text)
    with pytest.raises(ValueError, match=r"x must hold ids in \[0, 10\)"):
        hs.inspect_model(model, np.array([1, 2, 10]))
    assert "Units that track text features" in (tmp_path / "c.html").read_text(encoding="utf-8")


# -- the CLI on a safetensors state dict --------------------------------------------------------
def save(module, path):
    from safetensors.torch import save_file

    save_file(module.state_dict(), str(path))
    return path


def test_cli_inspects_a_torch_state_dict_and_says_what_it_inferred(tmp_path, capsys):
    torch = require_torch()
    torch.manual_seed(0)
    module = torch.nn.GRU(5, 7, num_layers=2, bidirectional=True, dtype=torch.float64)
    path = save(module, tmp_path / "gru.safetensors")
    x = np.random.default_rng(0).standard_normal((9, 2, 5))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "r.html"
    assert main(["inspect", str(path), "--inputs", str(tmp_path / "x.npy"), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "inferred: kind gru (weight_hh_l0 (21, 7): 3*H rows for H = 7)" in lines
    assert "inferred: input_size 5, hidden_size 7 (weight_ih_l0 (21, 5))" in lines
    assert "inferred: num_layers 2 (keys _l0 to _l1)" in lines
    assert "inferred: bidirectional True (_reverse keys)" in lines
    assert any(line.startswith("not inferred: reset_after") for line in lines)
    assert f"input: '{tmp_path / 'x.npy'}', (T, N, I) = (9, 2, 5)" in lines
    page = out.read_text(encoding="utf-8")
    assert_sections(page)
    loaded = load_state_dict_file(path)
    ref, _ = module(torch.tensor(x))
    np.testing.assert_allclose(loaded.layer(x)[0], ref.detach().numpy(), rtol=0, atol=TOL)


def test_cli_state_dict_of_a_whole_model_random_input_and_flags(tmp_path, capsys):
    torch = require_torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.RNN(3, 4, nonlinearity="relu")
            self.head = torch.nn.Linear(4, 2)

    net = Net()
    path = save(net, tmp_path / "net.safetensors")
    assert main(["inspect", str(path), "--nonlinearity", "relu", "--seed", "3", "--out", str(tmp_path / "a.html")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "inferred: prefix 'enc.' (the keys of one recurrent module; 2 other tensors ignored)" in lines
    assert "ignored: 2 tensor(s) not of the recurrent module (head.bias, head.weight)" in lines
    assert not any(line.startswith("not inferred") for line in lines)  # --nonlinearity given
    assert any("numpy.random.default_rng(3)" in line and "(100, 8, 3)" in line for line in lines)
    loaded = load_state_dict_file(path, nonlinearity="relu")
    x = np.random.default_rng(3).standard_normal((100, 8, 3))
    np.testing.assert_allclose(loaded.layer(x)[0], net.enc.double()(torch.tensor(x))[0].detach().numpy(),
                               rtol=0, atol=TOL)
    assert main(["inspect", str(path), "--out", str(tmp_path / "b.html")]) == 0
    assert any(line.startswith("not inferred: nonlinearity") for line in capsys.readouterr().out.splitlines())


def assert_one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hiddenstate: error: "), err
    for needle in needles:
        assert needle in err[0], err[0]


def test_cli_refuses_pickles_unread_and_bad_inputs_in_one_line(tmp_path, capsys, monkeypatch):
    torch = require_torch()
    module = torch.nn.LSTM(3, 4)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    import pickle

    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("a pickle was loaded"))
    assert main(["inspect", str(tmp_path / "m.pt"), "--out", str(tmp_path / "r.html")]) == 2
    assert_one_line_error(capsys, "never unpickles", 'safetensors.torch.save_file(model.state_dict(), "model.safetensors")')
    (tmp_path / "renamed.safetensors").write_bytes((tmp_path / "m.pt").read_bytes())  # a zip, whatever its name
    assert main(["inspect", str(tmp_path / "renamed.safetensors"), "--out", str(tmp_path / "r.html")]) == 2
    assert_one_line_error(capsys, "never unpickles")
    path = save(module, tmp_path / "m.safetensors")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases = [(["--inputs", str(tmp_path / "obj.npy")], "--inputs must be a .npy file of numbers"),
             (["--inputs", str(tmp_path / "missing.npy")], "--inputs"),
             (["--kind", "gru"], "kind='gru' needs shape"),
             (["--reset-after"], "--reset-after applies to a GRU only"),
             (["--prefix", "x."], "--prefix must be one of"),
             (["--text", str(path)], "--text needs a run directory")]
    np.save(tmp_path / "bad.npy", np.zeros((4, 2, 9)))
    cases.append((["--inputs", str(tmp_path / "bad.npy")], "(T, N, I=3)"))
    for flags, needle in cases:
        assert main(["inspect", str(path), *flags, "--out", str(tmp_path / "r.html")]) == 2, flags
        assert_one_line_error(capsys, needle)
    assert not (tmp_path / "r.html").exists()
    assert main(["inspect", str(tmp_path), "--kind", "gru"]) == 2
    assert_one_line_error(capsys, "--kind applies to a .safetensors state dict only")
    assert main(["inspect", str(tmp_path), "--kind", "gru", "--prefix", "x."]) == 2
    assert_one_line_error(capsys, "--kind, --prefix apply to a .safetensors state dict only")
    assert os.listdir(tmp_path)  # nothing removed


def test_state_dict_files_of_our_own_carry_their_options_and_a_min_gru_needs_its_kind(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 2, 3))
    cho = hs.GRU(3, 4, reset_after=False, rng=rng)
    hs.interop.save_safetensors(cho, tmp_path / "cho.safetensors")
    loaded = load_state_dict_file(tmp_path / "cho.safetensors")
    assert loaded.layer.reset_after is False and loaded.assumed == []  # the metadata tells
    np.testing.assert_array_equal(loaded.layer(x)[0], cho(x)[0])
    flipped = load_state_dict_file(tmp_path / "cho.safetensors", reset_after=True)  # the flag wins
    assert flipped.layer.reset_after is True
    mingru = hs.MinGRU(3, 4, rng=rng)
    save_file({k: np.ascontiguousarray(v) for k, v in mingru.params.items()}, str(tmp_path / "bare.safetensors"))
    with pytest.raises(ValueError, match="has no weight_hh_l0 .* give the kind with --kind"):
        load_state_dict_file(tmp_path / "bare.safetensors")
    loaded = load_state_dict_file(tmp_path / "bare.safetensors", kind="mingru")
    assert loaded.inferred[0] == "kind mingru (--kind)"
    np.testing.assert_array_equal(loaded.layer(x)[0], mingru(x)[0])


def our_gru_file(tmp_path):
    """A GRU of ours saved as a safetensors state dict (no torch needed)."""
    path = tmp_path / "gru.safetensors"
    hs.interop.save_safetensors(hs.GRU(3, 4, rng=np.random.default_rng(0)), path)
    return path


def test_cli_out_ending_in_a_separator_or_in_a_missing_directory_is_refused(tmp_path, capsys, monkeypatch):
    path = our_gru_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    for out in ("dir_nothere/", str(tmp_path / "dir_nothere") + os.sep):
        assert main(["inspect", str(path), "--out", out]) == 2
        assert_one_line_error(capsys, "--out must name an HTML file", "ends in a path separator", "Give a file name")
    for out in (str(tmp_path / "nonexistent" / "dir" / "r.html"), "nodir/r.html"):
        assert main(["inspect", str(path), "--out", out]) == 2
        assert_one_line_error(capsys, "--out must lie in an existing directory", "Create it first")
    assert sorted(os.listdir(tmp_path)) == ["gru.safetensors"]  # nothing written, no directory created
    with pytest.raises(ValueError, match="ends in a path separator"):
        hs.inspect_model(hs.GRU(3, 4), np.zeros((5, 1, 3)), out=str(tmp_path / "d") + "/")
    # the Python API keeps creating the parents, as documented
    hs.inspect_model(hs.GRU(3, 4), np.zeros((5, 1, 3)), out=tmp_path / "new" / "r.html", n_fixed_point_starts=0)
    assert (tmp_path / "new" / "r.html").is_file()


def test_cli_fixed_point_starts_reaches_the_search(tmp_path, capsys):
    path = our_gru_file(tmp_path)
    assert main(["inspect", str(path), "--fixed-point-starts", "3", "--out", str(tmp_path / "a.html")]) == 0
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert 'id="fixed"' in page and "from 3 starts" in page
    assert main(["inspect", str(path), "--fixed-point-starts", "0", "--out", str(tmp_path / "b.html")]) == 0
    assert 'id="fixed"' not in (tmp_path / "b.html").read_text(encoding="utf-8")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", str(path), "--fixed-point-starts", "-1", "--out", str(tmp_path / "c.html")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: argument --fixed-point-starts: must be a non-negative integer; got -1" in err[0]
    assert not (tmp_path / "c.html").exists()


def test_cli_inspect_help_states_the_default_out(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default: report.html in the current directory; a previous report is replaced, any other file refused" in text
    assert "--fixed-point-starts N" in text and "0 skips the search" in text
