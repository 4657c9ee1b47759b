"""The reference form of the Mamba block, in array-API functions only: one step of Algorithm 2 per loop iteration.

:func:`step` is one step of the equations of :mod:`hiddenstate.cells.mamba` on arrays of any
array-API namespace ``xp`` (``xp.matmul``, ``xp.exp``, ``xp.sum``, slicing); :func:`run` loops it
over time, which is what the kernels' whole-sequence products and scans compute (the tests hold
the two equal to float64 round-off, and differentiate this form with torch autograd). It is also
the array-API path of :class:`hiddenstate.Mamba`: a torch tensor or a CuPy array given to
``Mamba.forward`` is computed here, in its own library and on its device (forward only).
"""

from __future__ import annotations

from hiddenstate.xp.cells import sigmoid, softplus

__all__ = ["run", "step"]


def _silu(xp, c):
    return c * sigmoid(xp, c)


def step(xp, p: dict, u, ssm, conv):
    """One step of the Mamba block: the input ``u_t`` (N, M) and the states -> the output and the new states.

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters by their ``MambaMixer`` names (biases optional).
    u : array of shape (N, M)
        This step's input.
    ssm : array of shape (N, Di, S)
        The SSM state before the step.
    conv : array of shape (N, Di, K-1)
        The convolution's state before the step (the last K - 1 values of ``x``, oldest first).

    Returns
    -------
    out : array of shape (N, M)
    ssm : array of shape (N, Di, S)
    conv : array of shape (N, Di, K-1)
    """
    Di, S = p["A_log"].shape
    R = p["dt_proj.weight"].shape[1]
    xz = xp.matmul(u, xp.matrix_transpose(p["in_proj.weight"]))  # (N, 2 Di)
    if p.get("in_proj.bias") is not None:
        xz = xz + p["in_proj.bias"]
    x, z = xz[:, :Di], xz[:, Di:]
    window = xp.concat([conv, x[:, :, None]], axis=2)  # (N, Di, K): the K inputs the convolution reads
    c = xp.sum(window * p["conv1d.weight"][:, 0, :], axis=2)  # (N, Di)
    if p.get("conv1d.bias") is not None:
        c = c + p["conv1d.bias"]
    a = _silu(xp, c)
    dbc = xp.matmul(a, xp.matrix_transpose(p["x_proj.weight"]))  # (N, R + 2S)
    r, B, C = dbc[:, :R], dbc[:, R:R + S], dbc[:, R + S:]
    dt = softplus(xp, xp.matmul(r, xp.matrix_transpose(p["dt_proj.weight"])) + p["dt_proj.bias"])  # (N, Di)
    A = -xp.exp(p["A_log"])  # (Di, S)
    ssm = xp.exp(dt[:, :, None] * A) * ssm + (dt * a)[:, :, None] * B[:, None, :]  # (N, Di, S)
    y = xp.sum(ssm * C[:, None, :], axis=2) + p["D"] * a  # (N, Di)
    out = xp.matmul(y * _silu(xp, z), xp.matrix_transpose(p["out_proj.weight"]))  # (N, M)
    if p.get("out_proj.bias") is not None:
        out = out + p["out_proj.bias"]
    return out, ssm, window[:, :, 1:]


def run(xp, p: dict, u, ssm, conv):
    """:func:`step` over all T steps.

    Parameters
    ----------
    xp : module
        The array namespace.
    p : dict of str to array
        The parameters.
    u : array of shape (T, N, M)
    ssm : array of shape (N, Di, S)
    conv : array of shape (N, Di, K-1)

    Returns
    -------
    out : array of shape (T, N, M)
    ssm : array of shape (N, Di, S)
        The final SSM state.
    conv : array of shape (N, Di, K-1)
        The final convolution state.
    """
    outs = []
    for t in range(u.shape[0]):
        o, ssm, conv = step(xp, p, u[t], ssm, conv)
        outs.append(o)
    out = xp.stack(outs, axis=0) if outs else xp.zeros((0, u.shape[1], p["out_proj.weight"].shape[0]), dtype=u.dtype)
    return out, ssm, conv
