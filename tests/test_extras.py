"""A missing optional package is one line naming the extra to install, on every path that needs one."""
import builtins
import sys

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.core.extras import EXTRAS, MissingExtra, missing_extra, require
from hiddenstate.train.corpus import load_text

TINY = ["--hidden-size", "8", "--seq-len", "8", "--batch-size", "4", "--eval-every", "2", "--quiet"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    data = tmp_path_factory.mktemp("data") / "small.txt"
    data.write_text(load_text()[:5_000], encoding="utf-8")
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", "--data", str(data), "--steps", "2", "--out", str(out), *TINY]) == 0
    return out


def without(monkeypatch, *names):
    """Make ``import name`` (and its submodules) fail as if the package were not installed."""
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, name, None)  # import raises ModuleNotFoundError(name=name)


def one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("hiddenstate: error: ") and "internal error" not in err[0], err
    return err[0]


@pytest.mark.parametrize(("fmt", "package", "extra"), [("onnx", "onnx", "onnx"), ("torch", "torch", "torch")])
def test_export_without_its_package_names_the_extra(fmt, package, extra, run_dir, tmp_path, monkeypatch, capsys):
    without(monkeypatch, package)
    out = tmp_path / "model.bin"
    assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 2
    line = one_error_line(capsys)
    assert f"needs the optional package {package}, which is not installed: pip install 'hiddenstate[{extra}]'." in line
    assert not out.exists()


def test_train_on_torch_without_torch_names_the_extra(tmp_path, monkeypatch, capsys):
    without(monkeypatch, "torch")
    argv = ["train", "--steps", "1", "--device", "torch:cpu", "--out", str(tmp_path / "r"), *TINY]
    assert main(argv) == 2
    assert "pip install 'hiddenstate[torch]'" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("convert", "package"), [
    (lambda layer, tmp: hs.interop.to_torch(layer), "torch"),
    (lambda layer, tmp: hs.interop.to_onnx(layer, tmp / "g.onnx"), "onnx"),
])
def test_python_conversions_raise_missing_extra(convert, package, tmp_path, monkeypatch):
    layer = hs.GRU(3, 4, rng=np.random.default_rng(0))
    without(monkeypatch, package)
    with pytest.raises(MissingExtra, match=rf"needs the optional package {package}, which is not installed: "
                                           rf"pip install 'hiddenstate\[{EXTRAS[package]}\]'"):
        convert(layer, tmp_path)
    assert isinstance(MissingExtra("x"), ImportError)  # callers catching ImportError still do
    assert not (tmp_path / "g.onnx").exists()


def test_a_package_that_is_installed_but_does_not_import_says_so(monkeypatch):
    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name.split(".")[0] == "onnxruntime":
            raise ImportError("libonnxruntime.so: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
    monkeypatch.setattr(builtins, "__import__", broken)
    monkeypatch.setattr("importlib.import_module", lambda name: broken(name))
    with pytest.raises(MissingExtra, match=r"running the graph needs onnxruntime, which is installed but does not "
                                           r"import \(libonnxruntime.so: cannot open shared object file\); reinstall "
                                           r"it: pip install 'hiddenstate\[onnx\]'"):
        require("onnxruntime", "running the graph")


def test_missing_extra_recognises_only_the_optional_packages():
    assert missing_extra(ModuleNotFoundError("No module named 'onnx.helper'", name="onnx.helper"), "export") == (
        "export needs the optional package onnx, which is not installed: pip install 'hiddenstate[onnx]'.")
    assert missing_extra(ModuleNotFoundError("No module named 'keras'", name="keras")).startswith(
        "this needs the optional package keras")
    assert missing_extra(ModuleNotFoundError("No module named 'scipy'", name="scipy")) is None  # a requirement
    assert missing_extra(ImportError("cannot import name 'x'")) is None
    with pytest.raises(ValueError, match="module must be one of onnx, onnxruntime, torch, keras; got 'scipy'"):
        require("scipy", "x")


def test_the_extras_exist_in_pyproject_and_test_installs_them_all():
    import pathlib

    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    pyproject = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    names = {extra: {req.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip() for req in reqs}
             for extra, reqs in extras.items()}
    for module, extra in EXTRAS.items():
        assert module in names[extra], (module, extra, names.get(extra))
        assert module in names["test"], module  # the test extra stays a superset
