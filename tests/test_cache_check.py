"""The cache checker (issue 33): every registered family's tiny model, its cached paths held to its full forward.

Each figure of :func:`hiddenstate.check_cache` is checked against the transformers model itself,
run here without the checker: the logits of a prefill + continuation and of token-by-token
decoding, and the state its cache holds after them against the final state of
:func:`~hiddenstate.interop.families.hooks.recompute_layers` on the same ids. A cache update
broken on purpose (the state scaled on a one-token cached call, or dropped before a multi-token
one) is named at its layer and step; bad input gets one error naming the argument; the command
line's exit status is 0, 1 or 2.
"""

from __future__ import annotations

import inspect
import itertools
import os
import re

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
NAMES = [f.name for f in families.registered() if f.tiny_config is not None]
N, T = 2, 16
TOL = tolerance(torch.float32)
#: What transformers 5.25 gets wrong on these tiny models (each reproduced in the report of issue 33): the
#: multi-token cached forward ignores the cached state (mamba, falcon_mamba, jamba, zamba: the Mamba scan;
#: recurrent_gemma: its convolution and RG-LRU restart), MiniMax's attention layer's multi-token continuation,
#: Zamba2's one-token decoding, RWKV's one-token path for N > 1 (logits of shape (N, N, V)), and GLM-5-Next's
#: decoding past step 11, where its indexed (top-k) attention layer parts from the full forward.
SPLIT_OFF = {"mamba", "falcon_mamba", "jamba", "zamba", "recurrent_gemma", "minimax"}
DECODE_OFF = {"zamba2", "rwkv", "glm5_next"}


def build(name, seed=0):
    fam = families.family_of(name)
    torch.manual_seed(seed)
    return getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()


def ids_for(seed=1, n=N, t=T):
    return np.random.default_rng(seed).integers(1, 50, (n, t))


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def scores(out, model=None):
    """The logits, or the family's head on a backbone's last hidden states where it needs more than ids (JEV)."""
    return out.logits if model is None else families.family_of(model).head(model, out.last_hidden_state)


def theirs(model, ids, bounds):
    """The model itself through its cache: logits (N, T, V) and the cache after the last call."""
    whole, model = model, (model.model if families.family_of(model).head is not None else model)
    params = inspect.signature(model.forward).parameters
    kw = "cache" if "cache" in params else "state"
    pos = "position_ids" in params
    ids_t = torch.from_numpy(ids)
    cache, logits = None, []
    if hasattr(model.base_model, "_setup_cache"):  # RecurrentGemma returns no cache: the caller makes one
        model.base_model._setup_cache(model.config, len(ids), "cpu", torch.float32)
        cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        for a, b in itertools.pairwise(bounds):
            more = {"position_ids": torch.arange(a, b)[None].expand(len(ids), -1)} if pos else {}
            out = model(input_ids=ids_t[:, a:b], use_cache=True, **more, **({kw: cache} if cache is not None else {}))
            cache = cache if getattr(out, kw, None) is None else getattr(out, kw)
            logits.append(scores(out, whole if whole is not model else None).double().numpy())
    return np.concatenate(logits, axis=1), cache


@pytest.fixture(scope="module")
def checks():
    return {}


@pytest.mark.parametrize("name", NAMES)
def test_every_family_is_checked_and_its_figures_are_the_models_own(name, checks):
    model, ids = build(name), ids_for()
    check = hs.check_cache(model, ids, paths=["split", "decode", "chunked", "padded"])
    checks[name] = check
    print(f"\n{check}")
    names = [p.name for p in check.paths]
    assert names == ["split@4", "split@8", "split@12", "decode", "chunked", "padded"] and check.shape == (N, T)
    assert check.tolerance == TOL and check.model == name and check.dtype == "float32"
    with torch.no_grad():
        head = families.family_of(model).head is not None
        runs = model.model if head else model
        full = scores(runs(input_ids=torch.from_numpy(ids), use_cache=False), model if head else None).double().numpy()
    scale = np.abs(full).max()
    split = next(p for p in check.paths if p.name == "split@8")
    logits, cache = theirs(model, ids, [0, 8, T])
    assert split.logits_error == pytest.approx(np.abs(logits - full).max() / scale, rel=1e-9, abs=1e-12)
    assert split.ok == (name not in SPLIT_OFF)
    decode = next(p for p in check.paths if p.name == "decode")
    assert decode.ok == (name not in DECODE_OFF)
    if name != "rwkv":
        logits, _ = theirs(model, ids, [0, *range(4, T + 1)])
        assert decode.logits_error == pytest.approx(np.abs(logits - full).max() / scale, rel=1e-9, abs=1e-12)
    # the state the cache holds after the split path, against our recomputation of the full forward's last step
    fam = families.family_of(model)
    if fam.kind not in ("rglru", "lightning", "mlstm", "rwkv"):
        rc = recompute_layers(model, ids)
        for i, rec in zip(rc.layers, rc.records):
            states = get_kind(fam.kind).states(rec)
            field = "conv" if fam.kind == "shortconv" else next(f for f in states if f != "conv")
            if field == "conv":  # the recorded mixer's conv state (Inkling's layers hold four), its last K-1 inputs
                conv = cache.get_conv_state(i, state_idx=getattr(fam.mixers(model)[i], "conv_idx", 0))
                held = conv if conv.numel() == states[field][-1].size else conv[..., 1:]
            else:
                held = cache.get_recurrent_state(i)
            ours = states[field][-1]
            want = np.abs(held.double().numpy().reshape(ours.shape) - ours).max() / np.abs(states[field]).max()
            got = next(c for c in split.layers if c.layer == i).cache_errors[T - 1]
            assert got >= want * (1 - 1e-9) - 1e-12  # the largest over the fields compared, this field among them
    for p in check.paths:
        if p.ok:
            assert p.logits_error <= TOL and all(c.first_step is None for c in p.layers)
    # every family's cache keeps a right-padded row's state after its pad tokens: the padded path's cut rows diverge
    padded = check.paths[-1]
    assert padded.logits_error <= TOL and padded.first[1] == 7 and not check.ok
    assert check.first == next((p.name, *p.first) for p in check.paths if not p.ok)


