"""Report figures (planner.figures): the same bytes for the same inputs and no version stamp; the
shortcuts that make them cheap (in-view ticks, plain log labels, a minor grid drawn as one
collection, margins without tight_layout, fixed title places) draw what matplotlib's own way draws."""

from __future__ import annotations

import io

import matplotlib
import numpy as np
import pytest
from PIL import Image

from planner import figures
from planner.histogram import Histogram

_ROWS = [("no split", 496.34), ("split at 8,192", 577.07), ("fp8 weights on", 29.9),
         ("context limit 65,536 (rejects 1.0% of requests)", 23.92), ("infeasible", float("inf"))]
_POINTS = [(2.0, 77.74), (1.0, 143.8), (1.5, 77.74), (2.0, 77.74), (3.0, 77.74), (4.0, 77.74), (0.5, float("inf"))]


def _hist() -> Histogram:
    rng = np.random.default_rng(7)
    prompt = np.exp(rng.normal(6.5, 1.5, 3000)).astype(np.int64) + 1
    output = np.exp(rng.normal(5.0, 1.0, 3000)).astype(np.int64) + 1
    return Histogram.from_arrays(prompt, output)


_CALLS = {
    "traffic": lambda: figures.traffic_figure(_hist(), limit=131072, thresholds=[8192, 16384]),
    "cost": lambda: figures.cost_figure(_ROWS, title="t: cost per hour by split option and lever"),
    "target": lambda: figures.target_figure(_POINTS, xlabel="short: TTFT p99 limit (s)", title="t: target"),
    "forecast": lambda: figures.forecast_figure(["2027Q1", "2027Q2"], {"list": [1.5, 1.25], "gap": [1.0, None]},
                                                [8, 12], title="t: forecast"),
}


def _drawn(monkeypatch, draw) -> list:
    """The matplotlib Figures a figure function draws (and their PNGs), captured at _png."""
    seen = []
    png = figures._png
    monkeypatch.setattr(figures, "_png", lambda fig: seen.append((fig, png(fig))) or seen[-1][1])
    draw()
    return seen


@pytest.mark.parametrize("kind", sorted(_CALLS))
def test_a_figure_drawn_twice_is_the_same_bytes_an_opaque_png_without_a_version_stamp(kind):
    first, second = _CALLS[kind](), _CALLS[kind]()
    assert first == second
    image = Image.open(io.BytesIO(first))
    assert image.format == "PNG" and image.mode == "RGB"  # opaque: no alpha channel to store
    assert image.info.get("dpi") == pytest.approx((100, 100), abs=0.01)
    assert b"matplotlib" not in first.lower() and b"Software" not in first


@pytest.mark.parametrize("kind", sorted(_CALLS))
def test_dropping_out_of_view_ticks_draws_the_same_pixels(kind, monkeypatch):
    kept = _CALLS[kind]()
    monkeypatch.setattr(figures, "_InView", lambda inner: inner)  # every location the locator gives
    assert _CALLS[kind]() == kept


def test_in_view_ticks_are_the_ticks_matplotlib_draws(monkeypatch):
    [(fig, _)] = _drawn(monkeypatch, _CALLS["traffic"])
    counted = 0
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            inner = axis.get_major_locator().inner
            view = sorted(axis.get_view_interval())
            drawn = [t.get_loc() for t in axis._update_ticks()]  # the ones in view, of what was built
            assert list(axis.get_majorticklocs()) == drawn
            assert set(drawn) <= set(inner()) and all(view[0] <= x <= view[1] for x in drawn)
            counted += len(inner()) - len(drawn)
    assert counted > 0  # some were out of view, and not built


