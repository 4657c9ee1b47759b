"""The torch RNNs inside any model: found by path, recomputed by our layers, held to torch's own output, analysed.

Every expected value comes from torch itself: the test's own forward hooks (or the test calling
the torch module) give each module's output, independently of hiddenstate's hooks, and the
analysis's PCA is checked against NumPy's SVD of that torch output.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hiddenstate  # noqa: E402
from hiddenstate.interop.torch_rnns import find_rnns, recompute_rnns  # noqa: E402

TOL32 = 2e-5  # what a float32 torch module and our float64 layer may differ by, relative to the largest value


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def torch_outputs(model, path, run):
    """Every output (time-major (T, N, D*H), float64) module ``path`` returns while ``run()`` runs: torch's own."""
    module = dict(model.named_modules())[path]
    got = []

    def keep(mod, args, output):
        out = output[0] if isinstance(output, tuple) else output
        out = out.detach().double()
        if isinstance(mod, torch.nn.RNNCellBase):
            out = out[None]
        elif getattr(mod, "batch_first", False):
            out = out.transpose(0, 1)
        got.append(out.numpy())

    handle = module.register_forward_hook(keep)
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    return got


def explained_ratio(states):
    """PCA's explained-variance ratios of (T, H) states by NumPy's SVD."""
    centred = states - states.mean(0)
    s = np.linalg.svd(centred, compute_uv=False)
    return s ** 2 / (s ** 2).sum()