def test_the_shortest_ids_are_checked_on_every_path():
    check = hs.check_cache(build("qwen3_next"), ids_for(t=2), paths=["split", "decode", "chunked", "padded"])
    assert [(p.name, p.boundaries) for p in check.paths] == [("split@1", (0, 1, 2)), ("decode", (0, 1, 2)),
                                                              ("chunked", (0, 1, 2)), ("padded", (0, 2))]
    assert all(p.ok for p in check.paths[:3]) and check.paths[3].logits_error <= TOL


def test_a_float64_model_is_checked_from_copies_of_its_cache():
    # a float64 cache's .double().numpy() shares its memory: read without a copy, the state after the prefill
    # became the one after the continuation (0.79 off)
    check = hs.check_cache(build("lfm2").double(), ids_for(), paths=["split", "decode"])
    assert check.ok and check.dtype == "float64"
    assert max(e for p in check.paths for c in p.layers for e in c.cache_errors.values()) < 1e-12


def test_each_family_is_continued_by_the_keyword_its_forward_takes():
    from hiddenstate.keep.cache_paths import carry_keyword

    # Mamba2's forward swallows past_key_values= in **kwargs and starts from an empty state: cache= it is
    assert carry_keyword(build("mamba2")) == "cache" and carry_keyword(build("rwkv")) == "state"
    assert "past_key_values" not in inspect.signature(build("mamba2").forward).parameters


def _cache_in(kwargs):
    return next((v for v in kwargs.values() if hasattr(v, "get_recurrent_state")), None)


@pytest.mark.parametrize("how", ["scaled on a decoding step", "dropped before a continuation"])
def test_a_broken_cache_update_is_named_at_its_layer_and_step(monkeypatch, how):
    model, ids = build("qwen3_next"), ids_for()
    mixer = families.family_of(model).mixers(model)[2]
    own = mixer.forward

    def broken(*args, **kwargs):
        cache = _cache_in(kwargs)
        hidden = args[0] if args else kwargs["hidden_states"]
        if how.startswith("dropped") and cache is not None and hidden.shape[1] > 1 and cache.has_previous_state(2):
            cache.get_recurrent_state(2).zero_()
        out = own(*args, **kwargs)
        if how.startswith("scaled") and cache is not None and hidden.shape[1] == 1:
            cache.get_recurrent_state(2).mul_(0.5)
        return out

    clean = hs.check_cache(model, ids, paths=["split", "decode", "chunked"])
    assert clean.ok and clean.first is None and "Every path agrees" in str(clean)
    monkeypatch.setattr(mixer, "forward", broken)
    check = hs.check_cache(model, ids, paths=["split", "decode", "chunked"])
    assert not check.ok
    layer0 = {p.name: p.layers[0] for p in check.paths}
    assert all(c.first_step is None for c in layer0.values())  # layer 0 below the broken one agrees
    if how.startswith("scaled"):  # the first one-token call is step 4's: its state, then step 5's output
        assert check.first == ("decode", 2, 4)
        c = check.paths[3].layers[1]
        assert c.cache_errors[4] > 0.1 and c.output_errors[4] <= TOL and c.output_errors[5] > TOL
        assert "the decode path diverges first at layer 2, step 4" in check.line()
        assert all(p.ok for p in check.paths if p.name != "decode")
    else:  # the continuation from step 4 starts from an empty state: its first output is off
        assert check.first == ("split@4", 2, 4)
        assert "its output is" in check.line() and "split@4" in str(check)
        assert check.paths[3].ok  # decoding's one-token calls are untouched


