"""The documentation as the tests read it: the README (the front page) and every page of docs/.

``pages()`` lists them; ``examples(path)`` gives a page's runnable code in order: each ```python
block, and each figure the build draws (a ``.. plot::`` directive inside an ```{eval-rst} block, or a
```{plot} block), with its directive options and indentation removed. ``text()`` is all of it,
for the tests that look for what the documentation says (its commands, its examples).
"""
from __future__ import annotations

import pathlib
import re
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^```(?P<lang>python|\{plot\}|\{eval-rst\})[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
_PLOT = re.compile(r"^\.\. plot::[ \t]*\n(?P<body>(?:[ \t]+.*\n|[ \t]*\n)*)", re.M)


def pages() -> list[pathlib.Path]:
    """The README and every Markdown page under docs/, in a fixed order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _options_off(body: str) -> str:
    """A directive's body without its leading ``:option: value`` lines."""
    lines = body.split("\n")
    while lines and re.match(r"^\s*:[\w-]+:", lines[0]):
        lines.pop(0)
    return "\n".join(lines).strip("\n") + "\n"


def examples(path: pathlib.Path) -> list[tuple[str, str]]:
    """``[(kind, code), ...]`` of a page: kind ``"python"`` for a code block, ``"plot"`` for a figure."""
    out = []
    for m in _FENCE.finditer(path.read_text(encoding="utf-8")):
        lang, body = m["lang"], m["body"]
        if lang == "python":
            out.append(("python", body))
        elif lang == "{plot}":
            out.append(("plot", _options_off(body)))
        else:
            out += [("plot", _options_off(textwrap.dedent(p["body"]))) for p in _PLOT.finditer(body)]
    return out


def text() -> str:
    """Every page's text, the README first."""
    return "\n".join(p.read_text(encoding="utf-8") for p in pages())
