"""Report figures as PNG bytes (matplotlib's Agg backend), byte-identical for identical inputs.

Each function draws one figure and returns its PNG; planner.worker_pool runs them, in worker
processes while a plan is computed, and the report writers write the bytes beside the report."""

from __future__ import annotations

import io

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, Locator, LogLocator, MaxNLocator, NullLocator
from matplotlib.transforms import offset_copy
from PIL import Image

from planner.histogram import LENGTH_EDGES, Histogram
from planner.units import rounded_usd, usd_text

_DPI = 100
# A title placed at the axes' top, where matplotlib's automatic placement puts it when no tick
# labels or axis offset sit above the axes (none do here): placing it lays out every tick label
# of the axes once more.
_TITLE_Y = 1.0
# zlib level 3 rather than Pillow's 6: a third less encoding time; with the alpha channel dropped
# (every figure is opaque) the shipped reports' figures take 3% fewer bytes than level 6 gave them with it.
_PNG_LEVEL = 3

# Fixed margins (inches) at matplotlib's default sizes, as tight_layout found them: its padding
# (1.08 font sizes), a tick and its gap to the label (3.5 + 3.5 points), a title line above, a row of
# tick labels and an axis label below, room on the right for the last tick label's overhang.
_PAD_IN = 1.08 * 10 / 72
_TICK_IN = 7 / 72
_TOP_IN = 0.37
_BOTTOM_IN = 0.59
_RIGHT_IN = 0.2


# Glyphs rasterised as the font draws them, not through FreeType's autohinter (matplotlib's
# default): text is most of every figure's drawing, and the autohinter a sixth of the whole; at
# 100 dpi the letters differ by a shade at their edges.
_RC = {"text.hinting": "no_hinting"}
_DRAWING = matplotlib.rc_context(_RC)


def _coarse_ticks() -> MaxNLocator:
    """A cost axis's locator where every mark carries its own cost label: about five ticks, not
    matplotlib's eight to ten, each tick being seven artists to build and a label to lay out."""
    return MaxNLocator(nbins=5, steps=[1, 2, 5, 10])  # round steps: 200, not 150


def _figure(**kwargs) -> Figure:
    """A Figure on its own Agg canvas: no pyplot, so no figure manager to register and close."""
    fig = Figure(dpi=_DPI, **kwargs)
    FigureCanvasAgg(fig)
    return fig


class _InView(Locator):
    """Another locator's ticks less those outside the view: matplotlib builds a tick (seven artists)
    for every location its locator returns, one step past each end included, then draws only
    those in view. The same ticks are drawn."""

    def __init__(self, inner: Locator):
        self.inner = inner

    def __call__(self):
        locs = np.asarray(self.inner())
        transform = self.axis.get_transform()
        lo, hi = sorted(transform.transform(np.asarray(self.axis.get_view_interval(), dtype=float)))
        with np.errstate(divide="ignore", invalid="ignore"):
            at = transform.transform(locs.astype(float))
        slack = 1e-10 * (hi - lo)  # matplotlib's own closeness test when it drops the out-of-view ones
        return locs[(at >= lo - slack) & (at <= hi + slack)]

    # Autoscaling asks the axis's locator for its limits: the inner one's answer (a log locator's
    # keeps them positive).
    def nonsingular(self, v0, v1):
        return self.inner.nonsingular(v0, v1)

    def view_limits(self, vmin, vmax):
        return self.inner.view_limits(vmin, vmax)