def test_log_axes_are_labelled_with_plain_numbers_and_carry_no_minor_ticks(monkeypatch):
    [(fig, _)] = _drawn(monkeypatch, _CALLS["traffic"])
    heatmap, colorbar, length = fig.axes[0], fig.axes[2], fig.axes[1]
    axes = {"prompt": heatmap.xaxis, "output": heatmap.yaxis, "requests": colorbar.yaxis, "total": length.xaxis}
    for axis in axes.values():
        assert axis.get_scale() == "log"
        assert len(axis.get_minorticklocs()) == 0
        labels = [t.get_text() for t in axis.get_ticklabels()]
        assert labels and all("$" not in s and "^" not in s for s in labels)  # no mathtext
    assert [t.get_text() for t in axes["total"].get_ticklabels()] == ["100", "1k", "10k", "100k"]
    assert [figures._plain(x) for x in (0.5, 1.0, 200.0, 1e3, 2e3, 1.5e4, 1e6, 2.5e7)] == [
        "0.5", "1", "200", "1k", "2k", "15k", "1M", "25M"]


@pytest.mark.parametrize(("lo", "hi", "ticks"), [
    (14.0, 131072.0, [100, 1000, 10000, 100000]),       # decades, where two or more are in view
    (1100.0, 4200.0, [2000, 3000, 4000]),               # no two decades, no two of 1-2-5: every multiple
    (150.0, 1100.0, [200, 500, 1000]),                  # one decade: 1-2-5
    (181.0, 215.0, [200]),                              # one length bin: what there is
])
def test_a_narrow_log_axis_still_gets_labelled_ticks(lo, hi, ticks):
    assert list(figures._LogTicks().tick_values(lo, hi)) == ticks


def test_a_constant_length_class_has_labels_on_both_log_axes(monkeypatch):
    hist = Histogram.from_arrays(np.array([1000] * 5 + [1200] * 3), np.array([200] * 8))
    [(fig, _)] = _drawn(monkeypatch, lambda: figures.traffic_figure(hist, limit=4096, thresholds=[2048]))
    heatmap, length = fig.axes[0], fig.axes[1]
    assert [t.get_text() for t in heatmap.xaxis.get_ticklabels()] == ["900", "1k"]
    assert [t.get_text() for t in heatmap.yaxis.get_ticklabels()] == ["200"]
    assert [t.get_text() for t in length.xaxis.get_ticklabels()] == ["2k", "3k", "4k"]
    [grid] = [c for c in length.collections if c.get_zorder() == 1.5]
    assert not {seg[0][0] for seg in grid.get_segments()} & {2000.0, 3000.0, 4000.0}  # each line drawn once


def test_the_length_panel_keeps_its_minor_grid_lines_as_one_collection(monkeypatch):
    [(fig, _)] = _drawn(monkeypatch, _CALLS["traffic"])
    length = fig.axes[1]
    lo, hi = length.get_xlim()
    [grid] = [c for c in length.collections if c.get_zorder() == 1.5]
    xs = sorted(seg[0][0] for seg in grid.get_segments())
    expected = [k * 10.0**d for d in range(-1, 8) for k in range(2, 10) if lo < k * 10.0**d < hi]
    assert xs == pytest.approx(expected) and len(xs) > 10  # none on a decade: those are labelled ticks


def test_cost_figure_margins_hold_the_longest_name_as_tight_layout_did(monkeypatch):
    [(fig, _)] = _drawn(monkeypatch, _CALLS["cost"])
    [ax] = fig.axes
    renderer = fig.canvas.get_renderer()
    names = [t.get_window_extent(renderer) for t in ax.get_yticklabels()]
    pad_px = figures._PAD_IN * fig.dpi
    assert min(b.x0 for b in names) == pytest.approx(pad_px, abs=1.0)  # tight_layout's padding, to the pixel
    assert [t.get_text() for t in ax.get_yticklabels()] == [name for name, cost in _ROWS if np.isfinite(cost)]
    height = fig.canvas.get_width_height()[1]
    for box in [ax.title.get_window_extent(renderer), ax.xaxis.label.get_window_extent(renderer)]:
        assert box.y0 >= 0 and box.y1 <= height  # title and axis label inside the figure
    assert ax.xaxis.get_tightbbox(renderer).y0 >= pad_px - 1.0


