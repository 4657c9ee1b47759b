"""Causal tracing over layers x steps (issue 32): every cell held to an independent computation.

Each cell of :func:`hiddenstate.causal_trace` is held to :func:`hiddenstate.intervene` of the same
restore (``StateEdit(layer, step, "replace", source=clean_ids)`` on the corrupted ids, which runs
both chains from the start); for Mamba also to the transformers model itself run from an edited
cache (prefill the corrupted ids to the step, the layer's SSM state in the cache overwritten with
the one the model's own cache holds after prefilling the clean ids, then one token a call). Two
identities: corrupted == clean gives an indirect effect of exactly 0 everywhere; in a one-layer
model whose corruption lies before step t (and before the convolution's window), restoring the
state after t restores the whole layer, so the target's probability is the clean run's.
"""

from __future__ import annotations

import inspect
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.edit.causal.families import FamilyTracer  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.train.model import CharRNN  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
N, T, BAD = 2, 10, 3  # positions < BAD are corrupted


def build(name, **overrides):
    """A tiny random model of the family; weights drawn wider than the default so states matter (IE ~ 1e-3)."""
    fam = families.family_of(name)
    cfg = fam.tiny_config()
    cfg.initializer_range = 0.5
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    return getattr(transformers, fam.classes[0])(cfg).eval()


def prompts(V=50, seed=1):
    rng = np.random.default_rng(seed)
    clean = rng.integers(0, V, (N, T))
    corrupted = clean.copy()
    corrupted[:, :BAD] = (clean[:, :BAD] + 1 + rng.integers(0, V - 1, (N, BAD))) % V  # every one changed
    return clean, corrupted


OURS = {"MambaLM": lambda: hs.MambaLM(7, 8, 2, rng=np.random.default_rng(0)),
        "CharRNN(gru)": lambda: CharRNN(7, 6, 2, cell="gru", rng=np.random.default_rng(0)),
        "CharRNN(minlstm)": lambda: CharRNN(7, 6, 2, cell="minlstm", rng=np.random.default_rng(0))}


def model_for(name):
    return OURS[name]() if name in OURS else build(name)


@pytest.mark.parametrize("name", ["mamba", "qwen3_next", "MambaLM", "CharRNN(gru)", "CharRNN(minlstm)"])
def test_every_cell_equals_intervene_of_the_same_restore(name):
    model = model_for(name)
    V = 7 if name in OURS else 50
    clean, corrupted = prompts(V)
    target = clean[:, -1]
    tr = hs.causal_trace(model, clean, corrupted, target=target)
    assert tr.restored_prob.shape == (N, len(tr.layers), T - 1) and tr.steps == tuple(range(T - 1))
    tgt = np.repeat(target[:, None], T, axis=1)
    worst, largest = 0.0, 0.0
    for a, layer in enumerate(tr.layers):
        for b, step in enumerate(tr.steps):
            run = hs.intervene(model, corrupted, [hs.StateEdit(layer, step, "replace", source=clean)], target=tgt)
            want = run.target_prob[:, -1]
            worst = max(worst, float(np.abs(tr.restored_prob[:, a, b] - want).max()))
            largest = max(largest, float(np.abs(want - run.clean_target_prob[:, -1]).max()))
            np.testing.assert_array_equal(run.clean_target_prob[:, -1], tr.corrupted_prob)
    print(f"{name}: largest effect {largest:.3g}, trace vs intervene {worst:.3g}")
    assert largest > 1e-5  # the cells do something (far above the float32 round-off below)
    assert worst <= (1e-7 if name not in OURS else 1e-13)
    own = model(input_ids=torch.from_numpy(clean)).logits[:, -1] if name not in OURS else None
    if own is not None:  # the clean probability is the model's own
        p = torch.softmax(own.double(), -1).detach().numpy()[np.arange(N), target]
        np.testing.assert_allclose(tr.clean_prob, p, rtol=1e-6)
    np.testing.assert_allclose(tr.indirect_effect, (tr.restored_prob - tr.corrupted_prob[:, None, None]).mean(0))


@pytest.mark.parametrize("name", [f.name for f in families.registered() if f.tiny_config is not None])
def test_every_family_traces_as_intervene_restores(name):
    model = build(name)
    clean, corrupted = prompts()
    recurrent = [e.index for e in families.family_of(model).layer_map(model) if e.role == "recurrent"]
    tr = hs.causal_trace(model, clean, corrupted, target=clean[:, -1], layers=[recurrent[-1], recurrent[0]],
                         steps=[2, 6])
    tgt = np.repeat(clean[:, -1:], T, axis=1)
    for a, layer in enumerate(tr.layers):
        for b, step in enumerate(tr.steps):
            run = hs.intervene(model, corrupted, [hs.StateEdit(layer, step, "replace", source=clean)], target=tgt)
            np.testing.assert_allclose(tr.restored_prob[:, a, b], run.target_prob[:, -1], rtol=0, atol=1e-7)
    assert np.isfinite(tr.indirect_effect).all()


