"""An agreement figure that can see the recurrence (issue 32): a block with wrong decays is refused, for every family.

Every registered family's tiny random model (its ``tiny_config``, seeded, float32, no download)
is recomputed by a block whose decay (or, for a short convolution or ZAYA's CCA projection, whose
taps on its window) is deliberately wrong, and :func:`recompute_layers` must refuse it. Falcon-H1 is also built at
transformers' default initialisation with small muP multipliers
(``ssm_multipliers`` 0.25 to 0.5, ``ssm_in_multiplier`` 1.25, ``ssm_out_multiplier`` 0.24):
there the state's share of the readout is about 4e-12, a block with decays ten times too fast
agrees with the whole output to 6e-7 (inside the float32 tolerance 1.2e-4: the check before this
one let it through), and only the state-part check (``D`` set to 0 in the model's mixer and in
our block) refuses it.
"""

from __future__ import annotations

import dataclasses
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import registry  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
NAMES = [f.name for f in families.registered()]


def falcon_h1_at_its_multipliers():
    """A 3-layer Falcon-H1 at transformers' default initialisation (0.02) and small muP multipliers (0.25 to 1.25)."""
    return transformers.FalconH1Config(
        vocab_size=50, hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=3,
        num_key_value_heads=1, mamba_d_ssm=24, mamba_n_heads=3, mamba_d_head=8, mamba_n_groups=3, mamba_d_state=8,
        mamba_d_conv=3, mamba_chunk_size=8, mamba_rms_norm=True,
        ssm_multipliers=[0.35, 0.25, 0.35, 0.5, 0.35], ssm_in_multiplier=1.25, ssm_out_multiplier=0.24)


CASES = {name: name for name in NAMES} | {"falcon_h1 at its multipliers": "falcon_h1"}


def build(case, seed=0):
    fam = registry.find_family(CASES[case])
    torch.manual_seed(seed)
    config = falcon_h1_at_its_multipliers() if case != CASES[case] else fam.tiny_config()
    return getattr(transformers, fam.classes[0])(config).eval()


def ids_for(model, seed=1, N=2, T=24):
    return np.random.default_rng(seed).integers(0, model.get_input_embeddings().num_embeddings, (N, T))


def _softplus_inv(y):
    return y + np.log(-np.expm1(-y))


def wrong_decay(blk, kind: str) -> None:
    """Make ``blk``'s decays ten times too fast (its rate 10x), or a short convolution's window taps 10x, in place."""
    p = blk.params
    if kind in ("mamba", "mamba2", "gated_delta"):  # decay exp(-dt exp(A_log))
        p["A_log"] = p["A_log"] + np.log(10.0)
    elif kind == "kda":
        p["forget_gate.A_log"] = p["forget_gate.A_log"] + np.log(10.0)
    elif kind == "rglru":  # a = exp(-8 r softplus(Lambda))
        p["rg_lru.recurrent_param"] = _softplus_inv(10 * np.logaddexp(0.0, p["rg_lru.recurrent_param"]))
    elif kind == "mlstm":  # f = sigmoid(f_pre): the forget gate's bias lowered
        p["fgate_preact.bias"] = p["fgate_preact.bias"] - 3.0
    elif kind == "rwkv":  # w = exp(-exp(time_decay))
        p["time_decay"] = p["time_decay"] + np.log(10.0)
    elif kind == "lightning":  # exp(-lambda_h) per step
        blk.slope_rate = blk.slope_rate * 10.0
    elif kind == "shortconv":  # the taps that read the state (the window), not the current input's
        p["conv.weight"] = np.concatenate([10.0 * p["conv.weight"][..., :-1], p["conv.weight"][..., -1:]], axis=-1)
    elif kind == "cca":  # ZAYA: the depthwise taps that read the window (not the current token's)
        w = p["conv_qk_depthwise.weight"]
        p["conv_qk_depthwise.weight"] = np.concatenate([10.0 * w[..., :-1], w[..., -1:]], axis=-1)
    else:
        raise AssertionError(f"no wrong decay for kind {kind!r}: add one")


