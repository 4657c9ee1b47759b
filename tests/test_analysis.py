"""analyze_model end to end on small layers, and the hidden-size sweep."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.analysis import analyze_model, memory_sweep
from hiddenstate.report import build_report

TEXT = ('She said "come here" and he said "no".\nThey (both) left.\n' * 4)


def _onehot(text):
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text])
    return np.eye(len(chars))[ids][:, None, :], ids[:, None]  # (T, 1, V), (T, 1)


@pytest.mark.parametrize("cls", [hs.RNN, hs.GRU, hs.LSTM])
def test_analyze_one_layer_with_text(cls, rng, tmp_path):
    x, tok = _onehot(TEXT)
    layer = cls(x.shape[2], 12, rng=rng)
    an = analyze_model(layer, x, tokens=tok, text=TEXT, loss={"train": np.linspace(3, 2, 20)}, grad_steps=40,
                       n_fixed_point_starts=6, rng=rng)
    T = len(TEXT)
    assert an.trace.output.shape == (T, 1, 12)
    assert len(an.gates) == {hs.RNN: 0, hs.GRU: 2, hs.LSTM: 3}[cls]
    assert an.memory.metric == "accuracy" and an.memory.lags.size == 31
    assert an.gradient_norms.norm.shape == (1, 40)
    assert an.pca.scores.shape[-1] == 12
    assert an.fixed_points is not None and all(p.q <= 1e-12 for p in an.fixed_points)
    assert "inside quotes" in an.units and an.text == TEXT
    assert 1 <= len(an.text_units) <= 5
    assert all(v.shape == (T,) for v in an.text_units.values())
    assert set(an.timings) >= {"trace", "gates", "gradient", "memory", "pca", "fixed points", "text"}
    kw = an.report_kwargs()
    assert kw["project_fixed_points"] is True
    path = build_report(tmp_path / "r.html", an, title="t")
    page = path.read_text(encoding="utf-8")
    for anchor in ("gradient", "memory", "pca", "fixed", "text"):
        assert f'id="{anchor}"' in page
    assert ('id="gates"' in page) == (cls is not hs.RNN)


def test_analyze_stacked_bidirectional_float_inputs(rng, tmp_path):
    layer = hs.GRU(3, 5, 2, bidirectional=True, rng=rng)
    x = rng.normal(size=(60, 3, 3))
    an = analyze_model(layer, x, n_fixed_point_starts=4, rng=rng)
    assert an.gradient_norms is None  # BPTT-over-time norms need one direction
    assert an.memory.metric == "r2"
    assert len(an.gates) == 2 * 2 * 2
    assert an.report_kwargs()["project_fixed_points"] is False
    build_report(tmp_path / "r.html", an)


def test_memory_sweep_capacity_grows_with_hidden_size():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 4, 1))
    rows = memory_sweep("gru", [2, 32], x, x, max_lag=10, rng=np.random.default_rng(0), repeats=1)
    assert [r["H"] for r in rows] == [2, 32]
    assert rows[1]["parameters"] > rows[0]["parameters"]
    assert rows[1]["capacity"] > rows[0]["capacity"]
    assert all(r["µs per step"] > 0 for r in rows)
    with pytest.raises(ValueError, match="cell must be"):
        memory_sweep("transformer", [2], x, x)


def test_inspect_checkpoint_writes_the_report(tmp_path):
    from hiddenstate.pipelines.app import inspect_checkpoint
    from hiddenstate.train import train

    run = tmp_path / "run"
    train({"hidden_size": 8, "steps": 3, "seq_len": 16, "batch_size": 2, "eval_every": 3, "save_every": 3,
           "dtype": "float64", "out": str(run)}, progress=False)
    text = tmp_path / "t.txt"
    text.write_text('ROMEO:\n"Hark," he said (softly), "what light?"\n' * 5 + "\u2603 not in vocab", encoding="utf-8")
    path = inspect_checkpoint(run, out=tmp_path / "r.html", text_file=text, n_chars=150)
    page = path.read_text(encoding="utf-8")
    for anchor in ("loss", "gates", "gradient", "memory", "pca", "fixed", "text"):
        assert f'id="{anchor}"' in page
    assert "t.txt" in page and "moving average" not in page
    # the CLI hook (hiddenstate inspect / the end of demo) finds it
    assert inspect_checkpoint(run, out=tmp_path / "cli.html") == tmp_path / "cli.html"
    with pytest.raises(ValueError, match="at least 20 characters"):
        inspect_checkpoint(run, out=tmp_path / "x.html", text_file=tmp_path / "t.txt", n_chars=5)
    # a run with a moving average of the weights says which weights the report looked at
    ema_run = tmp_path / "ema"
    train({"hidden_size": 8, "steps": 3, "seq_len": 16, "batch_size": 2, "eval_every": 3, "save_every": 3,
           "dtype": "float64", "ema": 0.9, "out": str(ema_run)}, progress=False)
    page = inspect_checkpoint(ema_run, out=tmp_path / "e.html", text_file=text, n_chars=150).read_text(encoding="utf-8")
    assert "weights: <b>moving average, decay 0.9</b>" in page


def test_loss_history_reads_the_log(tmp_path):
    from hiddenstate.pipelines.app import loss_history

    assert loss_history(tmp_path) is None  # no log
    lines = [
        '{"step": 1, "train_loss": 4.0}',
        "not json",
        '["step", 2]',
        '{"train_loss": 3.0}',
        '{"step": 2, "train_loss": 3.5, "val_loss": 3.75}',
        '{"step": 3, "train_loss": true}',
        '{"step": "four", "train_loss": 2.0}',
        '{"step": null, "val_loss": 2.0}',
        '{"step": 5, "train_loss": 2.5, "val_loss": "n/a"}',
        '{"step": 6, "val_loss": 2.25}',
    ]
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    curves = loss_history(str(tmp_path))  # a str works as well as a Path
    assert set(curves) == {"train", "validation"}
    steps, nats = curves["train"]
    assert steps.dtype == nats.dtype == np.float64
    np.testing.assert_array_equal(steps, [1.0, 2.0, 5.0])
    np.testing.assert_array_equal(nats, [4.0, 3.5, 2.5])
    np.testing.assert_array_equal(curves["validation"][0], [2.0, 6.0])
    np.testing.assert_array_equal(curves["validation"][1], [3.75, 2.25])
    (tmp_path / "log.jsonl").write_text('{"step": 1, "lr": 0.1}\n', encoding="utf-8")
    assert loss_history(tmp_path) is None  # a log without any loss


def test_inspect_checkpoint_checks_its_options(tmp_path):
    from hiddenstate.pipelines.app import inspect_checkpoint

    # checked before the checkpoint is read: no run needed
    with pytest.raises(ValueError, match="n_chars must be a positive integer; got 0"):
        inspect_checkpoint(tmp_path / "missing", out=tmp_path / "r.html", n_chars=0)
    with pytest.raises(TypeError, match="n_chars must be a positive integer; got str"):
        inspect_checkpoint(tmp_path / "missing", out=tmp_path / "r.html", n_chars="100")
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        inspect_checkpoint(tmp_path / "missing", out=tmp_path / "r.html", rng=0)
    assert not (tmp_path / "r.html").exists()


def test_featured_units_groups_features_by_their_best_unit():
    from hiddenstate.probe.unitfeatures import UnitCorrelation, featured_units

    def uc(name, r):
        r = np.asarray(r, dtype=float)
        top = np.argsort(-np.abs(r), kind="stable")[:3]
        return UnitCorrelation(name, r, top, r[top])

    units = {"a": uc("a", [0.1, 0.4, -0.2]), "b": uc("b", [0.3, -0.9, 0.0]), "c": uc("c", [0.5, 0.0, 0.1])}
    # unit 1 is best for a (0.4) and b (0.9): one entry, b first (it tracks b better); then unit 0 for c
    assert featured_units(units) == [(1, ["b", "a"]), (0, ["c"])]
    assert featured_units(units, limit=1) == [(1, ["b", "a"])]
    with pytest.raises(ValueError, match="limit"):
        featured_units(units, limit=0)


def test_explorer_buttons_name_each_features_best_unit(rng):
    from hiddenstate.probe.textfeatures import text_features

    x, tok = _onehot(TEXT)
    H = 16
    layer = hs.GRU(x.shape[2], H, rng=rng)
    an = analyze_model(layer, x, tokens=tok, text=TEXT, grad_steps=0, n_fixed_point_starts=0, rng=rng)
    h = an.trace.output[:, 0]  # (T, H)
    feats = text_features(TEXT)
    table = an.report_kwargs()["tables"]["Units that track text features"]
    buttons = {}
    for label, sig, unit in an.explore["featured"]:
        if sig == "h":
            assert unit not in buttons  # one button per unit
            buttons[unit] = label.split(": unit")[0].split(", ")
    best_of = {}
    for row in table:
        f = feats[row["feature"]]
        r = np.array([np.corrcoef(h[:, j], f)[0, 1] for j in range(H)])  # Pearson, independently
        best_of[row["feature"]] = int(np.argmax(np.abs(r)))
        assert row["best unit"] == best_of[row["feature"]]
    expected = {}
    for name, j in best_of.items():
        expected.setdefault(j, []).append(name)
    expected = dict(list(expected.items())[:4])
    assert {j: set(v) for j, v in buttons.items()} == {j: set(v) for j, v in expected.items()}
    for j, names in buttons.items():
        title = an.explore["units"]["best feature"][j]  # what the unit's title says it tracks
        if any(title.startswith(n + " (") for n in names):
            assert title.startswith(names[0] + " (")


def test_empty_input_is_named_at_the_start(rng):
    layer = hs.GRU(3, 4, rng=rng)
    with pytest.raises(ValueError, match=r"x must have at least one time step to analyse; got T = 0 \(x of shape \(0, 4, 3\)\)"):
        analyze_model(layer, np.zeros((0, 4, 3)))
    with pytest.raises(ValueError, match=r"got T = 0 \(x of shape \(2, 0, 3\), batch_first\)"):
        analyze_model(hs.GRU(3, 4, batch_first=True, rng=rng), np.zeros((2, 0, 3)))
    with pytest.raises(ValueError, match="got T = 0"):
        hs.inspect_model(layer, np.zeros((0, 4, 3)))
