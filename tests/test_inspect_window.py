"""``inspect_model(..., window=, stride=)`` and ``hiddenstate inspect DIR --window A:B --stride K``.

Every step is still computed; each layer's record is cut to the kept steps once checked, so the
records, the analyses and the report hold only those steps. The peak :mod:`tracemalloc` measures
falls with the window, and the estimate checked before the run (``inspection_bytes(kept=)``)
stays within 20% of it.
"""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families.hooks import estimate_bytes, recompute_layers  # noqa: E402
from hiddenstate.pipelines.family_inspection import inspection_bytes  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
V = 200


def mamba2():
    torch.manual_seed(0)
    cfg = transformers.Mamba2Config(vocab_size=V, hidden_size=64, state_size=32, num_hidden_layers=2, expand=2,
                                    head_dim=16, num_heads=8, n_groups=1, chunk_size=64)
    return transformers.Mamba2ForCausalLM(cfg).eval()


def traced(fn, *args, **kwargs):
    tracemalloc.start()
    try:
        out = fn(*args, **kwargs)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_window_on_inspect_model_lowers_the_measured_peak_and_the_estimate_follows_it():
    model = mamba2()
    T = 1024  # four pieces of 256 steps: the whole record (about 85 MiB) never exists
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, V, (2, T)))
    full, peak_full = traced(recompute_layers, model, ids)
    cut, peak_cut = traced(hs.inspect_model, model, ids, window=(64, 128), stride=2)
    assert cut.meta["T"] == 32 and cut.meta["steps"] == list(range(64, 128, 2))
    for a, b in zip(full.records, cut.layers):  # the same states (the pieces' chunks differ: round-off)
        np.testing.assert_allclose(b.record.ssm, a.ssm[64:128:2], rtol=1e-9, atol=1e-12)
    assert peak_cut < 0.35 * peak_full, (peak_cut / 2 ** 20, peak_full / 2 ** 20)
    estimate = inspection_bytes(model, T, 2, kept=32)
    assert 0.8 * peak_cut <= estimate <= 1.2 * peak_cut, (estimate / 2 ** 20, peak_cut / 2 ** 20)
    # the cap held before the run is the windowed one
    per_full, per_cut = estimate_bytes(model, T, 2), estimate_bytes(model, T, 2, kept=32)
    assert all(per_cut[i] < per_full[i] for i in per_full)


def test_a_window_is_refused_where_it_does_not_apply_or_does_not_fit():
    model = mamba2()
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, V, (1, 16)))
    with pytest.raises(ValueError, match=r"^window must be \(start, stop\) with 0 <= start < stop <= T=16; got "
                                         r"\(4, 40\)"):
        hs.inspect_model(model, ids, window=(4, 40))
    with pytest.raises(ValueError, match=r"^stride must be"):
        hs.inspect_model(model, ids, stride=0)
    with pytest.raises(ValueError, match=r"^window and stride apply to a transformers model of a registered family"):
        hs.inspect_model(torch.nn.GRU(3, 4), np.zeros((5, 1, 3), dtype=np.float32), window=(0, 2))
    with pytest.raises(ValueError, match=r"^window and stride apply to a transformers model \(whose layers"):
        hs.inspect_model(hs.Mamba(d_model=8, d_state=4), np.zeros((6, 1, 8)), stride=2)


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory):
    torch.manual_seed(0)
    family = families.find_family("mamba")
    model = getattr(transformers, family.classes[0])(family.tiny_config()).eval()
    path = tmp_path_factory.mktemp("m") / "mamba"
    model.save_pretrained(path)
    return model, path


def test_the_command_line_keeps_the_window_and_refuses_a_bad_one_in_one_line(mamba_dir, tmp_path, capsys):
    model, path = mamba_dir
    ids = np.arange(40) % 50
    np.save(tmp_path / "ids.npy", ids)
    base = ["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy")]
    assert main([*base, "--window", "8:32", "--stride", "4", "--save-states", os.fspath(tmp_path / "s.safetensors"),
                 "--out", os.fspath(tmp_path / "r.html")]) == 0
    from hiddenstate.interop.states_file import load_states

    got = load_states(tmp_path / "s.safetensors")
    an = hs.inspect_model(model, torch.from_numpy(ids[None]), window=(8, 32), stride=4)
    np.testing.assert_array_equal(got.steps, [8, 12, 16, 20, 24, 28])  # the input's positions, not 0 to 5
    (layer, saved), = list(got.states.items())[:1]
    record = an.layers[0].record
    assert record.ssm.shape[0] == 6 and an.meta["steps"] == [8, 12, 16, 20, 24, 28]
    np.testing.assert_allclose(saved["ssm"], record.ssm.astype(np.float32), rtol=0, atol=0)
    capsys.readouterr()
    for flags, message in ((["--window", "8-32"], "--window must be START:STOP, two step positions"),
                           (["--window", "8:80"], "window must be (start, stop) with 0 <= start < stop <= T=40"),
                           (["--stride", "0"], "--stride")):
        with pytest.raises(SystemExit) if flags[0] == "--stride" else _nothing():
            assert main([*base, *flags, "--out", os.fspath(tmp_path / "r2.html")]) == 2
        err = [line for line in capsys.readouterr().err.strip().splitlines()
               if "falling back" not in line and not line.startswith("hiddenstate: inspect:")]
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "r2.html").exists()
    (tmp_path / "x.safetensors").write_bytes(b"")
    assert main(["inspect", os.fspath(tmp_path / "x.safetensors"), "--window", "0:4", "--out",
                 os.fspath(tmp_path / "r3.html")]) == 2
    assert "--window applies to a save_pretrained model directory" in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_window_and_stride_that_keep_fewer_than_two_steps_are_refused_before_the_model_runs(tmp_path, capsys):
    """A new user's find: --window 100:300 --stride 500 ran the whole recomputation, then failed naming neither flag."""
    from hiddenstate.cli import main

    model = mamba2()
    ids = np.random.default_rng(0).integers(0, 50, (1, 40))
    with pytest.raises(ValueError, match=r"window and stride must keep at least 2 steps .* keep 1 of T=40"):
        hs.inspect_model(model, ids, window=(10, 30), stride=50)
    model.save_pretrained(tmp_path / "m")
    np.save(tmp_path / "ids.npy", ids)
    capsys.readouterr()  # transformers' own progress bar of the save
    assert main(["inspect", str(tmp_path / "m"), "--ids", str(tmp_path / "ids.npy"), "--window", "10:30",
                 "--stride", "50", "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--window and --stride must keep at least 2 steps" in err[0], err
    assert not (tmp_path / "r.html").exists()


def test_a_windowed_report_says_which_positions_it_reads():
    from hiddenstate.report.family_page import family_page

    an = hs.inspect_model(mamba2(), np.random.default_rng(0).integers(0, 50, (1, 200)), window=(64, 128), stride=2)
    assert "64 to 126, stride 2" in family_page(an)
