"""The initial state in, the final state out, dL/dh0, and initial-state tuning with the trainer.

Oracles: torch.nn.GRU / LSTM given the same weights and h0 (outputs, h_n, and autograd's gradient
with respect to h0), central finite differences of the loss for every cell kind, and an
uninterrupted tuning run for a resumed one.
"""

from __future__ import annotations

import numpy as np
import pytest

from hiddenstate.train import load, sample, train
from hiddenstate.train.corpus import load_text
from hiddenstate.train.generate import Stream
from hiddenstate.train.initial_state import (
    broadcast_state,
    check_initial_state,
    initial_state_gradient,
    state_from_arrays,
    state_to_arrays,
)
from hiddenstate.train.model import CharRNN
from hiddenstate.train.steps import evaluate

CELLS = ("gru", "lstm", "rnn", "mingru", "minlstm", "mamba")


def _random_state(model, rows, rng):
    parts = model.initial_state(rows)
    parts = parts if isinstance(parts, tuple) else (parts,)
    out = tuple(0.5 * rng.standard_normal(p.shape) for p in parts)
    return out if len(out) == 2 else out[0]


def _parts(state):
    return state if isinstance(state, tuple) else (state,)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_h0_in_and_h_n_out_and_dh0_equal_torch(cell):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    V, H, L, T, N = 7, 5, 2, 6, 3
    model = CharRNN(V, H, L, cell=cell, rng=rng)
    h0 = _random_state(model, N, rng)
    x, y = rng.integers(0, V, (T, N)), rng.integers(0, V, (T, N))
    logits, h_n, _ = model.forward(x, h0)
    loss, d_h0, final = model.loss_and_state_grad(x, y, h0)

    net = (torch.nn.GRU if cell == "gru" else torch.nn.LSTM)(V, H, L).double()
    net.load_state_dict({k[4:]: torch.from_numpy(v) for k, v in model.params.items() if k.startswith("rnn.")})
    t0 = [torch.tensor(p, requires_grad=True) for p in _parts(h0)]
    out, t_n = net(torch.from_numpy(model.embed(x)), t0[0] if cell == "gru" else tuple(t0))
    t_logits = out @ torch.from_numpy(model.params["decoder.weight"]).T + torch.from_numpy(model.params["decoder.bias"])
    t_loss = torch.nn.functional.cross_entropy(t_logits.reshape(-1, V), torch.from_numpy(y).reshape(-1))
    t_loss.backward()

    np.testing.assert_allclose(logits, t_logits.detach().numpy(), rtol=0, atol=1e-12)
    for ours, theirs in zip(_parts(h_n) + _parts(final), _parts(t_n) * 2):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=0, atol=1e-12)
    assert loss == pytest.approx(t_loss.item(), abs=1e-12)
    for ours, theirs in zip(_parts(d_h0), t0):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cell", CELLS)
def test_the_gradient_of_a_one_row_h0_matches_finite_differences(cell):
    rng = np.random.default_rng(1)
    model = CharRNN(6, 5, 2, cell=cell, rng=np.random.default_rng(0))
    h0 = _random_state(model, 1, rng)  # one row: a state for every row of the batch
    x, y = rng.integers(0, 6, (7, 3)), rng.integers(0, 6, (7, 3))
    loss, d_h0 = initial_state_gradient(model, x, y, h0)
    assert loss == model.loss(x, y, broadcast_state(model, h0, 3))[0]
    probe = [p.copy() for p in _parts(h0)]

    def loss_at():
        return model.loss(x, y, broadcast_state(model, tuple(probe) if len(probe) == 2 else probe[0], 3))[0]

    for part, grad in zip(probe, _parts(d_h0)):
        assert grad.shape == part.shape
        for idx in [tuple(int(rng.integers(0, s)) for s in part.shape) for _ in range(5)]:
            part[idx] += 1e-6
            up = loss_at()
            part[idx] -= 2e-6
            down = loss_at()
            part[idx] += 1e-6
            assert grad[idx] == pytest.approx((up - down) / 2e-6, abs=1e-8), idx


