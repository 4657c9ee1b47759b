"""The module paths of hiddenstate 0.1, kept importable for one release with a DeprecationWarning.

0.2 moved the flat package into subpackages (see the README's map of the code). ``import
hiddenstate.trace`` or ``from hiddenstate.corpus import Vocabulary`` still work: a finder on
:data:`sys.meta_path` loads the new module under the old name and warns once per module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MOVED", "install"]

#: old module (0.1) -> new module (0.2). ``hiddenstate.trace`` is not here: importing a submodule
#: of that name would replace the function ``hiddenstate.trace`` on the package.
MOVED = {
    "hiddenstate.seeds": "hiddenstate.textbook",
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


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return importlib.import_module(self.new)

    def exec_module(self, module):
        pass


class _OldPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} moved to {new} in hiddenstate 0.2; import it from there "
                      "(the old path goes away in the next release).", DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    """Put the old-path finder on :data:`sys.meta_path` (once; called by ``import hiddenstate``)."""
    if not any(isinstance(f, _OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(_OldPathFinder())
