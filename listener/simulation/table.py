"""The terminal table of a comparison: one row per policy, costs at a given price.

``table_notes`` says under it what the columns count, and why push costs more when it does.
"""

from __future__ import annotations

from collections.abc import Sequence

from cloudqueue.listener.simulation.cost import DEFAULT_PRICE_PER_10K_USD
from cloudqueue.listener.simulation.policies import DEFAULTS_NAME, PUSH_NAME
from cloudqueue.listener.simulation.report import PolicyResult

CAPTION = (
    "get, delete, count: totals for the run; txn/day, $/day, $/month: scaled to a day, a month"
)

_COLUMNS = (
    ("policy", "<"),
    ("get", ">"),
    ("delete", ">"),
    ("count", ">"),
    ("txn/day", ">"),
    ("$/day", ">"),
    ("$/month", ">"),
    ("p50 s", ">"),
    ("p90 s", ">"),
    ("p99 s", ">"),
    ("peak thr", ">"),
    ("thread-s", ">"),
)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row(result: PolicyResult, price_per_10k_usd: float) -> tuple[str, ...]:
    counts = result.transactions
    return (
        result.policy,
        f"{counts.get('get_messages', 0):,}",
        f"{counts.get('delete_message', 0):,}",
        f"{counts.get('approximate_message_count', 0):,}",
        f"{result.transactions_per_day:,.0f}",
        f"${result.cost_per_day_usd(price_per_10k_usd):,.4f}",
        f"${result.cost_per_month_usd(price_per_10k_usd):,.2f}",
        _seconds(result.latency.p50_s),
        _seconds(result.latency.p90_s),
        _seconds(result.latency.p99_s),
        str(result.peak_threads),
        f"{result.thread_seconds:,.0f}",
    )


def format_table(
    results: Sequence[PolicyResult], price_per_10k_usd: float = DEFAULT_PRICE_PER_10K_USD
) -> str:
    """Aligned columns: transactions by operation, cost, pickup latency, threads."""
    rows = [tuple(name for name, _ in _COLUMNS)]
    rows += [_row(result, price_per_10k_usd) for result in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(
            f"{cell:{align}{width}}"
            for cell, (_, align), width in zip(row, _COLUMNS, widths, strict=True)
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def table_notes(results: Sequence[PolicyResult]) -> list[str]:
    """The caption, and one line on why push costs more than polling when it does."""
    notes = [CAPTION]
    by_name = {result.policy: result for result in results}
    push, polling = by_name.get(PUSH_NAME), by_name.get(DEFAULTS_NAME)
    if push is None or polling is None:
        return notes
    if push.transactions_per_day > polling.transactions_per_day:
        notes.append(_why_push_costs_more(push))
    return notes


def _why_push_costs_more(push: PolicyResult) -> str:
    handled = max(1, push.handled)
    counts = push.transactions.get("approximate_message_count", 0) / handled
    gets = push.transactions.get("get_messages", 0) / handled
    return (
        f"push costs more than the defaults here: with steady traffic every put announces work, "
        f"and each wake-up pays {counts:.1f} depth checks and {gets:.1f} gets a message; "
        f"push is the cheapest when the queue idles or work comes in bursts"
    )
