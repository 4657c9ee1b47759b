"""Per-character features of a text, aligned with the hidden state after each character.

Karpathy, Johnson and Fei-Fei (2015, section 4.2, Figure 2) found LSTM cells that track
interpretable properties of the text: being inside a quotation, the position in the line
(a "line length" counter), the depth of nested brackets, the start of a line. These functions
compute such properties for every character so that units can be matched against them
(:mod:`hiddenstate.probe.unitfeatures`).

Alignment: ``feature[t]`` is the value *after reading* ``text[t]`` — what the state ``h_t``,
which has consumed characters ``0..t``, could know. An opening quote therefore already counts
as inside (value 1), its closing quote as outside (value 0).

References
----------
A. Karpathy, J. Johnson, L. Fei-Fei, "Visualizing and understanding recurrent networks",
arXiv:1506.02078, 2015.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "after_newline",
    "bracket_depth",
    "inside_quotes",
    "is_space",
    "is_upper",
    "position_in_line",
    "text_features",
    "usable_features",
    "usable_text_features",
]


def _check(text, name: str = "text") -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str; got {type(text).__name__}. Decode bytes first, e.g. data.decode('utf-8').")
    return text


def inside_quotes(text: str, quote: str = '"') -> np.ndarray:
    """1.0 for every character from an opening ``quote`` up to (not including) its closing one.

    Parameters
    ----------
    text : str
        Length ``T``.
    quote : str, default '"'
        One or more quote characters; each toggles the state (so ``quote="\\"'"`` treats both
        kinds alike, which is right for prose but not for apostrophes).

    Returns
    -------
    ndarray of shape (T,), float64 in {0, 1}

    Raises
    ------
    TypeError
        ``text`` or ``quote`` is not a str.
    ValueError
        ``quote`` is empty.
    """
    text = _check(text)
    if not _check(quote, "quote"):
        raise ValueError("quote must name at least one quote character; got ''.")
    out = np.zeros(len(text))
    inside = False
    for t, ch in enumerate(text):
        if ch in quote:
            inside = not inside
        out[t] = 1.0 if inside else 0.0
    return out


def position_in_line(text: str) -> np.ndarray:
    """Column of each character: 0 for the first character of a line, counting up to the newline.

    Parameters
    ----------
    text : str
        Length ``T``.

    Returns
    -------
    ndarray of shape (T,), float64
        The newline character itself gets the column it occupies (the length of its line).

    Raises
    ------
    TypeError
        ``text`` is not a str (decode bytes first).
    """
    text = _check(text)
    out = np.zeros(len(text))
    col = 0
    for t, ch in enumerate(text):
        out[t] = col
        col = 0 if ch == "\n" else col + 1
    return out


def after_newline(text: str) -> np.ndarray:
    """1.0 for the first character of each line (``t == 0`` or ``text[t-1] == "\\n"``).

    Parameters
    ----------
    text : str
        Length ``T``.

    Returns
    -------
    ndarray of shape (T,), float64 in {0, 1}

    Raises
    ------
    TypeError
        ``text`` is not a str (decode bytes first).
    """
    text = _check(text)
    out = np.zeros(len(text))
    for t in range(len(text)):
        if t == 0 or text[t - 1] == "\n":
            out[t] = 1.0
    return out


def bracket_depth(text: str, open_: str = "([{", close: str = ")]}") -> np.ndarray:
    """Nesting depth of brackets after reading each character (never below 0).

    Parameters
    ----------
    text : str
        Length ``T``.
    open_ : str, default "([{"
        Characters that open a bracket (each adds 1).
    close : str, default ")]}"
        Characters that close one (each subtracts 1, never below 0); brackets of different
        kinds are not matched against each other.

    Returns
    -------
    ndarray of shape (T,), float64

    Raises
    ------
    TypeError
        ``text``, ``open_`` or ``close`` is not a str (decode bytes first).
    """
    text = _check(text)
    open_, close = _check(open_, "open_"), _check(close, "close")
    out = np.zeros(len(text))
    depth = 0
    for t, ch in enumerate(text):
        if ch in open_:
            depth += 1
        elif ch in close:
            depth = max(depth - 1, 0)
        out[t] = depth
    return out


def is_space(text: str) -> np.ndarray:
    """1.0 where the character is whitespace (``str.isspace``: space, tab, newline, ...).

    Parameters
    ----------
    text : str
        Length ``T``.

    Returns
    -------
    ndarray of shape (T,), float64 in {0, 1}

    Raises
    ------
    TypeError
        ``text`` is not a str (decode bytes first).
    """
    text = _check(text)
    return np.array([1.0 if ch.isspace() else 0.0 for ch in text])


def is_upper(text: str) -> np.ndarray:
    """1.0 where the character is an upper-case letter (``str.isupper``).

    Parameters
    ----------
    text : str
        Length ``T``.

    Returns
    -------
    ndarray of shape (T,), float64 in {0, 1}

    Raises
    ------
    TypeError
        ``text`` is not a str (decode bytes first).
    """
    text = _check(text)
    return np.array([1.0 if ch.isupper() else 0.0 for ch in text])


def text_features(text: str) -> dict[str, np.ndarray]:
    """The standard per-character features, by name.

    Parameters
    ----------
    text : str
        Length ``T``.

    Returns
    -------
    dict of str to ndarray of shape (T,), float64
        ``"inside quotes"`` (double quotes), ``"position in line"``, ``"after newline"``,
        ``"bracket depth"``, ``"whitespace"``, ``"upper case"``.
    """
    text = _check(text)
    return {
        "inside quotes": inside_quotes(text),
        "position in line": position_in_line(text),
        "after newline": after_newline(text),
        "bracket depth": bracket_depth(text),
        "whitespace": is_space(text),
        "upper case": is_upper(text),
    }


def usable_text_features(text: str, *, unit: str = "unit") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """:func:`text_features` of ``text``, less those no unit can track.

    A feature is left out when it is constant on the text, or binary and true (or false) at fewer
    than 5 characters: its correlation with a unit would be undefined or rest on a handful of
    characters.

    Parameters
    ----------
    text : str
        Length ``T``.
    unit : str, default "unit"
        What the reasons call a unit (``"channel"`` for Mamba).

    Returns
    -------
    features : dict of str to ndarray of shape (T,)
    skipped : dict of str to str
        ``"feature 'NAME'"`` -> why it was left out.

    Raises
    ------
    TypeError
        ``text`` is not a str.
    """
    return usable_features(text_features(text), unit=unit)


def usable_features(features: dict, *, unit: str = "unit", step: str = "characters") -> tuple[dict, dict]:
    """The features of ``features`` that a unit can track: not constant, and a binary one true (and false) at >= 5 steps.

    Parameters
    ----------
    features : dict of str to ndarray of shape (T,)
        Per-step features (:func:`text_features`, or per token
        :func:`hiddenstate.probe.tokens.token_features`).
    unit : str, default "unit"
        What the reasons call a unit.
    step : str, default "characters"
        What the reasons call a step (``"tokens"``).

    Returns
    -------
    features : dict of str to ndarray of shape (T,)
    skipped : dict of str to str
        ``"feature 'NAME'"`` -> why it was left out.
    """
    kept, skipped = {}, {}
    for name, v in features.items():
        if np.ptp(v) == 0:
            hint = " (the text has no double quote)" if name == "inside quotes" else ""
            skipped[f"feature {name!r}"] = f"constant on this text{hint}, so no {unit} can track it."
        elif np.isin(v, (0.0, 1.0)).all() and min(v.sum(), v.size - v.sum()) < 5:
            skipped[f"feature {name!r}"] = (f"true at only {int(min(v.sum(), v.size - v.sum()))} of {v.size} "
                                            f"{step}, too few to correlate.")
        else:
            kept[name] = v
    return kept, skipped
