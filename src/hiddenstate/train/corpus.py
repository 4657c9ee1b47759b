"""Character corpora: a vocabulary, the embedded Shakespeare text, and a truncated-BPTT batcher.

The batcher follows the layout of Karpathy's char-rnn and PyTorch's ``word_language_model``
(``batchify``): the token stream is cut into ``N`` contiguous rows that are read side by side,
``T`` steps at a time, so the hidden state at the end of one batch is the right initial state for
the next one (truncated backpropagation through time, Williams & Peng 1990; Sutskever 2013, §3).

Examples
--------
>>> from hiddenstate.train.corpus import Vocabulary, StreamBatcher, load_text, train_val_split
>>> text = load_text()                       # embedded Shakespeare, 987,291 characters
>>> vocab = Vocabulary(text)
>>> vocab.size
63
>>> train, val = train_val_split(vocab.encode(text))
>>> batcher = StreamBatcher(train, 32, 64)
>>> inputs, targets = batcher.next_batch()   # (T=64, N=32) int64 each
>>> bool((targets[:-1] == inputs[1:]).all())
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import numpy as np

from hiddenstate.core.files import open_regular
from hiddenstate.core.validation import nonnegative_int, positive_int, real

__all__ = ["StreamBatcher", "Vocabulary", "load_text", "train_val_split"]

_EMBEDDED_TEXT = "shakespeare.txt"


def _as_token_ids(ids, name: str = "ids") -> np.ndarray:
    """Return ``ids`` as a 1-D int64 array, or raise a TypeError/ValueError naming ``name``."""
    array = np.asarray(ids)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"{name} must be an array of integer token ids; got dtype {array.dtype}. "
            "Encode the text with Vocabulary.encode first."
        )
    if array.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D (one token stream); got shape {array.shape}. "
            "Flatten it or pass one stream at a time."
        )
    return array.astype(np.int64, copy=False)


class Vocabulary:
    """The sorted set of distinct characters of a text, with encode/decode to int64 ids.

    Parameters
    ----------
    text : str
        Any text; the vocabulary is ``sorted(set(text))`` (sorted by Unicode code point), so the
        same text always gives the same ids.

    Attributes
    ----------
    chars : str
        The ``V`` characters in id order: ``chars[i]`` has id ``i``.
    size : int
        ``V``, the number of distinct characters (also ``len(vocab)``).

    Raises
    ------
    TypeError
        If ``text`` is not a ``str``.
    ValueError
        If ``text`` is empty.

    Examples
    --------
    >>> vocab = Vocabulary("hello")
    >>> vocab.chars, vocab.size
    ('ehlo', 4)
    >>> vocab.encode("hole").tolist()
    [1, 3, 2, 0]
    >>> vocab.decode([1, 3, 2, 0])
    'hole'
    """

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}. Decode bytes first.")
        if not text:
            raise ValueError("text must contain at least one character; got ''. Pass the corpus.")
        self.chars = "".join(sorted(set(text)))
        self.size = len(self.chars)
        # Sorted code points: encode is a searchsorted, decode an indexing, both vectorized.
        self._codepoints = np.array([ord(c) for c in self.chars], dtype=np.uint32)  # (V,)

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self.chars == other.chars

    def __hash__(self) -> int:
        return hash(self.chars)

    def __repr__(self) -> str:
        shown = self.chars if self.size <= 20 else self.chars[:20] + "..."
        return f"Vocabulary(size={self.size}, chars={shown!r})"

    def encode(self, text: str) -> np.ndarray:
        """Map each character of ``text`` to its id.

        Parameters
        ----------
        text : str
            Characters that all belong to the vocabulary.

        Returns
        -------
        ndarray of shape (len(text),), dtype int64
            Ids in ``[0, V)``.

        Raises
        ------
        TypeError
            If ``text`` is not a ``str``.
        ValueError
            If ``text`` contains characters outside the vocabulary; the message lists them.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}.")
        utf32 = text.encode("utf-32-le", "surrogatepass")
        codepoints = np.frombuffer(utf32, dtype="<u4")  # (len(text),)
        ids = np.searchsorted(self._codepoints, codepoints)
        ids = np.minimum(ids, self.size - 1)
        unknown = self._codepoints[ids] != codepoints
        if unknown.any():
            missing = sorted({chr(c) for c in codepoints[unknown].tolist()})
            shown = ", ".join(repr(c) for c in missing[:20]) + (" ..." if len(missing) > 20 else "")
            raise ValueError(
                f"text must only use characters of the vocabulary; got {len(missing)} unknown "
                f"character(s): {shown}. Build the Vocabulary from a text that contains them."
            )
        return ids.astype(np.int64, copy=False)

    def decode(self, ids) -> str:
        """Map ids back to the text they encode.

        Parameters
        ----------
        ids : array_like of shape (M,), integer dtype
            Ids in ``[0, V)``.

        Returns
        -------
        str
            ``M`` characters.

        Raises
        ------
        TypeError
            If ``ids`` does not have an integer dtype.
        ValueError
            If ``ids`` is not 1-D or holds an id outside ``[0, V)``.
        """
        ids = _as_token_ids(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.size):
            bad = ids[(ids < 0) | (ids >= self.size)]
            raise ValueError(
                f"ids must lie in [0, V={self.size}); got {bad[:5].tolist()}. "
                "Decode with the vocabulary that encoded them."
            )
        return self._codepoints[ids].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def to_json(self) -> dict:
        """A JSON-serializable description of the vocabulary.

        Returns
        -------
        dict
            ``{"chars": <the V characters in id order>}``.
        """
        return {"chars": self.chars}

    @classmethod
    def from_json(cls, data: dict | str) -> Vocabulary:
        """Rebuild a vocabulary from :meth:`to_json` output (a dict, or that dict as JSON text).

        Parameters
        ----------
        data : dict or str
            ``{"chars": ...}``, or that dict as JSON text.

        Returns
        -------
        Vocabulary

        Raises
        ------
        TypeError
            If ``data`` is neither a dict nor a str.
        ValueError
            If ``data`` is not valid JSON, lacks ``"chars"``, or its characters are not the sorted
            distinct characters that :class:`Vocabulary` produces (ids would change).
        """
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"data must be JSON text from Vocabulary.to_json; {error}."
                ) from None
        if not isinstance(data, dict):
            raise TypeError(
                f"data must be a dict from Vocabulary.to_json; got {type(data).__name__}."
            )
        chars = data.get("chars")
        if not isinstance(chars, str) or not chars:
            raise ValueError(
                f"data must have a non-empty string under 'chars'; got {chars!r}. "
                "Pass the dict that Vocabulary.to_json returned."
            )
        vocab = cls(chars)
        if vocab.chars != chars:
            raise ValueError(
                f"data['chars'] must be sorted distinct characters; got {chars!r}. "
                "Ids would not match the ones the vocabulary was saved with."
            )
        return vocab


