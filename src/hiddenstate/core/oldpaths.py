"""Moved module paths, kept importable for one release with a DeprecationWarning.

0.2 moved the flat package of 0.1 into subpackages; 0.3 gave each recurrence kind its folder
(``hiddenstate.kinds.ssm``, ...), the classic engine its subpackage (``hiddenstate.classic``), the
infrastructure ``hiddenstate.core`` and the pipelines ``hiddenstate.pipelines`` (see the
documentation's map of the code). ``from hiddenstate.corpus import Vocabulary`` (0.1) or ``import
hiddenstate.mamba`` (0.2) still work: a finder on :data:`sys.meta_path` loads the new module under
the old name and warns once per module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable

__all__ = ["MOVED", "MOVED_03", "SPLIT_03", "install", "moved_names"]

#: old module (0.1) -> new module (0.2). ``hiddenstate.trace`` is not here: importing a submodule
#: of that name would replace the function ``hiddenstate.trace`` on the package.
MOVED = {
    "hiddenstate.seeds": "hiddenstate.classic.textbook",
    "hiddenstate.gatestats": "hiddenstate.probe.gatestats",
    "hiddenstate.gradflow": "hiddenstate.probe.gradflow",
    "hiddenstate.memory": "hiddenstate.probe.memory",
    "hiddenstate.fixedpoints": "hiddenstate.probe.fixedpoints",
    "hiddenstate.pca": "hiddenstate.probe.pca",
    "hiddenstate.unitfeatures": "hiddenstate.probe.unitfeatures",
    "hiddenstate.textfeatures": "hiddenstate.probe.textfeatures",
    "hiddenstate.analysis": "hiddenstate.probe.analysis",
    "hiddenstate.model": "hiddenstate.train.model",
    "hiddenstate.corpus": "hiddenstate.train.corpus",
    "hiddenstate.optim": "hiddenstate.train.optim",
    "hiddenstate.checkpoint": "hiddenstate.train.rundir.checkpoint",
    "hiddenstate.reproduce": "hiddenstate.experiments.reproduce",
    "hiddenstate.tasks": "hiddenstate.experiments.tasks",
}

#: old module (0.2) -> new module (0.3): one folder per recurrence kind, the classic engine, the core, the pipelines.
#: (0.2's ``hiddenstate.kinds.ssm``, ``.delta``, ``.mlstm`` and ``.rwkv`` are folders now: see :func:`moved_names`.)
MOVED_03 = {
    "hiddenstate.validation": "hiddenstate.core.validation",
    "hiddenstate.files": "hiddenstate.core.files",
    "hiddenstate.workspace": "hiddenstate.core.workspace",
    "hiddenstate.extras": "hiddenstate.core.extras",
    "hiddenstate.progress": "hiddenstate.core.progress",
    "hiddenstate.resources": "hiddenstate.core.resources",
    "hiddenstate.lazy": "hiddenstate.core.lazy",
    "hiddenstate.nesting": "hiddenstate.core.nesting",
    "hiddenstate.oldpaths": "hiddenstate.core.oldpaths",
    "hiddenstate.functional": "hiddenstate.core.functional",
    "hiddenstate.params": "hiddenstate.core.params",
    "hiddenstate.ragged": "hiddenstate.core.ragged",
    "hiddenstate.cells": "hiddenstate.classic.cells",
    "hiddenstate.cells.activations": "hiddenstate.classic.cells.activations",
    "hiddenstate.cells.base": "hiddenstate.classic.cells.base",
    "hiddenstate.cells.gru": "hiddenstate.classic.cells.gru",
    "hiddenstate.cells.lstm": "hiddenstate.classic.cells.lstm",
    "hiddenstate.cells.mingru": "hiddenstate.classic.cells.mingru",
    "hiddenstate.cells.minlstm": "hiddenstate.classic.cells.minlstm",
    "hiddenstate.cells.rnn": "hiddenstate.classic.cells.rnn",
    "hiddenstate.layers": "hiddenstate.classic.layers",
    "hiddenstate.recurrent": "hiddenstate.classic.recurrent",
    "hiddenstate.unroll": "hiddenstate.classic.unroll",
    "hiddenstate.prepared": "hiddenstate.classic.prepared",
    "hiddenstate.textbook": "hiddenstate.classic.textbook",
    "hiddenstate.gradcheck": "hiddenstate.classic.gradcheck",
    "hiddenstate.cells.scan": "hiddenstate.shared.scan",
    "hiddenstate.cells.causal_conv": "hiddenstate.shared.causal_conv",
    "hiddenstate.cells.ssd": "hiddenstate.shared.ssd",
    "hiddenstate.seqblock": "hiddenstate.shared.seqblock",
    "hiddenstate.cells.mamba": "hiddenstate.kinds.ssm.mamba_kernel",
    "hiddenstate.cells.mamba2": "hiddenstate.kinds.ssm.mamba2_kernel",
    "hiddenstate.ssm_block": "hiddenstate.kinds.ssm.block",
    "hiddenstate.mamba": "hiddenstate.kinds.ssm.mamba",
    "hiddenstate.mamba2": "hiddenstate.kinds.ssm.mamba2",
    "hiddenstate.mamba_lm": "hiddenstate.kinds.ssm.lm",
    "hiddenstate.train.mamba_stack": "hiddenstate.kinds.ssm.stack",
    "hiddenstate.xp.mamba": "hiddenstate.kinds.ssm.reference",
    "hiddenstate.probe.mamba": "hiddenstate.kinds.ssm.mamba_analysis",
    "hiddenstate.probe.mamba2": "hiddenstate.kinds.ssm.mamba2_analysis",
    "hiddenstate.cells.delta": "hiddenstate.kinds.delta.kernel",
    "hiddenstate.cells.delta_chunk": "hiddenstate.kinds.delta.chunked",
    "hiddenstate.cells.delta_block": "hiddenstate.kinds.delta.block_kernel",
    "hiddenstate.gated_delta": "hiddenstate.kinds.delta.block",
    "hiddenstate.xp.delta": "hiddenstate.kinds.delta.reference",
    "hiddenstate.probe.delta": "hiddenstate.kinds.delta.analysis",
    "hiddenstate.cells.mlstm": "hiddenstate.kinds.mlstm.kernel",
    "hiddenstate.mlstm": "hiddenstate.kinds.mlstm.block",
    "hiddenstate.cells.rwkv": "hiddenstate.kinds.rwkv.kernel",
    "hiddenstate.rwkv": "hiddenstate.kinds.rwkv.block",
    "hiddenstate.cells.rglru": "hiddenstate.kinds.rglru.kernel",
    "hiddenstate.rglru": "hiddenstate.kinds.rglru.block",
    "hiddenstate.cells.lightning": "hiddenstate.kinds.lightning.kernel",
    "hiddenstate.lightning": "hiddenstate.kinds.lightning.block",
    "hiddenstate.cells.shortconv": "hiddenstate.kinds.shortconv.kernel",
    "hiddenstate.shortconv": "hiddenstate.kinds.shortconv.block",
    "hiddenstate.probe.mamba_layers": "hiddenstate.probe.layer_loop",
    "hiddenstate.probe.mamba_memory": "hiddenstate.probe.state_memory",
    "hiddenstate.probe.mamba_units": "hiddenstate.probe.state_units",
    "hiddenstate.report.mamba_page": "hiddenstate.report.family_page",
    "hiddenstate.app": "hiddenstate.pipelines.app",
    "hiddenstate.inspection": "hiddenstate.pipelines.inspection",
    "hiddenstate.family_inspection": "hiddenstate.pipelines.family_inspection",
    "hiddenstate.inspect_command": "hiddenstate.pipelines.inspect_command",
    "hiddenstate.export": "hiddenstate.pipelines.export",
}
MOVED.update(MOVED_03)

#: old module (0.3.0) -> the modules its names were split into (0.3: one folder per kind). Importing the
#: old path gives a module of the old name holding every public name of the new ones, with a warning.
SPLIT_03 = {
    "hiddenstate.kinds.recurrences": ("hiddenstate.kinds.rglru.view", "hiddenstate.kinds.lightning.view",
                                      "hiddenstate.kinds.shortconv.view"),
    "hiddenstate.probe.recurrences": ("hiddenstate.kinds.rglru.analysis", "hiddenstate.kinds.lightning.analysis",
                                      "hiddenstate.kinds.shortconv.analysis", "hiddenstate.probe.state_analysis",
                                      "hiddenstate.probe.block_analysis"),
    "hiddenstate.probe.mlstm_rwkv": ("hiddenstate.kinds.mlstm.analysis", "hiddenstate.kinds.rwkv.analysis",
                                     "hiddenstate.probe.block_analysis"),
    "hiddenstate.report.kind_cards": ("hiddenstate.report.cards", "hiddenstate.kinds.mlstm.card",
                                      "hiddenstate.kinds.rwkv.card"),
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return importlib.import_module(self.new)

    def exec_module(self, module):
        pass


class _SplitLoader(importlib.abc.Loader):
    """A module of the old name holding the public names (``__all__``) of the modules it was split into.

    A name several of them hold (each kind's ``KINDS`` tuple) is the first one's, or, for tuples,
    all of them joined (0.2's ``hiddenstate.kinds.recurrences.KINDS`` held three kinds).
    """

    def __init__(self, parts: tuple):
        self.parts = parts

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        names = []
        for part in self.parts:
            new = importlib.import_module(part)
            for name in getattr(new, "__all__", ()):
                value = getattr(new, name)
                if name not in names:
                    setattr(module, name, value)
                    names.append(name)
                elif isinstance(value, tuple) and isinstance(getattr(module, name), tuple):
                    setattr(module, name, getattr(module, name) + value)
        module.__all__ = names


class _OldPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        parts = SPLIT_03.get(fullname)
        if parts is not None:
            warnings.warn(f"{fullname} was split into {', '.join(parts)} in hiddenstate 0.3; import from there "
                          "(the old path goes away in the next release).", DeprecationWarning, stacklevel=2)
            return importlib.util.spec_from_loader(fullname, _SplitLoader(parts))
        new = MOVED.get(fullname)
        if new is None:
            return None
        release = "0.3" if fullname in MOVED_03 else "0.2"
        warnings.warn(f"{fullname} moved to {new} in hiddenstate {release}; import it from there "
                      "(the old path goes away in the next release).", DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    """Put the old-path finder first on :data:`sys.meta_path` (once; called by ``import hiddenstate``).

    First, so that an old path inside a package that still exists (``hiddenstate.cells.gru``, whose
    package is now ``hiddenstate.classic.cells``) is aliased to the module already loaded instead
    of being loaded a second time from the new folder under its old name.
    """
    if not any(isinstance(f, _OldPathFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPathFinder())


def moved_names(package: str, module: str, names) -> Callable[[str], object]:
    """A module ``__getattr__`` resolving ``names`` (once in ``package``, now in ``module``) with a warning.

    Parameters
    ----------
    package : str
        The ``__name__`` of the package whose module these names were in (0.2's
        ``hiddenstate.kinds.ssm`` is the folder of that kind now).
    module : str
        The module that holds them now.
    names : iterable of str
        The names to resolve.

    Returns
    -------
    callable
        ``__getattr__(name)``: the object, after a DeprecationWarning; AttributeError for other names.
    """
    known = frozenset(names)

    def __getattr__(name: str) -> object:
        if name not in known:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(f"{package}.{name} moved to {module}.{name} in hiddenstate 0.3; import it from there "
                      "(the old path goes away in the next release).", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), name)

    return __getattr__
