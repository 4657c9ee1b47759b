"""``hiddenstate snapshot DIR``: a tiny saved model's state written to a file, equal to hiddenstate.snapshot's."""

from __future__ import annotations

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
    torch.manual_seed(0)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    root = tmp_path_factory.mktemp("snapshot")
    model.save_pretrained(root / "model")
    ids = np.random.default_rng(1).integers(0, 50, (2, 12))
    np.save(root / "ids.npy", ids)
    return root, model, ids


def test_the_written_snapshot_is_the_python_apis(saved, capsys):
    root, model, ids = saved
    out = root / "s.safetensors"
    assert main(["snapshot", str(root / "model"), "--ids", str(root / "ids.npy"), "--out", str(out),
                 "--prefix-length", "8"]) == 0
    printed = capsys.readouterr().out
    snap = hs.snapshot(model, ids, prefix_length=8)
    assert f"({hs.snapshot_bytes(model, ids, prefix_length=8)} bytes)" in printed and str(out) in printed
    back = hs.load_snapshot(out, model)
    assert back.prefix_length == 8 and back.arrays.keys() == snap.arrays.keys()
    for k in snap.arrays:
        np.testing.assert_array_equal(back.arrays[k], snap.arrays[k])
    np.testing.assert_array_equal(back.continue_with(model, ids[:, 8:]), snap.continue_with(model, ids[:, 8:]))


@pytest.mark.parametrize("flags, match", [
    (["--prefix-length", "13"], "^hiddenstate: error: --prefix-length must be at most the ids' length T=12; got 13"),
    (["--prefix-length", "0"], "--prefix-length: must be a positive integer; got 0"),
    (["--prefix-length", "-1"], "--prefix-length: must be a positive integer; got -1"),
])
def test_bad_flags_get_one_line_and_nothing_is_written(saved, capsys, flags, match):
    import re

    root, _, _ = saved
    out = root / "bad.safetensors"
    argv = ["snapshot", str(root / "model"), "--ids", str(root / "ids.npy"), "--out", str(out), *flags]
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's own refusal of a flag's value
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err), err
    assert not out.exists()


def test_an_existing_out_or_a_directory_that_is_not_a_model_is_refused(saved, capsys, tmp_path):
    root, _, _ = saved
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    assert main(["snapshot", str(root / "model"), "--ids", str(root / "ids.npy"), "--out", str(taken)]) == 2
    assert "--out must be a new file" in capsys.readouterr().err and taken.read_text() == "keep me"
    assert main(["snapshot", str(tmp_path), "--ids", str(root / "ids.npy"), "--out", str(tmp_path / "x")]) == 2
    assert "DIR must be a save_pretrained model directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
