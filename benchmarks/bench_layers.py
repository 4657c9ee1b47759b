"""Time hiddenstate's RNN, GRU and LSTM layers against torch.nn.RNN/GRU/LSTM on this machine.

What is measured (per (T, N, I, H) size and dtype, one layer, one direction):

* ``fwd``: ours ``layer.forward(x, need_cache=False)`` (what ``layer(x)`` runs: nothing kept
  for a backward); torch ``module(x)`` under ``torch.no_grad()``. ``fwd+cache`` is ours
  ``layer.forward(x)`` keeping its cache (the forward half of ``fwd+bwd``), for reference.
* ``fwd+bwd``: ours ``layer.forward(x)`` + ``layer.backward(cache, g)``; torch ``module(x)``
  with autograd on the parameters and the input, then ``(output * g).sum().backward()``.
  Both produce the gradients of every parameter and of ``x`` for the same upstream ``g``.
* ``floor``: the same matrix products our kernel issues for that layer and mode, alone, into
  preallocated outputs (``gemm_floor.py``): ``ours/floor`` is how far the layer is above the
  cost of its matrix products, and ``floor/torch`` the best ratio NumPy's BLAS allows.

Rows: RNN (tanh), GRU with ``reset_after=True`` (the same equations as ``torch.nn.GRU``),
GRU with our default ``reset_after=False`` (Cho et al. 2014; one extra (N, H) x (H, H)
product per step, so its ratio is *not* like for like: it is timed against the same
``torch.nn.GRU``), and LSTM. In float32 ``torch.nn.LSTM`` runs oneDNN's fused LSTM kernel, so
one more float32 row times our LSTM against torch with ``torch.backends.mkldnn`` disabled (the
ATen path of every other row). Both libraries get the same weights, inputs and thread count.

Method (the project's performance notes): all implementations run in one process,
interleaved within each round (order shuffled per round), after a warm-up on a short prefix of
the sequence (which also checks that ours and torch agree); the first round sets the number of
rounds (``--budget`` seconds, within ``[--min-rounds, --rounds]``). The table shows
per-implementation medians in milliseconds and ``ratio = median(ours) / median(torch)``
(< 1: ours is faster). Absolute times drift on shared VMs; the ratios are the result. On a
loaded machine ``--clock cpu`` (process CPU time) ignores time spent waiting for a CPU.

Usage::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_layers.py [--threads 1]
        [--rounds 15] [--budget 20] [--clock {wall,cpu}] [--quick] [--markdown]

``OPENBLAS_CORETYPE`` pins OpenBLAS to one kernel family (e.g. ``Haswell``: AVX2 only) and
makes every batched size 1.25-1.75x slower relative to torch; unset it for benchmarking.
"""

from __future__ import annotations

import argparse
import os
import sys

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_PINNING_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

SIZES = [(100, 32, 64, 128), (100, 32, 256, 256), (50, 256, 128, 256), (200, 64, 512, 512), (1000, 1, 64, 128)]
QUICK_SIZES = [(20, 8, 16, 32), (100, 1, 16, 32)]
KINDS = ("RNN", "GRU", "GRU-cho", "LSTM")
# table rows: (label, our layer, torch reference); the torch reference "LSTM-noDNN" is float32 only
ROWS = (
    ("RNN", "RNN", "RNN"),
    ("GRU (reset_after=True)", "GRU", "GRU"),
    ("GRU-cho (reset_after=False) [a]", "GRU-cho", "GRU"),
    ("LSTM", "LSTM", "LSTM"),
    ("LSTM vs torch oneDNN off [b]", "LSTM", "LSTM-noDNN"),
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads for both libraries (default 1)")
    p.add_argument("--rounds", type=int, default=15, help="maximum timed rounds per size and dtype (default 15)")
    p.add_argument("--min-rounds", type=int, default=3, help="minimum timed rounds per size and dtype (default 3)")
    p.add_argument("--budget", type=float, default=20.0,
                   help="seconds of timed rounds per size and dtype; the round count is budget / (one round), "
                        "clamped to [--min-rounds, --rounds] (default 20)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and 3 rounds: a smoke run of the script")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: time.perf_counter; cpu: time.process_time, this process's CPU time, which ignores "
                        "time spent descheduled on a loaded machine (single-threaded runs only) (default wall)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be >= 1; got {args.threads}.")
    if args.rounds < 1 or args.min_rounds < 1:
        p.error("--rounds and --min-rounds must be >= 1.")
    if args.clock == "cpu" and args.threads != 1:
        p.error("--clock cpu sums the CPU time of all threads; use it with --threads 1 only.")
    return args


