"""Per-character features and the units that track them."""

import numpy as np
import pytest

from hiddenstate.probe.textfeatures import (
    after_newline,
    bracket_depth,
    inside_quotes,
    position_in_line,
    text_features,
)
from hiddenstate.probe.unitfeatures import best_units, unit_feature_correlation

TEXT = 'ab "cd" e\n(f(g)) "h\nij"'


def test_text_features_by_hand():
    assert inside_quotes(TEXT).tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0]
    assert position_in_line("ab\ncd\n").tolist() == [0, 1, 2, 0, 1, 2]
    assert after_newline("ab\ncd\n").tolist() == [1, 0, 0, 1, 0, 0]
    assert bracket_depth("(a(b))c)").tolist() == [1, 1, 2, 2, 1, 0, 0, 0]
    feats = text_features(TEXT)
    assert set(feats) == {"inside quotes", "position in line", "after newline", "bracket depth", "whitespace",
                          "upper case"}
    assert all(f.shape == (len(TEXT),) for f in feats.values())
    with pytest.raises(TypeError, match="text must be a str"):
        text_features(b"bytes")


def test_planted_quote_unit_is_found(rng):
    text = ('He said "yes" and she said "no, never" then left. ' * 20)
    q = inside_quotes(text)
    T, H = len(text), 10
    acts = rng.normal(size=(T, H)) * 0.3
    acts[:, 7] = np.tanh(2 * q - 1 + 0.1 * rng.normal(size=T))  # a "quote cell"
    acts[:, 3] = -acts[:, 7] * 0.5  # anti-correlated, weaker noise-free copy
    acts[:, 0] = 0.25  # constant unit: r = 0, not NaN
    res = unit_feature_correlation(acts, q, top=3, name="inside quotes")
    assert set(res.top_units[:2]) == {3, 7}
    assert res.top_r[0] > 0.95 or res.top_r[0] < -0.95
    assert res.r[7] > 0.95 and res.r[3] < -0.95
    assert res.r[0] == 0.0
    np.testing.assert_allclose(res.r[5], np.corrcoef(acts[:, 5], q)[0, 1], atol=1e-12)
    out = best_units(acts, text_features(text), top=2)
    assert out["inside quotes"].best_unit in (3, 7)


def test_errors(rng):
    with pytest.raises(ValueError, match="feature must have shape"):
        unit_feature_correlation(rng.normal(size=(5, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="at least 2 valid steps"):
        unit_feature_correlation(rng.normal(size=(1, 2)), np.zeros(1))


def test_usable_text_features_leaves_out_what_no_unit_can_track():
    from hiddenstate.probe.textfeatures import usable_text_features

    text = "ab cd\nEf gh ij\n" * 3  # no double quote, no bracket; 6 newlines, 3 capitals
    features, skipped = usable_text_features(text, unit="channel")
    assert sorted(features) == ["after newline", "position in line", "whitespace"]
    assert skipped["feature 'inside quotes'"] == ("constant on this text (the text has no double quote), so no channel "
                                                  "can track it.")
    assert skipped["feature 'bracket depth'"] == "constant on this text, so no channel can track it."
    assert skipped["feature 'upper case'"] == f"true at only 3 of {len(text)} characters, too few to correlate."
    np.testing.assert_array_equal(features["whitespace"], [float(c in " \n") for c in text])