class Handmade(torch.nn.Module):
    """An LSTM (batch-first, bidirectional, 2 layers) and a GRU in sequence; a GRU cell and an LSTM stepped by hand."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential()
        self.encoder.add_module("lstm", torch.nn.LSTM(3, 5, num_layers=2, batch_first=True, bidirectional=True))
        self.gru = torch.nn.GRU(10, 4)
        self.cell = torch.nn.GRUCell(4, 6)
        self.step = torch.nn.LSTM(4, 7, num_layers=2)

    def forward(self, x):
        y, _ = self.encoder.lstm(x)
        z, _ = self.gru(y.transpose(0, 1))
        h = torch.zeros(z.shape[1], 6)
        for t in range(z.shape[0]):
            h = self.cell(z[t], h)
        state = None
        for t in range(z.shape[0]):  # a decoder stepping one token at a time, its state carried
            _, state = self.step(z[t:t + 1], state)
        return h


@pytest.fixture(scope="module")
def handmade():
    torch.manual_seed(0)
    return Handmade().eval(), torch.randn(3, 12, 3)


def test_find_rnns_lists_every_recurrent_module_and_cell_by_path(handmade):
    model, _ = handmade
    assert [p for p, _ in find_rnns(model)] == ["encoder.lstm", "gru", "cell", "step"]
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        find_rnns("model")


def test_a_handmade_model_is_recomputed_against_torchs_own_outputs(handmade):
    model, x = handmade
    rec = recompute_rnns(model, x)
    assert [r.name for r in rec.rnns] == ["encoder.lstm", "gru", "cell", "step"]
    assert rec.calls == {"encoder.lstm": 1, "gru": 1, "cell": 12, "step": 12}
    for r in rec.rnns:
        (theirs,) = [np.concatenate(torch_outputs(model, r.path, lambda: model(x)))]
        assert r.output.shape == theirs.shape
        assert rel(r.output, theirs) < TOL32, r.name
        assert r.error < TOL32 and r.tolerance == pytest.approx(1.2e-4, rel=0.01)
    lstm = rec["encoder.lstm"]
    assert lstm.batch_first and lstm.layer.bidirectional and lstm.layer.num_layers == 2 and lstm.x.shape == (12, 3, 3)
    # the stepped calls carry their state: joined in time into one 12-step sequence, from zeros
    assert rec["cell"].calls == tuple(range(12)) and rec["cell"].x.shape == (12, 3, 4)
    assert rec["step"].calls == tuple(range(12)) and rec["step"].h0 is None


def test_calls_that_do_not_carry_the_state_are_kept_apart():
    torch.manual_seed(1)
    gru = torch.nn.GRU(2, 3)
    model = torch.nn.Module()
    model.gru = gru
    x1, x2 = torch.randn(4, 2, 2), torch.randn(5, 2, 2)
    model.forward = lambda: (gru(x1), gru(x2))  # the second call starts from zeros again
    rec = recompute_rnns(model, method=model.forward)
    assert [r.name for r in rec.rnns] == ["gru[call 1]", "gru[call 2]"]
    with torch.no_grad():
        assert rel(rec["gru[call 2]"].output, gru(x2)[0].numpy()) < TOL32


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported:UserWarning")  # torch's own note
def test_packed_input_with_h0_is_recomputed_with_lengths_and_a_projected_lstm_is_skipped_by_name():
    torch.manual_seed(2)
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    class Packed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(3, 4, num_layers=2, batch_first=True)
            self.proj = torch.nn.LSTM(3, 6, proj_size=2)

        def forward(self, x, lengths, h0):
            out, _ = self.gru(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False), h0)
            return pad_packed_sequence(out, batch_first=True)[0], self.proj(x.transpose(0, 1))[0]

    model = Packed().eval()
    x, lengths, h0 = torch.randn(3, 7, 3), torch.tensor([4, 7, 2]), torch.randn(2, 3, 4)
    rec = recompute_rnns(model, x, lengths, h0)
    (r,) = rec.rnns
    assert r.name == "gru" and r.lengths.tolist() == [4, 7, 2]
    with torch.no_grad():
        theirs = model(x, lengths, h0)[0].transpose(0, 1).numpy()
    assert rel(r.output, theirs) < TOL32
    assert "proj_size=2" in rec.skipped["proj"]


def test_a_module_that_computes_something_else_is_refused_with_its_error():
    class Louder(torch.nn.GRU):
        def forward(self, x, hx=None):
            out, h = super().forward(x, hx)
            return 1.01 * out, h

    model = torch.nn.Sequential(Louder(2, 3))
    with pytest.raises(ValueError, match=r"0 \(Louder\) recomputed by our GRU differs .* by 0\.0\d+ .* not analysed"):
        recompute_rnns(model, torch.randn(5, 1, 2))
    with pytest.raises(ValueError, match="holds none"):
        recompute_rnns(torch.nn.Linear(2, 2), torch.randn(1, 2))


def test_inspect_model_analyses_each_rnn_by_path_and_writes_one_report(handmade, tmp_path):
    model, x = handmade
    an = hiddenstate.inspect_model(model, x, out=tmp_path / "r.html", layers=["gru", "cell"], max_lag=4,
                                   n_fixed_point_starts=2)
    assert list(an.analyses) == ["gru", "cell"]
    (gru_out,) = torch_outputs(model, "gru", lambda: model(x))
    np.testing.assert_allclose(an["gru"].pca.explained_variance_ratio, explained_ratio(gru_out[:, 0]),
                               rtol=1e-4, atol=1e-7)
    assert an.rows[0]["module"] == "gru" and an.rows[1]["calls"] == "12, joined in time"
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "The RNNs inside Handmade" in page and "cell" in page and "12, joined in time" in page
    with pytest.raises(ValueError, match="h0 must be None for a torch model with RNNs inside"):
        hiddenstate.inspect_model(model, x, h0=torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="layers must name RNNs of this model"):
        hiddenstate.inspect_model(model, x, layers="decoder")


# transformers audio and speech models that hold classic RNNs: tiny random configs, built offline.
_ENCODER = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
            "subsampling_conv_channels": 8, "num_mel_bins": 16}
_RNNT = {"decoder_hidden_size": 8, "num_decoder_layers": 2, "encoder_config": _ENCODER, "max_symbols_per_step": 2,
         "vocab_size": 10, "blank_token_id": 9}


def _encodec(tf):
    cfg = tf.EncodecConfig(hidden_size=16, num_filters=4, upsampling_ratios=[2, 2], codebook_size=16, codebook_dim=16,
                           num_lstm_layers=2)
    return tf.EncodecModel(cfg), {"input_values": torch.randn(2, 1, 64)}


def _wavtokenizer(tf):
    cfg = tf.WavTokenizerConfig(num_filters=4, upsampling_ratios=[2, 2], hidden_size=16, codebook_size=16,
                                codebook_dim=16, decoder_hidden_size=16, decoder_intermediate_size=32,
                                decoder_num_layers=1, decoder_attention_num_groups=4, num_lstm_layers=2)
    return tf.WavTokenizerModel(cfg), {"input_values": torch.randn(2, 1, 64)}


def _rnnt(cls, config, **extra):
    def build(tf):
        model = getattr(tf, cls)(getattr(tf, config)(**_RNNT, **extra))
        return model, {"input_features": torch.randn(2, 40, 16), "decoder_input_ids": torch.randint(0, 9, (2, 6))}
    return build


def _slanet(tf):
    backbone = {"model_type": "pp_lcnet", "scale": 0.25, "out_features": ["stage2", "stage3", "stage4", "stage5"],
                "out_indices": [2, 3, 4, 5], "divisor": 4}
    cfg = tf.SLANetConfig(hidden_size=8, max_text_length=6, out_channels=30, post_conv_out_channels=8,
                          backbone_config=backbone)
    return tf.SLANetForTableRecognition(cfg), {"pixel_values": torch.randn(1, 3, 64, 64)}


MODELS = {
    "encodec": (_encodec, ["encoder.layers.7.lstm", "decoder.layers.1.lstm"]),
    "wavtokenizer": (_wavtokenizer, ["encoder_model.encoder.layers.7.lstm"]),
    "parakeet": (_rnnt("ParakeetForRNNT", "ParakeetRNNTConfig", pad_token_id=2), ["decoder.lstm"]),
    "nemotron_asr_streaming": (_rnnt("NemotronAsrStreamingForRNNT", "NemotronAsrStreamingConfig", pad_token_id=0),
                               ["decoder.lstm"]),
    "nemotron3_5_asr": (_rnnt("Nemotron3_5AsrForRNNT", "Nemotron3_5AsrConfig", pad_token_id=0, num_prompts=4,
                              prompt_intermediate_size=8, default_prompt_id=1), ["decoder.lstm"]),
    "slanet": (_slanet, ["head.structure_attention_cell.rnn"]),  # an nn.GRUCell stepped by the table decoder
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # transformers' notes on defaults it falls back to
@pytest.mark.parametrize("name", list(MODELS))
def test_the_rnns_inside_transformers_audio_models_are_recomputed_and_analysed(name):
    tf = pytest.importorskip("transformers")
    build, paths = MODELS[name]
    torch.manual_seed(0)
    model, inputs = build(tf)
    model.eval()
    an = hiddenstate.inspect_model(model, inputs, max_lag=3, n_fixed_point_starts=0)
    rec = an.recomputed
    assert [r.path for r in rec.rnns] == paths and not rec.skipped
    for r in rec.rnns:
        theirs = np.concatenate(torch_outputs(model, r.path, lambda: model(**inputs)))
        assert r.output.shape == theirs.shape and len(r.calls) == rec.calls[r.path]  # every call joined
        assert rel(r.output, theirs) < TOL32 and r.error < TOL32, (r.name, r.error)
        np.testing.assert_allclose(an[r.name].pca.explained_variance_ratio, explained_ratio(theirs[:, 0]),
                                   rtol=1e-3, atol=1e-6)
    if name == "slanet":
        assert rec.rnns[0].layer.reset_after and len(rec.rnns[0].calls) == 7  # 7 decoding steps, one sequence


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_rnnt_decoder_stepping_token_by_token_in_generate_is_joined_in_time():
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = tf.ParakeetForRNNT(tf.ParakeetRNNTConfig(**_RNNT, pad_token_id=2)).eval()
    feats = torch.randn(1, 80, 16)
    rec = recompute_rnns(model, feats, method=model.generate, decoder_start_token_id=9, max_new_tokens=8)
    (r,) = rec.rnns
    steps = torch_outputs(model, "decoder.lstm", lambda: model.generate(feats, decoder_start_token_id=9,
                                                                          max_new_tokens=8))
    assert len(steps) == rec.calls["decoder.lstm"] > 1 and r.calls == tuple(range(len(steps)))
    assert r.x.shape[0] == len(steps) and rel(r.output, np.concatenate(steps)) < TOL32
