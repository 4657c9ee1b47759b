"""Every Python example in the README runs as printed, in a fresh interpreter and an empty folder."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests._torch import require_torch, torch_required

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def _needs(code: str, module: str) -> bool:
    return re.search(rf"^\s*(import|from) {module}\b", code, flags=re.M) is not None


def _with_what_it_builds_on(code: str) -> str:
    """Examples that continue an earlier one (the moving average and the Checkpoints example use the
    Optimizers example's ``layer``; the Checkpoints example also the Corpus example's) run it first."""
    earlier = []
    if "ema = ExponentialMovingAverage(layer.params" in code or "come from the Optimizers example" in code:
        earlier += [b for b in BLOCKS if "opt = Adam(layer.params" in b]
    if "come from the Optimizers example" in code:
        earlier += [b for b in BLOCKS if "batcher = StreamBatcher(" in b]
    return "\n".join([*earlier, code])


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    code = BLOCKS[index]
    if _needs(code, "torch"):
        require_torch()
    if _needs(code, "keras") and importlib.util.find_spec("keras") is None and not torch_required():
        pytest.skip("keras is not installed")
    if _needs(code, "transformers") and importlib.util.find_spec("transformers") is None and not torch_required():
        pytest.skip("transformers is not installed")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", _with_what_it_builds_on(code)], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, f"README example {index} failed:\n{code}\n{out.stderr[-3000:]}"
