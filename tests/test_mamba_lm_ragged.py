"""MambaLM with ragged batches and resets: each row equals its own runs, logits, both final states and every gradient.

The references are the model's own unpadded calls, one row at a time (and one segment at a time
for a reset row), whose gradients are summed; the plain calls are themselves checked against
finite differences and torch (tests/test_mamba.py, tests/test_mamba_transformers.py).
"""

import itertools

import numpy as np
import pytest

from hiddenstate.kinds.ssm.lm import MambaLM
from hiddenstate.kinds.ssm.mamba_kernel import MambaState

RTOL, ATOL = 1e-11, 1e-12


def model(batch_first=True, seed=5, **block):
    rng = np.random.default_rng(seed)
    lm = MambaLM(7, 4, 2, d_state=3, d_conv=3, expand=2, batch_first=batch_first, rng=rng, **block)
    for v in lm.params.values():
        v += 0.3 * rng.standard_normal(v.shape)
    return lm


def case(lm, T, N, seed=0):
    """Ids (N, T), initial states and the loss's weights, all batch-first (see :func:`layout`)."""
    rng = np.random.default_rng(seed)
    Di, S, K = lm.layers[0].d_inner, lm.layers[0].d_state, lm.layers[0].d_conv
    ids = rng.integers(0, 7, (N, T))
    states = [MambaState(rng.standard_normal((N, Di, S)), rng.standard_normal((N, Di, K - 1))) for _ in range(2)]
    w = rng.standard_normal((N, T, 7))  # dL/dlogits, batch-first
    w_fin = [(rng.standard_normal((N, Di, S)), rng.standard_normal((N, Di, K - 1))) for _ in range(2)]
    return ids, states, w, w_fin


def layout(lm, a):
    """A batch-first (N, T, ...) array in the model's layout."""
    return a if lm.batch_first else np.swapaxes(a, 0, 1)


def row(states, n):
    return [MambaState(s.ssm[n:n + 1], s.conv[n:n + 1]) for s in states]


