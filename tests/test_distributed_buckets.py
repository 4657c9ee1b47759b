"""The step of a data-parallel run: bucketed all-reduce during the backward pass, per-rank masks, one collective.

Two ranks started by hand on 127.0.0.1 (env:// rendezvous on a port picked free, gloo on the
loopback interface, every wait bounded by HIDDENSTATE_DIST_TIMEOUT and the subprocess timeout)
run the worker below; each writes what it measured to a JSON file that the test reads. The
references are computed independently: a plain ``dist.all_reduce`` of the whole packed gradient
(the unbucketed path), and the one-process gradient of the whole batch (float64).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests._torch import require_torch

WAIT_S = 240
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "HIDDENSTATE_DIST_TIMEOUT": "30",
       "HIDDENSTATE_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
for _name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    ENV.pop(_name, None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_ranks(script, *args):
    """Run ``script ARGS`` as ranks 0 and 1 of a world of 2 on 127.0.0.1; returns [(status, stdout, stderr)]."""
    port, procs = free_port(), []
    for r in range(2):
        env = {**ENV, "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=WAIT_S)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


# -- the pieces, in one process ----------------------------------------------------------------------
@pytest.mark.parametrize("start_half", [0, 1])
@pytest.mark.parametrize("ranks", [2, 4])
def test_a_rank_draws_only_its_rows_and_leaves_the_generator_where_the_whole_draw_does(start_half, ranks):
    from hiddenstate.train.distributed import RowGenerator
    from hiddenstate.train.distributed.rows import batch_rows

    N = 8
    draws = [((5, N, 3), np.float32), ((4, 4), np.float64), ((3, N, 5), np.float64), ((2, N, 1), np.float32),
             ((1,), np.float32), ((6, N, 7), np.float32), ((2, N, 3), np.float64)]

    def fresh():
        g = np.random.default_rng(11)
        if start_half:
            g.random(1, dtype=np.float32)  # a 32-bit half kept by the bit generator
        return g

    whole = fresh()
    expected = [whole.random(shape, dtype=dtype) for shape, dtype in draws]
    for rank in range(ranks):
        parent = fresh()
        rows = batch_rows(rank, ranks, N)
        g = RowGenerator(parent, rows, N)
        for (shape, dtype), want in zip(draws, expected):
            if len(shape) == 3:
                got = g.random((shape[0], N // ranks, shape[2]), dtype=dtype)
                np.testing.assert_array_equal(got, want[:, rows])
            else:
                np.testing.assert_array_equal(g.random(shape, dtype=dtype), want)
        a, b = parent.bit_generator.state, whole.bit_generator.state
        assert a["state"] == b["state"] and a["has_uint32"] == b["has_uint32"]
        if b["has_uint32"]:
            assert a["uinteger"] == b["uinteger"]


def test_buckets_close_at_group_boundaries_and_the_last_carries_the_extras():
    torch = require_torch()
    from hiddenstate.train.distributed.buckets import EXTRAS, GradientBuckets, agreed, stop_slots
    from hiddenstate.train.model import CharRNN

    model = CharRNN(7, 16, 3, rng=np.random.default_rng(0))
    groups = model.gradient_groups()
    sizes = [sum(model.params[k].size for k in g) for g in groups]
    started = []
    b = GradientBuckets(model.params, groups, lambda t: started.append(t.numel()) or t, lambda w: None, 2, torch,
                        cap=sizes[0] + 1)
    # the decoder alone is under the cap: it shares a bucket with the top layer; then one per layer
    assert [stop - start for start, stop in b.buckets] == [sizes[0] + sizes[1], sizes[2], sizes[3] + EXTRAS]
    x = np.random.default_rng(1).integers(0, 7, (4, 3))
    b.ready({k: np.ones_like(v) for k, v in model.params.items() if k.startswith("decoder")})
    assert started == []  # its bucket is not complete
    b.begin()  # a new step: nothing packed
    loss, grads, _ = model.loss_and_grads(x, x, ready=b.ready)
    assert started == [sizes[0] + sizes[1], sizes[2]]  # started during the backward pass, top first
    total, reduced, summed = b.finish(loss, grads, stop_slots(True, True, signal.SIGTERM))
    assert started[-1] == sizes[3] + EXTRAS
    for k, g in grads.items():  # a fake all-reduce of one rank: the gradient times 1/K
        np.testing.assert_array_equal(reduced[k], g * 0.5)
    assert total == float(loss) * 0.5 and agreed(summed) == (True, signal.SIGTERM)
    assert agreed(stop_slots(False, True, None)) == (False, None)  # only the leader's clock counts


# -- two ranks --------------------------------------------------------------------------------------
WORKER = r"""
import json, signal, sys
import numpy as np
import torch.distributed as dist
from hiddenstate.train.distributed import join
from hiddenstate.train.distributed import torchworld
from hiddenstate.train.model import CharRNN

