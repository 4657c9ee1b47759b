"""The vanishing-gradient bound of Pascanu, Mikolov and Bengio (2013) against each recurrent weight block.

:func:`spectral_bounds` is also importable from :mod:`hiddenstate.probe.gradflow` (its home
before this module).

References
----------
R. Pascanu, T. Mikolov, Y. Bengio, "On the difficulty of training recurrent neural networks",
ICML 2013.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells import kind_of
from hiddenstate.probe.trace import sequence_layer

__all__ = ["VANISHING_BOUND", "spectral_bounds"]

#: 1/gamma: the largest sigma_max(W_hh) for which vanishing is guaranteed (Pascanu et al. 2013, Sec. 3.1).
VANISHING_BOUND = {"tanh": 1.0, "relu": 1.0, "sigmoid": 4.0}


def spectral_bounds(layer) -> list[dict]:
    """Largest singular value of every recurrent weight block against the vanishing bound.

    Pascanu, Mikolov and Bengio (2013, Sec. 3.1): if ``sigma_max(W_hh) < 1/gamma``, where ``gamma``
    bounds the derivative of the nonlinearity (1 for tanh and relu, 1/4 for the logistic
    sigmoid), then every step Jacobian has norm below one and long-term gradients vanish
    geometrically. The condition is sufficient for vanishing, and ``sigma_max > 1/gamma`` is
    necessary (not sufficient) for explosion. It is exact for the Elman RNN; for GRU and LSTM
    blocks (gate order r, z, n / i, f, g, o) ``sigma_max`` is reported for reference only, since a
    gate near one carries the state whatever the weights.

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM

    Returns
    -------
    list of dict
        One row per layer, direction and gate block: ``"matrix"`` (parameter name), ``"block"``,
        ``"sigma_max"``, ``"bound"`` (``1/gamma``, or None for gated cells) and
        ``"vanishing guaranteed"`` (True/False, or None when the bound does not apply). Empty
        for a kind without recurrent weights (minGRU, minLSTM).

    Raises
    ------
    TypeError, ValueError
        ``layer`` not a sequence layer, or parameters that do not fit (``check_params``).
    """
    sequence_layer(layer).check_params()
    kind = kind_of(layer).name
    names = kind_of(layer).blocks
    H = layer.hidden_size
    rows = []
    if not kind_of(layer).recurrent:  # a linear recurrence: no recurrent weights to bound
        return rows
    for li in range(layer.num_layers):
        for d in range(layer.num_directions):
            key = f"weight_hh_l{li}" + ("_reverse" if d else "")
            W = np.asarray(layer.params[key], dtype=np.float64)
            for k, g in enumerate(names):
                s = float(np.linalg.svd(W[k * H:(k + 1) * H], compute_uv=False)[0])
                if kind == "rnn":
                    bound = VANISHING_BOUND[layer.nonlinearity]
                    rows.append({"matrix": key, "block": g, "sigma_max": s, "bound": bound,
                                 "vanishing guaranteed": bool(s < bound)})
                else:
                    rows.append({"matrix": key, "block": g, "sigma_max": s, "bound": None,
                                 "vanishing guaranteed": None})
    return rows