@pytest.mark.parametrize("case", list(CASES))
def test_a_block_with_wrong_decays_is_refused(case, monkeypatch):
    model = build(case)
    ids = ids_for(model)
    rc = recompute_layers(model, ids)  # the right block is accepted
    assert all(0 <= err <= rc.tolerance for err in rc.errors)
    good = registry.find_family(CASES[case])

    def off(mixer, config):
        blk = good.to_block(mixer, config)
        wrong_decay(blk, good.kind)
        return blk

    monkeypatch.setitem(registry._REGISTRY, good.name, dataclasses.replace(good, to_block=off))
    with pytest.raises(ValueError, match=r"^layer \d+ \(\w+\) recomputed by our \w+ block differs from the model's own "
                                         r"output .*above the tolerance"):
        recompute_layers(model, ids)


def test_falcon_h1_at_its_multipliers_hides_the_state_from_the_whole_output_but_not_from_the_state_part(monkeypatch):
    model = build("falcon_h1 at its multipliers")
    ids = ids_for(model)
    rc = recompute_layers(model, ids)
    mixers = rc.family.mixers(model)
    for i, err, rec in zip(rc.layers, rc.errors, rc.records):
        D = mixers[i].D.detach().double().numpy()[:, None]  # per head
        ch, y = rec.y - D * rec.x, rec.y  # the state's readout C h, and y = C h + D x (the model's own D)
        assert err.share == pytest.approx(np.var(ch) / np.var(y), rel=1e-12)
        assert err.share < 1e-9 and err.seen  # a state-part check ran: seen
        assert err.state_error is not None and err.state_error <= tolerance(torch.float32)
        assert "the state's share" in err.phrase() and "held to" in err.phrase()
    good = registry.find_family("falcon_h1")

    def off(mixer, config):
        blk = good.to_block(mixer, config)
        wrong_decay(blk, "mamba2")
        return blk

    monkeypatch.setitem(registry._REGISTRY, "falcon_h1", dataclasses.replace(good, to_block=off))
    with pytest.raises(ValueError, match=r"with its skip term \(D\) set to 0 in both by (\d\.\d+e-0[12]|0\.\d+) of its "
                                         r"largest value.*the state part \(the recurrence\) disagrees"):
        recompute_layers(model, ids)  # the whole output agrees (about 6e-7): only the state part shows the decays


def test_the_state_part_is_held_in_the_models_own_mixer_whose_d_is_restored():
    model = build("falcon_h1 at its multipliers")
    mixer = registry.find_family("falcon_h1").mixers(model)[0]
    before = mixer.D.detach().clone()
    recompute_layers(model, ids_for(model))
    assert torch.equal(mixer.D, before) and mixer.D.abs().min() > 0  # the model is as it was


def test_the_agreement_is_its_float_with_the_states_share():
    from hiddenstate.kinds.agreement import Agreement, readout_share, sees_state

    y = np.array([1.0, 3.0, 5.0, 7.0])
    skip = np.array([1.0, 2.0, 3.0, 4.0])  # y - skip = 0, 1, 2, 3: var 1.25 of var(y) = 5
    assert readout_share(y, skip) == pytest.approx(0.25)
    assert readout_share(np.ones(3), np.zeros(3)) == 0.0
    with pytest.raises(ValueError, match="skip must have the readout's shape"):
        readout_share(y, skip[:3])
    assert sees_state(1.0, 1.2e-4) and not sees_state(1e-6, 1.2e-4) and sees_state(2e-6, 1.2e-4)  # 0.1 sqrt(s) > tol
    a = Agreement(2e-7, share=6e-9, state_error=3e-7, tolerance=1.2e-4)
    assert a == 2e-7 and isinstance(a, float) and a.seen
    assert a.phrase() == ("2e-07 of the model's own output; the state's share 6e-09 of the readout, its part held to "
                          "3e-07 with the skip D x set to 0 in both")
    hidden = Agreement(5.9e-7, share=6e-9)
    assert not hidden.seen and hidden.phrase().endswith("too small for this check to see the recurrence")
    assert Agreement(1e-7).phrase().endswith("no skip term beside the state's readout")
    back = pickle.loads(pickle.dumps(hidden))
    assert (back, back.share, back.state_error, back.tolerance) == (hidden, 6e-9, None, 1.2e-4)


def test_the_summary_and_the_card_show_the_share_and_the_state_part(tmp_path):
    import hiddenstate as hs

    model = build("falcon_h1 at its multipliers")
    out = tmp_path / "report.html"
    an = hs.inspect_model(model, ids_for(model, N=1, T=40), out=out)
    text = an.summary()
    assert text.count("the state's share") == 3 and "with the skip D x set to 0 in both" in text
    page = out.read_text(encoding="utf-8")
    assert page.count("with the skip D set to 0 in the model's own mixer and in our block") == 3
