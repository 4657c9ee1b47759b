"""torch modules of our own: the Cho-form GRU torch lacks, and whole character models both ways.

* :func:`cho_gru_class` -> ``ChoGRU``, a ``torch.nn.Module`` with ``torch.nn.GRU``'s constructor,
  parameter names and call signature that computes the candidate of Cho et al. (2014, Eq. 8),
  ``n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)``: our default GRU, which ``torch.nn.GRU``
  cannot express. It is written with plain torch operations (a loop over time), so autograd
  differentiates it and it runs on any device.
* :func:`torch_char_model_class` -> ``TorchCharRNN``: a :class:`~hiddenstate.CharRNN` as a
  ``torch.nn.Module`` (one-hot or ``encoder`` embedding, the recurrent layers, the ``decoder``
  Linear) whose ``state_dict`` has exactly the CharRNN's parameter names
  (:func:`hiddenstate.interop.charrnn_to_torch` and back).

torch is imported only when these functions run.
"""

from __future__ import annotations

__all__ = ["cho_gru_class", "torch_char_model_class"]

_CLASSES: dict = {}


def _torch():
    from hiddenstate.core.extras import require

    return require("torch", "this conversion")


def cho_gru_class():
    """The ``ChoGRU`` torch module class (built once, when first asked for).

    Returns
    -------
    type
        ``ChoGRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
        dropout=0.0, bidirectional=False, dtype=None)``, a ``torch.nn.Module`` whose parameters
        are ``weight_ih_l{k}`` (3H, I_k), ``weight_hh_l{k}`` (3H, H), ``bias_ih_l{k}``,
        ``bias_hh_l{k}`` (3H,), ``..._reverse``, rows r, z, n, initialised like ``torch.nn.GRU``;
        ``module(x, h0=None) -> (output, h_n)`` with ``x`` (T, N, I) ((N, T, I) if
        ``batch_first``) or (T, I), ``h0`` and ``h_n`` (L*D, N, H), ``output`` (T, N, D*H): the
        update ``h' = z * h + (1 - z) * n`` with the Cho-form candidate. Inter-layer dropout in
        training mode, as torch's.

    Raises
    ------
    ImportError
        torch is not installed.
    """
    if "ChoGRU" in _CLASSES:
        return _CLASSES["ChoGRU"]
    torch = _torch()

    class ChoGRU(torch.nn.Module):
        """GRU with the candidate of Cho et al. (2014): the reset gate scales h before W_hn."""

        def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                     bidirectional=False, dtype=None):
            super().__init__()
            self.input_size, self.hidden_size, self.num_layers = int(input_size), int(hidden_size), int(num_layers)
            self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
            self.bidirectional = bool(bidirectional)
            D, H = 2 if self.bidirectional else 1, self.hidden_size
            k = 1.0 / H ** 0.5
            for layer in range(self.num_layers):
                width = self.input_size if layer == 0 else D * H
                for d in range(D):
                    sfx = f"_l{layer}" + ("_reverse" if d else "")
                    shapes = {"weight_ih": (3 * H, width), "weight_hh": (3 * H, H)}
                    if self.bias:
                        shapes.update({"bias_ih": (3 * H,), "bias_hh": (3 * H,)})
                    for name, shape in shapes.items():
                        w = torch.empty(shape, dtype=dtype).uniform_(-k, k)
                        self.register_parameter(name + sfx, torch.nn.Parameter(w))

        def _direction(self, x, h, sfx):
            W_ih, W_hh = getattr(self, "weight_ih" + sfx), getattr(self, "weight_hh" + sfx)
            b_ih = getattr(self, "bias_ih" + sfx) if self.bias else None
            b_hh = getattr(self, "bias_hh" + sfx) if self.bias else None
            H = self.hidden_size
            gi = torch.nn.functional.linear(x, W_ih, b_ih)  # (T, N, 3H)
            outs = []
            for t in range(x.shape[0]):
                gh = torch.nn.functional.linear(h, W_hh[:2 * H], None if b_hh is None else b_hh[:2 * H])
                r = torch.sigmoid(gi[t, :, :H] + gh[:, :H])
                z = torch.sigmoid(gi[t, :, H:2 * H] + gh[:, H:])
                n = torch.tanh(gi[t, :, 2 * H:] + torch.nn.functional.linear(
                    r * h, W_hh[2 * H:], None if b_hh is None else b_hh[2 * H:]))
                h = z * h + (1 - z) * n
                outs.append(h)
            return torch.stack(outs) if outs else x.new_zeros((0,) + h.shape), h

        def forward(self, x, h0=None):
            """``output, h_n = module(x, h0)`` (shapes as ``torch.nn.GRU``)."""
            unbatched = x.dim() == 2
            if unbatched:
                x = x.unsqueeze(1)
                h0 = None if h0 is None else h0.unsqueeze(1)
            elif self.batch_first:
                x = x.transpose(0, 1)
            D, H, N = 2 if self.bidirectional else 1, self.hidden_size, x.shape[1]
            if h0 is None:
                h0 = x.new_zeros((self.num_layers * D, N, H))
            finals, inp = [], x
            for layer in range(self.num_layers):
                outs = []
                for d in range(D):
                    sfx = f"_l{layer}" + ("_reverse" if d else "")
                    seq = inp if d == 0 else torch.flip(inp, [0])
                    out, h = self._direction(seq, h0[layer * D + d], sfx)
                    outs.append(out if d == 0 else torch.flip(out, [0]))
                    finals.append(h)
                inp = torch.cat(outs, dim=2)
                if self.training and self.dropout > 0 and layer < self.num_layers - 1:
                    inp = torch.nn.functional.dropout(inp, self.dropout, training=True)
            h_n = torch.stack(finals)
            if unbatched:
                return inp[:, 0], h_n[:, 0]
            return (inp.transpose(0, 1) if self.batch_first else inp), h_n

    _CLASSES["ChoGRU"] = ChoGRU
    return ChoGRU