def test_a_right_padded_batch_with_its_mask_is_compared_at_the_real_positions():
    model, ids = build("mamba2"), ids_for()
    mask = np.ones((N, T), dtype=np.int64)
    mask[1, 10:] = 0
    padded_ids = ids.copy()
    padded_ids[1, 10:] = 0
    check = hs.check_cache(model, padded_ids, attention_mask=mask, paths=["padded"])
    (p,) = check.paths
    assert p.logits_error <= TOL and set(p.layers[0].cache_errors) == {9, T - 1}
    assert p.layers[0].cache_errors[T - 1] <= TOL and p.layers[0].cache_errors[9] > 0.1
    assert check.first == ("padded", 0, 9) and "right-padded" in check.line()


@pytest.mark.parametrize("kw, error, match", [
    (dict(ids=np.zeros((2, 1), dtype=int)), ValueError, "T >= 2"),
    (dict(ids=np.zeros((2, 8))), TypeError, "ids must be integer"),
    (dict(ids=np.full((2, 8), 999)), ValueError, r"ids must lie in \[0, vocab_size"),
    (dict(splits=[16]), ValueError, r"splits must lie in \[1, 15\]"),
    (dict(splits=[0, 3]), ValueError, r"splits must lie in .*got \[0\]"),
    (dict(splits=2.5), TypeError, "splits must be an int"),
    (dict(chunks=1), ValueError, r"chunks must lie in \[2, T=16\]"),
    (dict(paths=["split", "beam"]), ValueError, "paths must be a non-empty list"),
    (dict(attention_mask=np.ones((2, 5), dtype=int)), ValueError, "attention_mask must be 0s and 1s"),
    (dict(attention_mask=np.tile((np.arange(T) >= 3).astype(int), (2, 1))), ValueError, "right padding"),
])
def test_bad_input_gets_one_error_naming_the_argument(kw, error, match):
    kw = {"ids": ids_for(), **kw}
    with pytest.raises(error, match=match):
        hs.check_cache(build("lfm2"), **kw)


def test_a_right_padded_batch_without_a_mask_is_refused():
    model = build("lfm2")
    pad = model.config.pad_token_id
    ids = ids_for()
    ids[1, 11:] = pad
    with pytest.raises(ValueError, match=f"attention_mask must be given for a right-padded batch.*pad_token_id={pad}"):
        hs.check_cache(model, ids)
    check = hs.check_cache(model, ids, attention_mask=np.ones_like(ids), paths=["split"])  # the pads are real tokens
    assert check.ok
    with pytest.raises(TypeError, match="model must be of a registered recurrent family"):
        hs.check_cache(torch.nn.Linear(2, 2), ids)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("check_cache")
    build("lfm2").save_pretrained(root / "model")
    np.save(root / "ids.npy", ids_for())
    return root


def test_the_command_line_exits_0_1_or_2(saved, capsys):
    model, ids = str(saved / "model"), str(saved / "ids.npy")
    assert main(["check-cache", model, "--ids", ids]) == 0  # the default paths: split, decode, chunked
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and out[-1].startswith("lfm2: every cached path agrees") and "agrees" in out[0]
    assert main(["check-cache", model, "--ids", ids, "--paths", "split,padded"]) == 1  # the state after the pads
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("lfm2: the padded path diverges first at layer 0, step 7")
    np.save(saved / "bad.npy", np.zeros((2, 8)))
    for argv, match in [(["--ids", str(saved / "bad.npy")], "--ids must hold integer token ids"),
                        (["--ids", ids, "--splits", "99"], r"--splits must lie in \[1, 15\]"),
                        (["--ids", ids, "--splits", "a"], "--splits must be integers"),
                        (["--ids", ids, "--paths", "beam"], "--paths must be a non-empty list"),
                        (["--ids", ids, "--chunks", "2,3"], "--chunks must be one integer"),
                        (["--ids", ids, "--chunks", "1"], r"--chunks must lie in \[2, T=16\]"),
                        (["--ids", ids, "--attention-mask", ids], "--attention-mask must be 0s and 1s")]:
        assert main(["check-cache", model, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err and re.search(match, err), err
    assert main(["check-cache", str(saved / "nowhere"), "--ids", ids]) == 2
    assert "DIR must be a save_pretrained model directory" in capsys.readouterr().err
    assert sorted(p.name for p in saved.iterdir()) == ["bad.npy", "ids.npy", "model"]  # nothing written
