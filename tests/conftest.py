"""Test-wide settings: floating-point errors raise, BLAS uses one thread, Ctrl-C is not ignored."""
import os
import signal

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pytest

# A suite started in the background (``make test &``, nohup, some CI runners) inherits SIGINT
# ignored; the trainer keeps an ignored signal ignored on purpose (guards.py), so the tests that
# interrupt a run with SIGINT would see nothing. They test the trainer, not the launcher: give this
# process (and, through exec, the processes it starts) Python's own SIGINT handler back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _raise_on_float_errors():
    old = np.seterr(all="raise")
    try:
        yield
    finally:
        np.seterr(**old)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
