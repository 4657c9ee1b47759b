"""``hiddenstate inspect``: one line per stage off a terminal, and our own model files inspected as the runs they are."""
import re
import shutil

import numpy as np
import pytest

from hiddenstate.cli import main
from hiddenstate.train.corpus import load_text

TINY = ["--hidden-size", "16", "--seq-len", "16", "--batch-size", "8", "--eval-every", "5", "--quiet"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    data = tmp_path_factory.mktemp("data") / "small.txt"
    data.write_text(load_text()[:20_000], encoding="utf-8")
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", "--data", str(data), "--steps", "4", "--out", str(out), *TINY]) == 0
    return out


def error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hiddenstate: error: "), err
    return err[0]


def test_inspect_prints_one_line_per_stage_on_stderr_off_a_terminal(run_dir, tmp_path, capsys):
    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "r.html"), "--fixed-point-starts", "4"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    stages = [re.fullmatch(r"hiddenstate: inspect: (measured .+|wrote the report .+): (\d+\.\d) s", line) for line in lines]
    assert all(stages), lines
    assert len(lines) == 8  # trace, gates, gradient, memory, PCA, fixed points, text; the report
    assert "measured fixed points (4 starts, " in captured.err and "found)" in captured.err
    assert captured.out.strip().splitlines()[-1] == f"report: {tmp_path / 'r.html'}"  # stdout keeps its one line


def test_analyze_model_is_silent_unless_given_echo(capsys):
    import hiddenstate as hs
    from hiddenstate.probe.analysis import analyze_model

    rng = np.random.default_rng(0)
    layer = hs.GRU(3, 5, rng=rng)
    x = rng.normal(size=(40, 2, 3))
    heard = []
    an = analyze_model(layer, x, n_fixed_point_starts=2, rng=rng, echo=heard.append)
    assert capsys.readouterr().err == ""
    assert len(heard) == 7 and heard[0].startswith("measured the states and gates of every step: ")
    # each line's seconds are the measurement's own timing
    for line, key in zip(heard, ["trace", "gates", "gradient", "memory", "pca", "fixed points", "text"]):
        assert line.endswith(f": {an.timings[key]:.1f} s"), (line, key)
    with pytest.raises(TypeError, match="echo must be callable or None; got str"):
        analyze_model(layer, x, echo="print")


def test_our_model_file_with_its_meta_is_inspected_as_the_run(run_dir, tmp_path, capsys):
    model = run_dir / "checkpoint" / "model.safetensors"
    assert main(["inspect", str(model), "--out", str(tmp_path / "a.html"), "--fixed-point-starts", "0"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == f"model: '{model}' is the model file of the checkpoint '{run_dir / 'checkpoint'}': inspected as that run"
    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "b.html"), "--fixed-point-starts", "0"]) == 0
    capsys.readouterr()
    stamp = re.compile(r"generated \d{4}-\d{2}-\d{2} \d{2}:\d{2}")  # the two reports may straddle a minute
    a, b = (stamp.sub("generated <time>", (tmp_path / n).read_text(encoding="utf-8")) for n in ("a.html", "b.html"))
    assert "Character-level GRU (16 units) trained 4 steps" in a
    first = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
    assert a == b, (len(a), len(b), a[first - 150:first + 150], b[first - 150:first + 150])  # the run's own report


def test_our_model_file_rejects_state_dict_flags(run_dir, tmp_path, capsys):
    model = run_dir / "checkpoint" / "model.safetensors"
    assert main(["inspect", str(model), "--kind", "gru", "--out", str(tmp_path / "a.html")]) == 2
    assert "--kind applies to a .safetensors state dict only; got the model file of the checkpoint" in error_line(capsys)
    assert not (tmp_path / "a.html").exists()


def test_our_model_file_without_its_meta_is_refused_with_the_command_that_inspects_it(run_dir, tmp_path, capsys):
    alone = tmp_path / "weights.safetensors"
    shutil.copy(run_dir / "checkpoint" / "model.safetensors", alone)
    assert main(["inspect", str(alone), "--out", str(tmp_path / "a.html")]) == 2
    line = error_line(capsys)
    assert f"CKPT '{alone}' holds a hiddenstate character model's weights (rnn.*, decoder.weight)" in line
    assert "`hiddenstate inspect RUN_DIR`" in line and "no meta.json lies beside it" in line
    assert not (tmp_path / "a.html").exists()
    # named model.safetensors, still without meta.json: the same refusal
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(alone, bare / "model.safetensors")
    assert main(["inspect", str(bare / "model.safetensors"), "--out", str(tmp_path / "a.html")]) == 2
    assert "no meta.json lies beside it" in error_line(capsys)


def test_a_torch_state_dict_is_still_inspected_as_one(tmp_path, capsys):
    import safetensors.numpy

    rng = np.random.default_rng(0)
    H, I = 4, 3
    state = {"weight_ih_l0": rng.normal(size=(3 * H, I)), "weight_hh_l0": rng.normal(size=(3 * H, H)),
             "bias_ih_l0": rng.normal(size=3 * H), "bias_hh_l0": rng.normal(size=3 * H),
             "decoder.weight": rng.normal(size=(5, H))}  # a decoder but no rnn.*: not one of ours
    path = tmp_path / "gru.safetensors"
    safetensors.numpy.save_file({k: v.astype(np.float32) for k, v in state.items()}, str(path))
    assert main(["inspect", str(path), "--out", str(tmp_path / "r.html"), "--fixed-point-starts", "0"]) == 0
    out = capsys.readouterr().out
    assert "inferred:" in out and "model file of the checkpoint" not in out
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "torch state dict &#x27;gru.safetensors&#x27; (GRU)" in page or "torch state dict 'gru.safetensors' (GRU)" in page
    assert "hiddenstate GRU" not in page  # the converted layer is not what the user gave


def test_a_checkpoint_without_its_log_still_shows_its_loss_curve(run_dir, tmp_path):
    """The shipped pretrained checkpoint has no log.jsonl: the report's loss card comes from the checkpoint's history."""
    from hiddenstate.pipelines.app import _snapshot_history, inspect_checkpoint, loss_history
    from hiddenstate.train import load

    from_log, from_checkpoint = loss_history(run_dir), _snapshot_history(load(run_dir))
    assert set(from_log) == set(from_checkpoint) == {"train", "validation"}
    for name in from_log:
        for a, b in zip(from_log[name], from_checkpoint[name]):
            np.testing.assert_array_equal(a, b)
    alone = tmp_path / "alone"
    shutil.copytree(run_dir / "checkpoint", alone)  # no log.jsonl beside it
    page = inspect_checkpoint(alone, tmp_path / "r.html", n_fixed_point_starts=0).read_text(encoding="utf-8")
    assert 'id="loss"' in page
