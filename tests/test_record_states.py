"""States out, fast (issue 35): :func:`hiddenstate.record_states` and ``hiddenstate states``.

What the streamed states are held to comes from elsewhere: the records of
:func:`recompute_layers` (each layer recomputed in float64 from its hooked input and held to the
model's output at every step, tests/test_families*.py), and the model's own cache after the same
ids (``use_cache=True``: the last state). A block that misses part of the mixer's math is refused
on the checked prefix, by the whole output or by the state part alone.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402
from hiddenstate.kinds import get_kind  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers.utils.logging.set_verbosity_error()

FAMILIES = [f.name for f in families.registered()]
STREAMED = [f.name for f in families.registered() if get_kind(f.kind).stream is not None]


def build(name):
    fam = families.family_of(name)
    torch.manual_seed(0)
    return getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()


def ids_for(N=2, T=40, seed=1):
    return np.random.default_rng(seed).integers(3, 50, (N, T))


def relative(a, b):
    scale = float(np.abs(b).max())
    return float(np.abs(a - b).max()) / (scale if scale > 0 else 1.0)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_gives_the_states_of_the_recomputed_records(name):
    model, ids = build(name), ids_for()
    got = hs.record_states(model, ids, dtype="float64", check_steps=24)
    ref = recompute_layers(model, ids)
    kind = get_kind(ref.family.kind)
    assert list(got.states) == list(ref.layers) and got.kind == kind.name and got.dtype == "float64"
    np.testing.assert_array_equal(got.steps, np.arange(40))
    for k, (layer, rec) in enumerate(zip(ref.layers, ref.records)):
        want = kind.states(rec)
        assert sorted(got.states[layer]) == sorted(want)
        for state, a in want.items():
            b = got.states[layer][state]
            assert b.shape == a.shape and b.dtype == np.float64
            # the first layer reads the model's own input; the ones above read our layers' outputs, which
            # differ from the mixers' by the model's float32 round-off (within its tolerance)
            assert relative(b, a) <= (1e-9 if k == 0 else 100 * tolerance(torch.float32)), (layer, state)
    for err in got.errors.values():
        assert err["output"] <= tolerance(torch.float32)
        if kind.skip:  # the state part was held alone, or a tenth of it would show in the whole output
            assert err["state_part"] is not None or 0.1 * err["state_size"] > tolerance(torch.float32)
            assert (err["state_part"] is None) == (0.1 * err["state_size"] > tolerance(torch.float32))
        else:
            assert err["state_part"] is None and err["state_size"] is None


@pytest.mark.parametrize("name", ["mamba", "mamba2", "qwen3_next", "falcon_h1"])
def test_the_last_state_is_the_models_own_cache_through_the_file(name, tmp_path):
    model, ids = build(name), ids_for(T=37)
    got = hs.record_states(model, ids, dtype="float32")
    path = got.save(tmp_path / "s.safetensors")
    back = hs.load_states(path)
    assert back.kind == got.kind and back.model == name and back.dtype == "float32"
    assert back.errors == got.errors and back.checked_steps == got.checked_steps == 37  # the proof travels too
    with torch.no_grad():
        out = model(torch.from_numpy(ids), use_cache=True)
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    state = {"mamba": "ssm", "mamba2": "ssm", "gated_delta": "recurrent"}[got.kind]
    for layer, by_name in back.states.items():
        np.testing.assert_array_equal(by_name[state], got.states[layer][state])  # the file round-trips bitwise
        own = cache.get_recurrent_state(layer).double().numpy()
        assert relative(by_name[state][-1].astype(np.float64), own) <= tolerance(torch.float32), layer


def test_window_stride_heads_and_states_keep_exactly_those_entries():
    model, ids = build("mamba2"), ids_for(T=45)
    full = hs.record_states(model, ids, dtype="float64")
    part = hs.record_states(model, ids, dtype="float64", window=(5, 41), stride=3, heads=[2, 0], states="ssm")
    np.testing.assert_array_equal(part.steps, np.arange(5, 41, 3))
    assert part.heads == (2, 0)
    for layer, by_name in part.states.items():
        assert list(by_name) == ["ssm"]
        np.testing.assert_array_equal(by_name["ssm"], full.states[layer]["ssm"][5:41:3][:, :, [2, 0]])
    assert part.nbytes == sum(a.nbytes for d in part.states.values() for a in d.values())


def test_float32_states_are_the_float64_ones_to_float32_round_off():
    model, ids = build("qwen3_next"), ids_for()
    a = hs.record_states(model, ids, dtype="float64")
    b = hs.record_states(model, ids, dtype="float32")
    for layer in a.states:
        for state in a.states[layer]:
            assert b.states[layer][state].dtype == np.float32
            assert relative(b.states[layer][state].astype(np.float64), a.states[layer][state]) < 1e-4


def _with_wrong_decay(monkeypatch, name, factor):
    fam = families.family_of(name)
    wrong = dataclasses.replace(fam, to_block=lambda mixer, config, _f=fam.to_block: _scaled(_f(mixer, config), factor))
    import hiddenstate.interop.families.hooks as hooks
    import hiddenstate.interop.families.states_out as out

    for module in (families.registry, hooks, out):
        monkeypatch.setattr(module, "family_of", lambda model, _w=wrong: _w)


def _scaled(blk, factor):
    blk.params = {**blk.params, "A_log": blk.params["A_log"] + np.log(factor)}
    return blk


@pytest.mark.parametrize("name", ["mamba", "falcon_h1"])
def test_a_block_with_decays_ten_times_too_fast_is_refused_before_any_state_is_kept(name, monkeypatch):
    model = build(name)
    if name == "falcon_h1":  # at its multipliers the state is ~1e-12 of the output: only the state part sees it
        assert get_kind("mamba2").skip == ("D",)
    _with_wrong_decay(monkeypatch, name, 10.0)
    with pytest.raises(ValueError, match=r"layer \d+ \(.*\) run by our .* kernel in float32 differs from the model's "
                                         r"own output"):
        hs.record_states(model, ids_for(), check_steps=32)


def test_a_kind_without_a_stream_refuses_bad_heads_before_it_runs(monkeypatch):
    model, ids = build("lfm2"), ids_for(T=20)
    ran = []
    import hiddenstate.interop.families.states_out as out

    monkeypatch.setattr(out, "recompute_layers", lambda *a, **k: ran.append(1))
    with pytest.raises(ValueError, match=r"heads must be distinct indices in \[0, 16\) \(the first axis of layer 0's "
                                         r"'conv' state"):
        hs.record_states(model, ids, heads=[99])
    assert not ran


def test_bad_choices_name_the_argument_and_the_rule():
    model, ids = build("mamba"), ids_for(T=20)
    with pytest.raises(ValueError, match=r"dtype must be 'float32' or 'float64'.*got 'float16'"):
        hs.record_states(model, ids, dtype="float16")
    with pytest.raises(ValueError, match=r"heads must be distinct indices in \[0, 16\) \(the first axis of layer 0's "
                                         r"'ssm' state, shape \(16, 4\)\); got \[16\]"):
        hs.record_states(model, ids, heads=[16])
    with pytest.raises(TypeError, match=r"heads must be a sequence of indices \(ints\) or None; got \[1.5\]"):
        hs.record_states(model, ids, heads=[1.5])
    with pytest.raises(ValueError, match=r"states must name states of layer 0, \['conv', 'ssm'\]; got \['h'\]"):
        hs.record_states(model, ids, states="h")
    with pytest.raises(ValueError, match=r"window must be \(start, stop\) with 0 <= start < stop <= T=20"):
        hs.record_states(model, ids, window=(3, 30))
    with pytest.raises(ValueError, match=r"max_bytes \(1000 bytes\) must cover the states: layers \[0, 1\] of this mamba "
                                         r"model on T=20 steps of N=2 sequence\(s\) would take about .*: the kept "
                                         r"states \(20 step\(s\) in float32\)"):
        hs.record_states(model, ids, max_bytes=1000)
    with pytest.raises(TypeError, match=r"check_steps"):
        hs.record_states(model, ids, check_steps=2.5)


def test_the_cli_writes_a_new_file_and_never_replaces_another(tmp_path, capsys):
    directory = tmp_path / "m"
    build("qwen3_next").save_pretrained(directory)
    ids = ids_for(T=30)
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "s.safetensors"
    args = ["states", str(directory), "--ids", str(tmp_path / "ids.npy"), "--out", str(out), "--window", "5:30",
            "--stride", "2", "--heads", "1,3", "--states", "recurrent", "--dtype", "float64", "--check-steps", "16"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert f"states: {out}" in captured.out and "layer 0: recurrent (13, 2, 2, 8, 6)" in captured.out
    assert "checking our kernel against the model's own" in captured.err
    saved = hs.load_states(out)
    np.testing.assert_array_equal(saved.steps, np.arange(5, 30, 2))
    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    with torch.no_grad():
        cache = model(torch.from_numpy(ids), use_cache=True).cache
    for layer, by_name in saved.states.items():
        own = cache.get_recurrent_state(layer).double().numpy()[:, [1, 3]]
        assert relative(by_name["recurrent"][-1], own) <= tolerance(torch.float32)  # step 29, the last
    assert main(args) == 2  # the states file exists: not replaced without --overwrite
    assert "--out must be a new file; got" in (err := capsys.readouterr().err)
    assert "a states file that exists. Pass --overwrite or choose another name." in err
    assert main(args + ["--overwrite"]) == 0
    capsys.readouterr()
    assert main(args[:5] + [str(tmp_path / "no" / "s.safetensors")]) == 2  # refused before the model loads
    err = capsys.readouterr().err
    assert "--out must be a file in an existing folder" in err and "loading" not in err
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    assert main(args[:5] + [str(other)]) == 2
    assert other.read_text() == "mine" and "never replaced" in capsys.readouterr().err
