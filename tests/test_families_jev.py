"""JEV (issue 34): a decision head on Qwen3.5's text backbone, read through the backbone.

The tiny random model comes from ``Family.tiny_config`` (seeded, float32, no download). JEV's own
forward scores the labels only at the token before each question's mark; the family's ``run``
gives the head's scores at every position, held here to the model's own forward at the marks.
Each recurrent layer is held to the model's own output and its final state to the cache of the
text backbone (JEV's forward runs it with ``use_cache=False``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(seed=0):
    fam = families.family_of("jev")
    torch.manual_seed(seed)
    model = transformers.JevForDecision(fam.tiny_config()).eval()
    with torch.no_grad():  # decays mostly between 0.5 and 1, as tests/test_families_qwen35.py
        for mixer in fam.mixers(model).values():
            for pname, p in mixer.named_parameters():
                if pname.endswith("A_log"):
                    p.copy_(torch.empty_like(p).uniform_(0.02, 0.3).log())
                elif pname.endswith("dt_bias"):
                    p.copy_(0.5 * torch.randn_like(p))
    return model


def ids_for(seed=1, N=2, T=70):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 45, (N, T)))


def test_every_recurrent_layer_is_recomputed_to_the_models_own_output_and_the_backbones_cache():
    model = build()
    ids = ids_for()
    rc = recompute_layers(model, ids)
    assert rc.family.name == "jev" and rc.family.kind == "gated_delta" and rc.layers == (0, 1, 2)
    assert [(e.role, e.class_name) for e in rc.layer_map] == ([("recurrent", "Qwen3_5GatedDeltaNet")] * 3
                                                              + [("attention", "Qwen3_5Attention")])
    assert all(e.path.startswith("model.layers.") for e in rc.layer_map)
    assert all(0 <= err <= tolerance(torch.float32) for err in rc.errors), rc.errors
    with torch.no_grad():
        cache = model.model(ids, use_cache=True).past_key_values
    for i, rec in zip(rc.layers, rc.records):
        S = cache.get_recurrent_state(i).double().numpy()
        assert np.abs(rec.recurrent[-1] - S).max() <= 2e-5 * np.abs(S).max()
    backbone = recompute_layers(model.model, ids)  # the text backbone alone: its own family, the same records
    assert backbone.family.name == "qwen3_5_text"
    for x, y in zip(rc.records, backbone.records):
        np.testing.assert_array_equal(x.recurrent, y.recurrent)


def test_the_run_is_the_models_own_decision_scores_at_the_marks():
    model = build()
    fam = families.family_of(model)
    ids = ids_for(N=1, T=30)
    marks = torch.tensor([[9, 20, 30]])  # three questions: scored at tokens 8, 19 and 29
    types = ["noul", "score", "choice"]
    from transformers.decision import Question

    type_ids = torch.tensor([[Question.questions_types.index(t) for t in types]])
    num_options = torch.tensor([[2, 5, 4]])
    with torch.no_grad():
        theirs = model(input_ids=ids, marks=marks, num_options=num_options, question_type_ids=type_ids).logits
        every = fam.logits(model, ids)
    assert every.shape == (1, 30, 50)
    offsets = model.config.offsets
    ours = torch.cat([every[0, m - 1, offsets[t]:offsets[t] + k] for m, t, k in zip(marks[0], types, num_options[0])])
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-7)  # the head on 3 rows or on all: float32 round-off
    assert every.abs().max() < model.config.softcap  # soft-capped


def test_an_intervention_changes_the_label_scores_after_the_edit_only():
    model = build()
    ids = ids_for(N=2, T=16).numpy()
    run = hs.intervene(model, ids, [hs.StateEdit(2, 7, "add", value=1.0)])
    assert run.logits.shape == (2, 16, 50)
    np.testing.assert_array_equal(run.logits[:, :8], run.clean_logits[:, :8])
    assert np.abs(run.logits[:, 8] - run.clean_logits[:, 8]).max() > 1e-4


def test_inspect_model_from_the_object_and_its_directory(tmp_path):
    model = build()
    model.save_pretrained(tmp_path / "m")
    ids = ids_for(N=1, T=24)
    a, b = hs.inspect_model(model, ids), hs.inspect_model(tmp_path / "m", ids)
    assert [la.layer for la in a.layers] == [la.layer for la in b.layers] == [0, 1, 2]
    np.testing.assert_array_equal(a.layers[0].record.recurrent, b.layers[0].record.recurrent)
    assert "decision head (model.proj, soft-capped label scores) is not recurrent" in families.family_of("jev").notes
