"""The pretrained checkpoint shipped with the package: it loads, samples, inspects, and its script reproduces it."""
import hashlib
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.train.pretrained import PRETRAINED_CONFIG, make_pretrained, pretrained_path
from hiddenstate.train.rundir.snapshot import Snapshot

ROOT = pathlib.Path(__file__).resolve().parents[1]


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def test_load_pretrained_is_the_demo_gru_in_float32_of_about_a_megabyte():
    trained = hs.load_pretrained()
    model = trained.model
    assert (model.cell, model.hidden_size, model.num_layers, model.vocab_size) == ("gru", 256, 1, 63)
    assert model.dtype == np.float32 and trained.step == 1000
    assert trained.config.seed == 0 and trained.config.data is None  # the embedded Shakespeare
    sizes = {p.name: p.stat().st_size for p in pretrained_path().iterdir()}
    assert set(sizes) == {"meta.json", "model.safetensors", "optimizer.safetensors"}
    # (3 * 256 * (63 + 256) + 2 * 3 * 256 + 63 * 256 + 63) float32 weights = 1,051,196 bytes, + headers
    assert 1_051_196 < sizes["model.safetensors"] < 1_052_000 and sum(sizes.values()) < 1_100_000
    assert trained.snapshot.adam == {} and trained.snapshot.carry is None  # inference only: not resumable
    with pytest.raises(ValueError, match="name must be one of 'demo-gru'; got 'gpt'"):
        hs.load_pretrained("gpt")


def test_its_validation_loss_is_the_one_it_records():
    """The loss in meta.json, recomputed here from the weights and the embedded text."""
    from hiddenstate.train import evaluate
    from hiddenstate.train.corpus import load_text, train_val_split

    trained = hs.load_pretrained()
    _, val = train_val_split(trained.vocab.encode(load_text()), trained.config.val_fraction)
    assert val.size == trained.snapshot.text["val_chars"] == 98_729
    # float32 BLAS round-off differs between numpy/OpenBLAS builds (6e-10 measured): 1e-7, not bit for bit
    assert evaluate(trained.model, val) == pytest.approx(trained.val_loss, rel=1e-7)
    assert trained.val_loss < 1.8  # it has learned something (a uniform guess is ln 63 = 4.14)


def test_sample_and_inspect_pretrained_from_the_command_line(tmp_path, capsys):
    assert main(["sample", "--pretrained", "--prime", "HAMLET:", "--length", "60", "--seed", "3"]) == 0
    first = capsys.readouterr().out
    assert first.startswith("HAMLET:") and len(first) > 60
    assert first == hs.load_pretrained().sample(prime="HAMLET:", length=60, seed=3) + "\n"
    out = tmp_path / "r.html"
    assert main(["inspect", "--pretrained", "--fixed-point-starts", "0", "--out", str(out)]) == 0
    assert "Character-level GRU (256 units) trained 1,000 steps on embedded Shakespeare" in out.read_text("utf-8")
    capsys.readouterr()
    assert main(["inspect", "--pretrained", "runs/x", "--out", str(out)]) == 2
    assert "--pretrained replaces CKPT; got both ('runs/x')" in capsys.readouterr().err
    for command in ("sample", "inspect"):  # neither CKPT nor --pretrained: one line, exit 2
        assert main([command]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("hiddenstate: error: CKPT is required: a run directory of "
                                                   "`hiddenstate train`, or --pretrained"), err


def test_the_script_path_cut_short_repeats_the_shipped_runs_first_steps(tmp_path):
    """make_pretrained stopped after 6 of its 1000 steps: the shipped run's first 6 losses and gradient norms.

    Equal to float32 round-off (1e-6), not bit for bit: the float32 products' round-off differs between
    numpy/OpenBLAS builds (1.9e-7 relative in the sixth gradient norm, measured on numpy 2.4.6).
    """
    shipped = Snapshot.read(pretrained_path())
    short = Snapshot.read(make_pretrained(tmp_path / "short", stop_after=6))
    assert short.step == 6 and shipped.train == {**short.train}
    for key in ("train_loss", "grad_norm"):
        assert short.history[key] == pytest.approx(shipped.history[key][:6], rel=1e-6), key
    assert short.model == shipped.model and short.vocab == shipped.vocab and short.text == shipped.text
    assert PRETRAINED_CONFIG["max_minutes"] is None  # fixed steps, whatever the machine's speed


@pytest.mark.slow
def test_the_script_reproduces_the_shipped_checkpoint(tmp_path):
    """The full run (1000 steps, one thread, ~70 s on one core): the shipped weights and validation loss.

    Byte for byte on the build that made them; across numpy/OpenBLAS builds the float32 round-off of
    1000 Adam steps drifts (measured with numpy 2.4.6: weights within 4.4e-4 of their largest entry,
    the validation loss within 1.5e-6), far inside what another seed or step count would change (O(1)).
    """
    out = tmp_path / "demo-gru"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_pretrained.py"), "--out", str(out)], check=True,
                   capture_output=True, timeout=900)
    shipped = pretrained_path()
    if all(sha256(out / name) == sha256(shipped / name) for name in ("model.safetensors", "optimizer.safetensors")):
        return  # the build that made them: byte for byte
    made, kept = hs.train.load(out), hs.load_pretrained()
    assert made.step == kept.step == 1000
    assert made.val_loss == pytest.approx(kept.val_loss, rel=1e-4)
    for key, value in kept.model.params.items():
        drift = np.abs(made.model.params[key].astype(np.float64) - value).max() / np.abs(value).max()
        assert drift < 5e-3, (key, drift)
