"""A character model as a ``torch.export`` program: a ``.pt2`` file torch loads without hiddenstate.

``torch.export`` cannot keep the time axis of ``torch.nn.GRU``/``LSTM``/``RNN`` dynamic: it
specialises T to the example's length ("Constraints violated (T)", measured with torch 2.13,
strict and non-strict), so such a program runs only sequences of that one length. The module exported here therefore writes each layer as the input projection of all
T steps followed by a ``scan`` over time (torch's higher-order ``scan`` operator, which
``torch.export`` keeps as one node with a symbolic length), so the program takes any T >= 1 and
any batch N. The equations are ours and torch's (GRU r, z, n; LSTM i, f, g, o; the Cho form for
``reset_after=False``) and the weights keep the CharRNN's names, "." written "_" (``rnn_weight_ih_l0``,
``decoder_weight``), as buffers: the program is for inference, so its outputs do not require grad
(``.numpy()`` works on them without ``.detach()``). torch is imported only here.
"""

from __future__ import annotations

import io

import numpy as np

from hiddenstate.interop.kinds import convertible_kind

__all__ = ["charrnn_to_exported_program"]


def _module_class():
    """``ExportableCharRNN``: ids (T, N), h0 (L, N, H) [, c0] -> logits (T, N, V), h_n [, c_n]."""
    import torch
    from torch._higher_order_ops.scan import scan

    F = torch.nn.functional

    class ExportableCharRNN(torch.nn.Module):
        """A CharRNN of RNN/GRU/LSTM layers in plain torch operations and ``scan`` over time."""

        def __init__(self, model):
            super().__init__()
            layer = model.rnn
            self.kind, self.V, self.H, self.L = layer.kind.name, model.vocab_size, layer.hidden_size, layer.num_layers
            self.embedded = model.embedding_dim is not None
            self.nonlinearity = getattr(layer, "nonlinearity", "tanh")
            self.reset_after = bool(getattr(layer, "reset_after", True))
            self.bias = bool(layer.bias)
            for key, value in model.params.items():  # buffers, not parameters: the outputs need no .detach()
                self.register_buffer(key.replace(".", "_"), torch.tensor(np.asarray(value)))

        def _p(self, name):
            return getattr(self, name)

        def _layer(self, x, h, c, k):
            H = self.H
            b_ih = self._p(f"rnn_bias_ih_l{k}") if self.bias else None
            W_hh = self._p(f"rnn_weight_hh_l{k}")
            b_hh = self._p(f"rnn_bias_hh_l{k}") if self.bias else None
            gi = F.linear(x, self._p(f"rnn_weight_ih_l{k}"), b_ih)  # (T, N, G*H) for all steps at once
            if self.kind == "lstm":
                def step(carry, g):
                    h, c = carry
                    i, f, gg, o = (g + F.linear(h, W_hh, b_hh)).chunk(4, dim=-1)
                    c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
                    h2 = torch.sigmoid(o) * torch.tanh(c2)
                    return (h2, c2), h2.clone()
                (h, c), out = scan(step, (h, c), gi)
                return out, h, c
            if self.kind == "gru":
                def step(h, g):
                    gh = F.linear(h, W_hh[:2 * H], None if b_hh is None else b_hh[:2 * H])
                    r = torch.sigmoid(g[..., :H] + gh[..., :H])
                    z = torch.sigmoid(g[..., H:2 * H] + gh[..., H:])
                    hn = r * h if not self.reset_after else h
                    n_h = F.linear(hn, W_hh[2 * H:], None if b_hh is None else b_hh[2 * H:])
                    n = torch.tanh(g[..., 2 * H:] + (r * n_h if self.reset_after else n_h))
                    h2 = z * h + (1 - z) * n
                    return h2, h2.clone()
            else:
                act = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}[self.nonlinearity]

                def step(h, g):
                    h2 = act(g + F.linear(h, W_hh, b_hh))
                    return h2, h2.clone()
            h, out = scan(step, h, gi)
            return out, h, None

        def forward(self, ids, h0, c0=None):
            """``logits, h_n[, c_n] = program(ids, h0[, c0])``; ids (T, N) int64, T >= 1."""
            dtype = self.decoder_weight.dtype
            x = F.one_hot(ids, self.V).to(dtype) if not self.embedded else F.embedding(ids, self.encoder_weight)
            hs, cs = [], []
            for k in range(self.L):
                x, h, c = self._layer(x, h0[k], None if c0 is None else c0[k], k)
                hs.append(h)
                cs.append(c)
            logits = F.linear(x, self.decoder_weight, self.decoder_bias)
            if self.kind == "lstm":
                return logits, torch.stack(hs), torch.stack(cs)
            return logits, torch.stack(hs)

    return ExportableCharRNN


def charrnn_to_exported_program(model) -> bytes:
    """A :class:`~hiddenstate.CharRNN` as the bytes of a ``torch.export`` ``.pt2`` file.

    Parameters
    ----------
    model : hiddenstate.CharRNN
        Of RNN, GRU or LSTM layers (minGRU/minLSTM models have no torch equivalent), one-hot or
        embedded input, float32 or float64 (kept).

    Returns
    -------
    bytes
        ``torch.export.save`` of the program. Load it with torch alone:
        ``program = torch.export.load("model.pt2").module()``, then
        ``logits, h_n = program(ids, h0)`` (LSTM: ``logits, h_n, c_n = program(ids, h0, c0)``)
        with ids (T, N) int64, T >= 1, any N, and h0, c0 (L, N, H) of the model's dtype; logits
        (T, N, V) are the model's ``forward`` logits.

    Raises
    ------
    TypeError
        ``model`` is not a CharRNN.
    ValueError
        Its layers have no torch equivalent (minGRU, minLSTM).
    ImportError
        torch is not installed.
    """
    layer = getattr(model, "rnn", None)
    if layer is None or not hasattr(model, "embed") or "decoder.weight" not in getattr(model, "params", {}):
        raise TypeError(f"model must be a hiddenstate CharRNN; got {type(model).__name__}.")
    kind = convertible_kind(layer, "a torch program")
    from hiddenstate.core.extras import require

    torch = require("torch", "export to torch.export")
    module = _module_class()(model).eval()
    L, H, dtype = layer.num_layers, layer.hidden_size, torch.float64 if layer.dtype == np.float64 else torch.float32
    T, N = torch.export.Dim("T", min=1), torch.export.Dim("N", min=1)
    ids = torch.zeros((3, 2), dtype=torch.int64)
    h0 = torch.zeros((L, 2, H), dtype=dtype)
    args, shapes = (ids, h0), ({0: T, 1: N}, {1: N})
    if kind == "lstm":
        args, shapes = (ids, h0, h0.clone()), ({0: T, 1: N}, {1: N}, {1: N})
    with torch.no_grad():
        program = torch.export.export(module, args, dynamic_shapes=shapes)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()