def _png(fig: Figure) -> bytes:
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(_InView(axis.get_major_locator()))
    fig.canvas.draw()
    rgba = Image.frombuffer("RGBA", fig.canvas.get_width_height(), fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    # Pillow writes no version stamp (savefig's, removed, had to be): the bytes depend on the figure alone.
    rgba.convert("RGB").save(buffer, format="png", compress_level=_PNG_LEVEL, dpi=(_DPI, _DPI))
    return buffer.getvalue()


@_DRAWING
def traffic_figure(hist: Histogram, *, limit: int, thresholds: list[int]) -> bytes:
    """Joint prompt x output histogram (log bins, exact counts) and the total-length distribution."""
    # Fixed margins rather than tight_layout, which lays the figure out twice (half the time).
    fig = _figure(figsize=(11, 4.2))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"wspace": 0.3})
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.92)
    n_bins = len(LENGTH_EDGES) - 1
    grid = np.zeros((n_bins, n_bins))
    np.add.at(grid, (hist.output_bin, hist.prompt_bin), hist.count)
    used_p = np.nonzero(grid.sum(axis=0))[0]
    used_o = np.nonzero(grid.sum(axis=1))[0]
    p_lo, p_hi = max(int(used_p.min()), 1), int(used_p.max()) + 1
    o_lo, o_hi = max(int(used_o.min()), 1), int(used_o.max()) + 1
    ax1.set_xlabel("prompt tokens")
    ax1.set_ylabel("output tokens")
    ax1.set_title("requests per (prompt, output) bin", y=_TITLE_Y)
    if grid[o_lo:o_hi, p_lo:p_hi].any():
        edges_p, edges_o = LENGTH_EDGES[p_lo : p_hi + 1], LENGTH_EDGES[o_lo : o_hi + 1]
        masked = np.ma.masked_equal(grid[o_lo:o_hi, p_lo:p_hi], 0)
        mesh = ax1.pcolormesh(edges_p, edges_o, masked, cmap="viridis", norm=matplotlib.colors.LogNorm())
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        _plain_log_ticks(ax1.xaxis, ax1.yaxis)
        bar = fig.colorbar(mesh, ax=ax1, label="requests")
        _plain_log_ticks(bar.ax.yaxis)
    else:  # every request has a 0-token prompt or output: nothing to place on log axes
        ax1.text(0.5, 0.5, "no request with both lengths > 0", ha="center", va="center", transform=ax1.transAxes)
    totals = (hist.sum_prompt + hist.sum_output) / hist.count
    order = np.argsort(totals, kind="stable")  # cells of equal mean drawn in one order on every CPU
    # From 0 at the shortest length: a step of one point (every request the same length) draws nothing
    cdf = np.concatenate([[0.0], np.cumsum(hist.count[order]) / hist.requests])
    ax2.step(np.concatenate([totals[order][:1], totals[order]]), cdf, where="post", color="tab:blue")
    ax2.set_ylim(0.0, 1.02)
    ax2.set_xscale("log")
    _plain_log_ticks(ax2.xaxis)
    ax2.set_xlabel("prompt + output tokens (cell means)")
    ax2.set_ylabel("share of requests at or below")
    ax2.set_title("total length", y=_TITLE_Y)
    for t in thresholds:
        ax2.axvline(t, color="tab:orange", linestyle="--", linewidth=1)
    ax2.axvline(limit, color="tab:red", linewidth=1)
    ax2.grid(True, alpha=0.3)
    _minor_log_grid(ax2, alpha=0.3)
    return _png(fig)


def _plain(value: float, _pos=None) -> str:
    """A log axis's tick label as a plain number, 1k rather than mathtext 10^3 (a tenth of the
    cost to lay out): k for thousands and M for millions keep every label four characters at most,
    so a million-token axis's decades do not run into each other."""
    for unit, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= unit:
            return f"{value / unit:g}{suffix}"
    return f"{value:g}"


class _LogTicks(LogLocator):
    """A log axis's ticks, every one labelled: the decades in view where two or more are, else
    1-2-5 in each decade, else every integer multiple, so that a narrow range (one length bin, a
    class of constant lengths) still shows two labels or more, as matplotlib's labelled minor
    ticks gave it. Only those in view: a tick outside is never drawn."""

    def tick_values(self, vmin, vmax):
        vmin, vmax = sorted((vmin, vmax))
        if not vmin > 0:
            return super().tick_values(vmin, vmax)
        decades = 10.0 ** np.arange(np.floor(np.log10(vmin)), np.ceil(np.log10(vmax)) + 1)
        for subs in ((1,), (1, 2, 5), range(1, 10)):
            locs = (decades[:, None] * np.asarray(subs, dtype=float)).ravel()
            locs = locs[(locs >= vmin * (1 - 1e-10)) & (locs <= vmax * (1 + 1e-10))]
            if len(locs) >= 2:
                break
        return locs


def _plain_log_ticks(*axes) -> None:
    """Labelled ticks only (_LogTicks, _plain), no minor ticks: each tick is seven artists built
    per draw, and the unlabelled minor ones were most of a log figure's drawing time."""
    for axis in axes:
        axis.set_major_locator(_LogTicks())
        axis.set_major_formatter(FuncFormatter(_plain))
        axis.set_minor_locator(NullLocator())


def _minor_log_grid(ax, *, alpha: float) -> None:
    """The grid lines a log x axis's minor ticks would draw (2..9 times each decade, less those
    on a labelled tick's own line), as one collection: the lines a reader reads values against,
    without the per-tick artists."""
    lo, hi = ax.get_xlim()
    decades = 10.0 ** np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
    xs = (decades[:, None] * np.arange(2, 10)).ravel()
    xs = xs[(xs > lo) & (xs < hi) & ~np.isin(xs, ax.xaxis.get_major_locator().tick_values(lo, hi))]
    rc = matplotlib.rcParams
    ax.vlines(xs, 0, 1, transform=ax.get_xaxis_transform(), colors=rc["grid.color"], alpha=alpha,
              linewidths=rc["grid.linewidth"], zorder=1.5)
    ax.set_xlim(lo, hi)


