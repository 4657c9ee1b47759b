"""Sphinx configuration of the hiddenstate documentation (``make docs``).

The pages are Markdown (MyST); the API reference is generated from the numpydoc docstrings; the
figures of the Learn pages are drawn at build time by matplotlib's plot directive, from the code
shown on the page. Nothing is fetched: the build runs offline.
"""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the checkout's package, also when it is not installed
os.environ.setdefault("MPLBACKEND", "Agg")

import hiddenstate  # noqa: E402

project = "hiddenstate"
author = "the hiddenstate developers"
copyright = "2026, the hiddenstate developers"
version = release = hiddenstate.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "matplotlib.sphinxext.plot_directive",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "results.json"]
root_doc = "index"

# MyST: $...$ math, ::: fences, anchors for the headings down to ### (links like page.md#a-heading)
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# API reference: the docstrings as written (numpydoc), members in source order, no stub pages
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_validation_checks = set()  # the docstrings are linted by tests/test_lint.py
# numpydoc turns a References section into citations that the text need not cite
suppress_warnings = ["ref.citation"]

# Figures: the code of each ```{plot} block runs at build time; the page shows it above its figure
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 90)]
plot_rcparams = {"figure.figsize": (6.4, 3.6), "savefig.bbox": "tight"}
# the figures' code runs in an empty folder of its own, removed after the build, never in the checkout
plot_working_directory = tempfile.mkdtemp(prefix="hiddenstate-docs-")
atexit.register(shutil.rmtree, plot_working_directory, ignore_errors=True)

html_theme = "furo"
html_title = f"hiddenstate {release}"
html_static_path = []
