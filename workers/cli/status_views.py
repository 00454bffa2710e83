"""What ``cloudqueue status`` shows of one running worker's listener on a queue."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from workers.live_state import LiveState, QueueLiveState


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