ARGS = parse_args() if __name__ == "__main__" else None
# thread counts must be fixed before numpy (OpenBLAS) and torch (MKL/OpenMP) are imported
for _var in _THREAD_VARS:
    os.environ[_var] = str(ARGS.threads if ARGS else 1)

import contextlib  # noqa: E402
import gc  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import hiddenstate  # noqa: E402
from gemm_floor import floor_jobs  # noqa: E402  (benchmarks/gemm_floor.py, next to this script)


# -- environment report --------------------------------------------------------------------------
def openblas_kernel() -> str:
    """Which OpenBLAS kernel NumPy uses: via threadpoolctl if installed, else the library's own corename."""
    try:
        from threadpoolctl import threadpool_info  # optional: not a dependency of hiddenstate
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        rows = [f"{d.get('internal_api')} {d.get('version')} arch={d.get('architecture')} threads={d.get('num_threads')}"
                f" ({os.path.basename(d.get('filepath', ''))})" for d in threadpool_info()]
        return "threadpoolctl: " + ("; ".join(rows) if rows else "no BLAS/OpenMP library found")
    import ctypes

    try:  # the OpenBLAS that NumPy loaded, found among this process's mapped libraries
        with open("/proc/self/maps") as fh:
            paths = sorted({line.split()[-1] for line in fh if "openblas" in line.lower() and ".so" in line})
    except OSError:
        paths = []
    for path in paths:
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                    "openblas_get_corename"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return f"{fn().decode()} (from {sym} in {os.path.basename(path)}; threadpoolctl not installed)"
    return "unknown (threadpoolctl not installed and no OpenBLAS corename symbol found)"


def environment_report(torch, args) -> list[str]:
    lines = [
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
        f"hiddenstate {getattr(hiddenstate, '__version__', '?')}, {platform.machine()}, {os.cpu_count()} CPUs",
        f"threads: {', '.join(f'{v}={os.environ[v]}' for v in _THREAD_VARS)}, torch.get_num_threads()={torch.get_num_threads()}",
        f"numpy OpenBLAS kernel: {openblas_kernel()}",
    ]
    lines.append(f"clock: {'time.process_time (CPU time of this process)' if args.clock == 'cpu' else 'time.perf_counter (wall)'}")
    with contextlib.suppress(AttributeError):
        lines.append(f"torch BLAS: MKL available={torch.backends.mkl.is_available()}, "
                     f"mkldnn={torch.backends.mkldnn.is_available()}")
    return lines


def pinning_warning() -> str | None:
    pinned = [f"{v}={os.environ[v]}" for v in _PINNING_VARS if v in os.environ]
    if not pinned:
        return None
    return (f"WARNING: {', '.join(pinned)} is set: OpenBLAS is pinned, which makes batched sizes 1.25-1.75x "
            f"slower relative to torch (performance.md section 5). Rerun with "
            f"`env {' '.join('-u ' + v for v in _PINNING_VARS)} python {sys.argv[0]} ...`.")


def load_warning(args) -> str | None:
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    free = (os.cpu_count() or 1) - args.threads
    if load <= max(free, 0.5) or args.clock == "cpu":
        return None
    return (f"WARNING: 1-minute load average {load:.1f} on {os.cpu_count()} CPUs: other processes compete for the "
            f"CPUs and wall-clock times will be noisy; consider --clock cpu.")


# -- the implementations ----------------------------------------------------------------------------
def build(kind, I, H, dtype, torch, seed):
    """Our layer and the torch module with the same weights."""
    rng = np.random.default_rng(seed)
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    if kind == "RNN":
        ours, theirs = hiddenstate.RNN(I, H, dtype=dtype, rng=rng), torch.nn.RNN(I, H, dtype=tdtype)
    elif kind in ("GRU", "GRU-cho"):
        ours = hiddenstate.GRU(I, H, reset_after=(kind == "GRU"), dtype=dtype, rng=rng)
        theirs = torch.nn.GRU(I, H, dtype=tdtype)
    else:
        ours, theirs = hiddenstate.LSTM(I, H, dtype=dtype, rng=rng), torch.nn.LSTM(I, H, dtype=tdtype)
    theirs.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ours.params.items()})
    return ours, theirs


