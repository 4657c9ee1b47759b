"""The PCA figure's legend: every marker at a legible size, the fixed point's star not drawn huge."""
import numpy as np

from hiddenstate.probe.fixedpoints import FixedPoint
from hiddenstate.probe.pca import pca
from hiddenstate.report.plots import pca_figure


def test_pca_legend_markers_have_moderate_sizes_inside_the_axes():
    rng = np.random.default_rng(0)
    states = rng.normal(size=(60, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.2])
    res = pca(states)
    text = ("ab, c\n" * 10)[:60]
    star = FixedPoint(h=states.max(axis=0), q=0.0, eigenvalues=np.full(5, 0.5 + 0j), n_unstable=0, kind="stable",
                      jacobian=np.eye(5) * 0.5)  # at the edge of the visited states
    fig = pca_figure(res, [star], text=text)
    ax = fig.axes[0]
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert "stable fixed point" in labels and any(lab.startswith("lower-case letter") for lab in labels)
    sizes = {lab: float(h.get_sizes()[0]) for lab, h in zip(labels, legend.legend_handles)}
    assert sizes["stable fixed point"] == 60.0  # the plot's star is 260; markerscale=2 made the legend's 520
    assert all(s == 24.0 for lab, s in sizes.items() if lab != "stable fixed point")
    # the star lies inside the axes with room to spare (margins)
    x, y = res.transform(star.h)[:2]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 < x < x1 and y0 < y < y1
    assert min(x1 - x, y1 - y) > 0.03 * min(x1 - x0, y1 - y0)
    import matplotlib.pyplot as plt

    plt.close(fig)