def test_target_figure_has_a_tick_at_each_target_tried_and_each_cost_written_once(monkeypatch):
    [(fig, _)] = _drawn(monkeypatch, _CALLS["target"])
    [ax] = fig.axes
    assert list(ax.get_xticks()) == [1.0, 1.5, 2.0, 3.0, 4.0]  # the infeasible 0.5 left out
    assert [t.get_text() for t in ax.texts] == ["$144", "$78", "$78", "$78", "$78"]
    assert ax.get_ylim() == pytest.approx((0, 143.8 * 1.2))
    # multiples of the stated targets (a report's TTFT sweep, every band's limit at once) are ticked so
    [(fig, _)] = _drawn(monkeypatch, lambda: figures.target_figure(_POINTS, xlabel="x", title="t", multiples=True))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["×1", "×1.5", "×2", "×3", "×4"]


def test_titles_sit_where_matplotlib_places_them(monkeypatch):
    redraw = figures._png
    for kind in ("traffic", "cost", "target"):
        for fig, png in _drawn(monkeypatch, _CALLS[kind]):
            for ax in fig.axes:
                ax._autotitlepos = True  # matplotlib's own placement, which lays the tick labels out again
            with matplotlib.rc_context(figures._RC):
                assert redraw(fig) == png, kind


def test_every_request_of_one_length_draws_a_step_from_0_to_1(monkeypatch):
    """One cell (seed 000's 2,000 + 300 tokens): the total-length curve was a single point, which
    draws nothing; it rises from 0 to 1 at 2,300 on a 0-1 axis."""
    one = Histogram.from_arrays(np.full(10, 2000), np.full(10, 300))
    [(fig, _)] = _drawn(monkeypatch, lambda: figures.traffic_figure(one, limit=8192, thresholds=[4096]))
    [ax] = [ax for ax in fig.axes if ax.get_title() == "total length"]
    [curve] = [line for line in ax.get_lines() if line.get_color() == "tab:blue"]
    assert list(curve.get_ydata()) == [0.0, 1.0] and list(curve.get_xdata()) == [2300.0, 2300.0]
    assert ax.get_ylim() == (0.0, 1.02)


def test_a_cost_figure_widens_until_its_title_fits(monkeypatch):
    """A long plan name leaves the bars too narrow for the title centred over them (70b_enterprise's
    title ran off the right edge): the figure widens instead."""
    rows = [("context limit 16,384 (rejects 21.9% of requests, against 8.3% at 32,768)", 51.8), ("no split", 111.0)]
    [(fig, _)] = _drawn(monkeypatch, lambda: figures.cost_figure(rows, title="70b_enterprise: cost per hour by split "
                                                                            "option and lever"))
    title = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    assert fig.get_size_inches()[0] > 8 and title.x0 >= 0 and title.x1 <= fig.bbox.width


def test_the_ttft_sweep_axis_names_every_band_s_stated_limit():
    """The sweep scales every band's TTFT limit at once: the axis is the multiple, and its label names each
    stated limit, with its statistic where the bands' differ (a p90 short band beside a p99 long one read
    "every band's TTFT p90 limit")."""
    from planner.report import ttft_sweep_axis
    from planner.targets import Band, Target

    short, long_ = Band("short", 0, 8192, ttft=Target("p99", 2.0)), Band("long", 8192, None, ttft=Target("p99", 15.0))
    assert ttft_sweep_axis([short, long_]) == "TTFT p99 limits, × the stated (short 2 s, long 15 s)"
    mixed = Band("short", 0, 8192, ttft=Target("p90", 1.0))
    assert ttft_sweep_axis([mixed, long_]) == "TTFT limits, × the stated (short p90 1 s, long p99 15 s)"
    assert ttft_sweep_axis([Band("short", 0, 8192), long_]) == "TTFT p99 limits, × the stated (long 15 s)"