def load_text(path: str | os.PathLike | None = None, *, name: str = "path") -> str:
    """Read a UTF-8 text file, or the embedded Shakespeare corpus when ``path`` is None.

    The embedded corpus is eight plays (987,291 ASCII characters, 63 distinct); see
    ``hiddenstate/data/NOTICE`` for its provenance. Bytes are decoded as strict UTF-8 with no
    newline translation, so ``len(load_text(p))`` counts exactly the characters in the file.

    Parameters
    ----------
    path : str or os.PathLike, optional
        A text file. Default: the embedded corpus.
    name : str, default "path"
        What the messages call ``path`` (e.g. ``"--data"``).

    Returns
    -------
    str
        The whole file.

    Raises
    ------
    TypeError
        If ``path`` is not a str, an os.PathLike or None.
    FileNotFoundError
        If ``path`` does not exist.
    IsADirectoryError
        If ``path`` is a directory.
    ValueError
        If the file is empty, not valid UTF-8 (the message gives the byte offset), or not a regular
        file (a FIFO, device, symlink loop: refused unopened, as a FIFO would block forever).
    """
    if path is None:
        embedded = resources.files("hiddenstate") / "data" / _EMBEDDED_TEXT
        return embedded.read_text(encoding="utf-8")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str, an os.PathLike or None; got {type(path).__name__}.")
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(f"{name} must name an existing text file; got '{path}', which does not exist. "
                                "Check the path, or give none for the embedded Shakespeare corpus.")
    if path.is_dir():
        raise IsADirectoryError(f"{name} must name a text file; got '{path}', which is a directory. "
                                "Name a file inside it.")
    with open_regular(path, name=name, hint="Give a text file.") as f:  # a FIFO is refused, not waited on
        data = f.read()
    if not data:
        raise ValueError(f"{name} must name a non-empty text file; got '{path}', which is empty.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{name} must name a UTF-8 text file; got '{path}', with byte {data[error.start]:#04x} "
            f"at offset {error.start} that is not valid UTF-8. Convert it, e.g. "
            f"`iconv -f latin1 -t utf-8`."
        ) from None


