"""The hidden-state tools on a character model of Mamba blocks (``CharRNN(cell="mamba")``, ``train --cell mamba``).

Every step's record of every layer is held to what the model's own forward pass computes: the
state after step t is the final state of the prefix ``ids[:t + 1]`` run through
``CharRNN.forward`` with the same initial state, and the last one is the state it returns.
"""

import re

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.kinds.ssm.mamba_analysis import MambaAnalysis, analyze_mamba, trace_mamba
from hiddenstate.kinds.ssm.mamba_kernel import rms_norm
from hiddenstate.kinds.ssm.stack import EPS
from hiddenstate.pipelines.app import inspect_checkpoint, inspect_mamba_checkpoint
from hiddenstate.probe.state_memory import state_memory_curve
from hiddenstate.train.corpus import load_text
from hiddenstate.train.model import CharRNN

TINY = ["--cell", "mamba", "--hidden-size", "8", "--num-layers", "2", "--seq-len", "16", "--batch-size", "4",
        "--eval-every", "3", "--quiet"]


def model_and_state(embedding_dim=None, N=3, seed=0):
    model = CharRNN(6, 8, 2, cell="mamba", embedding_dim=embedding_dim, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    ssm, conv = model.initial_state(N)
    return model, (rng.normal(size=ssm.shape), rng.normal(size=conv.shape))  # a carried state, not zeros


@pytest.mark.parametrize("embedding_dim", [None, 3])
def test_every_steps_record_is_the_final_state_of_its_prefix_run_through_the_model(embedding_dim):
    model, state = model_and_state(embedding_dim)
    ids = np.random.default_rng(7).integers(0, 6, (9, 3))  # (T, N)
    records = trace_mamba(model, ids, state)
    assert len(records) == 2 and records[0].ssm.shape == (9, 3, 16, 16) and records[0].conv.shape == (9, 3, 16, 3)
    for t in range(9):
        _, (ssm, conv), _ = model.forward(ids[:t + 1], state)  # (L, N, Di, S), (L, N, Di, K-1)
        for layer, rec in enumerate(records):
            np.testing.assert_allclose(rec.ssm[t], ssm[layer], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(rec.conv[t], conv[layer], rtol=1e-12, atol=1e-14)
    _, (ssm, conv), _ = model.forward(ids, state)
    for layer, rec in enumerate(records):  # the last step's states are the states the stack returns, exactly
        np.testing.assert_array_equal(rec.ssm[-1], ssm[layer])
        np.testing.assert_array_equal(rec.conv[-1], conv[layer])


def test_the_state_carried_across_calls_continues_the_record():
    model, state = model_and_state()
    ids = np.random.default_rng(3).integers(0, 6, (10, 3))
    whole = trace_mamba(model, ids, state)
    _, carried, _ = model.forward(ids[:4], state)
    rest = trace_mamba(model, ids[4:], carried)
    for a, b in zip(whole, rest):
        for name in ("ssm", "conv", "dt", "decay", "B", "C", "gate"):
            np.testing.assert_allclose(getattr(a, name)[4:], getattr(b, name), rtol=1e-11, atol=1e-13)


def test_layer_records_by_hand_from_the_residual_stream():
    # layer 0 reads rms_norm(W_in onehot) * n_0; the decay is exp(dt A) with A = -exp(A_log)
    model, _ = model_and_state(N=2)
    ids = np.array([[0, 5], [1, 4], [2, 3], [3, 2]])
    rec = trace_mamba(model, ids)[0]
    p = model.params
    onehot = np.eye(6)[ids]  # (T, N, V)
    stream = onehot @ p["rnn.in_proj.weight"].T  # (T, N, M)
    want = stream / np.sqrt((stream ** 2).mean(axis=-1, keepdims=True) + EPS) * p["rnn.layers.0.norm.weight"]
    np.testing.assert_allclose(rms_norm(stream, p["rnn.layers.0.norm.weight"], EPS)[0], want, rtol=1e-13)
    _, _, _, direct = model.rnn.layers[0].forward(want, None, record=True)
    np.testing.assert_allclose(rec.ssm, direct.ssm, rtol=1e-12, atol=1e-15)
    A = -np.exp(p["rnn.layers.0.mixer.A_log"])  # (Di, S)
    np.testing.assert_allclose(rec.decay, np.exp(rec.dt[..., None] * A), rtol=1e-13)
    # step 0 from a zero state: h_0 = dt_0 B_0 a_0 (outer product over the channel and the state entry)
    np.testing.assert_allclose(rec.ssm[0], rec.dt[0][..., None] * rec.B[0][:, None, :] * rec.x[0][..., None],
                               rtol=1e-12, atol=1e-15)


def test_one_sequence_of_ids_is_a_batch_of_one_and_bad_ids_are_refused():
    model, _ = model_and_state()
    ids = np.array([0, 3, 1, 5, 2])
    one, batch = trace_mamba(model, ids), trace_mamba(model, ids[:, None])
    np.testing.assert_array_equal(one[1].ssm, batch[1].ssm)
    with pytest.raises(TypeError, match="x must be integer character ids .* got dtype float64"):
        trace_mamba(model, ids.astype(float))
    with pytest.raises(ValueError, match=r"x must hold ids in \[0, V=6\); got values in \[0, 6\]"):
        trace_mamba(model, np.array([0, 6]))
    with pytest.raises(ValueError, match=r"x must have shape \(T,\) or \(T, N\)"):
        trace_mamba(model, np.zeros((2, 2, 2), dtype=int))
    with pytest.raises(ValueError, match=r"state.ssm must have shape \(2, 3, 16, 16\)"):
        trace_mamba(model, ids[:, None].repeat(3, axis=1), model.initial_state(2))
    with pytest.raises(TypeError, match="model must be a hiddenstate MambaLM, Mamba or CharRNN of cell 'mamba'; "
                                        "got CharRNN of cell 'gru'"):
        trace_mamba(CharRNN(6, 4, rng=np.random.default_rng(0)), ids)


def test_analyze_mamba_measures_every_layer_of_the_char_model():
    model, state = model_and_state()
    ids = np.random.default_rng(2).integers(0, 6, (40, 3))
    an = analyze_mamba(model, ids, state, max_lag=5)
    assert an.meta.pop("warnings")[0].startswith("The memory curve is scored on only 30 held-out step(s)")  # 3 x 10
    assert an.meta == {"T": 40, "N": 3, "d_inner": 16, "d_state": 16, "d_conv": 4, "num_layers": 2,
                       "model": "hiddenstate CharRNN (mamba)", "memory target": "the token k steps back (held-out accuracy)"}
    records = trace_mamba(model, ids, state)
    for la, rec in zip(an.layers, records):
        np.testing.assert_array_equal(la.record.ssm, rec.ssm)
        # time constants from the mean decay over all steps and sequences, per state entry
        np.testing.assert_allclose(la.time_constants, 1.0 / (1.0 - rec.decay.mean(axis=(0, 1))), rtol=1e-10)
        # the exact Jacobian product over the last 5 steps: the product of the last 5 decays
        prod = rec.decay[-5:].prod(axis=0).reshape(3, -1)  # (N, Di*S)
        np.testing.assert_allclose(la.flow_spectral[-1], prod.max(axis=1).mean(), rtol=1e-12)
        # the memory curve decodes the character ids the model read (its tokens by default)
        ref = state_memory_curve(rec.ssm.reshape(40, 3, -1), ids, max_lag=5)
        np.testing.assert_array_equal(la.memory.score, ref.score)
    assert an.text is None and an.explore is None  # no text: the card says what the explorer needs


def test_inspect_model_takes_text_with_its_vocabulary_and_writes_the_mamba_report(tmp_path):
    model, _ = model_and_state(N=1)
    vocab = "abc de"
    text = "a bad cab deed bead be a dace add ebb " * 3
    out = tmp_path / "r.html"
    heard = []
    an = hs.inspect_model(model, text, vocab=vocab, out=out, echo=heard.append)
    assert isinstance(an, MambaAnalysis) and an.meta["T"] == len(text) and an.meta["N"] == 1
    ids = np.array([vocab.index(c) for c in text])
    for la, rec in zip(an.layers, trace_mamba(model, ids)):
        np.testing.assert_array_equal(la.record.ssm, rec.ssm)
    page = out.read_text(encoding="utf-8")
    assert "<h1>Inside a Mamba model</h1>" in page and 'id="layer1"' in page and 'id="skipped"' in page
    assert "2 Mamba block(s), d_model 8" in page
    assert len(heard) == 2 and heard[0].startswith("measured every layer's states") and heard[1].startswith("wrote")
    # the text decoded with the vocabulary reaches the channels and the explorer; the ids the memory curve
    assert an.text == text and an.explore is not None and 'id="ex-data"' in page and 'id="memory"' in page
    np.testing.assert_array_equal(an.explore["signals"]["decay"], an.layers[-1].channel_decay[:, 0])
    for la in an.layers:
        ref = state_memory_curve(la.record.ssm.reshape(len(text), 1, -1), ids[:, None], max_lag=la.memory.lags.size - 1)
        np.testing.assert_array_equal(la.memory.score, ref.score)
    by_ids = hs.inspect_model(model, ids)  # ids and no out: the same measurements, nothing written
    np.testing.assert_array_equal(by_ids.layers[1].record.decay, an.layers[1].record.decay)
    with pytest.raises(ValueError, match="lengths must be None for a CharRNN of cell 'mamba'"):
        hs.inspect_model(model, ids[:, None], lengths=[3])
    with pytest.raises(ValueError, match="vocab must be given to read x as text"):
        hs.inspect_model(model, text)
    with pytest.raises(ValueError, match="x must have at least one step"):
        hs.inspect_model(model, np.zeros((0, 1), dtype=int))
    (tmp_path / "mine.html").write_text("my own page", encoding="utf-8")
    with pytest.raises(ValueError):  # nothing a user saved is overwritten
        hs.inspect_model(model, ids, out=tmp_path / "mine.html")
    assert (tmp_path / "mine.html").read_text(encoding="utf-8") == "my own page"


@pytest.fixture(scope="module")
def mamba_run(tmp_path_factory):
    data = tmp_path_factory.mktemp("data") / "small.txt"
    data.write_text(load_text()[:20_000], encoding="utf-8")
    out = tmp_path_factory.mktemp("runs") / "mamba"
    assert main(["train", "--data", str(data), "--steps", "3", "--out", str(out), *TINY]) == 0
    return out


def test_cli_inspect_of_a_mamba_run_writes_the_report_and_prints_its_summary(mamba_run, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "r.html"
    assert main(["inspect", str(mamba_run), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    stages = captured.err.strip().splitlines()
    assert len(stages) == 2, stages
    assert all(re.fullmatch(r"hiddenstate: inspect: (measured .+|wrote the report .+): \d+\.\d s", s) for s in stages)
    lines = captured.out.strip().splitlines()
    assert lines[-1] == f"report: {out}"
    # the summary is the analysis's own, once: the same run measured through the API gives the same lines
    again = inspect_mamba_checkpoint(mamba_run, tmp_path / "api.html")
    assert "\n".join(lines[:-1]) == again.summary()
    assert lines[0].startswith("hiddenstate CharRNN (mamba): 2 layer(s), state (Di=16, S=16) per sequence, ")
    assert sum(line.startswith("layer ") for line in lines) == 2
    page = out.read_text(encoding="utf-8")
    assert "Character-level Mamba (2 block(s), d_model 8" in page and "trained 3 steps on small.txt" in page
    assert "characters of validation text" in page
    assert 'id="ex-data"' in page and 'id="units"' in page and 'id="memory"' in page  # the text and ids reached it
    assert "memory capacity" in lines[1] and again.text in load_text()[:20_000] and len(again.text) == again.meta["T"]
    # inspect_checkpoint (what demo and the API call) gives the same report for a mamba run
    assert inspect_checkpoint(mamba_run, tmp_path / "ck.html") == tmp_path / "ck.html"
    assert 'id="layer1"' in (tmp_path / "ck.html").read_text(encoding="utf-8")


def test_cli_inspect_of_a_mamba_run_reads_text_and_refuses_what_does_not_apply(mamba_run, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be: that is the question.\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["inspect", str(mamba_run), "--text", str(text), "--out", str(tmp_path / "t.html"),
                 "--fixed-point-starts", "0"]) == 0  # 0 skips a search that a Mamba model has not: accepted
    assert "characters of t.txt" in (tmp_path / "t.html").read_text(encoding="utf-8")
    capsys.readouterr()
    for flags, message in [(["--fixed-point-starts", "4"], "--fixed-point-starts applies to models of rnn, gru, "
                             "lstm, mingru or minlstm layers; got 4 for the mamba run"),
                           (["--kind", "gru"], "--kind applies to a .safetensors state dict only")]:
        bad = tmp_path / "bad.html"
        assert main(["inspect", str(mamba_run), "--out", str(bad), *flags]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"hiddenstate: error: {message}"), err
        assert captured.out == "" and not bad.exists()