def run_alone(lm, ids, states, w, w_fin):
    """Logits (1, T, V), final states and gradients of one row run alone (batch-first arrays in, any layout)."""
    logits, fin, cache = lm.forward(layout(lm, ids), states)
    grads, d_states = lm.backward(cache, layout(lm, w), w_fin)
    return layout(lm, logits), fin, grads, d_states


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_each_row_of_a_ragged_batch_equals_its_own_unpadded_run(batch_first, scan):
    lm = model(batch_first, scan=scan)
    T, lengths = 6, np.array([6, 2, 0, 4])
    ids, states, w, w_fin = case(lm, T, 4)
    ids[1, 2:] = -1  # a padded step's id is never read
    logits, fin, cache = lm.forward(layout(lm, ids), states, lengths=lengths)
    grads, d_states = lm.backward(cache, layout(lm, w), [MambaState(*p) for p in w_fin])
    logits = layout(lm, logits)
    total = {k: np.zeros_like(v) for k, v in lm.params.items()}
    for n, L in enumerate(lengths):
        wf = [MambaState(a[n:n + 1], b[n:n + 1]) for a, b in w_fin]
        o, f1, g, d1 = run_alone(lm, ids[n:n + 1, :L], row(states, n), w[n:n + 1, :L], wf)
        np.testing.assert_allclose(logits[n, :L], o[0], rtol=1e-12, atol=1e-13)
        assert not logits[n, L:].any()  # 0 past the length
        for layer in range(2):
            np.testing.assert_allclose(fin[layer].ssm[n], f1[layer].ssm[0], rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(fin[layer].conv[n], f1[layer].conv[0], rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(d_states[layer].ssm[n], d1[layer].ssm[0], rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(d_states[layer].conv[n], d1[layer].conv[0], rtol=RTOL, atol=ATOL)
        for k in total:
            total[k] += g[k]
    for k in total:
        np.testing.assert_allclose(grads[k], total[k], rtol=RTOL, atol=ATOL, err_msg=k)
    # a length-0 row keeps its initial states and takes only the final states' gradient back
    np.testing.assert_array_equal(fin[0].ssm[2], states[0].ssm[2])
    np.testing.assert_array_equal(d_states[1].conv[2], w_fin[1][1][2])
    # lengths all T is the plain call
    full, fin_full, _ = lm.forward(layout(lm, np.where(ids < 0, 0, ids)), states)
    again, fin_again, _ = lm.forward(layout(lm, np.where(ids < 0, 0, ids)), states, lengths=[T] * 4)
    np.testing.assert_array_equal(again, full)
    np.testing.assert_array_equal(fin_again[1].ssm, fin_full[1].ssm)


@pytest.mark.parametrize("batch_first", [True, False])
def test_a_reset_row_equals_two_separate_runs_with_no_gradient_across_the_boundary(batch_first):
    lm = model(batch_first, seed=6)
    T = 7
    ids, states, w, w_fin = case(lm, T, 3, seed=1)
    reset = np.zeros((3, T), dtype=bool)  # batch-first
    reset[0, 3] = True
    reset[2, [2, 5]] = True
    reset[1, 6] = True  # past row 1's length: ignored
    lengths = np.array([7, 5, 7])
    logits, fin, cache = lm.forward(layout(lm, ids), states, lengths=lengths, reset=layout(lm, reset))
    grads, d_states = lm.backward(cache, layout(lm, w), [MambaState(*p) for p in w_fin])
    logits = layout(lm, logits)
    total = {k: np.zeros_like(v) for k, v in lm.params.items()}
    for n, L in enumerate(lengths):
        cuts = [0] + [t for t in range(1, L) if reset[n, t]] + [L]
        d0 = [[np.zeros_like(s.ssm[n:n + 1]), np.zeros_like(s.conv[n:n + 1])] for s in states]
        for i, (s0, s1) in enumerate(itertools.pairwise(cuts)):
            last = i == len(cuts) - 2
            wf = [MambaState(a[n:n + 1], b[n:n + 1]) for a, b in w_fin] if last else None
            o, f1, g, d1 = run_alone(lm, ids[n:n + 1, s0:s1], row(states, n), w[n:n + 1, s0:s1], wf)
            np.testing.assert_allclose(logits[n, s0:s1], o[0], rtol=1e-12, atol=1e-13)
            for k in total:
                total[k] += g[k]
            for layer in range(2):
                d0[layer][0] += d1[layer].ssm
                d0[layer][1] += d1[layer].conv
        for layer in range(2):  # the last segment's final states, both segments' initial-state gradients
            np.testing.assert_allclose(fin[layer].ssm[n], f1[layer].ssm[0], rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(fin[layer].conv[n], f1[layer].conv[0], rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(d_states[layer].ssm[n], d0[layer][0][0], rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(d_states[layer].conv[n], d0[layer][1][0], rtol=RTOL, atol=ATOL)
    for k in total:
        np.testing.assert_allclose(grads[k], total[k], rtol=RTOL, atol=ATOL, err_msg=k)
    # no gradient crosses the boundary: the logits after row 0's reset do not depend on its earlier ids
    other = ids.copy()
    other[0, :3] = (other[0, :3] + 1) % 7
    moved, _, _ = lm.forward(layout(lm, other), states, lengths=lengths, reset=layout(lm, reset))
    np.testing.assert_array_equal(layout(lm, moved)[0, 3:], logits[0, 3:])
    assert np.abs(layout(lm, moved)[0, :3] - logits[0, :3]).max() > 1e-3
    # __call__ takes them too
    called, _ = lm(layout(lm, ids), states, lengths=lengths, reset=layout(lm, reset))
    np.testing.assert_array_equal(layout(lm, called), logits)


def test_bad_lengths_and_reset_are_refused_naming_the_argument():
    lm = model(True)
    ids = np.zeros((2, 5), dtype=int)  # (N, T)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=5\]"):
        lm(ids, lengths=[6, 1])
    with pytest.raises(ValueError, match=r"lengths must have shape \(N=2,\); got \(3,\)"):
        lm(ids, lengths=[1, 2, 3])
    with pytest.raises(TypeError, match="lengths must be an integer array"):
        lm(ids, lengths=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"reset must have shape \(2, 5\); got \(5, 2\)"):
        lm(ids, reset=np.zeros((5, 2), dtype=bool))  # batch_first: (N, T)
    with pytest.raises(TypeError, match="reset must be a bool array"):
        lm(ids, reset=np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"reset must have shape \(5, 2\)"):
        model(False)(ids.T, reset=np.zeros((2, 5), dtype=bool))  # time-major: (T, N)
    bad = ids.copy()
    bad[1, 3] = 9
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V=7\) at the valid steps; got values in \[0, 9\]"):
        lm(bad, lengths=[5, 4])  # step 3 of row 1 is valid
    lm(bad, lengths=[5, 3])  # ... and padded here: never read
