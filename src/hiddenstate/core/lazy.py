"""Lazy re-exports for the package ``__init__`` files (PEP 562), so ``import hiddenstate`` stays lean.

A package lists ``name -> "module.path"`` (or ``"module.path:attribute"``); :func:`attach`
returns the module-level ``__getattr__`` and ``__dir__`` that import the module the first time
the name is used. scipy, matplotlib and safetensors are then only imported by the code that
needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["attach"]


def attach(package: str, exports: Mapping[str, str], namespace: Mapping[str, object] | None = None) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Build ``__getattr__`` and ``__dir__`` for ``package`` from its table of lazy exports.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : mapping of str to str
        Public name -> ``"module"`` (the name is a submodule, or an attribute of that name in
        it) or ``"module:attribute"``. Module paths are absolute (``"hiddenstate.probe.trace"``).
    namespace : mapping, optional
        The package's ``globals()``, so that ``dir()`` lists its eager names too.

    Returns
    -------
    getattr : callable
        ``getattr(name)`` imports and returns the export; raises AttributeError for other names.
    dir : callable
        ``dir()`` lists the exports and the names of ``namespace``.
    """
    table = dict(exports)

    def __getattr__(name: str) -> object:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, _, attribute = target.partition(":")
        module = importlib.import_module(module_name)
        if attribute:
            return getattr(module, attribute)
        if module_name.rsplit(".", 1)[-1] == name:
            return module
        return getattr(module, name)

    def __dir__() -> list[str]:
        return sorted(set(table) | set(namespace or ()))

    return __getattr__, __dir__
