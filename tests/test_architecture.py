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
import io
import pathlib
import subprocess
import sys
import tokenize

import pytest

import hiddenstate

SRC = pathlib.Path(hiddenstate.__file__).parent
PACKAGE = "hiddenstate"

# Each group of modules and what it may import (besides itself and the standard library/NumPy).
# CORE is the floor: the infrastructure (core/), the classic engine (classic/), the pieces the kinds
# share (shared/), each kind's kernels, block and view (kinds/<kind>/), the array-API path (xp/) and
# state.py. A kind's analysis (kinds/<kind>/*analysis.py) stands on the probe floor, its report card
# (kinds/<kind>/*card.py) on the report floor.
CORE = "core"
LAYERS = {
    CORE: {CORE},  # includes xp/ (the array-API path): NumPy and array_api_compat, the latter inside functions
    "probe": {CORE, "probe", "report.notebook"},  # inside the results' _repr_html_ only (notebook display)
    "report": {CORE, "report"},
    "interop": {CORE, "interop", "train.model"},  # whole character models convert too
    "train": {CORE, "train", "report.figures"},
    "experiments": {CORE, "experiments", "probe", "train.optim", "report.figures"},
    "pipelines.app": {CORE, "probe", "report", "train", "pipelines.app"},
    # a model of a transformers family (or one of our blocks' language models) -> report
    "pipelines.family_inspection": {CORE, "probe", "report", "interop", "pipelines.family_inspection"},
    "pipelines.inspection": {CORE, "probe", "report", "train", "interop", "pipelines.app",  # foreign models -> report
                             "pipelines.family_inspection", "pipelines.rnns_inside", "pipelines.inspection"},
    # the RNNs inside any torch model -> their analyses -> report
    "pipelines.rnns_inside": {CORE, "probe", "report", "interop", "pipelines.rnns_inside"},
    "pipelines.export": {CORE, "train", "interop", "pipelines.export"},
    # two prompts through a model of a family -> the distance of their states per layer and step (issue 35)
    "pipelines.compare": {CORE, "probe", "interop", "pipelines.compare"},  # trained models -> ONNX / torch.export files
    # hiddenstate.analyze: any model -> the analysis of its kind
    "pipelines.analyze": {CORE, "probe", "train", "interop", "pipelines.family_inspection", "pipelines.analyze"},
    "pipelines.inspect_command": {CORE, "train", "pipelines.app", "pipelines.inspection",  # which model a path names
                                  "pipelines.inspect_command", "interop.families",  # a model directory: its config,
                                  "pipelines.family_inspection",  # then its report
                                  "interop.states_file"},  # and --save-states
    # a model directory, one edit of its state -> the effect per position (issue 32)
    "pipelines.intervene_command": {CORE, "edit", "pipelines.inspect_command", "pipelines.intervene_command"},
    # a model directory and ids -> a snapshot file of its whole state (issue 33)
    "pipelines.snapshot_command": {CORE, "keep", "interop.families", "pipelines.inspect_command",
                                   "pipelines.snapshot_command"},
    "cli": {CORE, "probe", "report", "train", "interop", "experiments", "pipelines", "cli"},
    # interventions (issue 32): the edit record, the ops and the block-level edit stand on the core floor
    "edit": {CORE, "edit.ops", "edit.blocks", "edit.result", "edit.sources", "edit.api"},
    "edit.families": {CORE, "edit.ops", "edit.blocks", "edit.result", "edit.sources", "interop.families"},
    "edit.api": {CORE, "edit.families", "edit.ours", "interop.families.directory"},  # a directory, a family, ours
    # our own models in segments: the character models, the Mamba LMs (core) and trace for a stack's every layer
    "edit.ours": {CORE, "edit.ops", "edit.blocks", "edit.result", "edit.sources", "train.model", "probe.trace"},
    # causal tracing (issue 32): the edit machinery, a directory's model, the heatmap's figure
    "edit.causal": {CORE, "edit", "interop.families", "report.tracing"},
    # a model directory, clean and corrupted ids -> the trace's heatmap, JSON and page
    "pipelines.trace_command": {CORE, "edit", "pipelines.inspect_command", "pipelines.trace_command", "report"},
    # the state as an object you keep (issue 33): a model's cached paths held to its full forward (keep/cache_check),
    # standing on the families' machinery (interop) and below the pipelines
    "keep": {CORE, "keep", "interop", "train.model", "train.initial_state"},  # snapshots: our models too
    # a model directory and ids -> its cache check, exit status 0/1 (issue 33)
    "pipelines.cache_check_command": {CORE, "keep", "pipelines.inspect_command", "pipelines.cache_check_command"},
    # a model directory and ids -> every step's states of its recurrent layers in a states file (issue 35)
    "pipelines.states_command": {CORE, "interop.families", "interop.states_file", "pipelines.inspect_command",
                                 "pipelines.states_command"},
}
# ``hiddenstate`` itself (its __init__, the public surface) and ``python -m hiddenstate`` may
# import anything; nothing but the CLI may import the package's __init__ (it drags in the surface).
TOP = "top"
LAYERS[TOP] = set(LAYERS) | {TOP, "pipelines"}
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
    if rest[0] == "kinds" and len(rest) == 3 and rest[2].endswith("analysis"):
        return "probe"
    if rest[0] == "kinds" and len(rest) == 3 and rest[2].endswith("card"):
        return "report"
    if rest[0] == "pipelines":
        return ".".join(rest[:2]) if len(rest) > 1 else TOP
    if rest[0] == "edit":
        return ".".join(rest[:2]) if rest[1:2] in (["families"], ["api"], ["ours"], ["causal"]) else "edit"
    if rest[0] in LAYERS:
        return rest[0]
    if rest[0] == "report" and rest[1:] == ["figures"]:
        return "report"
    return CORE