@_DRAWING
def cost_figure(rows: list[tuple[str, float]], *, title: str, chosen: str | None = None) -> bytes:
    """Horizontal bars of cost per hour for a set of named plans (infeasible ones omitted; the report
    names them), the `chosen` one (the plan's own row) marked: among levers that change the service
    (a context limit that rejects requests) the cheapest bar need not be the decision."""
    rows = [(name, cost) for name, cost in rows if np.isfinite(cost)]
    width_in, height_in = 8, 0.45 * len(rows) + 1.2
    fig = _figure(figsize=(width_in, height_in))
    ax = fig.subplots()
    names = [f"{name} (the plan)" if name == chosen else name for name, _ in rows]
    ax.barh(range(len(rows)), [c for _, c in rows],
            color=["tab:orange" if name == chosen else "tab:blue" for name, _ in rows])
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()
    ax.set_xlabel("cost per hour (USD)")
    ax.set_title(title, y=_TITLE_Y)
    for i, (_, c) in enumerate(rows):
        ax.text(c, i, f" {usd_text(c)}", va="center")
    ax.set_xlim(0, max((c for _, c in rows), default=1) * 1.25)
    ax.xaxis.set_major_locator(_coarse_ticks())  # each bar's cost is written beside it
    # Margins from the widest plan name instead of tight_layout, which draws the figure once more
    # to find them: the other sides hold one line of text each, the same height in every figure.
    renderer = fig.canvas.get_renderer()
    names_px = max((label.get_window_extent(renderer).width for label in ax.get_yticklabels()), default=0.0)
    left_in = (names_px / fig.dpi) + _TICK_IN + _PAD_IN
    # The title is centred over the bars: long plan names leave them too narrow for it, so the figure
    # widens until it fits (70b_enterprise's title ran off the right edge at 8 inches).
    title_in = ax.title.get_window_extent(renderer).width / fig.dpi
    if left_in + title_in + _RIGHT_IN > width_in:
        width_in = left_in + title_in + _RIGHT_IN
        fig.set_size_inches(width_in, height_in)
    fig.subplots_adjust(left=left_in / width_in, right=1 - _RIGHT_IN / width_in,
                        bottom=_BOTTOM_IN / height_in, top=1 - _TOP_IN / height_in)
    return _png(fig)


@_DRAWING
def target_figure(points: list[tuple[float, float]], *, xlabel: str, title: str, stated: float | None = None,
                  multiples: bool = False) -> bytes:
    """Cost per hour against a latency target (the plan's own target among the points, a tick at
    each target tried, the `stated` one's point marked): what a stricter target costs. Infeasible
    points are left out (the report names them). multiples: the points' x are multiples of the stated
    targets, ticked ×0.5, ×1, ..."""
    # A set: a point given twice (the plan's, and a sweep's at its own target) is drawn once.
    points = sorted({(x, c) for x, c in points if np.isfinite(c)})
    fig = _figure(figsize=(7, 4))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.13, top=0.9)
    ax.plot([x for x, _ in points], [c for _, c in points], marker="o", color="tab:blue")
    mine = [(x, c) for x, c in points if x == stated]
    if mine:  # the target as the scenario states it: the plan
        ax.plot([x for x, _ in mine], [c for _, c in mine], marker="o", markersize=9, linestyle="none",
                color="tab:orange", zorder=3)
    above = offset_copy(ax.transData, fig=fig, y=7, units="points")  # annotate's offset, as a plain Text
    for x, c in points:
        ax.text(x, c, f"${rounded_usd(c, 0):,}", transform=above, ha="center", fontsize="small")
    if points:
        ticks = sorted({x for x, _ in points})
        ax.set_xticks(ticks, [f"×{x:g}" for x in ticks] if multiples else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("cost per hour (USD)")
    ax.set_ylim(bottom=0, top=max((c for _, c in points), default=1) * 1.2)
    ax.yaxis.set_major_locator(_coarse_ticks())  # each point's cost is written on it
    ax.set_title(title, y=_TITLE_Y)
    ax.grid(True, alpha=0.3)
    return _png(fig)


@_DRAWING
def forecast_figure(quarters: list[str], cpm: dict[str, list[float | None]], gpus: list[int], *,
                    title: str) -> bytes:
    """Cost per million tokens (one line per named series; a series with a gap is left out) and GPUs paid
    for by quarter (reserved GPUs a quarter leaves idle are paid too)."""
    fig = _figure(figsize=(8, 4.8))
    ax1 = fig.subplots()
    x = np.arange(len(quarters))
    for (label, values), marker in zip(cpm.items(), "os^dv", strict=False):
        if all(v is not None for v in values):
            ax1.plot(x, values, marker=marker, label=label)
    ax1.set_ylabel("USD per million tokens")
    ax1.set_xticks(x, quarters)
    ax1.set_ylim(bottom=0)
    ax2 = ax1.twinx()
    ax2.bar(x, gpus, alpha=0.25, color="tab:gray", label="GPUs paid for")
    ax2.set_ylabel("GPUs paid for (idle reserved ones included)")
    ax2.set_ylim(0, max(gpus) * 1.3 if gpus else 1)
    lines = ax1.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax1.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    fig.legend(lines, labels, loc="lower center", ncol=3, fontsize="small", frameon=False)
    ax1.set_title(title)
    fig.subplots_adjust(left=0.1, right=0.9, top=0.92, bottom=0.1 + 0.045 * ((len(labels) + 2) // 3))
    return _png(fig)
