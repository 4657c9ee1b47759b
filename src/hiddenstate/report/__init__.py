"""The self-contained HTML report of hidden-state measurements (figures drawn with matplotlib).

It renders the data it is given and imports nothing from :mod:`hiddenstate.probe`,
:mod:`hiddenstate.train` or the application layer (:mod:`hiddenstate.pipelines.app` joins them).

* :mod:`~hiddenstate.report.page`: :func:`build_report` and :func:`render_html`, the HTML page;
  its style sheet and script are package data in ``static/``, inlined into each page.
* :mod:`~hiddenstate.report.plots`: one figure per measurement (loss, gates, gradient, memory,
  PCA, eigenvalues).
* :mod:`~hiddenstate.report.explorer`: the explorer card (any unit or gate on the text, hover,
  span matching), with the activations embedded at 8 bits.
* :mod:`~hiddenstate.report.textview`: text coloured by unit activation (and the colour map the
  explorer's script mirrors).
* :mod:`~hiddenstate.report.notebook`: what a notebook shows for the measurements (HTML tables,
  inline figures) and :class:`~hiddenstate.report.notebook.Report`, what :func:`build_report` returns.
* :mod:`~hiddenstate.report.figures`: the plumbing shared with training and the experiments
  (house style, Agg figures, PNG output).
"""

from hiddenstate.core.lazy import attach

__all__ = ["build_report", "render_html"]
# lazy, so that ``hiddenstate.report.figures`` (used by training and the experiments) does not load the page
__getattr__, __dir__ = attach(__name__, {name: "hiddenstate.report.page" for name in __all__}, globals())