def train_val_split(ids, val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Split a token stream into a training head and a validation tail.

    The last ``round(M * val_fraction)`` tokens are the validation set; the split is contiguous
    (not shuffled) so both parts stay readable streams.

    Parameters
    ----------
    ids : array_like of shape (M,), integer dtype
        The whole token stream.
    val_fraction : float, default 0.1
        Fraction for validation, in ``[0, 1)``.

    Returns
    -------
    train : ndarray of shape (M - M_val,), dtype int64
    val : ndarray of shape (M_val,), dtype int64
        Views of ``ids`` when it is already int64.

    Raises
    ------
    TypeError
        If ``ids`` is not integer, or ``val_fraction`` is not a number.
    ValueError
        If ``ids`` is not 1-D, ``val_fraction`` is outside ``[0, 1)``, or either part would be
        empty while it should not be (an empty training part, or an empty validation part for a
        positive ``val_fraction``).
    """
    ids = _as_token_ids(ids)
    val_fraction = real("val_fraction", val_fraction, low=0.0, high=1.0, high_open=True)
    n_val = round(ids.size * val_fraction)
    if val_fraction > 0 and n_val == 0:
        raise ValueError(
            f"val_fraction={val_fraction} of {ids.size} tokens must leave at least one validation "
            "token; got 0. Use a longer text or a larger val_fraction."
        )
    if n_val >= ids.size:
        raise ValueError(
            f"ids must leave at least one training token; got {ids.size} token(s) with "
            f"val_fraction={val_fraction}. Use a longer text."
        )
    return ids[: ids.size - n_val], ids[ids.size - n_val :]


class StreamBatcher:
    """Truncated-BPTT batches: ``N`` contiguous rows of one token stream, ``T`` steps at a time.

    The first ``N * R`` tokens (``R = M // N``) are cut into ``N`` rows of ``R`` consecutive tokens;
    row ``n`` is ``ids[n*R : (n+1)*R]``. Batch ``k`` of a pass holds steps ``k*T .. k*T+T-1`` of
    every row as inputs and the next token of each as targets, so the inputs of batch ``k+1``
    continue exactly where those of batch ``k`` stopped: pass the final hidden state of one batch
    as the initial state of the next. A pass has ``(R - 1) // T`` batches (a final partial chunk
    and the last ``M - N*R`` tokens are left out); after the last one the batcher wraps to the
    first batch of the next pass (``epoch`` grows by one), where the carried state should be reset.

    Equivalent to::

        rows = ids[: N * R].reshape(N, R)
        inputs = rows[:, k*T : k*T + T].T         # (T, N)
        targets = rows[:, k*T + 1 : k*T + T + 1].T  # (T, N)

    Parameters
    ----------
    ids : array_like of shape (M,), integer dtype
        The token stream (copied).
    batch_size : int
        ``N``, the number of parallel rows.
    seq_len : int
        ``T``, the number of steps per batch (the truncation length).

    Attributes
    ----------
    batch_size, seq_len : int
        ``N`` and ``T``.
    batches_per_epoch : int
        ``(R - 1) // T``.
    epoch : int
        Completed passes over the rows.
    batch_index : int
        Index within the pass of the batch the next :meth:`next_batch` returns.

    Raises
    ------
    TypeError
        If ``ids`` is not integer, or ``batch_size``/``seq_len`` are not ints.
    ValueError
        If ``ids`` is not 1-D, the sizes are not positive, or ``ids`` holds fewer than
        ``N * (T + 1)`` tokens (not one full batch).
    """

    def __init__(self, ids, batch_size: int, seq_len: int):
        ids = _as_token_ids(ids)
        self.batch_size = positive_int("batch_size", batch_size)
        self.seq_len = positive_int("seq_len", seq_len)
        n, t = self.batch_size, self.seq_len
        if ids.size < n * (t + 1):
            raise ValueError(
                f"ids must hold at least batch_size*(seq_len+1)={n * (t + 1)} tokens for one "
                f"batch; got {ids.size}. Use a smaller batch_size or seq_len, or a longer text."
            )
        row_len = ids.size // n
        self._num_tokens = int(ids.size)
        # Time-major copy so that a batch is a contiguous slab of rows of this array.
        self._stream = np.ascontiguousarray(ids[: n * row_len].reshape(n, row_len).T)  # (R, N)
        self.batches_per_epoch = (row_len - 1) // t
        self.epoch = 0
        self.batch_index = 0

    def __repr__(self) -> str:
        return (
            f"StreamBatcher(batch_size={self.batch_size}, seq_len={self.seq_len}, "
            f"batches_per_epoch={self.batches_per_epoch}, epoch={self.epoch}, "
            f"batch_index={self.batch_index})"
        )

    @property
    def at_epoch_start(self) -> bool:
        """True when the next batch starts a pass: a carried hidden state should be reset."""
        return self.batch_index == 0

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return batch ``k`` of a pass without moving the position.

        Parameters
        ----------
        k : int
            In ``[0, batches_per_epoch)``.

        Returns
        -------
        inputs : ndarray of shape (T, N), dtype int64
        targets : ndarray of shape (T, N), dtype int64
            ``targets[t, n]`` is the token after ``inputs[t, n]`` in row ``n``.

        Raises
        ------
        ValueError
            If ``k`` is outside ``[0, batches_per_epoch)``.
        """
        if not 0 <= k < self.batches_per_epoch:
            raise ValueError(f"k must be in [0, {self.batches_per_epoch}); got {k}.")
        start = k * self.seq_len
        inputs = self._stream[start : start + self.seq_len].copy()  # (T, N)
        targets = self._stream[start + 1 : start + self.seq_len + 1].copy()  # (T, N)
        return inputs, targets

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the batch at the current position and advance (wrapping to the next pass).

        Returns
        -------
        inputs, targets : ndarray of shape (T, N), dtype int64
            See :meth:`batch`.
        """
        batch = self.batch(self.batch_index)
        self.batch_index += 1
        if self.batch_index == self.batches_per_epoch:
            self.batch_index = 0
            self.epoch += 1
        return batch

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Iterate forever with :meth:`next_batch`."""
        while True:
            yield self.next_batch()

    def iter_epoch(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield the batches of one whole pass in order, from the first; the position is untouched.

        Use it for evaluation: start from a zero state and carry it through the pass.
        """
        for k in range(self.batches_per_epoch):
            yield self.batch(k)

    def state_dict(self) -> dict:
        """Return the position as a JSON-serializable dict of ints.

        It also records ``batch_size``, ``seq_len`` and ``num_tokens`` so that
        :meth:`load_state_dict` can refuse a batcher built over a different layout.

        Returns
        -------
        dict of str to int
            ``batch_size``, ``seq_len``, ``num_tokens``, ``epoch`` and ``batch_index``.
        """
        return {
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "num_tokens": self._num_tokens,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a position from :meth:`state_dict`, so the next batches are those that followed.

        Parameters
        ----------
        state : dict of str to int
            From :meth:`state_dict` of a batcher over the same tokens and sizes.

        Raises
        ------
        TypeError
            If ``state`` is not a dict, or its ``epoch`` not an int.
        ValueError
            If keys are missing, the layout (``batch_size``, ``seq_len``, ``num_tokens``) differs
            from this batcher's, or the position is out of range. Nothing changes on error.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(); got {type(state).__name__}.")
        expected = self.state_dict()
        missing = sorted(set(expected) - set(state))
        if missing:
            raise ValueError(f"state must have keys {sorted(expected)}; missing {missing}.")
        for key in ("batch_size", "seq_len", "num_tokens"):
            got = state[key]  # an array here would make `!=` ambiguous: only an int can match
            if not isinstance(got, (int, np.integer)) or isinstance(got, bool) or got != expected[key]:
                raise ValueError(
                    f"state['{key}'] must match this batcher ({expected[key]}); got {state[key]}. "
                    "Rebuild the batcher with the same text, split, batch_size and seq_len."
                )
        epoch, batch_index = nonnegative_int("state['epoch']", state["epoch"]), state["batch_index"]
        if not (isinstance(batch_index, int) and 0 <= batch_index < self.batches_per_epoch):
            raise ValueError(
                f"state['batch_index'] must be an int in [0, {self.batches_per_epoch}); "
                f"got {batch_index!r}."
            )
        self.epoch, self.batch_index = epoch, batch_index
