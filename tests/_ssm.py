"""Builders the tests of both selective SSM blocks (Mamba, Mamba-2) share."""

import numpy as np


def jittered(cls, M=5, *, seed=0, jitter=0.3, **options):
    """A block with its parameters moved off their structured initial values (A_log = log(1..), D = 1, norms = 1)."""
    rng = np.random.default_rng(seed)
    b = cls(M, rng=rng, **options)
    for v in b.params.values():
        v += jitter * rng.standard_normal(v.shape).astype(v.dtype)
    return b


def ssm_inputs(b, T, N, seed=1):
    """A random input (T, N, M) and random initial states ``(ssm, conv)`` of the block's shapes."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((T, N, b.d_model))
    zero = b.initial_state(N)
    return u, rng.standard_normal(zero.ssm.shape), rng.standard_normal(zero.conv.shape)