out, data = sys.argv[1], sys.argv[2]
world = join("cpu")
counts = {}
for name in ("all_reduce", "broadcast", "all_gather", "all_gather_object", "broadcast_object_list", "barrier",
             "reduce", "gather", "scatter", "all_to_all", "reduce_scatter"):
    real = getattr(dist, name)
    def counted(*a, _real=real, _name=name, **k):
        counts[_name] = counts.get(_name, 0) + 1
        return _real(*a, **k)
    setattr(dist, name, counted)
result = {}
N, T = 8, 6
for dtype in ("float64", "float32"):
    model = CharRNN(11, 16, 3, dropout=0.3, weight_drop=0.2, dtype=dtype, rng=np.random.default_rng(0))
    x = np.random.default_rng(1).integers(0, 11, (T + 1, N))
    inputs, targets = x[:-1], x[1:]
    mine = world.shard((inputs, targets))
    groups = model.gradient_groups()

    def compute(ready=None):
        return model.loss_and_grads(*mine, training=True, rng=world.mask_generator(np.random.default_rng(5), N),
                                    ready=ready)

    world.bucket_elements = 1  # a bucket per group: decoder, layer 2, layer 1, layer 0 (+ the extras)
    signum = signal.SIGTERM if world.rank == 1 else None
    world.watch(lambda: (True, signum))  # only the leader's clock counts; rank 1 received SIGTERM
    counts.clear()
    loss, grads, _ = world.local(compute, model.params, groups)
    started = dict(counts)
    loss, reduced = world.average(loss, grads)
    decision = world.agree(False, False, None)
    step_counts = dict(counts)
    # the unbucketed reference: the same local gradient, packed whole, one plain all-reduce
    _, local, _ = compute()
    flat = np.concatenate([g.reshape(-1) for g in local.values()]) * np.dtype(dtype).type(0.5)
    import torch
    t = torch.from_numpy(flat)
    dist.all_reduce(t)
    plain, offset = {}, 0
    for k, g in local.items():
        plain[k] = flat[offset: offset + g.size].reshape(g.shape)
        offset += g.size
    # the one-process gradient of the whole batch, with the whole batch's masks
    whole_loss, whole, _ = model.loss_and_grads(inputs, targets, training=True, rng=np.random.default_rng(5))
    result[dtype] = {
        "buckets": len(world._plan[1].buckets), "started_in_backward": started, "step": step_counts,
        "decision": [decision[0], decision[1], decision[2]],
        "bit_identical": all(np.array_equal(reduced[k], plain[k]) for k in plain),
        "vs_whole": max(float(np.abs(reduced[k] - whole[k]).max() / np.abs(whole[k]).max()) for k in whole),
        "loss": [loss, float(whole_loss)],
    }
    world.watch(None)
    counts.clear()
    world.local(compute, model.params, groups)
    world.average(loss, grads)
    world.agree(False, False, None)  # without a probe: the agreement is an all-reduce of its own
    result[dtype]["without_probe"] = dict(counts)

# a floating-point error on rank 1 after its first bucket started: every rank gets a NaN loss, none hangs
def failing(ready=None):
    def hook(g):
        ready(g)
        if world.rank == 1:
            raise FloatingPointError("overflow")
    return model.loss_and_grads(*mine, training=True, rng=world.mask_generator(np.random.default_rng(5), N),
                                ready=hook)

