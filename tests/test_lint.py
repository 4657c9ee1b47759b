"""Contracts that lint: ruff over the code, numpydoc over every public docstring.

Both run inside ``make test`` (and so in CI). The numpydoc checks are the ones that make a
docstring a contract: the object has one (GL08), every parameter is documented (PR01) and no
documented parameter is missing from the signature (PR02), and whatever returns a value has a
Returns section (RT01). Dataclasses and named tuples document their fields as Attributes.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pathlib
import pkgutil
import shutil
import subprocess
import sys

import pytest

import hiddenstate

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKS = {"GL08", "PR01", "PR02", "RT01"}


def ruff_command():
    exe = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("ruff")
    return [exe] if exe else None


def test_ruff_is_clean():
    cmd = ruff_command()
    if cmd is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    out = subprocess.run([*cmd, "check", "--no-cache", "src", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def public_objects():
    """``module.name`` (and ``module.Class.method``) for every name in a public module's __all__."""
    for info in pkgutil.walk_packages(hiddenstate.__path__, "hiddenstate."):
        name = info.name
        if any(part.startswith("_") for part in name.split(".")):
            continue
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr, None)
            if obj is None or inspect.ismodule(obj) or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isfunction(obj):
                yield f"{name}.{attr}", obj
            elif inspect.isclass(obj):
                yield f"{name}.{attr}", obj
                for m, member in vars(obj).items():
                    if (m.startswith("_") and m != "__call__") or not (
                            inspect.isfunction(member) or isinstance(member, (property, staticmethod, classmethod))):
                        continue
                    yield f"{name}.{attr}.{m}", member


def record_like(obj) -> bool:
    return inspect.isclass(obj) and (dataclasses.is_dataclass(obj) or hasattr(obj, "_fields"))


def test_public_docstrings_follow_numpydoc():
    validate = pytest.importorskip("numpydoc.validate", reason="numpydoc is not installed").validate
    problems = []
    seen = 0
    for qualname, obj in public_objects():
        seen += 1
        for code, message in validate(qualname)["errors"]:
            if code in CHECKS and not (code == "PR01" and record_like(obj)):
                problems.append(f"{code} {qualname}: {message}")
    assert seen > 150  # the walk found the package's public surface
    assert not problems, f"{len(problems)} docstring problems:\n" + "\n".join(problems)