def make_jobs(ours, theirs, x, g, torch, onednn=True):
    """Five zero-argument callables: (ours fwd, torch fwd, ours fwd+bwd, torch fwd+bwd, ours fwd+cache).

    ``onednn=False`` runs torch with ``torch.backends.mkldnn`` disabled: its float32 LSTM then
    uses the same ATen kernels as every other dtype instead of oneDNN's fused LSTM.
    """
    xt = torch.from_numpy(x)
    gt = torch.from_numpy(g)
    xt_leaf = xt.clone().requires_grad_(True)

    def ours_fwd():
        return ours.forward(x, need_cache=False)[0]

    def ours_fwd_cache():
        return ours.forward(x)[0]

    def ours_fwdbwd():
        out, _, cache = ours.forward(x)
        return ours.backward(cache, g)

    def backend():
        return contextlib.nullcontext() if onednn else torch.backends.mkldnn.flags(enabled=False)

    def torch_fwd():
        with torch.no_grad(), backend():
            return theirs(xt)[0]

    def torch_fwdbwd():
        theirs.zero_grad(set_to_none=True)
        xt_leaf.grad = None
        with backend():
            out = theirs(xt_leaf)[0]
            (out * gt).sum().backward()
        return out

    return ours_fwd, torch_fwd, ours_fwdbwd, torch_fwdbwd, ours_fwd_cache


def check_parity(ours, theirs, x, g, torch):
    """Largest |ours - torch| over the output and the input gradient (sanity check: same computation)."""
    out, _, cache = ours.forward(x)
    _, dx, _ = ours.backward(cache, g)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    ot = theirs(xt)[0]
    (ot * torch.from_numpy(g)).sum().backward()
    return max(np.max(np.abs(out - ot.detach().numpy())), np.max(np.abs(dx - xt.grad.numpy())))


