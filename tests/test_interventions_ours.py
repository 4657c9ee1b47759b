"""Interventions in our own models (issue 32): CharRNN stacks of every cell, MambaLM, Mamba2LM.

Every edited run is held to a reference computed here independently: the CharRNN's layers run
step by step with the textbook step functions (:mod:`hiddenstate.classic.textbook`; the GRU's
reset-after form written out below), the state edited by hand after the edited step; the Mamba
LMs and the CharRNNs of minGRU, minLSTM and Mamba blocks fed one token a call with their states
carried and the edited layer's state changed by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.classic.textbook import elman_step, lstm_step
from hiddenstate.train.model import CharRNN

V, H, L, N, T, STEP = 7, 5, 2, 2, 10, 4


def ids_for(seed=1, T=T):
    return np.random.default_rng(seed).integers(0, V, (N, T))


def char_model(cell, seed=0):
    return CharRNN(V, H, L, cell=cell, embedding_dim=3 if cell == "lstm" else None, rng=np.random.default_rng(seed))


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def reference_charrnn(model, ids, edit_at=None):
    """Logits (N, T, V) of ``model`` step by step; ``edit_at(layer, t, {"h", "c"}) -> dict`` after each step.

    The edit changes the state each layer carries into step t+1: the outputs of step t (the layer
    above's input, the logits) are read before it, as "the state after reading token t" means.
    """
    p, cell, G = model.params, model.cell, {"gru": 3, "lstm": 4, "rnn": 1}[model.cell]
    x_all = model.embed(ids)  # (N, T, I)
    h = [np.zeros((ids.shape[0], H)) for _ in range(L)]
    c = [np.zeros((ids.shape[0], H)) for _ in range(L)]
    logits = []
    for t in range(ids.shape[1]):
        x = x_all[:, t]
        for k in range(L):
            W, U = (np.split(p[f"rnn.weight_{a}_l{k}"], G) for a in ("ih", "hh"))
            bi, bh = (np.split(p[f"rnn.bias_{a}_l{k}"], G) for a in ("ih", "hh"))
            if cell == "rnn":
                h[k] = elman_step(x, h[k], W[0].T, U[0].T, bi[0] + bh[0])
            elif cell == "lstm":  # torch's gate order i, f, g, o
                q = {f"{m}_{g}": v for j, g in enumerate("ifgo")
                     for m, v in (("W", W[j].T), ("U", U[j].T), ("b", bi[j] + bh[j]))}
                h[k], c[k] = lstm_step(x, h[k], c[k], q)
            else:  # torch's GRU (reset after the recurrent product): gates r, z, n
                r = sigmoid(x @ W[0].T + bi[0] + h[k] @ U[0].T + bh[0])
                z = sigmoid(x @ W[1].T + bi[1] + h[k] @ U[1].T + bh[1])
                n = np.tanh(x @ W[2].T + bi[2] + r * (h[k] @ U[2].T + bh[2]))
                h[k] = (1 - z) * n + z * h[k]
            x = h[k]
        logits.append(x @ p["decoder.weight"].T + p["decoder.bias"])
        for k in range(L) if edit_at is not None else ():  # the state carried to step t+1, every output read
            new = edit_at(k, t, {"h": h[k], "c": c[k]})
            h[k], c[k] = new["h"], new["c"]
    return np.stack(logits, axis=1)


def plain(model, ids):
    if isinstance(model, CharRNN):
        return model.forward(ids.T, need_cache=False)[0].transpose(1, 0, 2)
    return model.forward(ids)[0]


MODELS = {"gru": lambda: char_model("gru"), "lstm": lambda: char_model("lstm"), "rnn": lambda: char_model("rnn"),
          "mamba": lambda: hs.MambaLM(V, 8, L, rng=np.random.default_rng(0)),
          "mamba2": lambda: hs.Mamba2LM(V, 16, L, head_dim=8, rng=np.random.default_rng(0))}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_null_edit_returns_the_plain_forward(name):
    model, ids = MODELS[name](), ids_for()
    own = plain(model, ids)
    null = [hs.StateEdit(1, STEP, "scale", value=1.0), hs.StateEdit(0, 2, "add", value=0.0, until=6)]
    run = hs.intervene(model, ids, null)
    np.testing.assert_array_equal(run.logits, own)
    np.testing.assert_array_equal(run.clean_logits, own)
    ours = hs.intervene(model, ids, null, output="ours")  # the segmented run itself
    assert np.abs(ours.logits - own).max() <= 1e-12 * np.abs(own).max()
    for i in (0, 1):
        for f, v in run.states[i].items():
            np.testing.assert_array_equal(v, run.clean_states[i][f])
    assert run.errors == {} and run.model in ("CharRNN(" + name + ")", "MambaLM", "Mamba2LM")


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
@pytest.mark.parametrize("op, value, how", [("zero", None, lambda s: 0 * s), ("scale", -2.0, lambda s: -2 * s),
                                            ("add", "steer", None)])
def test_a_charrnn_edit_equals_the_step_by_step_reference(cell, op, value, how):
    model, ids = char_model(cell), ids_for()
    steer = np.random.default_rng(4).normal(size=H)
    if value == "steer":
        value, how = steer, (lambda s: s + steer)
    layer = 0 if cell == "rnn" else 1
    part = "h" if cell == "lstm" else "state"

    def by_hand(k, t, st):
        return {**st, "h": how(st["h"])} if (k, t) == (layer, STEP) else st

    want = reference_charrnn(model, ids, by_hand)
    clean = reference_charrnn(model, ids)
    run = hs.intervene(model, ids, [hs.StateEdit(layer, STEP, op, value=value, part=part)], target=ids)
    np.testing.assert_allclose(run.clean_logits, clean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.logits, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(run.logits[:, :STEP + 1], run.clean_logits[:, :STEP + 1])  # the past unchanged
    assert (run.kl[:, :STEP + 1] == 0).all() and (run.logit_diff[:, STEP + 1:] > 1e-6).all()  # the rest changed
    np.testing.assert_allclose(run.states[layer]["h"][STEP], how(run.clean_states[layer]["h"][STEP]), atol=1e-15)
    assert run.target_prob.shape == (N, T)


def test_an_lstms_cell_state_is_edited_alone():
    model, ids = char_model("lstm"), ids_for()
    run = hs.intervene(model, ids, [hs.StateEdit(0, STEP, "zero", part="c", channels=[1, 3])])
    keep = np.array([1.0, 0, 1, 0, 1])
    want = reference_charrnn(model, ids, lambda k, t, st: {**st, "c": st["c"] * keep} if (k, t) == (0, STEP) else st)
    np.testing.assert_allclose(run.logits, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(run.states[0]["h"][STEP], run.clean_states[0]["h"][STEP])  # h not touched
    np.testing.assert_array_equal(run.states[0]["c"][STEP], run.clean_states[0]["c"][STEP] * keep)
    moved = np.abs(run.states[0]["h"][STEP + 1] - run.clean_states[0]["h"][STEP + 1])  # c carries on into h
    assert (moved[:, [1, 3]] > 1e-6).all() and (moved[:, [0, 2, 4]] == 0).all()  # elementwise: those units only
    both = hs.intervene(model, ids, [hs.StateEdit(0, STEP, "zero")])  # part="state": h and c
    assert (both.states[0]["h"][STEP] == 0).all() and (both.states[0]["c"][STEP] == 0).all()


@pytest.mark.parametrize("name, part", [("mamba", "state"), ("mamba2", "state"), ("mamba", "conv"),
                                        ("mamba2", "conv")])
def test_a_mamba_lm_edit_equals_the_model_fed_one_token_a_call(name, part):
    model, ids = MODELS[name](), ids_for()
    field = "ssm" if part == "state" else "conv"
    shape = model.forward(ids[:, :1])[1][1]._asdict()[field].shape[1:]
    steer = np.random.default_rng(3).normal(size=shape)
    run = hs.intervene(model, ids, [hs.StateEdit(1, STEP, "add", value=steer, part=part, until=STEP + 1)])
    states, logits = None, []
    for t in range(T):
        lg, states, _ = model.forward(ids[:, t:t + 1], states)
        if t in (STEP, STEP + 1):
            states[1] = states[1]._replace(**{field: states[1]._asdict()[field] + steer})
        logits.append(lg[:, 0])
    want = np.stack(logits, axis=1)
    scale = np.abs(want).max()
    assert np.abs(run.logits - want).max() <= 1e-12 * scale
    np.testing.assert_array_equal(run.logits[:, :STEP + 1], run.clean_logits[:, :STEP + 1])
    assert np.abs(run.logits[:, STEP + 1:] - run.clean_logits[:, STEP + 1:]).max() > 1e-6 * scale
    np.testing.assert_allclose(run.states[1][field][STEP], run.clean_states[1][field][STEP] + steer, atol=1e-13)


NEW_CELLS = {"mingru": lambda: CharRNN(V, H, L, cell="mingru", rng=np.random.default_rng(0)),
             "minlstm": lambda: CharRNN(V, H, L, cell="minlstm", embedding_dim=3, rng=np.random.default_rng(0)),
             "mamba-cell": lambda: CharRNN(V, 8, L, cell="mamba", rng=np.random.default_rng(0))}


def one_token_a_call(model, ids, edit_at):
    """Logits (N, T, V) of a CharRNN fed one token a call, ``edit_at(t, state) -> state`` after each step."""
    state, logits = None, []
    for t in range(ids.shape[1]):
        lg, state, _ = model.forward(ids[:, t:t + 1].T, state, need_cache=False)
        state = edit_at(t, state)
        logits.append(lg[0])
    return np.stack(logits, axis=1)


@pytest.mark.parametrize("name", list(NEW_CELLS))
def test_minrnn_and_mamba_cell_charrnns_are_intervened(name):
    model, ids = NEW_CELLS[name](), ids_for()
    own = plain(model, ids)
    null = [hs.StateEdit(1, STEP, "scale", value=1.0), hs.StateEdit(0, 2, "add", value=0.0, until=6)]
    run = hs.intervene(model, ids, null)
    np.testing.assert_array_equal(run.logits, own)  # a null edit: the plain forward exactly
    assert np.abs(hs.intervene(model, ids, null, output="ours").logits - own).max() <= 1e-12 * np.abs(own).max()
    mamba = name == "mamba-cell"
    field = "ssm" if mamba else "h"
    shape = run.clean_states[1][field].shape[2:]
    steer = np.random.default_rng(3).normal(size=shape)
    edited = hs.intervene(model, ids, [hs.StateEdit(1, STEP, "add", value=steer, until=STEP + 1)])

    def by_hand(t, state):
        if t not in (STEP, STEP + 1):
            return state
        parts = [np.array(a, copy=True) for a in (state if mamba else (state,))]
        parts[0][1] += steer  # layer 1's h, or its SSM state (the pair's first array)
        return tuple(parts) if mamba else parts[0]

    want = one_token_a_call(model, ids, by_hand)
    scale = np.abs(want).max()
    assert np.abs(edited.logits - want).max() <= 1e-12 * scale
    np.testing.assert_array_equal(edited.logits[:, :STEP + 1], edited.clean_logits[:, :STEP + 1])  # the past
    assert np.abs(edited.logits[:, STEP + 1:] - edited.clean_logits[:, STEP + 1:]).max() > 1e-6 * scale
    np.testing.assert_allclose(edited.states[1][field][STEP], edited.clean_states[1][field][STEP] + steer, atol=1e-13)
    if mamba:  # the convolution window alone, as a MambaLM's
        conv = hs.intervene(model, ids, [hs.StateEdit(0, STEP, "zero", part="conv")])
        want = one_token_a_call(model, ids, lambda t, s: (s[0], np.where(np.arange(L)[:, None, None, None] == 0, 0.0,
                                                                       s[1])) if t == STEP else s)
        assert np.abs(conv.logits - want).max() <= 1e-12 * scale


def test_replace_and_mean_read_the_right_states():
    model, ids, other = char_model("gru"), ids_for(), ids_for(seed=9)
    donor = hs.intervene(model, other, [hs.StateEdit(1, STEP, "scale", value=1.0)])
    patched = hs.intervene(model, ids, [hs.StateEdit(1, STEP, "replace", source=other)])
    np.testing.assert_array_equal(patched.states[1]["h"][STEP], donor.clean_states[1]["h"][STEP])
    again = hs.intervene(model, ids, [hs.StateEdit(1, STEP, "replace", source=donor)])
    np.testing.assert_array_equal(again.logits, patched.logits)
    want = reference_charrnn(model, ids, lambda k, t, st: {**st, "h": donor.clean_states[1]["h"][STEP]}
                             if (k, t) == (1, STEP) else st)
    np.testing.assert_allclose(patched.logits, want, rtol=0, atol=1e-12)
    mean = hs.intervene(model, ids, [hs.StateEdit(0, STEP, "mean")])
    np.testing.assert_allclose(mean.states[0]["h"][STEP], np.broadcast_to(mean.clean_states[0]["h"].mean(axis=(0, 1)),
                                                                          (N, H)), rtol=1e-14)


@pytest.mark.parametrize("model, edit, error, match", [
    ("gru", dict(layer=2, step=3), ValueError, r"layer must lie in \[0, 2\) .* got 2"),
    ("mamba", dict(layer=5, step=3), ValueError, r"layer must lie in \[0, 2\)"),
    ("gru", dict(layer=0, step=T), ValueError, "step must lie in"),
    ("lstm", dict(layer=0, step=3, until=T + 2), ValueError, "until must lie in"),
    ("gru", dict(layer=0, step=3, op="add", value=np.ones(H + 1)), ValueError, "value must be a number or a steer"),
    ("lstm", dict(layer=0, step=3, op="add", value=np.ones(H)), ValueError, "value must be a number for part='state'"),
    ("mamba2", dict(layer=0, step=3, op="scale", value=np.ones(3)), ValueError, "value must be a number or an array"),
    ("gru", dict(layer=0, step=3, part="conv"), ValueError, "part must be one of"),
    ("rnn", dict(layer=0, step=3, heads=[0]), ValueError, "heads must be None"),
    ("gru", dict(layer=0, step=3, channels=[H]), ValueError, r"channels must lie in \[0, 5\)"),
    ("gru", dict(layer=0, step=3, op="replace", source=np.zeros((N, 3), dtype=int)), ValueError,
     "source must have at least"),
])
def test_bad_edits_of_our_models_get_one_error(model, edit, error, match):
    with pytest.raises(error, match=match):
        hs.intervene(MODELS[model](), ids_for(), [hs.StateEdit(**edit)])


def test_models_and_ids_we_do_not_intervene_are_refused():
    with pytest.raises(TypeError, match=r"model must be a CharRNN, a MambaLM or a Mamba2LM .* got GRU"):
        from hiddenstate.edit.ours import intervene_ours

        intervene_ours(hs.GRU(3, 4), ids_for(), [hs.StateEdit(0, 1)])
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab_size=7\)"):
        hs.intervene(char_model("gru"), ids_for() + V, [hs.StateEdit(0, 1)])
    with pytest.raises(ValueError, match="output must be 'delta' or 'ours'"):
        hs.intervene(char_model("rnn"), ids_for(), [hs.StateEdit(0, 1)], output="theirs")
    donor = hs.intervene(MODELS["mamba"](), ids_for(), [hs.StateEdit(0, 3, "scale", value=1.0)])
    with pytest.raises(ValueError, match=r"source must be a run of this CharRNN\(gru\) model"):
        hs.intervene(char_model("gru"), ids_for(), [hs.StateEdit(0, 3, "replace", source=donor)])