world.watch(lambda: (False, None))
loss, grads, _ = world.local(failing, model.params, groups)
loss, _ = world.average(loss, grads)
result["nan_after_failure"] = bool(np.isnan(loss))
json.dump(result, open(f"{out}/rank{world.rank}.json", "w"))
world.leave()
"""


def test_two_ranks_reduce_in_buckets_during_the_backward_pass_in_one_collective(tmp_path):
    require_torch()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    results = two_ranks(script, tmp_path, "unused")
    assert all(status == 0 for status, _, _ in results), results
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for got in ranks:
        for dtype in ("float64", "float32"):
            r = got[dtype]
            assert r["buckets"] == 4
            # the decoder's, layer 2's and layer 1's buckets started before the backward pass returned
            assert r["started_in_backward"] == {"all_reduce": 3}
            # the step: one all-reduce per bucket, the loss and the stop agreement in the last, nothing else
            assert r["step"] == {"all_reduce": 4}
            assert r["decision"] == [True, False, int(signal.SIGTERM)]
            assert r["bit_identical"], dtype
            assert r["without_probe"] == {"all_reduce": 5}
        assert got["float64"]["vs_whole"] < 1e-10  # the run is the one-process run
        assert got["float32"]["vs_whole"] < 1e-4
        np.testing.assert_allclose(got["float64"]["loss"][0], got["float64"]["loss"][1], rtol=1e-12)
        assert got["nan_after_failure"]


TRAIN = r"""
import json, os, sys
import torch.distributed as dist
from hiddenstate.train.distributed import torchworld
from hiddenstate.train import steps

out, data, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
torchworld.BUCKET_ELEMENTS = cap
calls, per_step = [0], []
real = dist.all_reduce
def counted(*a, **k):
    calls[0] += 1
    return real(*a, **k)
dist.all_reduce = counted
step, agree = steps.Trainer.train_step, torchworld.TorchWorld.agree
def train_step(self):
    per_step.append(calls[0])
    return step(self)
def agreed(self, *a):
    decision = agree(self, *a)
    per_step[-1] = calls[0] - per_step[-1]  # the collectives from the step's start to its stop decision
    return decision
steps.Trainer.train_step, torchworld.TorchWorld.agree = train_step, agreed
from hiddenstate.train import train
train(dict(data=data, hidden_size=24, num_layers=3, seq_len=12, batch_size=8, steps=12, eval_every=6, save_every=6,
           dtype="float64", dropout=0.3, weight_drop=0.2, out=out + "/two"), progress=False, verbose=False)
if os.environ["RANK"] == "0":
    json.dump(per_step, open(out + "/per_step.json", "w"))
"""


@pytest.mark.parametrize("cap", [1, 1 << 18])
def test_a_run_in_buckets_is_the_one_process_run_with_one_collective_a_bucket(tmp_path, cap):
    require_torch()
    from hiddenstate.train import train
    from hiddenstate.train.corpus import load_text
    from hiddenstate.train.rundir import load

    data = tmp_path / "play.txt"
    data.write_text(load_text()[:30_000], encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    results = two_ranks(script, tmp_path, data, cap)
    assert all(status == 0 for status, _, _ in results), results
    per_step = json.loads((tmp_path / "per_step.json").read_text())
    # cap 1: a bucket per group (decoder, 3 layers); the default: the small model is one bucket, so one collective
    assert per_step == [4 if cap == 1 else 1] * 12
    one = train(dict(data=str(data), hidden_size=24, num_layers=3, seq_len=12, batch_size=8, steps=12, eval_every=6,
                     save_every=6, dtype="float64", dropout=0.3, weight_drop=0.2, out=str(tmp_path / "one")),
                progress=False, verbose=False)
    two = load(tmp_path / "two")
    np.testing.assert_allclose(two.snapshot.history["train_loss"], one.history["train_loss"], rtol=1e-10, atol=0)
    np.testing.assert_allclose(two.snapshot.history["val_loss"], one.history["val_loss"], rtol=1e-10, atol=0)
    for key, w in one.model.params.items():
        assert np.abs(two.model.params[key] - w).max() <= 1e-10 * np.abs(w).max(), key
