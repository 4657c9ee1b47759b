"""Time hiddenstate's array-API path on a GPU (torch CUDA, CuPy) against torch.nn on CUDA/cuDNN; and on CPU.

``--device cuda`` (the default): per (T, N, I, H) size and kind, one layer, one direction,
float32 unless ``--dtype float64``:

* ``fwd``: ours ``layer.forward(x)`` on a CUDA tensor (or a CuPy array); torch ``module(x)``
  (cuDNN's fused RNN kernels) under ``torch.no_grad()``.
* ``fwd+bwd``: ours ``forward`` + ``backward(cache, g)``; torch ``module(x)`` with autograd, then
  ``(output * g).sum().backward()``. Both give the gradients of every parameter and of ``x``.

Every timed call ends with ``torch.cuda.synchronize()`` (CuPy: the stream's). The table shows
medians in milliseconds and ``ratio = median(ours) / median(torch)`` (> 1: torch is faster; ours
is the readable reference form, one step of the equations per Python iteration, and launches a
few kernels per step where cuDNN launches one per layer). Without a GPU it prints why and exits 0.

``--device cpu``: the array-API path on torch CPU tensors against our NumPy kernels, both on the
CPU in float64, ``ratio = median(array-API on torch) / median(NumPy)``: what the array-API path
costs on a CPU.

Usage::

    python benchmarks/bench_gpu.py [--device {cuda,cpu}] [--dtype float32] [--rounds 7] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

SIZES = ((100, 32, 64, 128), (50, 256, 128, 256), (200, 64, 128, 512))
QUICK = ((50, 16, 32, 64),)
KINDS = ("rnn", "gru", "lstm")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="default: float32 on cuda, float64 on cpu")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="one small size (a smoke test)")
    p.add_argument("--threads", type=int, default=1, help="torch and BLAS threads on the CPU")
    return p.parse_args(argv)


def build(kind, I, H, dtype, seed=0):
    import hiddenstate as hs

    options = {"reset_after": True} if kind == "gru" else {}
    return {"rnn": hs.RNN, "gru": hs.GRU, "lstm": hs.LSTM}[kind](I, H, dtype=dtype, rng=np.random.default_rng(seed),
                                                                 **options)


def torch_module(layer, torch, device):
    from hiddenstate.interop.pytorch import to_torch

    return to_torch(layer).to(device)


def median_ms(fn, rounds, sync):
    fn()
    sync()  # warm-up (and the first conversion of the parameters)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def jobs_ours(layer, x, g):
    def fwd():
        layer.forward(x)

    def fwdbwd():
        _, _, cache = layer.forward(x)
        layer.backward(cache, g)

    return fwd, fwdbwd


def jobs_torch(mod, x, g, torch):
    xg = x.clone().requires_grad_(True)

    def fwd():
        with torch.no_grad():
            mod(x)

    def fwdbwd():
        mod.zero_grad(set_to_none=True)
        out, _ = mod(xg)
        (out * g).sum().backward()

    return fwd, fwdbwd


def bench_cuda(args, torch):
    dtype = np.dtype(args.dtype or "float32")
    tdt = getattr(torch, dtype.name)
    sync = torch.cuda.synchronize
    try:
        import cupy
    except ImportError:
        cupy = None
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; dtype {dtype.name}; "
          f"CuPy {'absent' if cupy is None else cupy.__version__}")
    print(f"{'kind':5} {'T,N,I,H':>16} {'mode':8} {'ours ms':>9} {'torch ms':>9} {'ratio':>7}"
          + ("" if cupy is None else f" {'cupy ms':>9} {'ratio':>7}"))
    for T, N, I, H in (QUICK if args.quick else SIZES):
        for kind in KINDS:
            layer = build(kind, I, H, dtype)
            mod = torch_module(layer, torch, "cuda")
            x = torch.randn(T, N, I, dtype=tdt, device="cuda")
            g = torch.randn(T, N, H, dtype=tdt, device="cuda")
            ours_fwd, ours_fb = jobs_ours(layer, x, g)
            torch_fwd, torch_fb = jobs_torch(mod, x, g, torch)
            cupy_jobs = None
            if cupy is not None:
                cx, cg = cupy.asarray(x.cpu().numpy()), cupy.asarray(g.cpu().numpy())
                cupy_jobs = jobs_ours(layer, cx, cg)
            for mode, ours, theirs, k in (("fwd", ours_fwd, torch_fwd, 0), ("fwd+bwd", ours_fb, torch_fb, 1)):
                a, b = median_ms(ours, args.rounds, sync), median_ms(theirs, args.rounds, sync)
                line = f"{kind:5} {f'{T},{N},{I},{H}':>16} {mode:8} {a:9.2f} {b:9.2f} {a / b:7.2f}"
                if cupy_jobs is not None:
                    c = median_ms(cupy_jobs[k], args.rounds, cupy.cuda.get_current_stream().synchronize)
                    line += f" {c:9.2f} {c / b:7.2f}"
                print(line, flush=True)


def bench_cpu(args, torch):
    dtype = np.dtype(args.dtype or "float64")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"CPU, {args.threads} thread(s); torch {torch.__version__}; dtype {dtype.name}; "
          "ratio = array-API path on torch CPU tensors / NumPy kernels")
    print(f"{'kind':5} {'T,N,I,H':>16} {'mode':8} {'numpy ms':>9} {'torch-xp ms':>11} {'ratio':>7}")
    for T, N, I, H in (QUICK if args.quick else SIZES[:2]):
        for kind in KINDS:
            layer = build(kind, I, H, dtype)
            x = rng.standard_normal((T, N, I)).astype(dtype)
            g = rng.standard_normal((T, N, H)).astype(dtype)
            np_jobs = jobs_ours(layer, x, g)
            xp_jobs = jobs_ours(layer, torch.from_numpy(x), torch.from_numpy(g))
            for mode, k in (("fwd", 0), ("fwd+bwd", 1)):
                a = median_ms(np_jobs[k], args.rounds, lambda: None)
                b = median_ms(xp_jobs[k], args.rounds, lambda: None)
                print(f"{kind:5} {f'{T},{N},{I},{H}':>16} {mode:8} {a:9.2f} {b:11.2f} {b / a:7.2f}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench_gpu: torch is not installed; nothing to compare against (pip install torch).")
        return 0
    if args.device == "cpu":
        bench_cpu(args, torch)
        return 0
    if not torch.cuda.is_available():
        print("bench_gpu: no GPU (torch.cuda.is_available() is False); nothing timed. "
              "Run `python benchmarks/bench_gpu.py --device cpu` for the array-API path on the CPU.")
        return 0
    bench_cuda(args, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
