"""Generation one character at a time, the hidden state carried: a stream, and the sampling rules.

A character model's state after reading a prefix is all it needs to go on: :class:`Stream`
keeps it, so each :meth:`Stream.feed` runs one step of the recurrent layers (never the prefix
again) and returns the next-character distribution and the new state. :func:`next_distribution`
turns a step's logits into the distribution a character is drawn from (temperature, then top-k,
then nucleus / top-p), and :func:`draw` draws one id from it with one ``rng.random()``.
:meth:`hiddenstate.train.model.CharRNN.sample` (and so ``hiddenstate sample``) is a
:class:`Stream` that reads the prime and then feeds back what it draws.

Shapes: V characters; a model's state is (L, 1, H) for one stream (LSTM: a pair (h, c)).

Examples
--------
>>> import numpy as np
>>> from hiddenstate.train.model import CharRNN
>>> model = CharRNN(5, 8, rng=np.random.default_rng(0))
>>> stream = Stream(model)
>>> probs, state = stream.feed(3)            # p(c_1 | c_0 = 3) and h_1
>>> probs.shape, state.shape
((5,), (1, 1, 8))
>>> probs, state = stream.feed(1)            # p(c_2 | 3, 1): one step, h_1 carried
>>> next_distribution(stream.logits, top_k=2).nonzero()[0].size
2

References
----------
.. [1] A. Fan, M. Lewis, Y. Dauphin, "Hierarchical neural story generation", ACL 2018 (top-k).
.. [2] A. Holtzman, J. Buys, L. Du, M. Forbes, Y. Choi, "The curious case of neural text
   degeneration", ICLR 2020 (nucleus sampling, top-p).
"""

from __future__ import annotations

import functools

import numpy as np

from hiddenstate.core.functional import softmax
from hiddenstate.core.nesting import where_ragged
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import float_array, generator, nonnegative_int, positive_int, real
from hiddenstate.train.guards import sampling_memory
from hiddenstate.train.initial_state import check_initial_state

__all__ = ["SAMPLE_RULES", "Stream", "check_sampling", "draw", "next_distribution"]

#: The rules of the sampling options (``SAMPLE_RULES[name](name, value)``, see
#: :mod:`hiddenstate.core.validation`), shared by :meth:`~hiddenstate.train.model.CharRNN.sample`,
#: :func:`hiddenstate.train.sample` and the flags of ``hiddenstate sample``. ``top_k`` and
#: ``top_p`` also accept None (no truncation).
SAMPLE_RULES = {
    "length": nonnegative_int,
    "temperature": functools.partial(real, low=0.0),
    "top_k": positive_int,
    "top_p": functools.partial(real, low=0.0, high=1.0, low_open=True),
}


def check_sampling(temperature=1.0, top_k=None, top_p=None) -> tuple:
    """Validate the sampling options by :data:`SAMPLE_RULES`.

    Parameters
    ----------
    temperature : float, default 1.0
        >= 0 and finite.
    top_k : int, optional
        Positive; None keeps every character.
    top_p : float, optional
        In (0, 1]; None keeps every character.

    Returns
    -------
    tuple of (float, int or None, float or None)
        The options as Python numbers.

    Raises
    ------
    TypeError
        An option of the wrong type (a str, a bool, a float ``top_k``).
    ValueError
        A negative or non-finite temperature, ``top_k`` < 1, ``top_p`` outside (0, 1].
    """
    temperature = SAMPLE_RULES["temperature"]("temperature", temperature)
    top_k = None if top_k is None else SAMPLE_RULES["top_k"]("top_k", top_k)
    top_p = None if top_p is None else SAMPLE_RULES["top_p"]("top_p", top_p)
    return temperature, top_k, top_p