def _cache_of(out):
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


def _prefill(model, ids, t):
    pos = "position_ids" in inspect.signature(model.forward).parameters
    more = {"position_ids": torch.arange(t + 1)[None].expand(ids.shape[0], -1)} if pos else {}
    return _cache_of(model(input_ids=ids[:, :t + 1], use_cache=True, **more))


def _cached_p(model, clean, corrupted, layer, t, target, restore=True):
    """The model itself: the corrupted prefix, the layer's state overwritten with the clean prefix's, then one token a call."""
    params = inspect.signature(model.forward).parameters
    kw = "cache" if "cache" in params else "past_key_values"
    c, x = torch.from_numpy(clean), torch.from_numpy(corrupted)
    with torch.no_grad():
        cache = _prefill(model, x, t)
        if restore:
            cache.get_recurrent_state(layer).copy_(_prefill(model, c, t).get_recurrent_state(layer))
        for s in range(t + 1, x.shape[1]):
            more = {"position_ids": torch.full((x.shape[0], 1), s)} if "position_ids" in params else {}
            out = model(input_ids=x[:, s:s + 1], use_cache=True, **{kw: cache}, **more)
            cache = _cache_of(out) or cache
    p = torch.softmax(out.logits[:, -1].double(), -1).numpy()
    return p[np.arange(x.shape[0]), target]


