"""What Mamba and Mamba-2 share through :class:`hiddenstate.kinds.ssm.block.SelectiveSSMBlock`, tested once for both.

Carrying the states across calls (the outputs, the final states and every gradient of two calls
equal those of one long call), and the envelope's refusals, each with the rule in its message (each block's own shapes
and options are refused in its own test file).
"""

import numpy as np
import pytest

from hiddenstate.kinds.ssm.block import SelectiveSSMBlock
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba2 import Mamba2
from hiddenstate.shared.seqblock import BlockCache
from hiddenstate.state import MambaState
from tests._ssm import jittered, ssm_inputs

KINDS = {"mamba": (Mamba, dict(d_state=4, d_conv=4)), "mamba2": (Mamba2, dict(d_state=4, d_conv=4, head_dim=4))}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_carrying_the_state_across_calls_equals_one_long_call_and_its_gradients(kind):
    cls, options = KINDS[kind]
    b = jittered(cls, 4, **options)
    u, h0, c0 = ssm_inputs(b, 10, 3)
    out, final, cache = b.forward(u, (h0, c0))
    o1, s1, k1 = b.forward(u[:2], (h0, c0))  # shorter than the convolution window
    o2, s2, k2 = b.forward(u[2:], s1)
    np.testing.assert_allclose(np.concatenate([o1, o2]), out, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(s2.ssm, final.ssm, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(s2.conv, final.conv)
    # BPTT across the boundary: the second call's d_state is the first call's d_state_n
    d_out = np.random.default_rng(4).standard_normal(out.shape)
    g, d_u, d0 = b.backward(cache, d_out)
    g2, d_u2, mid = b.backward(k2, d_out[2:])
    g1, d_u1, d01 = b.backward(k1, d_out[:2], mid)
    np.testing.assert_allclose(np.concatenate([d_u1, d_u2]), d_u, rtol=1e-12, atol=1e-13)
    for k in g:
        np.testing.assert_allclose(g1[k] + g2[k], g[k], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(d01.ssm, d0.ssm, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(d01.conv, d0.conv, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_shared_envelope_refuses_with_the_rule(kind):
    cls, options = KINDS[kind]
    b = jittered(cls, 4, **options)
    assert isinstance(b, SelectiveSSMBlock) and b.state_type is MambaState
    u, h0, c0 = ssm_inputs(b, 5, 2)
    out, final, cache = b.forward(u, (h0, c0))
    assert isinstance(cache, BlockCache) and isinstance(final, MambaState)
    with pytest.raises(TypeError, match=r"^state must be a pair \(ssm, conv\) \(a MambaState\); got tuple of length 3\."):
        b.forward(u, (h0, c0, c0))
    with pytest.raises(TypeError, match=r"^state must be a pair \(ssm, conv\) \(a MambaState\); got ndarray\."):
        b.forward(u, h0)
    with pytest.raises(TypeError, match=r"^d_state_n must be a pair \(d_ssm, d_conv\); got list\."):
        b.backward(cache, None, [h0, c0])
    with pytest.raises(TypeError, match=rf"^cache must be what {cls.__name__}.forward returned; got tuple\."):
        b.backward((1, 2), None)
    with pytest.raises(TypeError, match="^record must be a bool"):
        b.forward(u, record=1)
    with pytest.raises(ValueError, match=r"^u must have shape \(T, N, M\) with M=4; got \(5, 2, 5\)\."):
        b(np.zeros((5, 2, 5)))
    with pytest.raises(ValueError, match=r"^d_out must have the output's shape \(5, 2, 4\); got \(5, 2, 5\)\."):
        b.backward(cache, np.zeros((5, 2, 5)))
    for layer in (Mamba(4, d_state=4), Mamba2(4, d_state=4, head_dim=4)):  # a cache of another layer, of either kind, names that layer's class
        _, _, theirs = layer.forward(u)
        with pytest.raises(ValueError, match=rf"^cache must come from this layer's forward; got the cache of another "
                                             rf"{type(layer).__name__} layer\."):
            b.backward(theirs, None)
    # a None part of the initial state is zeros
    zero = b.initial_state(2)
    np.testing.assert_array_equal(b(u, (None, c0))[0], b(u, (zero.ssm, c0))[0])
    b.params["A_log"] = b.params["A_log"].astype(np.float32)
    with pytest.raises(TypeError, match=r"params\['A_log'\] must have dtype float64"):
        b(u)