def next_distribution(logits, *, temperature=1.0, top_k=None, top_p=None) -> np.ndarray:
    """The distribution the next character is drawn from: temperature, then top-k, then top-p.

    ``p = softmax(logits / temperature)``; top-k keeps the k most probable characters (Fan et
    al. 2018); top-p keeps, of what is left and renormalised, the smallest set of the most
    probable characters whose probability reaches ``top_p`` (nucleus sampling, Holtzman et al.
    2020); the kept probabilities are renormalised to sum to 1 and every other entry is 0.
    Characters of equal probability are ranked by id (lower first), so the kept set is always
    the same. ``temperature=0`` is greedy: all the mass on the first most likely character; a
    temperature so small that ``logits / temperature`` overflows (``1e-310``) is its limit, all
    the mass on the most likely characters (shared equally if several are tied).

    Parameters
    ----------
    logits : array_like of shape (V,), floating
        Unnormalised log-probabilities (one step of :meth:`CharRNN.forward`).
    temperature : float, default 1.0
        >= 0: the logits are divided by it; 0: greedy.
    top_k : int, optional
        Keep at most this many characters (positive). None: all.
    top_p : float, optional
        Nucleus mass in (0, 1]. None (or 1): no nucleus truncation.

    Returns
    -------
    ndarray of shape (V,), float64
        Non-negative, sums to 1 (up to round-off), zero outside the kept set.

    Raises
    ------
    TypeError, ValueError
        Options outside :data:`SAMPLE_RULES`, logits that are not a finite vector.
    """
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p)
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 1 or z.size == 0 or not np.isfinite(z).all():
        raise ValueError(f"logits must be a non-empty finite vector of shape (V,); got shape {z.shape}.")
    if temperature == 0:
        p = np.zeros_like(z)
        p[int(np.argmax(z))] = 1.0
        return p
    with np.errstate(under="ignore", over="ignore", divide="ignore"):  # tiny temperatures: p is one-hot
        scaled = (z - z.max()) / temperature  # (V,), <= 0: -inf where a tiny temperature overflows, never NaN
        p = np.exp(scaled)
        p /= p.sum()  # the maximum gives exp(0) = 1, so the sum is >= 1
    if top_k is None and top_p is None:
        return p
    order = np.argsort(-p, kind="stable")  # most probable first; ties by id
    keep = order if top_k is None else order[:top_k]
    if top_p is not None and top_p < 1.0:
        mass = np.cumsum(p[keep])
        keep = keep[: int(np.searchsorted(mass, top_p * mass[-1], side="left")) + 1]
    out = np.zeros_like(p)
    out[keep] = p[keep]
    return out / out.sum()


