"""``hiddenstate trace DIR``: a tiny saved model, the cost line before the sweep, its files against hiddenstate.causal_trace."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    fam = families.family_of("qwen3_next")
    cfg = fam.tiny_config()
    cfg.initializer_range = 0.5
    torch.manual_seed(0)
    model = getattr(transformers, fam.classes[0])(cfg).eval()
    root = tmp_path_factory.mktemp("trace")
    model.save_pretrained(root / "model")
    rng = np.random.default_rng(1)
    clean = rng.integers(0, 50, (1, 8))
    corrupted = clean.copy()
    corrupted[:, :2] = (clean[:, :2] + 7) % 50
    np.save(root / "clean.npy", clean)
    np.save(root / "corrupted.npy", corrupted)
    return root, model, clean, corrupted


def argv_for(root, out, *more):
    return ["trace", str(root / "model"), "--clean-ids", str(root / "clean.npy"), "--corrupted-ids",
            str(root / "corrupted.npy"), "--target", "5", "--out", str(out), *more]


def test_the_cost_is_printed_first_and_the_files_hold_the_python_apis_trace(saved, tmp_path, capsys):
    root, model, clean, corrupted = saved
    out = tmp_path / "trace"
    assert main(argv_for(root, out, "--layers", "2,0", "--steps", "1:6")) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("causal trace of qwen3_next: 2 layers x 5 steps = 10 edited runs; one took ")
    assert printed[1].startswith("CausalTrace(qwen3_next") and printed[-1].startswith("written: ")
    assert sorted(p.name for p in out.iterdir()) == ["trace.html", "trace.json", "trace.png"]
    data = json.loads((out / "trace.json").read_text())
    want = hs.causal_trace(model, clean, corrupted, target=5, layers=[2, 0], steps=range(1, 6))
    assert data["hiddenstate"] == "causal trace" and data["layers"] == [2, 0] and data["steps"] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(data["indirect_effect"], want.indirect_effect, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(data["clean_prob"], want.clean_prob, rtol=1e-12)
    assert (out / "trace.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'id="causal-trace"' in (out / "trace.html").read_text()
    assert main(argv_for(root, out, "--steps", "0,3", "--position", "5", "--part", "conv")) == 0  # its own: replaced
    data = json.loads((out / "trace.json").read_text())
    assert data["steps"] == [0, 3] and data["position"] == 5 and data["part"] == "conv" and data["layers"] == [0, 2]


@pytest.mark.parametrize("flags, match", [
    (["--layers", "1"], r"--layers must be recurrent layers of this qwen3_next model, \[0, 2\]; got 1 \(attention\)"),
    (["--steps", "7"], r"--steps must lie in \[0, position=7\)"),
    (["--steps", "5:2"], "--steps must be START:STOP"),
    (["--target", "50"], r"--target must lie in \[0, vocab_size=50\)"),
    (["--target", "-1"], "--target"),
    (["--position", "9"], r"--position must lie in \[1, T=8\)"),
])
def test_bad_input_is_one_line_and_status_2(saved, tmp_path, capsys, flags, match):
    root, _, _, _ = saved
    argv = argv_for(root, tmp_path / "out")
    argv = [a for a in argv if a != "5"] if "--target" in flags else argv
    if "--target" in flags:
        argv.remove("--target")
    try:
        status = main([*argv, *flags])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(match, err), err
    assert not (tmp_path / "out").exists()  # nothing written


def test_an_out_that_is_not_ours_and_ids_of_another_shape_are_refused(saved, tmp_path, capsys):
    root, _, clean, _ = saved
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    assert main(argv_for(root, other)) == 2
    assert "--out must be a new or empty directory, or a previous one" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(argv_for(root, afile)) == 2
    assert "--out must be a directory" in capsys.readouterr().err
    np.save(tmp_path / "short.npy", clean[:, :5])
    argv = argv_for(root, tmp_path / "out")
    argv[argv.index("--corrupted-ids") + 1] = str(tmp_path / "short.npy")
    assert main(argv) == 2
    assert "--corrupted-ids must have the shape of --clean-ids (1, 8)" in capsys.readouterr().err
    assert main(["trace", str(tmp_path), *argv[2:]]) == 2
    assert "DIR must be a save_pretrained model directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
