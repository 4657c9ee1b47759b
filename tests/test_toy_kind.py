"""Adding a kind is one record and one registry call: a toy kind defined here gets an analysis and a report.

The toy block is a diagonal linear recurrence ``h_t = a * h_{t-1} + b * x_t`` with a fixed decay
vector ``a`` in (0, 1). Nothing in the package knows it: it is registered with one
:func:`hiddenstate.kinds.register_kind` call (its analysis named lazily, ``"<this module>:TOY"``),
measured by the generic code (:func:`hiddenstate.probe.block_analysis.analyze_block`, the layer
loop) and shown by the generic family page (the generic card of the layers' own rows), and the
measurements are held to values computed by hand: the time constants ``1 / (1 - a)``, the lag
norms ``max(a)^k`` and ``sqrt(mean(a^(2k)))``, the state itself.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import hiddenstate
from hiddenstate import kinds
from hiddenstate.kinds import Kind, LagNorms, RecordView, diagonal_lag_norms
from hiddenstate.probe.block_analysis import analyze_block
from hiddenstate.probe.layer_loop import LayerKind, analyze_records, layer_kind
from hiddenstate.probe.state_analysis import NEEDS_TEXT, RecurrenceAnalysis, RecurrenceLayerAnalysis
from hiddenstate.report.family_page import build_family_report, card_of, family_page

A = np.array([0.5, 0.8, 0.9, 0.95])
B = np.array([1.0, 0.5, 2.0, 1.0])


class ToyRecord(NamedTuple):
    h: np.ndarray  # (T, N, D): the state after every step
    a: np.ndarray  # (D,): the decay


class DiagonalRecurrence:
    """``h_t = a * h_{t-1} + b * x_t``, batch-first input (N, T, D), the state its own output."""

    batch_first = True

    def __init__(self, a, b):
        self.a, self.b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        self.d_model = self.a.size

    def forward(self, u, state=None, *, record=False):
        u = np.asarray(u, dtype=np.float64)
        N, T, D = u.shape
        h = np.zeros((N, D)) if state is None else np.asarray(state, dtype=np.float64)
        hs = np.empty((T, N, D))
        for t in range(T):
            h = self.a * h + self.b * u[:, t]
            hs[t] = h
        return hs.transpose(1, 0, 2), h, None, (ToyRecord(hs, self.a) if record else None)


def toy_view(rec) -> RecordView:
    T, N, D = rec.h.shape
    keep = np.broadcast_to(rec.a, (T, N, D))
    return RecordView(state=rec.h, keep=keep, keep_shape=(D,), keep_name="decay a",
                      lag_norms=lambda max_lag: LagNorms(*diagonal_lag_norms(keep, max_lag)), units=rec.h,
                      unit_keep=keep)


def _measure(index, rec, max_lag, common):
    return {"kind": "toy", "flow_note": "The exact Jacobian product dh_T/dh_(T-k) = diag(a^k), its largest entry:",
            "gate_unit": "channel", "keep_label": "a"}


def _sizes(rec):
    D = rec.h.shape[-1]
    return {"kind": "toy", "d": D, "state entries": "D", "state": f"toy state (D={D}) with a fixed decay per channel",
            "unit": "A channel d is a unit: its activation is its state h_t[d]."}


#: The toy kind's analysis for the shared layer loop (the generic layer analysis; no view: the record's).
TOY = LayerKind("toy", _measure, RecurrenceLayerAnalysis, RecurrenceAnalysis, _sizes,
                {"fixed points": "affine with a fixed decay: one stable fixed point per input"}, NEEDS_TEXT)


@pytest.fixture
def toy():
    kind = kinds.register_kind(Kind("toy", DiagonalRecurrence, toy_view, lambda rec: {"h": rec.h},
                                    analysis=f"{__name__}:TOY", title="toy diagonal recurrence"))
    try:
        yield kind
    finally:
        kinds.unregister_kind("toy")


def _input(T=60, N=2, seed=0):
    return np.random.default_rng(seed).normal(size=(N, T, A.size))


def test_the_toy_kind_is_found_through_its_one_record(toy):
    block = DiagonalRecurrence(A, B)
    assert kinds.get_kind("toy") is toy and kinds.kind_of_block(block) is toy and kinds.BLOCKS["toy"] is DiagonalRecurrence
    assert layer_kind("toy") is TOY  # the lazy "module:NAME" resolved on first use
    assert toy.report_card() is None and toy.analyzer() is None and toy.display == "toy diagonal recurrence"


def test_the_generic_analysis_measures_the_toy_kind_exactly(toy):
    u = _input()
    an = analyze_block(DiagonalRecurrence(A, B), u, max_lag=6)
    assert isinstance(an, RecurrenceAnalysis) and an.meta["kind"] == "toy" and an.meta["T"] == 60
    (la,) = an.layers
    # the state is the recurrence, computed by hand for sequence 1, last step
    h = np.zeros(A.size)
    for t in range(u.shape[1]):
        h = A * h + B * u[1, t]
    np.testing.assert_allclose(la.record.h[-1, 1], h, rtol=1e-12)
    # time constants 1 / (1 - a): 2, 5, 10, 20 steps
    np.testing.assert_allclose(la.time_constants, [2.0, 5.0, 10.0, 20.0], rtol=1e-9)
    np.testing.assert_allclose(la.decay.mean, A, rtol=1e-12)
    # the exact lag norms of diag(a^k): the largest entry 0.95^k, the RMS sqrt(mean(a^(2k)))
    k = np.arange(7)
    np.testing.assert_allclose(la.flow_spectral, 0.95 ** k, rtol=1e-12)
    np.testing.assert_allclose(la.flow_rms, np.sqrt((A[None, :] ** (2 * k[:, None])).mean(axis=1)), rtol=1e-12)
    assert la.memory is not None and la.pca.n_components_for(0.9) <= A.size
    assert "toy state (D=4)" in an.summary() and "fixed points" in an.not_measured


def test_the_generic_page_reports_the_toy_kind(toy, tmp_path):
    u = _input()
    text = "".join("ab c"[i % 4] for i in range(60))
    an = analyze_block(DiagonalRecurrence(A, B), u, max_lag=6, text=text)
    assert card_of(an) is not None and an.explore is not None
    page = build_family_report(tmp_path / "toy.html", an).read_text(encoding="utf-8")
    assert "<h1>Inside the toy diagonal recurrence layers of hiddenstate DiagonalRecurrence</h1>" in page
    assert 'id="layer0"' in page and "toy state (D=4) with a fixed decay per channel" in page
    assert "mean channel decay a</th><td>0.7875" in page  # mean of A: (0.5 + 0.8 + 0.9 + 0.95) / 4
    assert "channels kept &gt; 0.9 (share of steps)</th><td>25.0%" in page  # 0.95 alone
    assert "longest channel time constant</th><td>20 steps (channel 3)" in page
    assert "<td>2</td><td>5</td><td>10</td><td>20</td>" in page  # each channel's time constant
    assert "Explore the units" in page and 'id="memory"' in page and "fixed points" in page
    # the kind's name also resolves in the shared loop, and the page's title can be given
    again = analyze_records("toy", [an.layers[0].record], x=u, ids=False, batch_first=True, max_lag=6)
    np.testing.assert_allclose(again.layers[0].time_constants, an.layers[0].time_constants)
    assert "<title>mine</title>" in family_page(again, title="mine")


def test_the_toy_kind_leaves_the_registry_after_the_test():
    assert "toy" not in kinds.KINDS and "toy" not in kinds.BLOCKS
    with pytest.raises(TypeError, match="block must be a hiddenstate"):
        analyze_block(DiagonalRecurrence(A, B), _input())


def test_the_one_entry_point_analyses_the_toy_kind_through_its_record(toy):
    # hiddenstate.analyze routes any block of a registered kind, a kind it has never heard of included
    u = _input()
    an = hiddenstate.analyze(DiagonalRecurrence(A, B), u, max_lag=6)
    np.testing.assert_allclose(an.layers[0].time_constants, [2.0, 5.0, 10.0, 20.0], rtol=1e-9)
    assert an.meta["kind"] == "toy"
