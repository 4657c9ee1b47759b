"""The array-API path on a GPU: the checks of tests/test_array_api.py on torch CUDA tensors (and CuPy arrays).

Skipped, with the reason, where torch sees no GPU (CuPy's tests: where CuPy is not installed or
sees no GPU). On a GPU: float64 parity with torch.nn (cuDNN) and torch autograd to 1e-10, with
our NumPy kernels for every kind and option, the cells and step maps, unbatched input, the Mamba
block's forward and backward (tests/test_mamba_array_api.py), and a few training steps on ``cuda``
against the NumPy run.
"""

import numpy as np
import pytest

from hiddenstate.xp import to_numpy
from tests._torch import require_torch
from tests._torchrun import TORCHRUN
from tests.strategies import make_layer, state_parts
from tests.test_array_api import (
    SEEDS,
    TOL,
    check_cells_and_step_maps,
    check_numpy_parity,
    check_torch_parity,
    check_training,
    check_unbatched,
)
from tests.test_mamba_array_api import CONFIGS as MAMBA_CONFIGS
from tests.test_mamba_array_api import check_autograd_through_the_forward_loop, check_equals_the_numpy_kernels

torch = require_torch()

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: torch.cuda.is_available() is False")


@pytest.fixture(autouse=True)
def _exact_cuda_matmuls():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("seed", SEEDS)
def test_layers_equal_torch_nn_on_cuda(seed):
    check_torch_parity(seed, "cuda")


@pytest.mark.parametrize("seed", range(12))
def test_layers_equal_the_numpy_kernels_on_cuda(seed):
    check_numpy_parity(seed, "cuda")


def test_unbatched_input_on_cuda():
    check_unbatched("cuda")


def test_cells_and_step_maps_on_cuda():
    check_cells_and_step_maps("cuda")


@pytest.mark.parametrize("config", MAMBA_CONFIGS)
def test_the_mamba_block_equals_the_numpy_kernels_on_cuda(config):
    check_equals_the_numpy_kernels("cuda", config, batch_first=True)


def test_torch_autograd_through_the_mamba_loop_equals_its_adjoint_on_cuda():
    check_autograd_through_the_forward_loop("cuda")


def test_results_stay_on_the_gpu():
    layer = make_layer("lstm", 3, 4, 2, bidirectional=True)
    x = torch.randn(5, 2, 3, dtype=torch.float64, device="cuda")
    out, (h_n, c_n), cache = layer.forward(x)
    grads, dx, (dh0, dc0) = layer.backward(cache, torch.ones_like(out))
    for t in (out, h_n, c_n, dx, dh0, dc0, *grads.values()):
        assert t.is_cuda and t.dtype == torch.float64


@pytest.mark.parametrize(("cell", "options"), [("gru", {}), ("lstm", {"dropout": 0.2, "embedding_dim": 5})])
def test_training_on_cuda_follows_the_numpy_run(tmp_path, cell, options):
    check_training(tmp_path, "cuda", cell, **options)


def test_cupy_arrays_equal_the_numpy_kernels():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("CuPy sees no GPU")
    rng = np.random.default_rng(0)
    for kind in ("gru", "gru_after", "lstm", "rnn_tanh", "mingru"):
        layer = make_layer(kind, 3, 4, 2, bidirectional=True)
        x = rng.standard_normal((5, 2, 3))
        out, h_n, cache = layer.forward(x, lengths=[5, 3])
        c_out, c_hn, c_cache = layer.forward(cupy.asarray(x), lengths=[5, 3])
        assert isinstance(c_out, cupy.ndarray)
        np.testing.assert_allclose(to_numpy(c_out), out, **TOL)
        for a, b in zip(state_parts(c_hn), state_parts(h_n)):
            np.testing.assert_allclose(to_numpy(a), b, **TOL)
        d = rng.standard_normal(out.shape)
        g, dx, _ = layer.backward(cache, d)
        cg, cdx, _ = layer.backward(c_cache, cupy.asarray(d))
        np.testing.assert_allclose(to_numpy(cdx), dx, **TOL)
        for k in g:
            np.testing.assert_allclose(to_numpy(cg[k]), g[k], **TOL, err_msg=k)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs 2 GPUs for 2 ranks: fewer are visible")
def test_two_ranks_on_nccl_equal_one_process(tmp_path):
    """``torchrun --nproc-per-node 2 ... --device cuda``: one GPU per rank, NCCL; float64 to 1e-10 of one process."""
    import subprocess
    import sys

    from tests.test_distributed import ENV, SMALL, assert_same_run, free_port

    flags = ["train", *SMALL, "--steps", "20", "--dropout", "0.2", "--device", "cuda"]
    one = subprocess.run([sys.executable, "-m", "hiddenstate", *flags, "--out", str(tmp_path / "one")], env=ENV,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2",
                          "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "hiddenstate", *flags,
                          "--out", str(tmp_path / "two")], env=ENV, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr
    assert_same_run(tmp_path / "one", tmp_path / "two")