def allowed(src: str, dst: str) -> bool:
    rules = LAYERS[group_of(src)]
    dotted = ".".join(dst.split(".")[1:])
    group = group_of(dst)
    return (group in rules or any(group.startswith(r + ".") for r in rules)
            or any(dotted == r or dotted.startswith(r + ".") for r in rules))


GRAPH = {m: sorted({t for t, _, _ in imports_of(m) if t in MODULES and t != m}) for m in MODULES}


def test_every_module_is_parsed():
    assert {"hiddenstate.classic.cells.gru", "hiddenstate.probe.trace", "hiddenstate.train.loop",
            "hiddenstate.report", "hiddenstate.pipelines.app", "hiddenstate.cli"} <= set(MODULES)


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
    planted["hiddenstate.state"] = [*GRAPH["hiddenstate.state"], "hiddenstate.classic.layers"]
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


def _is_kernel(module: str) -> bool:
    parts = module.split(".")
    if parts[1:3] == ["classic", "cells"]:
        return True
    return parts[1] == "kinds" and len(parts) == 4 and (parts[3].endswith("kernel") or parts[3] == "chunked")


def test_the_array_api_path_stands_below_the_kernels():
    # xp/ and each kind's reference.py are the readable references the tuned kernels (classic/cells/,
    # kinds/<kind>/*kernel.py, chunked.py) are held to: they import none of them
    refs = [m for m in MODULES if m.startswith(f"{PACKAGE}.xp") or m.endswith(".reference")]
    assert f"{PACKAGE}.kinds.ssm.reference" in refs and f"{PACKAGE}.kinds.delta.reference" in refs
    bad = [f"{MODULES[m].relative_to(SRC)}:{line} imports {t}" for m in refs
           for t, _, line in imports_of(m) if _is_kernel(t)]
    assert not bad, "\n".join(bad)


def test_the_infrastructure_imports_only_itself():
    # core/ is the floor under everything: validation, files, params, ... import nothing else of the package
    bad = [f"{MODULES[m].relative_to(SRC)}:{line} imports {t}" for m in MODULES if m.startswith(f"{PACKAGE}.core")
           for t, _, line in imports_of(m) if t in MODULES and not t.startswith(f"{PACKAGE}.core")]
    assert not bad, "\n".join(bad)


