"""The package's shape: imports flow one way, no module reaches into another's private names.

Every import statement of every module under ``src/hiddenstate`` is read with :mod:`ast`,
function-local ones included, and resolved to the module it loads. The test fails on

* a cycle among the package's modules;
* ``from hiddenstate.x import _name`` (or an import of a module whose own name is private) from
  another module: private names stay inside their module;
* an import that crosses the layering below (the map of the code in docs/development.md says the same).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import hiddenstate

SRC = pathlib.Path(hiddenstate.__file__).parent
PACKAGE = "hiddenstate"

# Each group of modules and what it may import (besides itself and the standard library/NumPy).
CORE = "core"
LAYERS = {
    CORE: {CORE},  # includes xp/ (the array-API path): NumPy and array_api_compat, the latter inside functions
    "probe": {CORE, "probe", "report.notebook"},  # inside the results' _repr_html_ only (notebook display)
    "report": {CORE, "report"},
    "interop": {CORE, "interop", "train.model"},  # whole character models convert too
    "train": {CORE, "train", "report.figures"},
    "experiments": {CORE, "experiments", "probe", "train.optim", "report.figures"},
    "app": {CORE, "probe", "report", "train", "app"},
    "family_inspection": {CORE, "probe", "report", "interop", "family_inspection"},  # Mamba models, ours and transformers'
    "inspection": {CORE, "probe", "report", "train", "interop", "app", "family_inspection", "inspection"},  # foreign models -> report
    "export": {CORE, "train", "interop", "export"},  # trained models -> ONNX / torch.export files
    "inspect_command": {CORE, "train", "app", "inspection", "inspect_command",  # which model a path names
                        "interop.families", "family_inspection"},  # a model directory: its config, then its report
    "cli": {CORE, "probe", "report", "train", "interop", "experiments", "app", "family_inspection", "inspection", "export",
            "inspect_command", "cli"},
}
# ``hiddenstate`` itself (its __init__, the public surface) and ``python -m hiddenstate`` may
# import anything; nothing but the CLI may import the package's __init__ (it drags in the surface).
TOP = "top"
LAYERS[TOP] = set(LAYERS) | {TOP}
LAYERS["cli"] |= {TOP}


def module_names() -> dict[str, pathlib.Path]:
    names = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        parts = [PACKAGE, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


MODULES = module_names()


def resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from ... import`` (relative imports included)."""
    if node.level == 0:
        return node.module
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append((alias.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, node)
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:  # ``from hiddenstate import state``: the submodule itself
                    found.append((sub, None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
    return found


def group_of(module: str) -> str:
    rest = module.split(".")[1:]
    if not rest or rest == ["__main__"]:
        return TOP
    if rest[0] in LAYERS:
        return rest[0]
    if rest[0] == "report" and rest[1:] == ["figures"]:
        return "report"
    return CORE


def allowed(src: str, dst: str) -> bool:
    rules = LAYERS[group_of(src)]
    dotted = ".".join(dst.split(".")[1:])
    return group_of(dst) in rules or any(dotted == r or dotted.startswith(r + ".") for r in rules)


GRAPH = {m: sorted({t for t, _, _ in imports_of(m) if t in MODULES and t != m}) for m in MODULES}


def test_every_module_is_parsed():
    assert {"hiddenstate.cells.gru", "hiddenstate.probe.trace", "hiddenstate.train.loop",
            "hiddenstate.report", "hiddenstate.app", "hiddenstate.cli"} <= set(MODULES)


def test_no_import_cycles():
    # Tarjan-free: depth-first search with colours; report the first cycle found
    colour, stack = {}, []

    def visit(m):
        colour[m] = "grey"
        stack.append(m)
        for n in GRAPH[m]:
            if colour.get(n) == "grey":
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in colour:
                visit(n)
        stack.pop()
        colour[m] = "black"

    for m in sorted(MODULES):
        if m not in colour:
            visit(m)


def test_the_cycle_detector_finds_a_planted_cycle(monkeypatch):
    planted = dict(GRAPH)
    planted["hiddenstate.state"] = [*GRAPH["hiddenstate.state"], "hiddenstate.layers"]
    monkeypatch.setitem(globals(), "GRAPH", planted)
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_no_import_cycles()


def test_no_module_imports_another_modules_private_names():
    bad = []
    for m in MODULES:
        for target, name, line in imports_of(m):
            private_module = any(part.startswith("_") and part != "__init__" for part in target.split("."))
            private_name = name is not None and name.startswith("_") and not name.endswith("__")
            if target != m and (private_module or private_name):
                bad.append(f"{MODULES[m].relative_to(SRC)}:{line} imports {target}{'.' + name if name else ''}")
    assert not bad, "\n".join(bad)


def test_imports_follow_the_layering():
    bad = [f"{MODULES[m].relative_to(SRC)}:{line} ({group_of(m)}) imports {t} ({group_of(t)})"
           for m in MODULES for t, _, line in imports_of(m) if t in MODULES and not allowed(m, t)]
    assert not bad, "\n".join(bad)


def test_the_array_api_path_stands_below_the_kernels():
    # xp/ is the readable reference the kernels of cells/ are held to: it imports none of them
    bad = [f"{MODULES[m].relative_to(SRC)}:{line} imports {t}" for m in MODULES if m.startswith(f"{PACKAGE}.xp")
           for t, _, line in imports_of(m) if t == f"{PACKAGE}.cells" or t.startswith(f"{PACKAGE}.cells.")]
    assert not bad, "\n".join(bad)


# Inside train/: the run directory (checkpoint files, the snapshot and its schema, ownership) and the
# distributed machinery are subpackages of their own, and each may import only these.
TRAIN_SUBPACKAGES = {
    "train.rundir": {CORE, "train.rundir", "train.config", "train.corpus", "train.model", "train.guards",
                     "train.mamba_stack"},  # the carried state's shapes (d_state, d_conv, expand)
    "train.distributed": {CORE, "train.distributed"},  # torch only inside join() and launch()
}


def test_the_train_subpackages_keep_to_their_layer():
    bad = []
    for m in MODULES:
        sub = next((s for s in TRAIN_SUBPACKAGES if m == f"{PACKAGE}.{s}" or m.startswith(f"{PACKAGE}.{s}.")), None)
        if sub is None:
            continue
        for t, _, line in imports_of(m):
            dotted = ".".join(t.split(".")[1:])
            ok = group_of(t) == CORE or any(dotted == r or dotted.startswith(r + ".") for r in TRAIN_SUBPACKAGES[sub])
            if t in MODULES and not ok:
                bad.append(f"{MODULES[m].relative_to(SRC)}:{line} ({sub}) imports {t}")
    assert not bad, "\n".join(bad)


def test_no_module_is_much_longer_than_500_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 520}
    assert not long, long


def test_import_hiddenstate_loads_no_scipy_matplotlib_or_safetensors():
    code = ("import sys, hiddenstate; heavy = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'scipy', 'matplotlib', 'safetensors', 'torch', 'keras', 'transformers'}); print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    # ... and the lazy names still resolve
    code = "import hiddenstate as hs; print(hs.CharRNN.__name__, hs.build_report.__name__, hs.find_fixed_points.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["CharRNN", "build_report", "find_fixed_points"]


def test_old_module_paths_still_import_with_a_deprecation_warning():
    from hiddenstate.probe import gradflow as new

    sys.modules.pop("hiddenstate.gradflow", None)
    with pytest.warns(DeprecationWarning, match="hiddenstate.gradflow moved to hiddenstate.probe.gradflow"):
        from hiddenstate.gradflow import jacobian_flow
    assert sys.modules["hiddenstate.gradflow"] is new and jacobian_flow is new.jacobian_flow
    assert callable(hiddenstate.trace)  # the function, not a module
    sys.modules.pop("hiddenstate.gradflow", None)
