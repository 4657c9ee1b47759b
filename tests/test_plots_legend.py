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


def test_gradient_legend_lies_below_the_axes_not_over_the_curves():
    from hiddenstate.report.plots import gradient_figure

    lags = np.arange(100)
    curves = {f"curve {i}: a long label as the report writes them, layer {i}": (lags, np.exp(-lags / (10 + 5 * i)))
              for i in range(4)}
    fig = gradient_figure(curves, {"σ_max(W_hh)^k = 0.90^k": (lags, 0.9 ** lags.astype(float))})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1
    box, axes_box = fig.legends[0].get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.y1 <= axes_box.y0  # entirely below the plotting area
    assert len(fig.legends[0].get_texts()) == 5
    assert box.y0 >= 0 and box.x0 >= 0 and box.x1 <= fig.bbox.x1  # and inside the figure
