"""A character-level language model: input -> recurrent layers -> output projection -> softmax.

The seed's distinction between the hidden state and the output is kept explicit: the recurrent
layers (:class:`hiddenstate.GRU`, :class:`~hiddenstate.LSTM` or :class:`~hiddenstate.RNN`) carry
``h``; a separate projection ``W_hy`` (``decoder.weight``) turns each ``h_t`` into scores for the
next character (Karpathy 2015, "The unreasonable effectiveness of recurrent neural networks";
the layout of PyTorch's ``word_language_model``: encoder, rnn, decoder)::

    x_t = onehot(c_t)            (or E[c_t] with an embedding)          # (N, I)
    h_t = layer(x_t, h_{t-1})                                           # (L*D, N, H)
    y_t = h_t^{top} @ W_hy.T + b_y                                      # (N, V)
    p(c_{t+1} | c_{<=t}) = softmax(y_t)

Parameters live in one dict keyed like a torch ``state_dict``: ``rnn.weight_ih_l0`` ...
(strip ``"rnn."`` and ``torch.nn.GRU`` / ``LSTM`` / ``RNN`` accept them with ``load_state_dict``),
``decoder.weight`` (V, H), ``decoder.bias`` (V,), and ``encoder.weight`` (V, E) when an
embedding is used. The GRU is built with ``reset_after=True`` so it computes exactly what
``torch.nn.GRU`` computes. ``cell="mingru"`` / ``"minlstm"`` puts the linear recurrences of
Feng et al. (2024) in residual blocks with RMS normalisation and an MLP
(:class:`hiddenstate.train.blocks.MinStack`, which explains why a plain stack does not train as
well); its parameters are ``rnn.weight_ih_l{k}``, ``rnn.ff_*``, ``rnn.norm_*``. ``cell="mamba"``
stacks Mamba blocks (Gu & Dao 2023) on a residual stream with RMS norms as the reference models
do (:class:`hiddenstate.kinds.ssm.stack.MambaStack`: ``d_state`` 16, ``d_conv`` 4, ``expand`` 2);
its state is a pair ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))``.

Examples
--------
>>> import numpy as np
>>> model = CharRNN(5, 8, cell="gru", rng=np.random.default_rng(0))
>>> inputs = np.array([[0, 1], [2, 3], [4, 0]])          # (T=3, N=2) character ids
>>> logits, state, _ = model.forward(inputs)
>>> logits.shape, state.shape
((3, 2, 5), (1, 2, 8))
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.layers import BY_KIND
from hiddenstate.core.functional import cross_entropy
from hiddenstate.core.nesting import as_array, where_ragged
from hiddenstate.core.params import uniform_init
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import choice, drop_probability, float_array, float_dtype, generator, positive_int
from hiddenstate.kinds.ssm.stack import MambaStack
from hiddenstate.train.blocks import LINEAR_CELLS, MinStack
from hiddenstate.train.generate import SAMPLE_RULES, Stream, check_sampling
from hiddenstate.train.guards import sampling_memory

__all__ = ["CELLS", "SAMPLE_RULES", "CharRNN"]

#: The recurrent layers a CharRNN can use (``cell=``): the gated RNNs, then the linear recurrences.
CELLS = tuple(sorted(k for k in BY_KIND if BY_KIND[k].kind.recurrent)) + LINEAR_CELLS + ("mamba",)


def _check_ids(name: str, ids, vocab_size: int, ndim: int) -> np.ndarray:
    """Validate an integer id array of ``ndim`` dimensions with values in [0, V)."""
    try:
        arr = np.asarray(ids)
    except (ValueError, TypeError):  # ragged nested lists
        raise TypeError(f"{name} must be an integer array of character ids; got {type(ids).__name__} "
                        f"({where_ragged(ids, name)}).") from None
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array of character ids; got dtype {arr.dtype}. "
                        "Encode text with Vocabulary.encode.")
    if arr.ndim != ndim:
        legend = "(T, N)" if ndim == 2 else "(T,)"
        raise ValueError(f"{name} must have shape {legend}; got shape {arr.shape}.")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise ValueError(f"{name} must lie in [0, V={vocab_size}); got values in [{arr.min()}, {arr.max()}]. "
                         "Encode with the vocabulary the model was built for.")
    return arr.astype(np.int64, copy=False)


class CharRNN:
    """Character-level recurrent language model with an explicit output projection ``W_hy``.

    Parameters
    ----------
    vocab_size : int
        V, the number of distinct characters.
    hidden_size : int
        H, units per recurrent layer.
    num_layers : int, default 1
        L, stacked recurrent layers.
    cell : {"gru", "lstm", "mingru", "minlstm", "rnn", "mamba"}, default "gru"
        The recurrent layer: ``GRU(reset_after=True)`` (= ``torch.nn.GRU``), ``LSTM``, a tanh
        ``RNN``, or minGRU / minLSTM layers (plain form, per-step loop: the faster mode on a CPU
        at these sizes) in residual blocks (:class:`~hiddenstate.train.blocks.MinStack`;
        ``hidden_size`` is then also the width of the residual stream), or Mamba blocks
        (:class:`~hiddenstate.kinds.ssm.stack.MambaStack`; ``hidden_size`` is ``d_model``).
    embedding_dim : int, optional
        E. None (default): one-hot inputs, so ``rnn.weight_ih_l0`` (G*H, V) is the input map.
        Otherwise a learned table ``encoder.weight`` (V, E) (``torch.nn.Embedding``) feeds the
        first layer.
    dropout : float in [0, 1), default 0
        Dropout on the non-recurrent connections (Zaremba, Sutskever & Vinyals 2014): on every
        layer's output, i.e. between stacked layers and before the decoder, in
        ``forward(training=True)`` only. The recurrent state itself is never dropped. For
        ``"mingru"``/``"minlstm"``: on every branch of the residual blocks and before the decoder.
    weight_drop : float in [0, 1), default 0
        DropConnect on the recurrent weights ``rnn.weight_hh_l*`` in ``forward(training=True)``
        (Merity, Keskar & Socher 2018; see :class:`hiddenstate.GRU`): one mask per chunk.
    dtype : {float64, float32}, default float64
        float32 trains about twice as fast; float64 makes gradient checks meaningful.
    rng : numpy.random.Generator, optional
        Draws the initial weights: recurrent and decoder U(-1/sqrt(H), 1/sqrt(H)) as in PyTorch
        (``nn.Linear`` draws its bias from the same interval), embedding N(0, 1).

    Attributes
    ----------
    params : dict of str to ndarray
        Every trainable array, keyed like a torch ``state_dict``. The ``rnn.*`` entries are the
        very arrays of :attr:`rnn` ``.params``, so updating them in place (as the optimizers do)
        updates the layer.
    rnn : hiddenstate.GRU, LSTM, RNN or hiddenstate.train.blocks.MinStack
        The recurrent layers (a sequence layer: ``hiddenstate.trace(model.rnn, model.embed(ids))``
        sees every layer).
    vocab_size, hidden_size, num_layers, cell, embedding_dim, dropout, weight_drop, dtype
        The constructor arguments (see :meth:`config`).

    Raises
    ------
    TypeError
        Sizes that are not ints, a dtype other than float32/float64, an rng that is not a Generator.
    ValueError
        Non-positive sizes, an unknown ``cell``.
    """

    def __init__(self, vocab_size, hidden_size, num_layers=1, *, cell="gru", embedding_dim=None,
                 dropout=0.0, weight_drop=0.0, dtype=np.float64, rng=None):
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.num_layers = positive_int("num_layers", num_layers)
        self.cell = choice("cell", cell, CELLS)
        self.embedding_dim = None if embedding_dim is None else positive_int("embedding_dim", embedding_dim)
        self.dropout = drop_probability("dropout", dropout)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        self._rng = rng  # default source of dropout masks
        V, H = self.vocab_size, self.hidden_size
        input_size = V if self.embedding_dim is None else self.embedding_dim
        if self.cell in LINEAR_CELLS + ("mamba",) and drop_probability("weight_drop", weight_drop):
            raise ValueError(f"weight_drop must be 0 for cell={self.cell!r}, which has no recurrent weights to "
                             f"drop; got {weight_drop}. Use dropout instead.")
        if self.cell == "mamba":
            self.rnn = MambaStack(input_size, H, self.num_layers, dropout=self.dropout, dtype=self.dtype, rng=rng)
        elif self.cell in LINEAR_CELLS:
            self.rnn = MinStack(input_size, H, self.num_layers, cell=self.cell, dropout=self.dropout,
                                dtype=self.dtype, rng=rng)
        else:
            options = {"reset_after": True} if cell == "gru" else {}
            self.rnn = BY_KIND[cell](input_size, H, self.num_layers, dropout=self.dropout, weight_drop=weight_drop,
                                     dtype=self.dtype, rng=rng, **options)
        self.weight_drop = self.rnn.weight_drop
        self.params: dict[str, np.ndarray] = {}
        if self.embedding_dim is not None:
            self.params["encoder.weight"] = rng.standard_normal((V, self.embedding_dim)).astype(self.dtype)
        for key, value in self.rnn.params.items():
            self.params["rnn." + key] = value
        self.params["decoder.weight"] = uniform_init(rng, (V, H), H, self.dtype)  # W_hy
        self.params["decoder.bias"] = uniform_init(rng, (V,), H, self.dtype)  # b_y

    def __repr__(self) -> str:
        emb = "" if self.embedding_dim is None else f", embedding_dim={self.embedding_dim}"
        emb += f", dropout={self.dropout}" if self.dropout else ""
        emb += f", weight_drop={self.weight_drop}" if self.weight_drop else ""
        return (f"CharRNN(vocab_size={self.vocab_size}, hidden_size={self.hidden_size}, "
                f"num_layers={self.num_layers}, cell={self.cell!r}{emb}, dtype={self.dtype})")

    @property
    def num_params(self) -> int:
        """Total number of trainable scalars."""
        return int(sum(p.size for p in self.params.values()))

    def config(self) -> dict:
        """The constructor arguments as a JSON-serializable dict.

        Returns
        -------
        dict
            ``vocab_size``, ``hidden_size``, ``num_layers``, ``cell``, ``embedding_dim``,
            ``dropout``, ``weight_drop`` and ``dtype`` (its name); ``CharRNN(**config)`` rebuilds
            the model (with fresh weights).
        """
        return {"vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
                "num_layers": self.num_layers, "cell": self.cell, "embedding_dim": self.embedding_dim,
                "dropout": self.dropout, "weight_drop": self.weight_drop, "dtype": self.dtype.name}

    # -- parameters ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of :attr:`params`.

        Returns
        -------
        dict of str to ndarray
            Under torch's names; strip ``"rnn."`` for ``torch.nn.GRU`` / ``LSTM`` / ``RNN``.
        """
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state: dict) -> None:
        """Copy arrays into :attr:`params` in place; keys and shapes must match exactly.

        Values are cast to the model's dtype. Nothing changes if a check fails.

        Parameters
        ----------
        state : dict of str to ndarray
            Exactly the keys of :attr:`params`, each of its shape (e.g. :meth:`state_dict`).

        Raises
        ------
        TypeError
            If ``state`` is not a dict, or a value is ragged nested lists (named by key).
        ValueError
            A key is missing or unexpected, or an array has the wrong shape, non-finite values, or
            values beyond the model's dtype (1e300 into a float32 model), named by key.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict of str -> ndarray; got {type(state).__name__}.")
        missing = sorted(set(self.params) - set(state))
        extra = sorted(set(state) - set(self.params))
        if missing or extra:
            raise ValueError(f"state must have exactly the model's keys; missing {missing}, unexpected {extra}. "
                             "Load a checkpoint saved for the same model configuration.")
        new = {}
        for key, param in self.params.items():
            value = as_array(f"state[{key!r}]", state[key])
            if value.shape != param.shape:
                raise ValueError(f"state[{key!r}] must have shape {param.shape}; got {value.shape}.")
            if not np.issubdtype(value.dtype, np.floating) or not np.isfinite(value).all():
                raise ValueError(f"state[{key!r}] must be a finite floating array; got dtype {value.dtype}.")
            new[key] = float_array(f"state[{key!r}]", value, dtype=self.dtype)  # 1e300 into float32: refused
        for key, value in new.items():
            np.copyto(self.params[key], value, casting="unsafe")

    # -- state ---------------------------------------------------------------------------------
    def initial_state(self, batch_size: int):
        """The zero state of a batch, with the right structure.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        ndarray of shape (L, N, H), or a pair of them (h, c) for the LSTM
            Zeros of the model's dtype.
        """
        return self.rnn.initial_state(batch_size)

    # -- forward / backward --------------------------------------------------------------------
    def embed(self, inputs) -> np.ndarray:
        """The recurrent layers' input for character ids: one-hot rows, or embedding rows.

        Parameters
        ----------
        inputs : ndarray of integer ids, any shape S, values in [0, V)

        Returns
        -------
        ndarray of shape S + (I,), the model's dtype
            ``I = V`` (one-hot) or ``E`` (``encoder.weight[inputs]``).
        """
        inputs = np.asarray(inputs)
        if self.embedding_dim is None:
            x = np.zeros(inputs.shape + (self.vocab_size,), dtype=self.dtype)  # (T, N, V)
            np.put_along_axis(x, inputs[..., None], 1.0, axis=-1)
            return x
        return self.params["encoder.weight"][inputs]  # (T, N, E)

    def forward(self, inputs, state=None, *, training=False, rng=None, need_cache=True):
        """Scores for the next character at every step of a (T, N) chunk.

        Parameters
        ----------
        inputs : ndarray of shape (T, N), integer
            Character ids in [0, V).
        state : ndarray of shape (L, N, H), or a pair for the LSTM, optional
            The state carried from the previous chunk (None: zeros).
        training : bool, default False
            Apply dropout (when ``dropout > 0``).
        rng : numpy.random.Generator, optional
            Draws the dropout masks (default: the generator given at construction).
        need_cache : bool, default True
            False: no :meth:`backward` follows (validation, generation): the recurrent layers
            keep nothing for one (the same logits and state, faster) and ``cache`` is None.

        Returns
        -------
        logits : ndarray of shape (T, N, V), the model's dtype
            Unnormalised log-probabilities of the next character.
        state : ndarray of shape (L, N, H) (LSTM: pair)
            The final state, to pass as ``state`` for the next chunk (truncated BPTT: no gradient
            flows back through it).
        cache : object or None
            Pass to :meth:`backward`; None when ``need_cache=False``.

        Raises
        ------
        TypeError, ValueError
            Non-integer or out-of-range ids, a state of the wrong shape.
        """
        inputs = _check_ids("inputs", inputs, self.vocab_size, 2)
        T, N = inputs.shape
        x = self.embed(inputs)  # (T, N, I)
        hs, state, rnn_cache = self.rnn.forward(x, state, training=training, rng=rng if rng is not None else self._rng,
                                                need_cache=need_cache)  # (T, N, H)
        mask = None
        if training and self.dropout > 0.0:
            rng = self._rng if rng is None else generator(rng)
            keep = rng.random(hs.shape, dtype=np.float32) >= self.dropout  # (T, N, H)
            mask = keep.astype(self.dtype) / self.dtype.type(1.0 - self.dropout)
            hs = hs * mask
        top = hs.reshape(T * N, self.hidden_size)  # (T*N, H)
        logits = top @ self.params["decoder.weight"].T  # (T*N, V)
        logits += self.params["decoder.bias"]
        cache = (inputs, top, mask, rnn_cache) if need_cache else None
        return logits.reshape(T, N, self.vocab_size), state, cache

    def gradient_groups(self) -> list[list[str]]:
        """The keys of :attr:`params` in the order :meth:`backward` finishes their gradients.

        The decoder's first, then each recurrent layer's from the top down (a GRU, LSTM or RNN
        stack; another stack's all at once), then the embedding's: a data-parallel run reduces a
        group while the backward pass computes the next ones.

        Returns
        -------
        list of list of str
            Every key once.
        """
        groups, rnn = [["decoder.weight", "decoder.bias"]], ["rnn." + k for k in self.rnn.params]
        if self.cell not in LINEAR_CELLS + ("mamba",):  # a GRU/LSTM/RNN stack: a hook after each layer
            for layer in range(self.num_layers - 1, -1, -1):
                ends = tuple(self.rnn.suffix(layer, d) for d in range(self.rnn.num_directions))
                groups.append([k for k in rnn if k.endswith(ends)])
            groups[-1] += [k for k in rnn if not any(k in g for g in groups)]  # a learned h0 comes last
        else:
            groups.append(rnn)
        if self.embedding_dim is not None:
            groups.append(["encoder.weight"])
        return groups

    def backward(self, cache, dlogits, *, ready=None) -> dict[str, np.ndarray]:
        """Exact gradients of a scalar loss given its gradient with respect to the logits.

        Parameters
        ----------
        cache : object
            From :meth:`forward`.
        dlogits : ndarray of shape (T, N, V)
            d loss / d logits.
        ready : callable, optional
            ``ready(grads)`` with each group of :meth:`gradient_groups` as soon as its gradients
            are final (a dict keyed like :attr:`params`), before the rest is computed; the
            return value holds every gradient all the same.

        Returns
        -------
        dict of str to ndarray
            Same keys and shapes as :attr:`params`.
        """
        inputs, top, mask, rnn_cache = cache
        T, N = inputs.shape
        dy = np.asarray(dlogits, dtype=self.dtype).reshape(T * N, self.vocab_size)  # (T*N, V)
        grads = {}
        d_decoder_weight = dy.T @ top  # (V, H)
        d_decoder_bias = dy.reshape(T, N, -1).sum(axis=1).sum(axis=0)  # (V,)
        if ready is not None:
            ready({"decoder.weight": d_decoder_weight, "decoder.bias": d_decoder_bias})
        dhs = (dy @ self.params["decoder.weight"]).reshape(T, N, self.hidden_size)  # (T, N, H)
        if mask is not None:
            dhs *= mask
        if ready is not None and self.cell not in LINEAR_CELLS + ("mamba",):
            rnn_grads, dx, _ = self.rnn.backward(rnn_cache, dhs, ready=lambda g: ready({"rnn." + k: v for k, v in g.items()}))
        else:
            rnn_grads, dx, _ = self.rnn.backward(rnn_cache, dhs)
        if self.embedding_dim is not None:
            d_encoder = np.zeros_like(self.params["encoder.weight"])  # (V, E)
            np.add.at(d_encoder, inputs.reshape(-1), dx.reshape(T * N, -1))
            grads["encoder.weight"] = d_encoder
        for key, value in rnn_grads.items():
            grads["rnn." + key] = value
        grads["decoder.weight"] = d_decoder_weight
        grads["decoder.bias"] = d_decoder_bias
        return grads

    def loss(self, inputs, targets, state=None, *, training=False, rng=None):
        """Mean cross-entropy (nats per character) of a chunk, without gradients.

        Parameters
        ----------
        inputs, targets : ndarray of shape (T, N), integer
            ``targets[t, n]`` is the character after ``inputs[t, n]``.
        state : optional
            Carried state (see :meth:`forward`).
        training, rng
            Dropout, see :meth:`forward`.

        Returns
        -------
        loss : float
        state : the final state
        """
        targets = _check_ids("targets", targets, self.vocab_size, 2)
        logits, state, _ = self.forward(inputs, state, training=training, rng=rng, need_cache=False)
        if targets.shape != logits.shape[:2]:
            raise ValueError(f"targets must have the shape of inputs {logits.shape[:2]}; got {targets.shape}.")
        with np.errstate(under="ignore"):  # exp of very negative log-probabilities: 0 is exact enough
            loss, _ = cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1))
        return loss, state

    def loss_and_grads(self, inputs, targets, state=None, *, training=False, rng=None, ready=None):
        """Mean cross-entropy of a chunk and its exact gradient (one truncated-BPTT step).

        Parameters
        ----------
        inputs, targets : ndarray of shape (T, N), integer
            ``targets[t, n]`` is the character after ``inputs[t, n]``.
        state : optional
            Carried state (see :meth:`forward`).
        training : bool, default False
            Apply dropout, see :meth:`forward`.
        rng : numpy.random.Generator, optional
            Draws the dropout masks (see :meth:`forward`).
        ready : callable, optional
            Handed to :meth:`backward`: called with each group of final gradients.

        Returns
        -------
        loss : float
            Nats per character.
        grads : dict of str to ndarray
            Same keys as :attr:`params`.
        state : the final state, to carry into the next chunk (gradients are cut there)
        """
        targets = _check_ids("targets", targets, self.vocab_size, 2)
        logits, state, cache = self.forward(inputs, state, training=training, rng=rng)
        if targets.shape != logits.shape[:2]:
            raise ValueError(f"targets must have the shape of inputs {logits.shape[:2]}; got {targets.shape}.")
        with np.errstate(under="ignore"):  # exp of very negative log-probabilities: 0 is exact enough
            loss, dlogits = cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1))
        return loss, self.backward(cache, dlogits, ready=ready), state

    def loss_and_state_grad(self, inputs, targets, state=None):
        """Mean cross-entropy of a chunk and its exact gradient with respect to the initial state.

        Backpropagation through time through every recurrent layer down to ``state`` (the
        weights' gradients are computed on the way and dropped; the weights are not changed).
        Without dropout: what initial-state tuning trains
        (:mod:`hiddenstate.train.initial_state`).

        Parameters
        ----------
        inputs, targets : ndarray of shape (T, N), integer
            ``targets[t, n]`` is the character after ``inputs[t, n]``.
        state : ndarray of shape (L, N, H), or a pair, optional
            The initial state in the format of :meth:`initial_state` (None: zeros).

        Returns
        -------
        loss : float
            Nats per character.
        d_state : ndarray or pair of ndarray
            d loss / d ``state``, shaped like :meth:`initial_state` ``(N)``.
        state : the final state
        """
        targets = _check_ids("targets", targets, self.vocab_size, 2)
        logits, final, cache = self.forward(inputs, state)
        if targets.shape != logits.shape[:2]:
            raise ValueError(f"targets must have the shape of inputs {logits.shape[:2]}; got {targets.shape}.")
        with np.errstate(under="ignore"):  # exp of very negative log-probabilities: 0 is exact enough
            loss, dlogits = cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1))
        T, N = targets.shape
        dhs = (np.asarray(dlogits, dtype=self.dtype) @ self.params["decoder.weight"]).reshape(T, N, self.hidden_size)
        _, _, d_state = self.rnn.backward(cache[3], dhs)
        return loss, d_state, final

    # -- generation ----------------------------------------------------------------------------
    def sample(self, prime, length, *, temperature=1.0, top_k=None, top_p=None, rng=None, state=None) -> np.ndarray:
        """Generate ``length`` character ids after reading ``prime``.

        The prime is read in one pass (its last step's scores give the first new character);
        then a :class:`hiddenstate.train.generate.Stream` carries the hidden state: each new
        character is drawn from :func:`~hiddenstate.train.generate.next_distribution`
        (``softmax(logits / temperature)``, truncated to the ``top_k`` most likely characters
        and then to the ``top_p`` nucleus, renormalised) by inverse-CDF sampling with one
        ``rng.random()`` per character, and fed back in: one recurrent step per character.

        Parameters
        ----------
        prime : array_like of shape (P,), integer, P >= 1
            Ids to condition on.
        length : int
            Number of new ids (0 allowed).
        temperature : float, default 1.0
            > 0: divide the logits by it (below 1: more conservative; above 1: more varied).
            0: greedy (always the most likely character).
        top_k : int, optional
            Draw only among the k most likely characters (Fan et al. 2018). None: all.
        top_p : float in (0, 1], optional
            Draw only from the smallest set of most likely characters whose probability reaches
            ``top_p`` (nucleus sampling, Holtzman et al. 2020). None: no truncation.
        rng : numpy.random.Generator, optional
            The only source of randomness: the same generator state gives the same ids.
        state : optional
            Initial state for a single sequence ((L, 1, H); LSTM: pair). None: zeros.

        Returns
        -------
        ndarray of shape (length,), dtype int64
            The generated ids (the prime is not included).

        Raises
        ------
        TypeError
            A prime that is not integer, a length or ``top_k`` that is not an int, a temperature
            or ``top_p`` that is not a number, an rng that is not a Generator.
        ValueError
            An empty or out-of-range prime, a negative length, a negative or non-finite
            temperature, ``top_k`` < 1, ``top_p`` outside (0, 1]; a length whose ids cannot fit in
            memory (:func:`hiddenstate.core.resources.check_memory`, as ``hiddenstate sample --length``).
        """
        prime = _check_ids("prime", prime, self.vocab_size, 1)
        if prime.size == 0:
            raise ValueError("prime must hold at least one character id; got an empty prime. "
                             "Start from e.g. a newline.")
        length = SAMPLE_RULES["length"]("length", length)
        temperature, top_k, top_p = check_sampling(temperature, top_k, top_p)
        rng = generator(rng)
        check_memory(f"length {length}", sampling_memory(self, length, prime.size), "Ask for fewer characters.")
        if length == 0:
            return np.empty(0, dtype=np.int64)
        stream = Stream(self, state)
        stream.read(prime)
        return stream.generate(length, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng)
