"""The optional packages (the extras of ``pyproject.toml``) and the one-line message when one is missing.

hiddenstate itself needs NumPy, SciPy, matplotlib, safetensors, tqdm, threadpoolctl and
array-api-compat. Export to ONNX needs ``onnx`` (and ``onnxruntime`` to run the graph), the
torch conversions, ``torch.export`` and ``--device torch:...`` need ``torch``: each is an extra,
``pip install 'hiddenstate[onnx]'``. :func:`require` imports one and raises
:class:`MissingExtra` (an ImportError) naming the extra to install when it is missing; the CLI
prints that message on one line with exit status 2.
"""

from __future__ import annotations

import importlib

__all__ = ["EXTRAS", "MissingExtra", "missing_extra", "require"]

#: importable module -> the extra of ``pyproject.toml`` that installs it
EXTRAS = {"onnx": "onnx", "onnxruntime": "onnx", "torch": "torch", "keras": "keras"}


class MissingExtra(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def _install(module: str) -> str:
    return f"pip install 'hiddenstate[{EXTRAS[module]}]'"


def require(module: str, feature: str):
    """Import the optional package ``module`` for ``feature``.

    Parameters
    ----------
    module : str
        A key of :data:`EXTRAS` (``"onnx"``, ``"onnxruntime"``, ``"torch"``, ``"keras"``).
    feature : str
        What needs it, the start of the message (``"export to ONNX"``).

    Returns
    -------
    module
        The imported package.

    Raises
    ------
    MissingExtra
        ``module`` is not installed: ``"export to ONNX needs the optional package onnx, which is
        not installed: pip install 'hiddenstate[onnx]'."``; or it is installed but fails to
        import (the message keeps the reason).
    ValueError
        ``module`` is not a key of :data:`EXTRAS`.
    """
    if module not in EXTRAS:
        raise ValueError(f"module must be one of {', '.join(EXTRAS)}; got {module!r}.")
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtra(missing_extra(error, feature) or (
            f"{feature} needs {module}, which is installed but does not import ({' '.join(str(error).split())}); "
            f"reinstall it: {_install(module)}.")) from None


def missing_extra(error: BaseException, feature: str | None = None) -> str | None:
    """The one-line message for an ImportError of a missing optional package, or None for any other error.

    Parameters
    ----------
    error : BaseException
        What an import raised.
    feature : str, optional
        What needed the package (default ``"this"``).

    Returns
    -------
    str or None
        ``"<feature> needs the optional package <name>, which is not installed: pip install
        'hiddenstate[<extra>]'."`` when ``error`` is a :class:`MissingExtra` (its own message) or
        a ModuleNotFoundError for a package of :data:`EXTRAS` (or a submodule of one); None
        otherwise.
    """
    if isinstance(error, MissingExtra):
        return str(error)
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    top = (name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    return f"{feature or 'this'} needs the optional package {top}, which is not installed: {_install(top)}."
