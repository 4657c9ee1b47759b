"""``hiddenstate intervene DIR``: a tiny saved model, its printed effects and JSON against hiddenstate.intervene."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    fam = families.family_of("mamba2")
    torch.manual_seed(0)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    root = tmp_path_factory.mktemp("intervene")
    model.save_pretrained(root / "model")
    ids = np.random.default_rng(1).integers(0, 50, (2, 8))
    np.save(root / "ids.npy", ids)
    return root, model, ids


def test_the_printed_and_written_effects_are_the_python_apis(saved, capsys):
    root, model, ids = saved
    out = root / "effects.json"
    argv = ["intervene", str(root / "model"), "--ids", str(root / "ids.npy"), "--layer", "1", "--step", "3", "--op", "scale",
            "--value", "-1", "--heads", "0,2", "--target", str(root / "ids.npy")]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert not out.exists()  # nothing written unless asked
    run = hs.intervene(model, ids, [hs.StateEdit(1, 3, "scale", value=-1.0, heads=[0, 2])], target=ids)
    rows = [line.split() for line in printed[2:]]
    assert len(rows) == 2 * 8 and rows[4 * 1 + 8][:2] == ["1", "4"]
    got = np.array([[float(v) for v in r[2:]] for r in rows]).reshape(2, 8, 4)
    np.testing.assert_allclose(got[..., 0], run.logit_diff, rtol=1e-3, atol=1e-12)  # printed to 4 digits
    np.testing.assert_allclose(got[..., 1], run.kl, rtol=1e-3, atol=1e-12)
    np.testing.assert_allclose(got[..., 3], run.target_prob, rtol=1e-3)
    assert (got[:, :4, :2] == 0).all() and (got[:, 4:, 1] > 0).all()
    assert main([*argv, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["hiddenstate"] == "intervene effects" and data["model"] == "mamba2"
    assert data["edit"] == {"layer": 1, "step": 3, "until": 3, "op": "scale", "part": "state", "value": -1.0,
                            "heads": [0, 2], "source": None}
    np.testing.assert_allclose(data["effects"]["kl"], run.kl, rtol=1e-12)
    assert main([*argv, "--out", str(out)]) == 0  # its own previous file is replaced


def test_replace_from_a_source_and_an_edit_of_the_conv_window_are_the_python_apis(saved, tmp_path, capsys):
    root, model, ids = saved
    other = np.random.default_rng(5).integers(0, 50, (2, 8))
    np.save(tmp_path / "other.npy", other)
    base = ["intervene", str(root / "model"), "--ids", str(root / "ids.npy"), "--layer", "1", "--step", "3"]
    for flags, edit in (
        (["--op", "replace", "--source", str(tmp_path / "other.npy")], hs.StateEdit(1, 3, "replace", source=other)),
        (["--op", "zero", "--part", "conv"], hs.StateEdit(1, 3, "zero", part="conv")),
    ):
        out = tmp_path / f"{flags[1]}.json"
        assert main([*base, *flags, "--out", str(out)]) == 0
        data = json.loads(out.read_text())
        run = hs.intervene(model, ids, [edit])
        np.testing.assert_allclose(data["effects"]["kl"], run.kl, rtol=1e-12, atol=1e-300)
        assert max(map(max, data["effects"]["kl"])) > 0 and data["edit"]["part"] == edit.part
    assert data["edit"]["source"] is None and "replace" in capsys.readouterr().out


@pytest.mark.parametrize("flags, match", [
    (["--layer", "1", "--step", "1", "--op", "replace"], "--source must be given for --op replace"),
    (["--layer", "1", "--step", "1", "--op", "zero", "--source", "IDS"], "--source must not be given for --op zero"),
    (["--layer", "0", "--step", "99", "--op", "zero"], "step must lie in"),
    (["--layer", "7", "--step", "1", "--op", "zero"], "layer must be a recurrent layer"),
    (["--layer", "1", "--step", "1", "--op", "add"], "--value must be given for op='add'"),
    (["--layer", "1", "--step", "1", "--op", "zero", "--heads", "0,99"], r"heads must lie in \[0, "),
    (["--layer", "1", "--step", "1", "--op", "zero", "--heads", "a"], "--heads must be comma-separated"),
    (["--layer", "-1", "--step", "1", "--op", "zero"], "--layer"),
])
def test_bad_input_is_one_line_and_status_2(saved, capsys, flags, match):
    root, _, _ = saved
    argv = ["intervene", str(root / "model"), "--ids", str(root / "ids.npy"),
            *[str(root / "ids.npy") if f == "IDS" else f for f in flags]]
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert __import__("re").search(match, err), err


def test_an_out_that_is_not_ours_and_a_directory_that_is_no_model_are_refused(saved, tmp_path, capsys):
    root, _, _ = saved
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}')
    base = ["--ids", str(root / "ids.npy"), "--layer", "1", "--step", "1", "--op", "zero"]
    assert main(["intervene", str(root / "model"), *base, "--out", str(other)]) == 2
    assert "--out must be a new file or a previous effects file" in capsys.readouterr().err
    assert other.read_text() == '{"mine": 1}'
    assert main(["intervene", str(tmp_path), *base]) == 2
    assert "DIR must be a save_pretrained model directory" in capsys.readouterr().err
    np.save(tmp_path / "floats.npy", np.ones((2, 3)))
    assert main(["intervene", str(root / "model"), *base[2:], "--ids", str(tmp_path / "floats.npy")]) == 2
    assert "--ids must hold integer token ids" in capsys.readouterr().err
