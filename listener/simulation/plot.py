"""A PNG of a comparison: queue depth, threads and cumulative transactions over simulated time.

matplotlib is the optional ``plot`` extra, imported only here and only when a chart is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cloudqueue.listener.imports import import_extra
from cloudqueue.listener.simulation.report import PolicyResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SERIES = ("queue depth", "threads", "cumulative transactions")
"""The three panels, top to bottom (each panel's y label)."""


def require_plot_extra() -> None:
    """MissingExtraError now, when ``--plot`` cannot draw: before a long tuning, not after."""
    import_extra("matplotlib.figure", extra="plot", needed_by="--plot")


def _pyplot_free_figure() -> Figure:
    figures = import_extra("matplotlib.figure", extra="plot", needed_by="--plot")
    # A Figure without pyplot: no GUI backend, no global state, safe in any thread.
    figure: Figure = figures.Figure(figsize=(10, 8), layout="constrained")
    return figure


def comparison_figure(results: Sequence[PolicyResult]) -> Figure:
    """One panel per series, one line per policy, hours on the x axis."""
    figure = _pyplot_free_figure()
    axes = figure.subplots(len(SERIES), 1, sharex=True)
    for order, result in enumerate(results):
        # Earlier policies drawn thicker, so a line hidden under a later one still shows.
        width = max(0.8, 3.0 - 0.5 * order)
        hours = [sample.time_s / 3600 for sample in result.samples]
        values = (
            [sample.depth for sample in result.samples],
            [sample.threads for sample in result.samples],
            [sample.transactions for sample in result.samples],
        )
        for axis, series in zip(axes, values, strict=True):
            axis.step(hours, series, where="post", label=result.policy, linewidth=width)
    for axis, label in zip(axes, SERIES, strict=True):
        axis.set_ylabel(label)
        axis.grid(visible=True, alpha=0.3)
    axes[0].legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("simulated hours")
    figure.suptitle("cloudqueue simulate")
    return figure


def save_plot(results: Sequence[PolicyResult], path: Path) -> Figure:
    """Draw the comparison and write it as a PNG; returns the figure (tests look inside)."""
    figure = comparison_figure(results)
    figure.savefig(path, format="png", dpi=100)
    return figure


def save_tradeoff(points: Sequence[tuple[float, float]], path: Path) -> Figure:
    """Monthly cost against p95 pickup, one marker per setting on the trade-off curve (``tune``)."""
    figure = _pyplot_free_figure()
    axis = figure.subplots(1, 1)
    axis.plot([p95 for p95, _ in points], [cost for _, cost in points], marker="o")
    axis.set_xlabel("p95 pickup (s)")
    axis.set_ylabel("cost per month (USD)")
    axis.grid(visible=True, alpha=0.3)
    figure.suptitle("cloudqueue tune: the cheapest settings for each pickup")
    figure.savefig(path, format="png", dpi=100)
    return figure