def test_a_mamba_cell_equals_the_model_run_from_an_edited_cache():
    model = build("mamba")
    clean, corrupted = prompts()
    target = clean[:, -1]
    steps = [2, 5, 7]
    tr = hs.causal_trace(model, clean, corrupted, target=target, steps=steps)
    for a, layer in enumerate(tr.layers):
        for b, t in enumerate(steps):
            theirs = _cached_p(model, clean, corrupted, layer, t, target)
            base = _cached_p(model, clean, corrupted, layer, t, target, restore=False)
            ie = tr.restored_prob[:, a, b] - tr.corrupted_prob
            print(f"layer {layer} step {t}: IE {ie}, the model's cache path {theirs - base}")
            assert np.abs(ie).max() > 1e-5
            np.testing.assert_allclose(tr.restored_prob[:, a, b], theirs, rtol=0, atol=2e-6)
            np.testing.assert_allclose(ie, theirs - base, rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", ["mamba", "MambaLM", "CharRNN(gru)"])
def test_restoring_the_one_layer_after_the_corruption_gives_the_clean_probability(name):
    if name == "mamba":
        model = build("mamba", num_hidden_layers=1)
        K, V, tol = model.config.conv_kernel, 50, 2e-6
    elif name == "MambaLM":
        model, K, V, tol = hs.MambaLM(7, 8, 1, rng=np.random.default_rng(0)), 4, 7, 1e-13
    else:
        model, K, V, tol = CharRNN(7, 6, 1, cell="gru", rng=np.random.default_rng(0)), 1, 7, 1e-13
    clean, corrupted = prompts(V)
    tr = hs.causal_trace(model, clean, corrupted, target=clean[:, -1])
    whole = [b for b, t in enumerate(tr.steps) if t - K + 2 >= BAD]  # the conv window holds clean inputs only
    assert whole and float(np.abs(tr.clean_prob - tr.corrupted_prob).max()) > 100 * tol
    np.testing.assert_allclose(tr.restored_prob[:, 0, whole], np.repeat(tr.clean_prob[:, None], len(whole), 1),
                               rtol=0, atol=tol)
    np.testing.assert_allclose(tr.normalized[0, whole], 1.0, atol=tol / abs(tr.clean_prob - tr.corrupted_prob).mean())


@pytest.mark.parametrize("name", ["qwen3_next", "CharRNN(gru)"])
def test_corrupted_equal_to_clean_has_no_effect_at_all(name):
    model = model_for(name)
    clean, _ = prompts(7 if name in OURS else 50)
    tr = hs.causal_trace(model, clean, clean, target=3)
    assert (tr.indirect_effect == 0).all() and (tr.restored_prob == tr.clean_prob[:, None, None]).all()
    assert tr.normalized is None
    with pytest.raises(ValueError, match="normalized must be False"):
        tr.plot(normalized=True)


def test_the_cost_is_known_before_the_sweep_and_the_result_draws_and_serialises(monkeypatch):
    model = build("qwen3_next")
    clean, corrupted = prompts()
    cells, seen = [], []
    original = FamilyTracer.cell
    monkeypatch.setattr(FamilyTracer, "cell", lambda self, i, t: cells.append((i, t)) or original(self, i, t))
    tr = hs.causal_trace(model, clean, corrupted, target=clean[:, -1], layers=[2, 0], steps=[1, 4, 6], position=7,
                         on_cost=lambda cost: seen.append((cost, len(cells))))
    (cost, done), = seen
    assert done == 1 and len(cells) == 6 and len(set(cells)) == 6  # one cell timed, then the other five
    assert cost is tr.cost and cost.runs == 6 and cost.layers == (2, 0) and cost.steps == (1, 4, 6)
    assert cost.seconds_per_run > 0 and cost.state_bytes > 0 and (cost.group, cost.groups) == ("layer", 2)
    assert cost.seconds == pytest.approx(6 * cost.seconds_per_run + 2 * cost.seconds_per_group)
    assert "2 layers x 3 steps = 6 edited runs" in str(cost)
    alone = hs.trace_cost(model, clean, corrupted, target=clean[:, -1], layers=[2, 0], steps=[1, 4, 6], position=7)
    assert alone.runs == 6 and len(cells) == 7  # the setup and one cell only
    assert tr.layers == (2, 0) and tr.position == 7
    p = torch.softmax(model(input_ids=torch.from_numpy(corrupted)).logits[:, 7].double(), -1).detach().numpy()
    np.testing.assert_allclose(tr.corrupted_prob, p[np.arange(N), clean[:, -1]], rtol=1e-6)
    fig = tr.plot()
    ax = fig.axes[0]
    assert len(fig.axes) == 2 and ax.get_ylabel() == "layer" and "step" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["2", "0"]
    np.testing.assert_array_equal(ax.images[0].get_array(), tr.indirect_effect)
    data = json.loads(json.dumps(tr.to_dict()))
    np.testing.assert_allclose(data["indirect_effect"], tr.indirect_effect)
    assert data["layers"] == [2, 0] and data["cost"]["runs"] == 6 and "largest effect" in repr(tr)


def test_the_report_gains_the_trace_section(tmp_path):
    from hiddenstate.report.family_page import family_page
    from hiddenstate.report.tracing import trace_page

    model = hs.MambaLM(7, 8, 2, rng=np.random.default_rng(0))
    clean, corrupted = prompts(7)
    tr = hs.causal_trace(model, clean, corrupted, target=2, steps=[3, 5])
    page = trace_page(tr)
    assert '<section id="causal-trace">' in page and "data:image/png;base64," in page and "<footer>hiddenstate " in page
    analysis = hs.analyze(model, clean)
    assert '<section id="causal-trace">' in family_page(analysis, causal_trace=tr)
    assert "causal-trace" not in family_page(analysis)


@pytest.mark.parametrize("kw, error, match", [
    (dict(corrupted_ids=np.zeros((N, T - 1), int)), ValueError, "corrupted_ids must have the shape of clean_ids"),
    (dict(target=50), ValueError, r"target must lie in \[0, vocab_size=50\)"),
    (dict(target=np.array([1, 2, 3])), ValueError, "target must be one token id or N=2"),
    (dict(target=1.5), TypeError, "target must be a token id"),
    (dict(layers=[1]), ValueError, r"layers must be recurrent layers of this qwen3_next model, \[0, 2\]; got 1 "
                                   r"\(attention\)"),
    (dict(layers=[0, 0]), ValueError, "layers must list distinct"),
    (dict(steps=[9]), ValueError, r"steps must lie in \[0, position=9\)"),
    (dict(steps=[2], position=2), ValueError, r"steps must lie in \[0, position=2\)"),
    (dict(position=0), ValueError, r"position must lie in \[1, T=10\)"),
    (dict(position=10), ValueError, r"position must lie in \[1, T=10\)"),
    (dict(clean_ids=np.ones((N, T))), TypeError, "clean_ids must be integer token ids"),
    (dict(clean_ids=np.zeros((N, 1), int), corrupted_ids=np.zeros((N, 1), int)), ValueError, "T >= 2"),
    (dict(part="kv"), ValueError, "part must be one of"),
])
def test_bad_input_gets_one_error_naming_the_argument(kw, error, match):
    clean, corrupted = prompts()
    args = {"clean_ids": clean, "corrupted_ids": corrupted, "target": 3, **kw}
    with pytest.raises(error, match=match):
        hs.causal_trace(build("qwen3_next"), args.pop("clean_ids"), args.pop("corrupted_ids"), **args)


def test_our_models_refuse_a_layer_past_the_stack_and_a_model_of_no_family():
    clean, corrupted = prompts(7)
    with pytest.raises(ValueError, match=r"layers must lie in \[0, 2\) .* got 5"):
        hs.causal_trace(OURS["MambaLM"](), clean, corrupted, target=1, layers=[5])
    with pytest.raises(TypeError, match="model must be of a registered recurrent family"):
        hs.causal_trace(torch.nn.GRU(3, 4), clean, corrupted, target=1)
