"""HIDDENSTATE_NUM_THREADS falls back to one BLAS thread when the machine has no CPUs to spare."""
import pytest

from hiddenstate.cli import _blas_threads, _free_threads


@pytest.mark.parametrize("n,load,cpus,used", [
    (2, 0.0, 2, 2), (2, 0.4, 2, 2), (2, 0.6, 2, 1), (2, 1.5, 2, 1),  # 2 CPUs: another busy process -> 1
    (4, 3.0, 8, 4), (4, 4.6, 8, 1), (8, 0.0, 4, 1), (3, 0.9, 4, 3),
])
def test_threads_beyond_the_free_cpus_fall_back_to_one(n, load, cpus, used):
    got, notice = _free_threads(n, load, cpus)
    assert got == used
    assert (notice == "") == (used == n)
    if notice:
        assert f"HIDDENSTATE_NUM_THREADS={n}" in notice and f"{load:.1f} on {cpus} CPUs" in notice
        assert "using 1 BLAS thread" in notice and f"OMP_NUM_THREADS={n} to insist" in notice


def test_the_cli_warns_once_and_limits_blas_to_one_thread(monkeypatch):
    import os

    from threadpoolctl import threadpool_info

    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HIDDENSTATE_NUM_THREADS", "64")
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    notice = r"HIDDENSTATE_NUM_THREADS=64 but the load average is 1\.0"
    with pytest.warns(UserWarning, match=notice) as record, _blas_threads():
        blas = [d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"]
    assert len(record) == 1
    assert blas and set(blas) == {1}


_SCRIPT = """
import json, sys
from hiddenstate.cli import _blas_threads
assert "scipy.linalg" not in sys.modules  # SciPy's BLAS is loaded after the CLI's limit, as in `inspect`
with _blas_threads():
    import numpy as np
    import scipy.optimize
    from hiddenstate.core.threads import loaded_blas_threads
    from hiddenstate.probe.fixedpoints import find_fixed_points
    seen = {}
    real = scipy.optimize.minimize
    def spy(*a, **k):  # the fixed-point search's own minimiser: the threads it runs under
        seen.update(loaded_blas_threads())
        return real(*a, **k)
    scipy.optimize.minimize = spy
    W = np.random.default_rng(0).standard_normal((6, 6)) * 0.5
    F = lambda h: np.tanh(h @ W.T) - h
    jac = lambda h: (1 - np.tanh(h @ W.T) ** 2)[:, None] * W - np.eye(6)
    find_fixed_points(F, jac, np.random.default_rng(1).standard_normal((2, 6)))
print(json.dumps(seen))
"""


def test_the_cli_limit_reaches_scipys_blas_in_the_fixed_point_search():
    """SciPy brings its own OpenBLAS, loaded after the CLI's limit: it must run one thread too (issue 35)."""
    import json
    import os
    import subprocess
    import sys

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "HIDDENSTATE_NUM_THREADS")
    }
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert any("scipy_openblas-" in name or "scipy_openblas." in name for name in seen) or len(seen) >= 2, seen
    assert seen and set(seen.values()) == {1}, seen


def test_blas_threads_limits_every_loaded_blas_and_torch_then_restores():
    import torch

    from hiddenstate import blas_threads
    from hiddenstate.core.threads import loaded_blas_threads

    before = torch.get_num_threads()
    with blas_threads(1):
        inside = loaded_blas_threads()
    assert set(inside.values()) == {1} and "torch" in inside
    assert torch.get_num_threads() == before
    for bad, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("2", TypeError)):
        with pytest.raises(error, match=r"n must be a positive integer"), blas_threads(bad):
            pass
