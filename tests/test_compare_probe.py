"""Two prompts' states side by side, and a linear probe of per-token labels (issue 35: compare and probe)."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.compare import flat_states, state_distance


def test_state_distance_by_hand():
    a = np.zeros((3, 1, 2))
    b = np.zeros((3, 1, 2))
    a[1] = [[3.0, 0.0]]
    b[1] = [[0.0, 4.0]]
    a[2] = [[1.0, 1.0]]
    b[2] = [[-1.0, -1.0]]
    d, r = state_distance(a, b)
    assert np.allclose(d, [0.0, 5.0, np.sqrt(8.0)])
    assert np.allclose(r, [0.0, 5.0 / np.sqrt((9 + 16) / 2), 2.0])  # opposite states: 2
    with pytest.raises(ValueError, match=r"states_a and states_b must have the same shape"):
        state_distance(a, b[:2])


def test_flat_states_joins_every_field_in_sorted_order():
    s = {"b": np.ones((4, 2, 3)), "a": np.zeros((4, 2, 2, 2))}
    flat = flat_states(s)
    assert flat.shape == (4, 2, 7) and np.all(flat[..., :4] == 0) and np.all(flat[..., 4:] == 1)
    with pytest.raises(ValueError, match=r"states must all have the same steps and sequences"):
        flat_states({"a": np.zeros((4, 2)), "b": np.zeros((3, 2))})
    with pytest.raises(ValueError, match=r"states must hold at least one array"):
        flat_states({})


def test_a_probe_reads_a_label_that_is_in_the_state_and_not_one_that_is_not():
    rng = np.random.default_rng(0)
    T, N, F = 80, 3, 6
    labels = rng.integers(0, 3, (N, T))
    states = rng.standard_normal((T, N, F)) * 0.1
    states[np.arange(T)[:, None], np.arange(N)[None, :], labels.T] += 1.0  # the label written as a one-hot
    got = hs.probe_states(states, labels)
    assert got.metric == "accuracy" and got.score == 1.0 and got.n_train == 60 * N and got.n_test == 20 * N
    # chance: the most common training label's share of the test labels, counted here by hand
    values, counts = np.unique(labels[:, :60], return_counts=True)
    assert got.chance == pytest.approx(np.mean(labels[:, 60:] == values[np.argmax(counts)]))
    noise = hs.probe_states(rng.standard_normal((T, N, F)), labels)
    assert noise.score < 0.6
    real = hs.probe_states(states, labels.astype(float) * 2.0)  # a quantity (linear in the one-hot): R^2
    assert real.metric == "r2" and real.score > 0.95 and real.chance == 0.0
    assert "held-out tokens" in str(got)


def test_probe_states_refuses_labels_of_another_shape_by_name():
    with pytest.raises(ValueError, match=r"labels must have shape \(N, T\) = \(2, 10\)"):
        hs.probe_states(np.zeros((10, 2, 3)), np.zeros((10, 2), dtype=int))
    with pytest.raises(TypeError, match=r"labels must be ints"):
        hs.probe_states(np.zeros((10, 2, 3)), np.zeros((2, 10), dtype=bool))


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _model(name):
    from hiddenstate.interop import families

    fam = families.family_of(name)
    torch.manual_seed(0)
    return getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()


@pytest.mark.parametrize("name", ["mamba", "qwen3_next"])
def test_two_prompts_that_differ_at_one_step_are_apart_from_that_step(name):
    from hiddenstate.interop.families.hooks import recompute_layers
    from hiddenstate.kinds import get_kind

    model = _model(name)
    a = np.random.default_rng(1).integers(0, 50, (2, 12))
    b = a.copy()
    b[:, 5] = (b[:, 5] + 1) % 50
    cmp = hs.compare_states(model, a, b)
    assert np.all(cmp.distance[:, :5] == 0) and np.all(cmp.relative[:, 5:6] > 0)
    assert cmp.first_apart[0] == 5
    # independently: each prompt's own recomputation, compared here
    ra, rb = recompute_layers(model, a), recompute_layers(model, b)
    kind = get_kind(ra.family.kind)
    for i in range(len(cmp.layers)):
        sa, sb = kind.states(ra.records[i]), kind.states(rb.records[i])
        d = np.sqrt(sum(((sa[k] - sb[k]) ** 2).reshape(12, -1).sum(axis=1) for k in sa))
        assert np.allclose(cmp.distance[i], d, rtol=1e-9, atol=1e-12)
    assert "apart from step 5" in str(cmp)
    same = hs.compare_states(model, a, a)
    assert np.all(same.distance == 0) and set(same.first_apart) == {None}
    with pytest.raises(ValueError, match=r"ids_a and ids_b must have the same shape"):
        hs.compare_states(model, a, b[:, :10])


def test_a_probe_of_a_models_saved_states(tmp_path):
    """The documented route: states out of an inspection, read back, probed for the previous token."""
    model = _model("mamba")
    ids = np.random.default_rng(2).integers(0, 8, (2, 60))
    an = hs.inspect_model(model, ids)
    from hiddenstate.interop.states_file import load_states, save_states

    save_states(an, tmp_path / "s.safetensors")
    saved = load_states(tmp_path / "s.safetensors")
    got = hs.probe_states(saved.states[sorted(saved.states)[-1]], ids)  # the token just read
    assert got.metric == "accuracy" and got.score > got.chance
