"""Tokens as the units of text: what each step read, shown legibly, and the text features per token.

A character model reads one character a step; a model with a real tokenizer (byte-pair encoding,
SentencePiece, WordPiece) reads one *token* a step, a piece of a word, a whole word with its
leading space, or a single byte of a multi-byte character. The report's explorer and the unit
features read the text step by step, so with a real tokenizer the step's unit is the token:

* :func:`token_pieces` decodes every id on its own (``tokenizer.decode([id])``, the text that
  token adds) and, where that is not a whole character (a byte of a UTF-8 sequence decodes to
  ``"\\ufffd"``), keeps the tokenizer's own name of the token (``"<0xE2>"``, ``"âĢ"``);
* :func:`hiddenstate.report.textview.legible` is how the page shows a piece: spaces as they are but a token of whitespace
  only as a visible mark, newlines as ``↵`` (followed by a real line break), tabs as ``→``;
* :func:`token_features` gives the per-character features of :mod:`hiddenstate.probe.textfeatures`
  one value per token: the feature at the token's last character (the state after a step has
  read the whole token), plus ``"word start"`` (the token opens a word: it starts with
  whitespace, or follows whitespace).

Nothing here needs a tokenizer library: a ``tokenizers.Tokenizer`` and a transformers tokenizer
both have ``decode`` (and ``id_to_token`` or ``convert_ids_to_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hiddenstate.probe.textfeatures import text_features

__all__ = ["token_features", "token_pieces"]


def _piece_list(pieces, name: str = "pieces") -> list:
    if isinstance(pieces, str) or not isinstance(pieces, Sequence):
        raise TypeError(f"{name} must be a sequence of str (one token's text per step); got {type(pieces).__name__}.")
    out = list(pieces)
    bad = next((i for i, p in enumerate(out) if not isinstance(p, str)), None)
    if bad is not None:
        raise TypeError(f"{name}[{bad}] must be a str; got {type(out[bad]).__name__}.")
    return out


def token_pieces(tokenizer, ids) -> list:
    """The text each token adds, decoded one id at a time; a partial byte keeps the token's own name.

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer or transformers tokenizer
        Anything with ``decode(list_of_ids) -> str``; ``id_to_token(id)`` or
        ``convert_ids_to_tokens(id)`` names a token whose bytes are not a whole character.
    ids : array_like of int, shape (T,)
        One sequence's token ids.

    Returns
    -------
    list of str
        T pieces: ``decode([id])``, or the token's name where that decodes to ``"\\ufffd"`` (a
        byte of a multi-byte UTF-8 character) or to nothing (a special token).

    Raises
    ------
    TypeError
        ``tokenizer`` has no ``decode``; ``ids`` are not integers.
    ValueError
        ``ids`` is not one-dimensional.
    """
    if not callable(getattr(tokenizer, "decode", None)):
        raise TypeError(f"tokenizer must have a decode(ids) method (a tokenizers.Tokenizer or a transformers "
                        f"tokenizer); got {type(tokenizer).__name__}.")
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be integer token ids; got dtype {arr.dtype}.")
    if arr.ndim != 1:
        raise ValueError(f"ids must have shape (T,), one sequence; got {arr.shape}.")
    name = getattr(tokenizer, "id_to_token", None) or getattr(tokenizer, "convert_ids_to_tokens", None)
    out = []
    for i in arr.tolist():
        piece = tokenizer.decode([i])
        if (not piece or "\ufffd" in piece) and name is not None:
            piece = str(name(i))
        out.append(piece)
    return out


def token_features(pieces) -> dict:
    """The text features of :func:`~hiddenstate.probe.textfeatures.text_features`, one value per token.

    Parameters
    ----------
    pieces : sequence of str
        The text each token added, one per step (:func:`token_pieces`); their concatenation is
        the text.

    Returns
    -------
    dict of str to ndarray of shape (T,), float64
        Each character feature at the token's last character (an empty piece: at the last
        character before it, 0 at the start), and ``"word start"``: 1 where the piece starts
        with whitespace or the text before it ends with whitespace (or it is the first).

    Raises
    ------
    TypeError
        ``pieces`` is not a sequence of str.
    ValueError
        ``pieces`` is empty.
    """
    pieces = _piece_list(pieces)
    if not pieces:
        raise ValueError("pieces must hold at least one token's text; got none.")
    text = "".join(pieces)
    ends = np.cumsum([len(p) for p in pieces]) - 1  # (T,) the index of each token's last character
    feats = text_features(text) if text else {}
    out = {}
    for name, v in feats.items():
        out[name] = np.where(ends >= 0, v[np.clip(ends, 0, None)], 0.0)
    starts = ends - np.array([len(p) for p in pieces]) + 1
    out["word start"] = np.array([1.0 if (t == 0 or (p[:1].isspace()) or (s > 0 and text[s - 1].isspace())) else 0.0
                                  for t, (p, s) in enumerate(zip(pieces, starts))])
    return out
