"""Report figures as PNG bytes (matplotlib's Agg backend), byte-identical for identical inputs.

Each function draws one figure and returns its PNG; planner.worker_pool runs them, in worker
processes while a plan is computed, and the report writers write the bytes beside the report."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from planner.histogram import LENGTH_EDGES, Histogram

_SAVE = {"dpi": 100, "metadata": {"Software": None}}  # no version stamp: reports must not drift


def _png(fig) -> bytes:
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", **_SAVE)
        return buffer.getvalue()
    finally:
        plt.close(fig)


def traffic_figure(hist: Histogram, *, limit: int, thresholds: list[int]) -> bytes:
    """Joint prompt x output histogram (log bins, exact counts) and the total-length distribution."""
    # Fixed margins rather than tight_layout, which lays the figure out twice (half the time).
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"wspace": 0.3})
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
    ax1.set_title("requests per (prompt, output) bin")
    if grid[o_lo:o_hi, p_lo:p_hi].any():
        edges_p, edges_o = LENGTH_EDGES[p_lo : p_hi + 1], LENGTH_EDGES[o_lo : o_hi + 1]
        masked = np.ma.masked_equal(grid[o_lo:o_hi, p_lo:p_hi], 0)
        mesh = ax1.pcolormesh(edges_p, edges_o, masked, cmap="viridis", norm=matplotlib.colors.LogNorm())
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        fig.colorbar(mesh, ax=ax1, label="requests")
    else:  # every request has a 0-token prompt or output: nothing to place on log axes
        ax1.text(0.5, 0.5, "no request with both lengths > 0", ha="center", va="center", transform=ax1.transAxes)
    totals = (hist.sum_prompt + hist.sum_output) / hist.count
    order = np.argsort(totals)
    cdf = np.cumsum(hist.count[order]) / hist.requests
    ax2.step(totals[order], cdf, where="post", color="tab:blue")
    ax2.set_xscale("log")
    ax2.set_xlabel("prompt + output tokens (cell means)")
    ax2.set_ylabel("share of requests at or below")
    ax2.set_title("total length")
    for t in thresholds:
        ax2.axvline(t, color="tab:orange", linestyle="--", linewidth=1)
    ax2.axvline(limit, color="tab:red", linewidth=1)
    ax2.grid(True, which="both", alpha=0.3)
    return _png(fig)


def cost_figure(rows: list[tuple[str, float]], *, title: str) -> bytes:
    """Horizontal bars of cost per hour for a set of named plans (infeasible ones omitted)."""
    rows = [(name, cost) for name, cost in rows if np.isfinite(cost)]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    names = [name for name, _ in rows]
    ax.barh(range(len(rows)), [c for _, c in rows], color="tab:blue")
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()
    ax.set_xlabel("cost per hour (USD)")
    ax.set_title(title)
    for i, (_, c) in enumerate(rows):
        ax.text(c, i, f" ${c:,.2f}", va="center")
    ax.set_xlim(0, max((c for _, c in rows), default=1) * 1.25)
    fig.tight_layout()
    return _png(fig)


def target_figure(points: list[tuple[float, float]], *, xlabel: str, title: str) -> bytes:
    """Cost per hour against a latency target (the plan's own target marked): what a stricter
    target costs. Infeasible points are left out."""
    points = sorted((x, c) for x, c in points if np.isfinite(c))
    fig, ax = plt.subplots(figsize=(7, 4))
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.13, top=0.9)
    ax.plot([x for x, _ in points], [c for _, c in points], marker="o", color="tab:blue")
    for x, c in points:
        ax.annotate(f"${c:,.0f}", (x, c), textcoords="offset points", xytext=(0, 7), ha="center", fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("cost per hour (USD)")
    ax.set_ylim(bottom=0, top=max((c for _, c in points), default=1) * 1.2)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return _png(fig)


def forecast_figure(quarters: list[str], cpm: dict[str, list[float | None]], gpus: list[int], *,
                    title: str) -> bytes:
    """Cost per million tokens (one line per named series; a series with a gap is left out) and GPU count by quarter."""
    fig, ax1 = plt.subplots(figsize=(8, 4.8))
    x = np.arange(len(quarters))
    for (label, values), marker in zip(cpm.items(), "os^dv", strict=False):
        if all(v is not None for v in values):
            ax1.plot(x, values, marker=marker, label=label)
    ax1.set_ylabel("USD per million tokens")
    ax1.set_xticks(x, quarters)
    ax1.set_ylim(bottom=0)
    ax2 = ax1.twinx()
    ax2.bar(x, gpus, alpha=0.25, color="tab:gray", label="GPUs")
    ax2.set_ylabel("GPUs")
    ax2.set_ylim(0, max(gpus) * 1.3 if gpus else 1)
    lines = ax1.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax1.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    fig.legend(lines, labels, loc="lower center", ncol=3, fontsize="small", frameon=False)
    ax1.set_title(title)
    fig.subplots_adjust(left=0.1, right=0.9, top=0.92, bottom=0.1 + 0.045 * ((len(labels) + 2) // 3))
    return _png(fig)