def torch_char_model_class():
    """The ``TorchCharRNN`` torch module class: ids -> logits, the same parameters as a CharRNN.

    Returns
    -------
    type
        ``TorchCharRNN(vocab_size, rnn, embedding_dim=None)``: ``rnn`` a torch recurrent
        module; ``module(ids, state=None) -> (logits, state)`` with ``ids`` (T, N) int64 and
        ``logits`` (T, N, V). Attributes ``encoder`` (``torch.nn.Embedding``, only with an
        ``embedding_dim``), ``rnn``, ``decoder`` (``torch.nn.Linear`` (H -> V)).

    Raises
    ------
    ImportError
        torch is not installed.
    """
    if "TorchCharRNN" in _CLASSES:
        return _CLASSES["TorchCharRNN"]
    torch = _torch()

    class TorchCharRNN(torch.nn.Module):
        """One-hot or embedded characters -> recurrent layers -> a Linear decoder (hiddenstate's CharRNN)."""

        def __init__(self, vocab_size, rnn, embedding_dim=None):
            super().__init__()
            self.vocab_size, self.embedding_dim = int(vocab_size), embedding_dim
            dtype = next(rnn.parameters()).dtype
            if embedding_dim is not None:
                self.encoder = torch.nn.Embedding(self.vocab_size, int(embedding_dim), dtype=dtype)
            self.rnn = rnn
            self.decoder = torch.nn.Linear(rnn.hidden_size, self.vocab_size, dtype=dtype)

        def forward(self, ids, state=None):
            """``logits, state = module(ids, state)``: ``ids`` (T, N) int64 -> ``logits`` (T, N, V)."""
            dtype = self.decoder.weight.dtype
            if self.embedding_dim is None:
                x = torch.nn.functional.one_hot(ids, self.vocab_size).to(dtype)
            else:
                x = self.encoder(ids)
            out, state = self.rnn(x, state)
            return self.decoder(out), state

    _CLASSES["TorchCharRNN"] = TorchCharRNN
    return TorchCharRNN
