"""The self-contained HTML report of hidden-state measurements (figures drawn with matplotlib)."""

from hiddenstate.report.page import build_report, render_html

__all__ = ["build_report", "render_html"]
