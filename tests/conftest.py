"""Test-wide settings: floating-point errors raise, BLAS uses one thread."""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pytest


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