def bench_cell(size, dtype, args, torch):
    """Time every row at one (size, dtype); returns ({label: {mode: (ours ms, torch ms)}}, rounds, notes)."""
    T, N, I, H = size
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((T, N, I)).astype(dtype)
    T_short = min(T, 8)  # parity check and warm-up on a short prefix: cheap even at the largest size
    jobs, warm, notes = {}, [], []
    for kind in KINDS:
        ours, theirs = build(kind, I, H, dtype, torch, args.seed + 1)
        g = rng.standard_normal((T, N, H)).astype(dtype)
        if kind != "GRU-cho":
            err = check_parity(ours, theirs, x[:T_short], g[:T_short], torch)
            tol = 1e-9 if dtype == np.float64 else 1e-3
            if not err <= tol:
                notes.append(f"WARNING: {kind} {size} {np.dtype(dtype).name}: max |ours - torch| = {err:.2e} > {tol:g}")
        of, tf, ofb, tfb, ofc = make_jobs(ours, theirs, x, g, torch)
        jobs[("ours", kind, "fwd")], jobs[("ours", kind, "fwd+bwd")] = of, ofb
        jobs[("ours", kind, "fwd+cache")] = ofc
        jobs[("floor", kind, "fwd")], jobs[("floor", kind, "fwd+bwd")] = floor_jobs(kind, size, dtype, args.seed)
        if kind != "GRU-cho":  # GRU-cho is compared with the same torch GRU timings
            jobs[("torch", kind, "fwd")], jobs[("torch", kind, "fwd+bwd")] = tf, tfb
        warm += make_jobs(ours, theirs, x[:T_short], g[:T_short], torch)
        if kind == "LSTM" and dtype == np.float32:
            _, tf, _, tfb, _ = make_jobs(ours, theirs, x, g, torch, onednn=False)
            jobs[("torch", "LSTM-noDNN", "fwd")], jobs[("torch", "LSTM-noDNN", "fwd+bwd")] = tf, tfb
            warm += make_jobs(ours, theirs, x[:T_short], g[:T_short], torch, onednn=False)
    for job in warm:  # allocator, BLAS buffers, torch's lazy initialisation
        job()
    keys = list(jobs)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    times = {k: [] for k in keys}
    order_rng = np.random.default_rng(args.seed + 2)
    rounds = 3 if args.quick else args.rounds
    r = 0
    while r < rounds:
        gc.collect()
        t0 = time.perf_counter()
        for i in order_rng.permutation(len(keys)):
            k = keys[i]
            t = clock()
            jobs[k]()
            times[k].append(clock() - t)
        if r == 0 and not args.quick:  # the first round sets the count: --budget seconds in all
            one_round = time.perf_counter() - t0
            rounds = int(min(args.rounds, max(args.min_rounds, args.budget // max(one_round, 1e-9))))
        r += 1
    med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    result = {}
    for label, mine, ref in ROWS:
        if ("torch", ref, "fwd") in med:
            result[label] = {mode: (med[("ours", mine, mode)], med[("torch", ref, mode)]) for mode in ("fwd", "fwd+bwd")}
            result[label]["floor"] = (med[("floor", mine, "fwd")], med[("floor", mine, "fwd+bwd")])
            result[label]["cache"] = med[("ours", mine, "fwd+cache")]
    return result, rounds, notes


# -- output ---------------------------------------------------------------------------------------
HEADER = ("T", "N", "I", "H", "dtype", "layer", "rounds", "fwd ours ms", "fwd torch ms", "fwd ratio",
          "fwd+cache ms", "fwd+cache ratio",
          "f+b ours ms", "f+b torch ms", "f+b ratio", "fwd floor ms", "fwd ours/floor", "f+b floor ms",
          "f+b ours/floor")


def table_rows(results):
    rows = []
    for (size, dtype), res, rounds in results:
        for label, per_mode in res.items():
            (fo, ft), (bo, bt), (ff, bf) = per_mode["fwd"], per_mode["fwd+bwd"], per_mode["floor"]
            fc = per_mode["cache"]
            rows.append((*map(str, size), np.dtype(dtype).name, label, str(rounds), f"{fo:.2f}", f"{ft:.2f}",
                         f"{fo / ft:.2f}", f"{fc:.2f}", f"{fc / ft:.2f}", f"{bo:.2f}", f"{bt:.2f}", f"{bo / bt:.2f}", f"{ff:.2f}", f"{fo / ff:.2f}",
                         f"{bf:.2f}", f"{bo / bf:.2f}"))
    return rows


def format_table(rows, markdown):
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    fmt = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))
    return "\n".join([fmt(HEADER), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def main(args):
    try:
        import torch
    except ImportError:
        sys.exit("bench_layers.py needs torch (pip install torch) as the reference implementation.")
    torch.set_num_threads(args.threads)
    # torch.backends.mkldnn.flags() warns about TF32 on Intel GPUs, irrelevant here
    warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
    torch.manual_seed(args.seed)
    warn = [w for w in (pinning_warning(), load_warning(args)) if w]
    for w in warn:
        print(w, file=sys.stderr)
    header = environment_report(torch, args) + warn
    for line in header:
        print(("- " if args.markdown else "") + line)
    print()
    sizes = QUICK_SIZES if args.quick else SIZES
    results, notes = [], []
    t_start = time.perf_counter()
    from tqdm.auto import tqdm

    cases = [(size, dtype) for size in sizes for dtype in (np.float32, np.float64)]
    with tqdm(cases, unit="size", file=sys.stderr, dynamic_ncols=True, disable=None) as bar:  # a TTY only
        for size, dtype in bar:
            bar.set_description(f"{size} {np.dtype(dtype).name}")
            res, rounds, n = bench_cell(size, dtype, args, torch)
            results.append(((size, dtype), res, rounds))
            notes += n
            bar.write(f"  done {size} {np.dtype(dtype).name} ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr)
    print(format_table(table_rows(results), args.markdown))
    print()
    print("ratio = median(ours) / median(torch), < 1 means hiddenstate is faster; fwd = forward(need_cache=False) "
          "vs torch under no_grad; fwd+cache = forward keeping the cache for a backward; f+b = forward + backward "
          "(gradients of all parameters and of x).")
    print("floor = the same matrix products as our kernel issues, alone, in NumPy (benchmarks/gemm_floor.py); "
          "ours/floor = how far our layer is above the cost of its matrix products.")
    print("[a] GRU-cho is our default Cho et al. (2014) candidate (reset before the recurrent product: a second "
          "(N,H)x(H,H) GEMM per step), timed against the same torch.nn.GRU (reset_after form): not like for like.")
    print("[b] float32 only: torch.nn.LSTM in float32 runs oneDNN's fused LSTM kernel (inference and training); "
          "this row times it with torch.backends.mkldnn disabled, i.e. the ATen path every other row uses.")
    for note in notes:
        print(note)
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    try:
        main(ARGS)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback
        print(f"{os.path.basename(sys.argv[0])}: interrupted", file=sys.stderr)
        sys.exit(130)
