"""Every Python example of the documentation runs as printed, in a fresh interpreter and an empty folder.

The README (the front page) and every page of docs/ (tests/_docs.py reads them): each ```python
block, and the code of each figure that ``make docs`` draws with matplotlib's plot directive (which
must leave a figure open, as the directive saves the open figures).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests import _docs
from tests._torch import require_torch, torch_required

EXAMPLES = [(page, i, kind, code) for page in _docs.pages() for i, (kind, code) in enumerate(_docs.examples(page))]
README_BLOCKS = [code for page, _, kind, code in EXAMPLES if page == _docs.README and kind == "python"]
_FIGURE_CHECK = "\nimport matplotlib.pyplot as _plt\nassert _plt.get_fignums(), 'the figure code drew no figure'\n"


def _needs(code: str, module: str) -> bool:
    return re.search(rf"^\s*(import|from) {module}\b", code, flags=re.M) is not None


def _with_what_it_builds_on(code: str, page) -> str:
    """Examples that continue an earlier one of their page (the moving average and the Checkpoints
    example use the Optimizers example's ``layer``; the Checkpoints example also the Corpus
    example's) run it first."""
    blocks = [c for kind, c in _docs.examples(page) if kind == "python"]
    earlier = []
    if "ema = ExponentialMovingAverage(layer.params" in code or "come from the Optimizers example" in code:
        earlier += [b for b in blocks if "opt = Adam(layer.params" in b]
    if "come from the Optimizers example" in code:
        earlier += [b for b in blocks if "batcher = StreamBatcher(" in b]
    return "\n".join([*earlier, code])


def test_the_documentation_has_examples_and_figures():
    assert len(README_BLOCKS) >= 1
    assert len(EXAMPLES) >= 40
    learn = sorted((_docs.DOCS / "learn").glob("*.md"))
    assert len(learn) >= 8
    for page in learn:
        if page.name != "index.md":  # every Learn page runs, and draws its figure at build time
            kinds = [kind for kind, _ in _docs.examples(page)]
            assert "python" in kinds and "plot" in kinds, page.name


def test_the_reader_finds_figures_in_eval_rst_and_plot_fences(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```python\nprint(1)\n```\n\n```{eval-rst}\n.. plot::\n   :include-source: true\n\n"
                    "   import a\n\n   b = 2\n```\n\n```{plot}\n:caption: c\n\nimport c\n```\n", encoding="utf-8")
    assert _docs.examples(page) == [("python", "print(1)\n"), ("plot", "import a\n\nb = 2\n"), ("plot", "import c\n")]


@pytest.mark.parametrize("page, index, kind, code", EXAMPLES,
                         ids=[f"{p.relative_to(_docs.ROOT)}:{i}" for p, i, _, _ in EXAMPLES])
def test_documentation_example_runs(page, index, kind, code, tmp_path):
    if _needs(code, "torch"):
        require_torch()
    if _needs(code, "keras") and importlib.util.find_spec("keras") is None and not torch_required():
        pytest.skip("keras is not installed")
    if _needs(code, "transformers") and importlib.util.find_spec("transformers") is None and not torch_required():
        pytest.skip("transformers is not installed")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    program = _with_what_it_builds_on(code, page) + (_FIGURE_CHECK if kind == "plot" else "")
    out = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=300)
    where = page.relative_to(_docs.ROOT)
    assert out.returncode == 0, f"{where} example {index} ({kind}) failed:\n{code}\n{out.stderr[-3000:]}"


def test_the_readme_is_a_front_page_whose_links_and_picture_exist():
    text = _docs.README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for command in ("make demo", "make test", "make docs"):
        assert command in text
    links = re.findall(r"\]\(((?:docs/)[^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 20 and all((_docs.ROOT / link).is_file() for link in links), links
    picture = re.search(r"!\[[^\]]+\]\((docs/images/[\w.-]+\.png)\)", text)[1]
    assert (_docs.ROOT / picture).is_file()
    assert f'plt.savefig("{pathlib.Path(picture).name}"' in README_BLOCKS[0]  # the tour draws the picture it shows