def test_the_top_level_holds_a_few_modules():
    top = sorted(p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 12, top


# Inside train/: the run directory (checkpoint files, the snapshot and its schema, ownership) and the
# distributed machinery are subpackages of their own, and each may import only these.
TRAIN_SUBPACKAGES = {
    "train.rundir": {CORE, "train.rundir", "train.config", "train.corpus", "train.model", "train.guards",
                     "train.initial_state"},  # a leaf over core: the tuned state a checkpoint holds
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


def code_lines(text: str) -> int:
    """The lines of ``text`` that hold code: not blank, not only a comment, not in a docstring."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


# The size rule measures code, not prose: a module may explain itself at any length, but holds at
# most this many lines of code (a file that needs more is two ideas).
MAX_CODE_LINES = 400


def test_code_lines_counts_code_only():
    text = ('"""Module docstring,\n\ntwo paragraphs."""\n\nimport os  # a comment\n# only a comment\n\n\n'
            'def f(x):\n    """Docstring."""\n    y = (x +\n         1)\n    return "not a docstring"\n')
    # import os / def f(x): / y = (x + / 1) / return ...
    assert code_lines(text) == 5


def test_no_module_holds_more_than_its_share_of_code():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := code_lines(p.read_text(encoding="utf-8"))) > MAX_CODE_LINES}
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


@pytest.mark.parametrize("old", sorted(__import__("hiddenstate.core.oldpaths", fromlist=["MOVED_03"]).MOVED_03))
def test_every_path_moved_in_0_3_imports_the_same_module_with_a_warning(old):
    import importlib

    from hiddenstate.core.oldpaths import MOVED_03

    new = importlib.import_module(MOVED_03[old])
    aliases = [name for name in MOVED_03 if old == name or old.startswith(name + ".")]  # an old parent warns too
    for name in aliases:
        sys.modules.pop(name, None)
    try:
        with pytest.warns(DeprecationWarning) as caught:
            module = importlib.import_module(old)
        assert module is new
        assert f"{old} moved to {MOVED_03[old]} in hiddenstate 0.3" in [str(w.message).split(";")[0] for w in caught]
    finally:
        for name in aliases:
            sys.modules.pop(name, None)


def test_a_kinds_old_module_names_resolve_in_its_folder_with_a_warning():
    from hiddenstate.kinds import ssm
    from hiddenstate.kinds.ssm.view import mamba_view

    with pytest.warns(DeprecationWarning, match="hiddenstate.kinds.ssm.mamba_view moved to hiddenstate.kinds.ssm.view"):
        assert ssm.mamba_view is mamba_view
    with pytest.raises(AttributeError):
        ssm.no_such_name  # noqa: B018


# The recurrence kinds' names (hiddenstate.kinds' registry, and the words a module of one kind would carry).
KIND_NAMES = ("mamba", "mamba2", "ssm", "delta", "gated_delta", "kda", "mlstm", "rwkv", "rglru", "lightning",
              "shortconv")


def named_after_a_kind(part: str) -> str | None:
    """The kind a module or folder name carries as one of its ``_``-separated words (or runs of words), or None."""
    words = part.split("_")
    runs = {"_".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    return next((k for k in KIND_NAMES if k in runs), None)


def test_named_after_a_kind_reads_words_not_substrings():
    assert named_after_a_kind("mlstm_rwkv") == "mlstm" and named_after_a_kind("gated_delta") == "delta"
    assert named_after_a_kind("mamba_page") == "mamba" and named_after_a_kind("kind_cards") is None
    assert named_after_a_kind("state_memory") is None and named_after_a_kind("deltas") is None


def test_no_module_outside_a_kinds_folder_is_named_after_a_kind():
    bad = []
    for m in MODULES:
        parts = m.split(".")[1:]
        if parts[:1] == ["kinds"] and MODULES[m].parent.name != "kinds":
            continue  # a kind's own folder (kinds/<kind>/) and what it holds: named as it likes
        if parts[:2] == ["interop", "families"]:
            # interop/families/<model_type>.py are named after transformers model types (mamba, rwkv, ...), which
            # are families, not kinds: exempt
            continue
        for part in parts:
            if (kind := named_after_a_kind(part)) is not None:
                bad.append(f"{MODULES[m].relative_to(SRC)} is named after the kind {kind!r}")
    assert not bad, "\n".join(bad)


def test_every_registered_kind_has_its_folder_its_analysis_and_its_card():
    from hiddenstate.kinds import KINDS

    for kind in KINDS.values():
        folder = kind.block.__module__.split(".")
        assert folder[:2] == [PACKAGE, "kinds"] and len(folder) == 4, kind
        assert kind.layer_kind().name == kind.name and kind.report_card() is not None, kind
        own = [kind.analyze] if kind.analyze is not None else []  # None: the generic analyze_block serves it
        for ref in (kind.analysis, kind.card, *own):  # lazy: named, not imported with the kinds
            assert isinstance(ref, str) and ref.startswith(".".join(folder[:3]) + "."), (kind, ref)


@pytest.mark.parametrize("old", sorted(__import__("hiddenstate.core.oldpaths", fromlist=["SPLIT_03"]).SPLIT_03))
def test_every_module_split_in_0_3_imports_its_names_with_a_warning(old):
    import importlib

    from hiddenstate.core.oldpaths import SPLIT_03

    sys.modules.pop(old, None)
    try:
        with pytest.warns(DeprecationWarning, match=f"{old} was split into"):
            module = importlib.import_module(old)
        news = [importlib.import_module(part) for part in SPLIT_03[old]]
        for new in news:
            for name in new.__all__:
                if sum(name in other.__all__ for other in news) == 1:  # a name only one of them holds: that one
                    assert getattr(module, name) is getattr(new, name), name
        assert set(module.__all__) == {name for new in news for name in new.__all__}
    finally:
        sys.modules.pop(old, None)
