"""hiddenstate export RUN --format onnx|torch --out FILE: files other tools run with the model's logits.

Oracles: the model's own ``forward`` logits. The ONNX graph runs in onnxruntime (float32, 1e-5);
the torch.export program is loaded in a fresh Python process in which hiddenstate cannot be
imported (float64, 1e-10), at sequence lengths and batch sizes other than the export example's.
"""
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.interop.torch_export import charrnn_to_exported_program
from hiddenstate.train import load
from hiddenstate.train.corpus import load_text
from tests._torch import require_torch

TINY = ["--hidden-size", "12", "--num-layers", "2", "--seq-len", "16", "--batch-size", "8", "--eval-every", "5",
        "--quiet"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny trained runs: a float32 GRU and a float64 LSTM."""
    base = tmp_path_factory.mktemp("export")
    data = base / "small.txt"
    data.write_text(load_text()[:20_000], encoding="utf-8")
    out = {}
    for cell, dtype in (("gru", "float32"), ("lstm", "float64")):
        out[cell] = base / cell
        assert main(["train", "--data", str(data), "--steps", "4", "--cell", cell, "--dtype", dtype,
                     "--out", str(out[cell]), *TINY]) == 0
    return out


def ids_and_state(model, T, N, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, model.vocab_size, size=(T, N))
    L, H = model.num_layers, model.hidden_size
    h0 = rng.standard_normal((L, N, H)).astype(model.dtype) * 0.5
    c0 = rng.standard_normal((L, N, H)).astype(model.dtype) * 0.5
    return ids, h0, c0


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_onnx_export_runs_in_onnxruntime_with_the_models_logits(runs, cell, tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime")
    out = tmp_path / "model.onnx"
    assert main(["export", str(runs[cell]), "--format", "onnx", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"onnx: {out}" in printed
    model = load(runs[cell]).model
    hint = printed.splitlines()[-1]  # this run's names, L = 2, H = 12 (TINY) and dtype
    if cell == "gru":
        assert "{'ids': ids, 'h0': h0})" in hint and "h0 (2, N, 12) float32 (NumPy)" in hint, hint
        assert "c0" not in hint and "c_n" not in hint, hint
    else:
        assert "{'ids': ids, 'h0': h0, 'c0': c0})" in hint and "h0, c0 (2, N, 12) float64 each" in hint, hint
        assert "ReferenceEvaluator" in hint, hint
    ids, h0, c0 = ids_and_state(model, 23, 3)
    expected, state, _ = model.forward(ids, (h0, c0) if cell == "lstm" else h0)
    feeds = {"ids": ids.astype(np.int64), "h0": h0.astype(np.float32)}
    if cell == "lstm":
        feeds["c0"] = c0.astype(np.float32)
    if model.dtype == np.float64:  # onnxruntime's CPU RNN kernels are float32 only: run the float32 copy
        pytest.importorskip("onnx")
        from onnx.reference import ReferenceEvaluator

        got = ReferenceEvaluator(str(out)).run(None, {**feeds, "h0": h0, **({"c0": c0} if cell == "lstm" else {})})
        np.testing.assert_allclose(got[0], expected, rtol=0, atol=1e-10)
        return
    got = ort.InferenceSession(str(out)).run(None, feeds)
    np.testing.assert_allclose(got[0], expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got[1], state, rtol=0, atol=1e-5)


LOAD_WITHOUT_HIDDENSTATE = textwrap.dedent("""
    import sys
    sys.modules["hiddenstate"] = None          # any import of hiddenstate now fails
    import numpy as np, torch
    program = torch.export.load(sys.argv[1]).module()
    arrays = np.load(sys.argv[2])
    args = [torch.from_numpy(arrays[k]) for k in ("ids", "h0", "c0") if k in arrays.files]
    outputs = program(*args)
    assert not any(o.requires_grad for o in outputs)  # .numpy() works without .detach()
    np.savez(sys.argv[3], *[o.numpy() for o in outputs])
""")


def run_fresh(program, tmp_path, **arrays):
    """Run a .pt2 program in a new Python process that cannot import hiddenstate."""
    np.savez(tmp_path / "in.npz", **arrays)
    subprocess.run([sys.executable, "-c", LOAD_WITHOUT_HIDDENSTATE, str(program), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, capture_output=True, text=True, timeout=300)
    with np.load(tmp_path / "out.npz") as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


def test_torch_export_loads_without_hiddenstate_and_gives_the_logits(runs, tmp_path, capsys):
    require_torch()
    out = tmp_path / "model.pt2"
    assert main(["export", str(runs["lstm"]), "--format", "torch", "--out", str(out)]) == 0
    hint = capsys.readouterr().out.splitlines()[-1]
    assert hint == (f"load it with: torch.export.load({str(out)!r}).module()(ids, h0, c0)  # ids (T, N) int64, "
                    "T >= 1; h0, c0 (2, N, 12) float64 each -> logits (T, N, V=" + str(load(runs["lstm"]).model.vocab_size)
                    + "), h_n, c_n; torch alone, no hiddenstate"), hint
    model = load(runs["lstm"]).model
    assert model.dtype == np.float64
    ids, h0, c0 = ids_and_state(model, 37, 5)  # neither the export example's T nor its N
    expected, (h_n, c_n), _ = model.forward(ids, (h0, c0))
    logits, got_h, got_c = run_fresh(out, tmp_path, ids=ids, h0=h0, c0=c0)
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got_h, h_n, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got_c, c_n, rtol=0, atol=1e-10)


def swap_layer(model, layer):
    """``model`` with its recurrent layer replaced (a form a CharRNN does not build itself)."""
    model.rnn = layer
    for key in [k for k in model.params if k.startswith("rnn.")]:
        del model.params[key]
    model.params.update({f"rnn.{k}": v for k, v in layer.params.items()})
    return model


@pytest.mark.parametrize("form", ["rnn_tanh", "rnn_relu_embedded", "gru_cho", "gru_float32"])
def test_exported_program_of_every_form_matches_the_model(form, tmp_path):
    torch = require_torch()
    import io

    rng = np.random.default_rng(1)
    V, H = 11, 6
    dtype = np.float32 if form.endswith("float32") else np.float64
    model = hs.CharRNN(V, H, 2, cell=form.split("_")[0], embedding_dim=4 if "embedded" in form else None, dtype=dtype,
                       rng=rng)
    I = 4 if "embedded" in form else V
    if form == "rnn_relu_embedded":
        model = swap_layer(model, hs.RNN(I, H, 2, nonlinearity="relu", rng=rng))
    if form == "gru_cho":
        model = swap_layer(model, hs.GRU(I, H, 2, reset_after=False, rng=rng))
    program = torch.export.load(io.BytesIO(charrnn_to_exported_program(model))).module()
    for T, N in ((1, 1), (19, 4)):
        ids, h0, _ = ids_and_state(model, T, N, seed=T)
        expected, h_n, _ = model.forward(ids, h0)
        with warnings.catch_warnings():  # torch's eager scan warns about its own use of torch.jit (torch 2.13)
            warnings.simplefilter("ignore", DeprecationWarning)
            logits, got_h = program(torch.from_numpy(ids), torch.from_numpy(h0))
        tol = 1e-10 if dtype == np.float64 else 1e-5
        assert logits.dtype == (torch.float64 if dtype == np.float64 else torch.float32)
        np.testing.assert_allclose(logits.detach().numpy(), expected, rtol=0, atol=tol)
        np.testing.assert_allclose(got_h.detach().numpy(), h_n, rtol=0, atol=tol)


def assert_one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hiddenstate") and ": error: " in err[0], err
    for needle in needles:
        assert needle in err[0], err[0]


def test_export_errors_are_one_line_exit_2_and_nothing_is_overwritten(runs, tmp_path, capsys):
    mine = tmp_path / "mine.onnx"
    mine.write_bytes(b"my file")
    for fmt in ("onnx", "torch"):
        assert main(["export", str(runs["gru"]), "--format", fmt, "--out", str(mine)]) == 2
        assert_one_line_error(capsys, "--out must name a new file", "nothing is overwritten")
    assert mine.read_bytes() == b"my file"
    assert main(["export", str(tmp_path / "nowhere"), "--format", "onnx", "--out", str(tmp_path / "a.onnx")]) == 2
    assert_one_line_error(capsys, "does not exist")
    assert main(["export", str(runs["gru"]), "--format", "onnx", "--out", str(tmp_path / "no" / "a.onnx")]) == 2
    assert_one_line_error(capsys, "--out must lie in an existing directory")
    assert main(["export", str(runs["gru"]), "--format", "onnx", "--out", str(tmp_path / "dir_nothere") + "/"]) == 2
    assert_one_line_error(capsys, "--out must name a file", "ends in a path separator")
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(runs["gru"]), "--format", "tflite", "--out", str(tmp_path / "a")])
    assert exit_.value.code == 2
    assert_one_line_error(capsys, "--format", "tflite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.onnx"]


def test_a_model_of_linear_recurrences_is_refused_with_a_reason(tmp_path):
    model = hs.CharRNN(5, 4, cell="mingru", rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="no weight_hh"):
        charrnn_to_exported_program(model)
