"""ZAYA (issue 34): the CCA projection of every layer, held to the model's own output and cache.

The tiny random model comes from ``Family.tiny_config`` (seeded, float32, no download). What the
recomputation is held to comes from the model itself: the ``(query, key, value)`` its own
``ZayaCCAProjection`` returned (the forward hook's, flattened), and the window of ``[q | k]`` and the
delayed value its cache keeps (conv state 0 and recurrent state 0 of each layer) after a prefill,
and after a prefill then one token a call. The lag norms are held to the exact Jacobian of our block
measured column by column, the state's share to each step run again from a zero state.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import registry  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402
from hiddenstate.interop.families.zaya import cca_block, rebuild  # noqa: E402
from hiddenstate.kinds import get_kind  # noqa: E402
from hiddenstate.kinds.agreement import readout_share  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
W = 3  # (cca_time0 - 1) + (cca_time1 - 1) of the tiny config


def build(seed=0):
    fam = families.family_of("zaya")
    torch.manual_seed(seed)
    return transformers.ZayaForCausalLM(fam.tiny_config()).eval()


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 45, (N, T)))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def test_every_layer_is_recomputed_to_the_models_own_output_and_cache():
    model, ids = build(), ids_for()
    rc = recompute_layers(model, ids)
    assert rc.family.kind == "cca" and rc.layers == (0, 1, 2)
    for e in rc.layer_map:
        assert (e.role, e.class_name, e.path) == ("recurrent", "ZayaCCAProjection", f"model.layers.{e.index}.self_attn"
                                                                                     f".qkv_proj")
        assert [(r, c) for r, c, _ in e.parts] == [("attention", "ZayaAttention"), ("moe", "ZayaSparseMoeBlock")]
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= 1e-5 for err in rc.errors), rc.errors
    print(f"zaya: worst recomputed layer {max(rc.errors):.2e}")
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
    for i, rec in zip(rc.layers, rc.records):
        assert rec.conv.shape == (24, 2, 48, W) and rec.v.shape == (24, 2, 8)
        assert rel(rec.conv[-1], cache.get_conv_state(i, state_idx=0).double().numpy()[..., -W:]) <= 1e-5, i
        assert rel(rec.v[-1], cache.get_recurrent_state(i, state_idx=0).double().numpy()) <= 1e-5, i


def test_token_by_token_decoding_and_a_padding_mask_are_what_our_block_carries():
    model = build()
    fam = families.family_of(model)
    ids = ids_for(T=11)
    mixers = fam.mixers(model)
    calls = {i: [] for i in mixers}
    hooks = [m.register_forward_hook(lambda mod, a, kw, out, i=i: calls[i].append(
        tuple(x.double().numpy() for x in fam.hooked(a, kw, out))), with_kwargs=True) for i, m in mixers.items()]
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0  # sequence 1 left-padded: the model zeroes those inputs of the projection (conv_mask)
    with torch.no_grad():
        cache = model(ids[:, :6], attention_mask=mask, use_cache=True).cache
        for t in range(6, 11):
            mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
            cache = model(ids[:, t:t + 1], attention_mask=mask, cache=cache, use_cache=True).cache
    for h in hooks:
        h.remove()
    for i, seen in calls.items():
        assert [u.shape[1] for u, _ in seen] == [6, 1, 1, 1, 1, 1]
        assert (seen[0][0][1, :2] == 0).all()  # the hooked input is masked as the module masks it
        blk, state = fam.block(model, i), None
        for u, theirs in seen:
            ours, state, _ = blk.forward(u, state)
            assert rel(ours, theirs) <= 1e-5, i
        assert rel(state[0], cache.get_conv_state(i, state_idx=0).double().numpy()[..., -W:]) <= 1e-5, i
        assert rel(state[1], cache.get_recurrent_state(i, state_idx=0).double().numpy()) <= 1e-5, i


def test_a_block_without_the_window_or_the_delayed_value_is_refused():
    model, ids = build(), ids_for()
    fam = families.family_of(model)

    def no_window(mixer, config):  # the depthwise taps that read the window set to 0
        blk = cca_block(mixer, config)
        blk.params["conv_qk_depthwise.weight"][..., :-1] = 0.0
        return blk

    def no_delay(mixer, config):  # the value's delayed half read from the current token
        blk = cca_block(mixer, config)
        blk.params["v_proj_delayed.weight"] = blk.params["v_proj_current.weight"].copy()
        return blk

    for wrong in (no_window, no_delay):
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(registry._REGISTRY, "zaya", dataclasses.replace(fam, to_block=wrong))
            with pytest.raises(ValueError, match=r"^layer 0 \(ZayaCCAProjection\) recomputed by our CCAProjection "
                                                 r"block differs from the model's own output"):
                recompute_layers(model, ids)


def test_the_lag_norms_are_the_blocks_exact_jacobian():
    model = build()
    blk = families.family_of(model).block(model, 1)
    C, V = 48, 8
    u = np.random.default_rng(2).normal(size=(1, 6, 16))
    kind = get_kind("cca")
    _, rec = kind.run(blk, u)
    norms = kind.view(rec).lag_norms(5)
    F = C * W + V
    for k in range(6):  # dS_T/dS_(T-k): the last k steps run from the state plus each unit column
        base = (np.zeros((1, C, W)), np.zeros((1, V)))
        J = np.zeros((F, F))
        for j in range(F):
            e = np.zeros(F)
            e[j] = 1.0
            start = (e[:C * W].reshape(1, C, W), e[C * W:].reshape(1, V))
            if k == 0:
                out = start
            else:
                _, out, _ = blk.forward(u[:, 6 - k:], start)
                _, zero, _ = blk.forward(u[:, 6 - k:], base)
                out = (out[0] - zero[0], out[1] - zero[1])
            J[:, j] = np.concatenate([out[0].reshape(-1), out[1].reshape(-1)])
        assert norms.spectral[k] == pytest.approx(np.linalg.norm(J, 2), abs=1e-12), k
        assert norms.rms[k] == pytest.approx(np.linalg.norm(J) / np.sqrt(F), abs=1e-12), k


def test_the_states_share_is_each_steps_output_less_its_run_from_a_zero_state():
    model = build()
    blk = families.family_of(model).block(model, 2)
    u = np.random.default_rng(3).normal(size=(2, 9, 16))
    out, _, _, rec = blk.forward(u, record=True)
    parts = []
    for t in range(9):  # the step run from the state before it, and from a zero window and delayed value
        before = (np.zeros((2, 48, W)), blk.params["v_proj_delayed.bias"] + np.zeros((2, 8))) if t == 0 else (
            rec.conv[t - 1], rec.v[t - 1])
        with_state = blk.forward(u[:, t:t + 1], before)[0]
        alone = blk.forward(u[:, t:t + 1], (np.zeros((2, 48, W)), np.zeros((2, 8))))[0]
        parts.append((with_state - alone)[:, 0])
    part = np.stack(parts, axis=1)
    keep = np.r_[0:48, 56:64]  # [query | key | delayed value]
    expected = readout_share(out[..., keep], out[..., keep] - part[..., keep])
    assert get_kind("cca").share(blk, rec) == pytest.approx(expected, rel=1e-10)
    assert 0.05 < expected < 0.95  # neither all state nor none


def test_an_edited_view_is_put_back_as_the_three_tensors():
    model, ids = build(), ids_for(N=2, T=12)
    fam = families.family_of(model)
    mixer = fam.mixers(model)[0]
    seen = []
    h = mixer.register_forward_hook(lambda mod, a, kw, out: seen.append(out), with_kwargs=True)
    with torch.no_grad():
        model(ids, use_cache=False)
    h.remove()
    q, k, v = seen[0]
    flat = fam.hooked((torch.zeros(2, 12, 16),), {}, seen[0])[1]
    back = rebuild(seen[0], flat)
    assert all(torch.equal(a, b) and a.shape == b.shape for a, b in zip(back, (q, k, v)))
    run = hs.intervene(model, ids, [hs.StateEdit(0, 5, "zero", part="v")])
    assert (run.states[0]["v"][5] == 0).all()
    np.testing.assert_array_equal(run.states[0]["conv"], run.clean_states[0]["conv"])
    assert (run.logit_diff[:, :6] == 0).all() and run.logit_diff[:, 6].min() > 0


def test_inspect_model_from_the_object_and_its_directory(tmp_path):
    model = build()
    model.save_pretrained(tmp_path / "m")
    ids = ids_for(N=1, T=20)
    out = tmp_path / "r.html"
    a = hs.inspect_model(model, ids, out=out, max_lag=5)
    b = hs.inspect_model(tmp_path / "m", ids)
    assert a.meta["kind"] == "cca" and [la.layer for la in a.layers] == [0, 1, 2]
    for x, y in zip(a.layers, b.layers):
        np.testing.assert_array_equal(x.record.conv, y.record.conv)
        np.testing.assert_array_equal(x.record.v, y.record.v)
    assert 0 < a.layers[0].recomputed.share < 1 and "the state's share" in a.summary()
    page = out.read_text(encoding="utf-8")
    assert "ZayaCCAProjection" in page and "a one-token delayed value" in page


@pytest.mark.parametrize("value, error, words", [(-1, ValueError, r"must be an int in \[0, 2,147,483,647\]; got -1"),
                                                 (2.5, TypeError, "must be an int .*; got a float 2.5")])
def test_a_hostile_cca_time_in_config_json_is_one_line_naming_the_field(tmp_path, value, error, words):
    import json

    build().save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["cca_time0"] = value
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(error, match=f"config.json' field cca_time0 {words}"):
        hs.inspect_model(tmp_path / "m", np.array([[1, 2, 3]]))