def draw(p, rng) -> int:
    """One id drawn from a distribution by inverse-CDF sampling, with one ``rng.random()``.

    Parameters
    ----------
    p : ndarray of shape (V,), float64
        Non-negative weights (e.g. :func:`next_distribution`); need not sum to exactly 1.
    rng : numpy.random.Generator
        Consumed by exactly one ``random()`` call: the same state gives the same id.

    Returns
    -------
    int
        An id whose weight is positive.

    Raises
    ------
    TypeError
        ``p`` is not an array of numbers, ``rng`` not a Generator.
    ValueError
        ``p`` is not a non-empty vector of finite non-negative weights with a positive sum.
    """
    if not callable(getattr(rng, "random", None)):
        generator(rng, required=True)  # the message of the rule: a numpy.random.Generator
    p = float_array("p", p, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or (p < 0).any() or not p.sum() > 0:
        shown = f"shape {p.shape}" if p.ndim != 1 or p.size == 0 else f"weights in [{p.min():g}, {p.max():g}]"
        raise ValueError(f"p must be a non-empty vector (V,) of non-negative weights with a positive sum; got {shown}.")
    cdf = np.cumsum(p)
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(i, int(np.flatnonzero(p)[-1]))  # u * cdf[-1] rounded up to cdf[-1]: the last kept id


class Stream:
    """A character model read one character at a time, its hidden state carried between calls.

    Parameters
    ----------
    model : hiddenstate.train.model.CharRNN
        The model (its weights are read, never changed).
    state : ndarray of shape (L, 1, H), or a pair (LSTM: (h, c); mamba: (ssm, conv)), optional
        The state to start from (None: zeros; format: :mod:`hiddenstate.train.initial_state`), e.g. one
        returned by an earlier :meth:`feed` or a tuned initial state ("ValueError" names a wrong one).
    vocab : hiddenstate.train.corpus.Vocabulary, optional
        Lets :meth:`feed` take characters (one-character strings) as well as ids.

    Attributes
    ----------
    state : ndarray or tuple of ndarray, or None
        The state after everything fed so far (None before the first character with no
        ``state`` given).
    logits : ndarray of shape (V,)
        The last step's logits (the model's dtype); read before the first character it raises a
        RuntimeError ("feed a character first").
    n_read : int
        Characters read so far (by :meth:`feed`, :meth:`read` and :meth:`generate`).
    model, vocab
        As given.

    Notes
    -----
    Feeding a text character by character gives the distributions and state of one
    :meth:`CharRNN.forward` over the whole text (to round-off: the tests hold them to 1e-12 in
    float64), at the cost of one step per character, whatever the length of what came before.
    """

    def __init__(self, model, state=None, *, vocab=None):
        if not all(hasattr(model, a) for a in ("forward", "vocab_size", "hidden_size", "num_layers", "cell")):
            raise TypeError(f"model must be a hiddenstate CharRNN; got {type(model).__name__}.")
        if vocab is not None:
            chars = getattr(vocab, "chars", None)
            if not isinstance(chars, str) or not hasattr(vocab, "encode"):
                raise TypeError(f"vocab must be a hiddenstate Vocabulary (hiddenstate.train.corpus.Vocabulary(text)) "
                                f"or None; got {type(vocab).__name__} {vocab!r:.60}.")
            if len(chars) != model.vocab_size:
                raise ValueError(f"vocab must have the model's V={model.vocab_size} characters; got {len(chars)}.")
        self.model = model
        self.vocab = vocab
        self.state = None if state is None else check_initial_state(model, state, batch_size=1, name="state")
        self._logits = None
        self.n_read = 0

    def __repr__(self) -> str:
        """``Stream(GRU H=128, V=65, 12 read, next: ' ' 0.31, 'e' 0.12, 't' 0.09)``, or ``..., nothing read yet)``."""
        m = self.model
        size = f"{m.num_layers} × {m.hidden_size}" if m.num_layers > 1 else f"H={m.hidden_size}"
        head = f"Stream({str(m.cell).upper()} {size}, V={m.vocab_size}"
        if self._logits is None:
            return head + (", nothing read yet)" if self.state is None else ", from a given state, nothing read yet)")
        with np.errstate(under="ignore"):
            p = softmax(np.asarray(self._logits, dtype=np.float64))
        top = np.argsort(-p, kind="stable")[:3]
        name = (lambda i: repr(self.vocab.chars[i])) if self.vocab is not None else (lambda i: f"id {i}")
        return head + f", {self.n_read:,} read, next: " + ", ".join(f"{name(int(i))} {p[i]:.2f}" for i in top) + ")"

    @property
    def logits(self) -> np.ndarray:
        """The last step's logits, shape (V,), the model's dtype.

        Raises
        ------
        RuntimeError
            Nothing has been fed yet, so there are no logits.
        """
        if self._logits is None:
            raise RuntimeError("Stream.logits: nothing has been read yet, so there are no logits: feed a character "
                               "first (stream.feed(char) or stream.read(ids)).")
        return self._logits

    def _id(self, char) -> int:
        if isinstance(char, str):
            if self.vocab is None:
                raise TypeError(f"char must be an integer id (this Stream has no vocab to encode text); got str {char!r}.")
            if len(char) != 1:
                raise ValueError(f"char must be a single character; got {char!r} of length {len(char)}.")
            if char not in self.vocab.chars:
                raise ValueError(f"char must be one of the vocabulary's {len(self.vocab.chars)} characters; got "
                                 f"{char!r}.")
            return int(self.vocab.encode(char)[0])
        if isinstance(char, (bool, np.bool_)) or not isinstance(char, (int, np.integer)):
            raise TypeError(f"char must be an integer id or a one-character str; got {type(char).__name__} {char!r}.")
        if not 0 <= char < self.model.vocab_size:
            raise ValueError(f"char must lie in [0, V={self.model.vocab_size}); got {char}.")
        return int(char)

    def feed(self, char) -> tuple:
        """Read one character: one step of the recurrent layers from the carried state.

        Parameters
        ----------
        char : int or str
            A character id in [0, V), or a one-character str when the stream has a ``vocab``.

        Returns
        -------
        probs : ndarray of shape (V,), float64
            ``softmax(logits)``: the distribution of the character after ``char``.
        state : ndarray of shape (L, 1, H) (LSTM: pair)
            The new hidden state (also kept in :attr:`state`).

        Raises
        ------
        TypeError, ValueError
            Not an id or character, an id outside [0, V), a character outside ``vocab``.
        """
        return self.read(np.array([self._id(char)], dtype=np.int64))

    def read(self, ids) -> tuple:
        """Read several characters in one forward pass (a prime), the state carried as by :meth:`feed`.

        Parameters
        ----------
        ids : array_like of shape (P,), integer, P >= 1
            Character ids in [0, V).

        Returns
        -------
        probs : ndarray of shape (V,), float64
            The distribution of the character after the last one read.
        state : ndarray of shape (L, 1, H) (LSTM: pair)
            The new hidden state (also kept in :attr:`state`).

        Raises
        ------
        TypeError, ValueError
            Ids that are not integers, out of range, or an empty sequence.
        """
        try:
            ids = np.asarray(ids)
        except (ValueError, TypeError):  # ragged nested lists
            raise TypeError(f"ids must be a sequence of character ids; got {type(ids).__name__} "
                            f"({where_ragged(ids, 'ids')}).") from None
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"ids must be a non-empty sequence of shape (P,); got shape {ids.shape}.")
        logits, self.state, _ = self.model.forward(ids[:, None], self.state, need_cache=False)  # (P, 1, V)
        self._logits = logits[-1, 0]
        self.n_read += ids.size
        with np.errstate(under="ignore"):
            return softmax(self.logits.astype(np.float64)), self.state

    def generate(self, length, *, temperature=1.0, top_k=None, top_p=None, rng=None) -> np.ndarray:
        """Draw ``length`` characters, each fed back in: sampling from where the stream stands.

        Parameters
        ----------
        length : int
            Number of ids (0 allowed).
        temperature, top_k, top_p
            See :func:`next_distribution`.
        rng : numpy.random.Generator, optional
            One ``random()`` per character (none when greedy): same state, same ids.

        Returns
        -------
        ndarray of shape (length,), int64
            The ids drawn. The stream's state is then that after reading all but the last one
            (the last drawn id is not fed, so nothing is computed that is not used).

        Raises
        ------
        RuntimeError
            If nothing has been read yet (no distribution to draw from).
        TypeError, ValueError
            Options outside :data:`SAMPLE_RULES`; a length whose ids cannot fit in memory
            (:func:`hiddenstate.core.resources.check_memory`, the rule of ``hiddenstate sample --length``).
        """
        length = SAMPLE_RULES["length"]("length", length)
        temperature, top_k, top_p = check_sampling(temperature, top_k, top_p)
        rng = generator(rng)
        check_memory(f"length {length}", sampling_memory(self.model, length, 0), "Ask for fewer characters.")
        if self._logits is None:
            raise RuntimeError("Stream.generate needs a distribution to start from: feed or read a prime first.")
        out = np.empty(length, dtype=np.int64)
        for i in range(length):
            p = next_distribution(self.logits, temperature=temperature, top_k=top_k, top_p=top_p)
            out[i] = int(np.argmax(p)) if temperature == 0 else draw(p, rng)
            if i + 1 < length:
                self.read(out[i:i + 1])
        return out
