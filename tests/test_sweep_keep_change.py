"""A bad-input sweep (hypothesis) over the surfaces of issues 32-35 (change the state, keep it, compare it).

As tests/test_sweep_new_surfaces.py does for older surfaces: every call ends in a result checked
to be finite, or a ``ValueError``/``TypeError`` whose message states a rule; every call runs under
a watchdog (a hang fails). The counts per surface are printed at the end.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hiddenstate as hs
from tests.test_sweep_new_surfaces import COUNTS as _OLD
from tests.test_sweep_new_surfaces import JUNK, attempt, finite

COUNTS: Counter = _OLD  # attempt() counts there; this module prints its own surfaces' share
SWEEP = settings(max_examples=int(os.environ.get("HIDDENSTATE_SWEEP_EXAMPLES", 15)), deadline=None, database=None,
                 derandomize=True, suppress_health_check=list(HealthCheck))
MINE = ("probe_states", "compare_states", "blas_threads", "state_distance")


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    mine = {k: v for k, v in COUNTS.items() if k[0] in MINE}
    line = f"sweep_keep_change: {sum(mine.values())} inputs; {dict(sorted(mine.items()))}"
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else open(os.devnull):
        print("\n" + line)


STATES = st.one_of(JUNK, st.just(np.ones((6, 2, 3))), st.just({"a": np.ones((6, 2, 3))}), st.just({}),
                   st.just({"a": np.ones((6, 2)), "b": np.ones((5, 2))}), st.just(np.full((6, 2, 3), np.nan)),
                   st.just(np.ones(6)), st.builds(lambda t: np.random.default_rng(t).standard_normal((t, 2, 3)),
                                                  st.integers(0, 9)))
LABELS = st.one_of(JUNK, st.just(np.zeros((2, 6), dtype=int)), st.just(np.arange(6)), st.just(np.zeros((6, 2))),
                   st.just(np.ones((2, 6), dtype=bool)), st.just(np.full((2, 6), np.nan)))


@SWEEP
@given(states=STATES, labels=LABELS, alpha=st.one_of(JUNK, st.floats(-1, 2)),
       frac=st.one_of(JUNK, st.floats(-0.5, 1.5)))
def test_probe_states(states, labels, alpha, frac):
    attempt("probe_states", lambda: hs.probe_states(states, labels, alpha=alpha, train_fraction=frac),
            lambda r: np.isfinite(r.score) or pytest.fail("a NaN score"))


@SWEEP
@given(a=STATES, b=STATES)
def test_state_distance(a, b):
    from hiddenstate.probe.compare import state_distance

    attempt("state_distance", lambda: state_distance(a, b), finite)


@SWEEP
@given(n=st.one_of(JUNK, st.integers(-1, 3)))
def test_blas_threads(n):
    def call():
        with hs.blas_threads(n):
            return None

    attempt("blas_threads", call)


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def mamba():
    from hiddenstate.interop import families

    torch.manual_seed(0)
    return transformers.MambaForCausalLM(families.family_of("mamba").tiny_config()).eval()


IDS = st.one_of(JUNK, st.just(np.zeros((2, 5), dtype=int)), st.just(np.zeros((2, 4), dtype=int)),
                st.just(np.full((1, 5), 10**6)), st.just(np.full((1, 5), -1)), st.just(np.zeros((2, 5))))


@SWEEP
@given(a=IDS, b=IDS, layers=st.one_of(st.none(), JUNK, st.just([0]), st.just([7])), tol=st.one_of(JUNK, st.floats()))
def test_compare_states(mamba, a, b, layers, tol):
    attempt("compare_states", lambda: hs.compare_states(mamba, a, b, layers=layers, tol=tol),
            lambda r: finite([r.distance, r.relative]))
