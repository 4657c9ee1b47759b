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
