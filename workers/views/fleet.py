"""The running workers on a queue, as ``cloudqueue status`` and the dashboard show them.

Each is one listener of a running ``cloudqueue run`` process, read from the live-state file the
process publishes (``cloudqueue.workers.host.live_state``): reading it costs no storage transaction.
Rates are measured between two readings of the same process (``with_rates``); the totals add the
fleet up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from cloudqueue.workers.host.live_state import LiveState, QueueLiveState, read_live_states


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One running process's listener on the queue, and its rates since the previous refresh."""

    state: LiveState
    listener: QueueLiveState
    rate_per_s: float | None = None
    transactions_per_hour: float | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.state.host, self.state.pid)


def running_workers(state_dir: Path, queue: str, where: str) -> list[WorkerView]:
    """A view of each listener on ``queue`` of the processes running on storage ``where``."""
    return [
        WorkerView(state, listener)
        for state in read_live_states(state_dir, queue, storage=where)
        for listener in state.listening_on(queue)
    ]


def with_rates(view: WorkerView, before: WorkerView | None) -> WorkerView:
    """The view with rates measured against the same process's previous one.

    Measured between the processes' own publish times (``updated_at``), not between refreshes:
    a process publishes about every second, so the refresh times would skew short intervals.
    Until the process has published again, the previous rates stand.
    """
    if before is None:
        return view
    elapsed_s = (view.state.updated_at - before.state.updated_at).total_seconds()
    if elapsed_s <= 0:
        return WorkerView(
            view.state, view.listener, before.rate_per_s, before.transactions_per_hour
        )
    handled = view.listener.processed - before.listener.processed
    transactions_per_hour = None
    if view.state.transactions is not None and before.state.transactions is not None:
        spent = view.state.transactions - before.state.transactions
        transactions_per_hour = spent / elapsed_s * 3600
    return WorkerView(view.state, view.listener, handled / elapsed_s, transactions_per_hour)


def worker_report(view: WorkerView, *, rates: bool) -> dict[str, object]:
    """One running listener on the queue: its process, threads, counters and measured rate."""
    measured = {key: value for key, value in asdict(view.listener).items() if key != "queue"}
    state = view.state
    process = {"pid": state.pid, "host": state.host, "worker": state.worker}
    report = {**process, "updated_at": state.updated_at.isoformat(), **measured}
    if rates:
        report["rate_per_s"] = view.rate_per_s
        report["transactions_per_hour"] = view.transactions_per_hour
    return report


def totals(workers: list[WorkerView]) -> dict[str, object]:
    """Threads, rate and transactions per hour of all the workers (rates once all are known)."""
    rates = [view.rate_per_s for view in workers]
    # A process hosting several workers reports its transactions once per worker line.
    per_process = {view.key: view.transactions_per_hour for view in workers}
    return {
        "threads": sum(view.listener.active_threads for view in workers),
        "rate_per_s": None if None in rates else sum(rate or 0.0 for rate in rates),
        "transactions_per_hour": (
            None if None in per_process.values() else sum(tx or 0.0 for tx in per_process.values())
        ),
    }


def estimated_totals(workers: list[WorkerView]) -> dict[str, object]:
    """Threads, and the workers' own estimates of transactions and cost (once all have one)."""
    per_hour = [view.listener.storage_transactions_per_hour for view in workers]
    cost = [view.listener.projected_cost_per_month_usd for view in workers]
    return {
        "threads": sum(view.listener.active_threads for view in workers),
        "storage_transactions_per_hour": _sum_when_known(per_hour),
        "projected_cost_per_month_usd": _sum_when_known(cost),
    }


def _sum_when_known(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if values and len(known) == len(values) else None