@pytest.mark.parametrize("cell", CELLS)
def test_states_round_trip_through_named_arrays_forward_and_stream(cell):
    rng = np.random.default_rng(2)
    model = CharRNN(6, 4, 2, cell=cell, rng=np.random.default_rng(0))
    h0 = _random_state(model, 1, rng)
    back = state_from_arrays(model, {k: v.copy() for k, v in state_to_arrays(model, h0).items()})
    for a, b in zip(_parts(h0), _parts(back)):
        assert a.tobytes() == b.tobytes()
    ids = rng.integers(0, 6, 9)
    logits, h_n, _ = model.forward(ids[:, None], h0)
    stream = Stream(model, h0)
    for t, i in enumerate(ids):
        stream.feed(int(i))
        np.testing.assert_allclose(stream.logits, logits[t, 0], rtol=0, atol=1e-12)
    for a, b in zip(_parts(stream.state), _parts(h_n)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    # a state read in two halves equals the state of the whole: the final state is a valid h0
    _, mid, _ = model.forward(ids[:4, None], h0)
    _, end, _ = model.forward(ids[4:, None], mid)
    for a, b in zip(_parts(end), _parts(h_n)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_a_wrong_h0_is_one_value_error_naming_the_argument_the_model_and_what_came():
    gru = CharRNN(6, 4, 2, cell="gru", rng=np.random.default_rng(0))
    lstm = CharRNN(6, 4, 2, cell="lstm", rng=np.random.default_rng(0))
    other = CharRNN(6, 5, 2, cell="gru", rng=np.random.default_rng(0))
    cases = [
        (gru, np.zeros((2, 1, 5)), r"float64 \(2, 1, 5\)"),  # another model's H
        (gru, other.initial_state(1), r"float64 \(2, 1, 5\)"),
        (gru, np.zeros((2, 1, 4), dtype=np.int64), r"int64 \(2, 1, 4\)"),  # dtype
        (gru, np.zeros((2, 1, 4), dtype=bool), r"bool \(2, 1, 4\)"),
        (gru, lstm.initial_state(1), r"2 arrays"),  # an LSTM's pair for a GRU
        (lstm, gru.initial_state(1), r"float64 \(2, 1, 4\)"),
        (gru, np.zeros((2, 2, 4)), r"float64 \(2, 2, 4\)"),  # 2 rows for a batch of 3
        (gru, "zeros", r"str"),
    ]
    for model, h0, got in cases:
        with pytest.raises(ValueError, match=rf"^h0 must be .* for CharRNN\(.*hidden_size=4, num_layers=2, "
                                             rf"cell='{model.cell}'.*N = 1 .*got {got}"):
            check_initial_state(model, h0, batch_size=3)
    with pytest.raises(ValueError, match=r"^h0 must hold finite values .*CharRNN"):
        check_initial_state(gru, np.full((2, 1, 4), np.nan))
    with pytest.raises(ValueError, match=r"^initial_state must hold the arrays \['h', 'c'\] of CharRNN.*got \['h'\]"):
        state_from_arrays(lstm, {"h": np.zeros((2, 1, 4))})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny GRU trained on one text, and a second text of another style (upper case, no punctuation)."""
    root = tmp_path_factory.mktemp("tune")
    text = load_text()[:30_000]
    (root / "play.txt").write_text(text, encoding="utf-8")
    shouting = "".join(c for c in text.upper() if c in text and (c.isalpha() or c in " \n"))
    (root / "shout.txt").write_text(shouting, encoding="utf-8")
    base = train({"data": str(root / "play.txt"), "hidden_size": 24, "steps": 60, "seq_len": 16, "batch_size": 8,
                  "eval_every": 60, "dtype": "float64", "out": str(root / "base")}, progress=False, verbose=False)
    return root, base


def _tune(root, out, **extra):
    config = {"tune_initial_state": str(root / "base"), "data": str(root / "shout.txt"), "steps": 30, "seq_len": 16,
              "batch_size": 8, "eval_every": 10, "save_every": 10, "lr": 0.05, "out": str(root / out), **extra}
    return config


def test_tuning_lowers_the_loss_and_leaves_the_weights_bit_identical(runs):
    root, base = runs
    tuned = train(_tune(root, "tuned"), progress=False, verbose=False)
    losses = tuned.history["train_loss"]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.05, losses
    saved = load(tuned.out)
    assert saved.config.tune_initial_state == str(root / "base")
    assert saved.config.hidden_size == 24 and saved.config.dtype == "float64"  # the tuned model's fields
    for key, value in base.model.params.items():
        assert saved.model.params[key].tobytes() == value.tobytes(), key
    h0 = saved.initial_state
    assert h0.shape == (1, 1, 24) and np.abs(h0).max() > 0.01
    np.testing.assert_array_equal(h0, tuned.initial_state)
    # the validation loss of the run is the held-out text read from the tuned state, below the zero state's
    ids = saved.vocab.encode((root / "shout.txt").read_text(encoding="utf-8"))[-3000:]
    assert evaluate(saved.model, ids, initial_state=h0) < evaluate(saved.model, ids)
    # generation starts from the tuned state: sampling the run equals sampling the model from h0
    rng = np.random.default_rng(4)
    ids_from_h0 = saved.model.sample(saved.vocab.encode("\n"), 30, rng=rng, state=h0)
    assert sample(tuned.out, length=30, seed=4) == "\n" + saved.vocab.decode(ids_from_h0)


def test_a_resumed_tuning_run_equals_the_uninterrupted_one(runs):
    root, _ = runs
    whole = train(_tune(root, "whole"), progress=False, verbose=False)

    class Crash(Exception):
        pass

    def crash(record):
        if record["step"] == 17:
            raise Crash

    with pytest.raises(Crash):
        train(_tune(root, "parts"), progress=False, verbose=False, callback=crash)
    assert load(root / "parts").step == 10
    resumed = train(None, resume=root / "parts", progress=False, verbose=False)
    for key in ("train_loss", "grad_norm", "val_step", "val_loss"):
        np.testing.assert_array_equal(resumed.history[key], whole.history[key], err_msg=key)
    assert resumed.initial_state.tobytes() == whole.initial_state.tobytes()
    a, b = load(root / "whole").snapshot, load(root / "parts").snapshot
    for key, value in a.adam.items():
        assert b.adam[key].tobytes() == value.tobytes(), key


def test_tuning_refuses_ema_unknown_characters_and_a_missing_model(runs):
    root, _ = runs
    with pytest.raises(ValueError, match=r"^ema must be None with tune_initial_state"):
        train(_tune(root, "e", ema=0.9), progress=False, verbose=False)
    (root / "odd.txt").write_text("ÆØÅ" * 3000, encoding="utf-8")
    with pytest.raises(ValueError, match=r"data must only use the characters of the model being tuned .*'ÅÆØ'"):
        train(_tune(root, "odd", data=str(root / "odd.txt")), progress=False, verbose=False)
    with pytest.raises(ValueError, match=r"^--cell must be the tuned model's \('gru'\) with --tune-initial-state; "
                                         r"got 'lstm'"):
        train(_tune(root, "c", cell="lstm"), progress=False, verbose=False)
    with pytest.raises(FileNotFoundError, match=r"^--tune-initial-state: checkpoint .*nothere"):
        train(_tune(root, "m", tune_initial_state=str(root / "nothere")), progress=False, verbose=False)
    assert not any((root / name).exists() and any((root / name).iterdir()) for name in ("e", "odd", "m", "c"))


def test_a_tuned_state_saves_and_loads_as_a_snapshot_that_generation_takes(runs, tmp_path):
    import hiddenstate as hs
    from hiddenstate.keep.ours import initial_snapshot

    root, _ = runs
    tuned = load(root / "tuned") if (root / "tuned").is_dir() else None
    if tuned is None:
        train(_tune(root, "tuned"), progress=False, verbose=False)
        tuned = load(root / "tuned")
    model, h0 = tuned.model, tuned.initial_state
    snap = initial_snapshot(model, h0)
    snap.save(tmp_path / "style.safetensors")
    back = hs.load_snapshot(tmp_path / "style.safetensors", model)
    np.testing.assert_array_equal(check_initial_state(model, back), h0)
    ids = tuned.vocab.encode("\nTHE KING")
    a, b = Stream(model, h0), Stream(model, back)
    for i in ids:
        a.feed(int(i))
        b.feed(int(i))
        assert a.logits.tobytes() == b.logits.tobytes()
    rng = np.random.default_rng(3)
    want = model.sample(ids[:1], 20, rng=np.random.default_rng(3), state=h0)
    np.testing.assert_array_equal(model.sample(ids[:1], 20, rng=rng, state=back), want)
    np.testing.assert_allclose(snap.next_logits[0], h0[-1, 0] @ model.params["decoder.weight"].T
                               + model.params["decoder.bias"], rtol=0, atol=1e-12)
    # another model (other weights): refused in one ValueError naming the snapshot
    other = CharRNN(model.vocab_size, model.hidden_size, cell=model.cell, dtype=model.dtype,
                    rng=np.random.default_rng(9))
    with pytest.raises(ValueError, match=r"^state \(a snapshot\) must have the weights the snapshot was taken with"):
        Stream(other, back)
    with pytest.raises(ValueError, match=r"weights the snapshot was taken with"):
        hs.load_snapshot(tmp_path / "style.safetensors", other)


def test_the_cli_tunes_samples_from_the_tuned_state_and_refuses_in_one_line(runs, tmp_path, capsys):
    from hiddenstate.cli import main

    root, _ = runs
    out = tmp_path / "cli"
    assert main(["train", "--tune-initial-state", str(root / "base"), "--data", str(root / "shout.txt"), "--steps", "8",
                 "--seq-len", "16", "--batch-size", "8", "--lr", "0.2", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["sample", str(out), "--length", "30", "--seed", "5"]) == 0
    printed = capsys.readouterr().out.rstrip("\n")
    assert printed == sample(out, length=30, seed=5).rstrip("\n")  # from the tuned state ...
    assert printed != sample(root / "base", length=30, seed=5).rstrip("\n")  # ... not from zeros
    assert main(["train", "--tune-initial-state", str(tmp_path / "nothere"), "--data", str(root / "shout.txt"),
                 "--out", str(tmp_path / "x"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tune-initial-state: checkpoint" in err[0] and "nothere" in err[0]
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_a_tuning_checkpoint_without_its_state_or_with_a_bad_one_is_refused(runs):
    from hiddenstate.train.rundir.checkpoint import load_checkpoint
    from hiddenstate.train.rundir.snapshot import Snapshot

    root, _ = runs
    if not (root / "tuned").is_dir():
        train(_tune(root, "tuned"), progress=False, verbose=False)
    params, meta, arrays = load_checkpoint(root / "tuned" / "checkpoint")
    assert sorted(k for k in arrays if k.startswith("initial_state.")) == ["initial_state.h"]
    Snapshot.from_files(params, meta, arrays)  # as saved: reads
    without = {k: v for k, v in arrays.items() if not k.startswith("initial_state.")}
    with pytest.raises(ValueError, match=r"must hold the tuned 'initial_state\.' arrays exactly when "
                                         r"train\.tune_initial_state is set; got 0"):
        Snapshot.from_files(params, meta, without)
    with pytest.raises(ValueError, match=r"initial_state\.h"):
        Snapshot.from_files(params, meta, {**arrays, "initial_state.h": np.full((1, 1, 24), np.nan)})
    trained = load(root / "tuned")
    trained.snapshot.initial_state = {"h": np.zeros((1, 1, 23))}  # another model's H: named when used
    with pytest.raises(ValueError, match=r"initial_state must be \(1, N, 24\) .*got float64 \(1, 1, 23\)"):
        sample(trained, length=5)


@pytest.mark.parametrize("kind", ["MambaLM", "Mamba2LM"])
def test_a_mamba_lms_one_row_initial_states_get_their_gradient_by_bptt(kind):
    # the models from_transformers makes of Mamba, FalconMamba and Mamba-2: dL/dh0 checked by finite differences
    import hiddenstate as hs

    options = {"head_dim": 4, "n_groups": 1, "d_state": 8} if kind == "Mamba2LM" else {}
    model = getattr(hs, kind)(7, 8, 2, rng=np.random.default_rng(0), **options)
    rng = np.random.default_rng(5)
    h0 = [type(z)(*(0.3 * rng.standard_normal(p.shape) for p in z)) for z in (b.initial_state(1) for b in model.layers)]
    ids, targets = rng.integers(0, 7, (3, 6)), rng.integers(0, 7, (3, 6))  # (N, T): batch_first
    loss, d_h0 = initial_state_gradient(model, ids, targets, h0)
    assert len(d_h0) == 2 and all(d.shape == p.shape for dl, pl in zip(d_h0, h0) for d, p in zip(dl, pl))

    def loss_at(state):
        from hiddenstate.core.functional import cross_entropy

        logits, _, _ = model.forward(ids, broadcast_state(model, state, 3))
        return cross_entropy(logits.reshape(-1, 7), targets.reshape(-1))[0]

    assert loss == pytest.approx(loss_at(h0), abs=1e-12)
    for layer in range(2):
        for part in range(2):
            arr = h0[layer][part]
            for idx in [tuple(int(rng.integers(0, s)) for s in arr.shape) for _ in range(3)]:
                arr[idx] += 1e-6
                up = loss_at(h0)
                arr[idx] -= 2e-6
                down = loss_at(h0)
                arr[idx] += 1e-6
                assert d_h0[layer][part][idx] == pytest.approx((up - down) / 2e-6, abs=1e-8), (layer, part, idx)
    with pytest.raises(ValueError, match=rf"^h0 must be a list of L=2 MambaState .* for {kind}.*got 2 arrays"):
        initial_state_gradient(model, ids, targets, [h0[0]])
    # a snapshot of the LM (its state after a prefix) is an initial state it takes, part for part
    from hiddenstate.keep.ours import state_of

    snap = hs.snapshot(model, ids)
    for mine, theirs in zip(check_initial_state(model, snap), state_of(snap)):
        for a, b in zip(mine, theirs):
            assert a.tobytes() == b.tobytes()
