"""What the PNGs draw (issue 11): identical busbw series stay distinguishable, the timeline says which ranks it
shows and what its bars are, and the links plot keeps coinciding links apart by dash pattern."""
from types import SimpleNamespace

import pytest

from simcomm.hardware import build_cluster
from simcomm.report import plots
from simcomm.session import Session
from simcomm.workloads import run_perf


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, kept open for inspection."""
    kept = []
    save = plots._save

    def keep(fig, plt, path, text=None):
        kept.append(fig)  # _save closes it, which leaves its artists to read
        return save(fig, plt, path, text)
    monkeypatch.setattr(plots, "_save", keep)
    return kept


def _row(requested, size, busbw):
    return SimpleNamespace(collective="all_reduce", requested=requested, size=size, busbw=busbw)


def test_identical_busbw_series_get_distinct_markers_and_dashes(figures, tmp_path):
    sizes = [1 << 10, 1 << 20, 1 << 30]
    rows = [_row(name, s, 1e9 * s.bit_length()) for name in ("ring", "tree", "nvls", "auto") for s in sizes]
    plots.plot_busbw(rows, tmp_path / "busbw.png")
    (ax,) = figures[0].axes
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == [f"all_reduce ({n})" for n in ("ring", "tree", "nvls", "auto")]
    assert len({tuple(ln.get_ydata()) for ln in lines}) == 1  # the four series coincide...
    assert len({ln.get_marker() for ln in lines}) == 4  # ...and each is still told apart
    assert len({str(ln.get_linestyle()) for ln in lines}) == 4
    assert [ln.get_zorder() for ln in lines] == sorted(ln.get_zorder() for ln in lines)
    widths = [ln.get_linewidth() for ln in lines]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]  # later, thinner ones on top


def _activities(ranks):
    return [SimpleNamespace(rank=r, kind=kind, start=1e-6 * r, end=1e-6 * r + 5e-6)
            for r in range(ranks) for kind in ("collective", "send", "hbm")]


@pytest.mark.parametrize("ranks, shown", [(40, "(ranks 0-31 of 40 shown)"), (8, "(all 8 ranks)")])
def test_timeline_says_which_ranks_it_shows(figures, tmp_path, ranks, shown):
    cluster = SimpleNamespace(name="5x hgx-h100")
    plots.plot_timeline(_activities(ranks), cluster, tmp_path / "timeline.png", max_ranks=32)
    (ax,) = figures[0].axes
    assert ax.get_title() == f"timeline (5x hgx-h100) {shown}"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [f"rank {r}" for r in range(min(ranks, 32))]
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "bars: what each rank\nwas doing"
    assert _apart(figures[0], ax, legend)
    assert [t.get_text() for t in legend.get_texts()] == \
        ["collective (call to completion)", "transfers sent", "HBM (reductions)"]


def test_links_plot_gives_each_curve_its_own_dash_pattern(figures, tmp_path):
    """Curves at the same level stay apart by dash pattern; links whose load is the same at every moment are one
    curve (2 nodes, a ring: the NVSwitch ports and the NIC links)."""
    from simcomm.report.links import link_usage
    c = build_cluster("hgx-h100", nodes=2)
    session = Session(c, detail="flows")
    run_perf(session, ["all_reduce"], [1 << 24], algorithms=["ring"])
    plots.plot_links(session.sim.recorder.link_loads, c, tmp_path / "links.png", top=6)
    top = figures[0].axes[0]
    steps = [p for p in top.patches if p.get_label().endswith("%)")]
    assert len(steps) >= 2 and len({str(p.get_linestyle()) for p in steps}) == len(steps)
    assert [p.get_zorder() for p in steps] == sorted(p.get_zorder() for p in steps)
    counted = sum(1 + int(p.get_label().split(" and ")[1].split()[0]) if " and " in p.get_label() else 1
                  for p in steps)
    assert counted == len(link_usage(session.sim.recorder.link_loads, c))


def _apart(fig, ax, legend) -> bool:
    """The legend is drawn beside the axes, not over the data."""
    fig.canvas.draw()
    box, area = legend.get_window_extent(), ax.get_window_extent()
    return box.x0 >= area.x1 or box.y0 >= area.y1 or box.x1 <= area.x0 or box.y1 <= area.y0


def test_links_plot_labels_every_link_it_draws_beside_the_plot(figures, tmp_path):
    """Issue 25: on one H100 box the 16 NVSwitch links of a ring all-reduce carry the same load; the legend named 8
    of them and covered the curves. Links alike are one curve whose label counts them, beside the plot."""
    c = build_cluster("hgx-h100")
    session = Session(c, detail="flows")
    run_perf(session, ["all_reduce"], [1 << 24], algorithms=["ring"])
    plots.plot_links(session.sim.recorder.link_loads, c, tmp_path / "links.png")
    top = figures[0].axes[0]
    labels = [t.get_text() for t in top.get_legend().get_texts()]
    counted = sum(1 + int(x.split(" and ")[1].split()[0]) if " and " in x else 1 for x in labels)
    assert counted == 16 and labels == ["n0.gpu0->n0.nvswitch and 15 more links alike (peak 100.0%)"]
    assert _apart(figures[0], top, top.get_legend())
