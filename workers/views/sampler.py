"""What the dashboard shows: each watched queue sampled every second or two, with its history.

A ``Sampler`` refreshes every ``interval_s`` on its own thread, so that the history (the chart's
last minutes) keeps growing while no page is open and every page sees the same numbers; the web
app (``cloudqueue.workers.dashboard.app``) serves its ``state()``. A refresh is ``cloudqueue
status``'s snapshot (``cloudqueue.workers.views.snapshot``: depths, and the workers' published live
state with their rates since the previous refresh, and one peek for the visible / in-flight split
and the oldest message's age) plus what a dashboard adds: the target thread count and the poison
queue's latest records. It costs three storage transactions a queue (two counts and the peek), and
one more while the poison queue holds messages (a peek for its latest records). Given the store's
group ledger, each refresh also reads the newest groups (``cloudqueue.workers.views.groups``).

Queues watched: those named at start, and those any running worker publishes its state for.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import structlog

from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.errors import QueueNotFoundError, StorageError
from cloudqueue.listener.poison.queue import browse_poisoned
from cloudqueue.listener.redaction import redact
from cloudqueue.listener.scaling.scaler import ScalingPolicy, targets
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.workflows.group_ledger import GroupLedger
from cloudqueue.workers.host.live_state import running_queue_names, utc_now
from cloudqueue.workers.views.fleet import WorkerView
from cloudqueue.workers.views.groups import dashboard_rows
from cloudqueue.workers.views.poison import poison_summary
from cloudqueue.workers.views.snapshot import Snapshot, snapshot_report, take_snapshot

HISTORY_S = 300.0
"""How far back the charts reach: five minutes."""

LATEST_POISONED = 10
"""How many poison records the dashboard lists (a peek: changes nothing)."""

COST_FIELDS = ("storage_transactions_per_hour", "projected_cost_per_month_usd")
"""Cost meter values a worker may publish per queue; summed over workers when present."""

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Watched:
    """One queue's previous snapshot (for rates), its history and its latest state."""

    previous: Snapshot | None = None
    history: deque[dict[str, Any]] = field(default_factory=deque)
    state: dict[str, Any] = field(default_factory=dict)


class Sampler:
    """Samples the watched queues; ``state()`` is what ``/api/state`` returns."""

    def __init__(
        self,
        storage: QueueStorage,
        *,
        queues: Iterable[str],
        state_dir: Path,
        where: str,
        policy: ScalingPolicy,
        interval_s: float = 1.0,
        now: Callable[[], datetime] = utc_now,
        view_of: Callable[[str], QueueStorage] | None = None,
        groups: GroupLedger | None = None,
    ) -> None:
        self.storage = storage
        # How a queue is read: as its partitions when it is partitioned (LayoutViews.view).
        self.view_of = view_of or (lambda _: storage)
        self.named_queues = tuple(queues)
        self.state_dir = state_dir
        self.where = where
        self.policy = policy
        self.interval_s = interval_s
        self.groups = groups
        self._group_rows: list[dict[str, Any]] = []
        self._now = now
        self._watched: dict[str, _Watched] = {}
        self._lock = threading.Lock()
        self._sampling = threading.Lock()  # the thread and a requeue may both ask for a sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- Running ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.sample()  # the first page load has numbers at once
        self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # a dashboard that stops refreshing would show stale numbers
                log.exception("dashboard_sample_failed")

    # -- Sampling ---------------------------------------------------------------------------------

    def queues(self) -> list[str]:
        """The named queues, then those of running workers (sorted), each once."""
        running = sorted(running_queue_names(self.state_dir))
        return list(dict.fromkeys([*self.named_queues, *running]))

    def watches(self, queue: str) -> bool:
        with self._lock:
            return queue in self._watched

    def sample(self) -> None:
        """Refresh every watched queue once."""
        with self._sampling:
            for queue in self.queues():
                with self._lock:
                    watched = self._watched.setdefault(queue, _Watched())
                try:
                    state = self._sample_queue(queue, watched)
                except Exception as error:  # one queue's surprise must not stall the others
                    log.exception("dashboard_sample_failed", queue=queue)
                    state = {"queue": queue, "error": f"not sampled: {redact(str(error))}"}
                with self._lock:
                    watched.state = state
            self._sample_groups()

    def _sample_groups(self) -> None:
        if self.groups is None:
            return
        try:
            rows = dashboard_rows(self.groups, self._now())
        except Exception as error:  # the queues' numbers stay worth showing without groups
            log.exception("dashboard_sample_failed", groups=True)
            rows = [{"error": f"groups not sampled: {redact(str(error))}"}]
        with self._lock:
            self._group_rows = rows

    def _sample_queue(self, queue: str, watched: _Watched) -> dict[str, Any]:
        at = self._now()
        try:
            snapshot = take_snapshot(
                self.view_of(queue), queue, self.state_dir, self.where, watched.previous
            )
        except QueueNotFoundError:
            return {"queue": queue, "error": f"queue {queue} does not exist on {self.where}"}
        except StorageError as error:
            return {"queue": queue, "error": redact(str(error))}
        watched.previous = snapshot
        state = self._describe(snapshot, at)
        self._remember(watched.history, state, at)
        return state

    def _describe(self, snapshot: Snapshot, at: datetime) -> dict[str, Any]:
        report = snapshot_report(snapshot, rates=True)
        workers = cast(list[dict[str, Any]], report["workers"])
        totals = cast(dict[str, Any], report["totals"])
        in_flight = sum(int(worker["in_flight"]) for worker in workers)
        return {
            "queue": snapshot.queue,
            "at": at.isoformat(),
            "depth": snapshot.depth,
            "visible_depth": snapshot.facts.visible,
            "in_flight": in_flight,
            # From the snapshot's own peek: a second one would double what watching costs.
            "oldest_message_age_s": snapshot.facts.oldest_age_s,
            "threads": totals["threads"],
            "target_threads": sum(self._target(snapshot.depth, view) for view in snapshot.workers),
            "processed_per_s": totals["rate_per_s"],
            "counters": _counters(workers, totals),
            "workers": [_worker_row(worker) for worker in workers],
            "poison": self._poison(snapshot),
        }

    def _target(self, depth: int, view: WorkerView) -> int:
        """The threads the configured scaling rule asks of this worker for the sampled backlog."""
        listener = view.listener
        load = ListenerLoad(
            approximate_depth=depth,
            in_flight=listener.in_flight,
            active_threads=listener.active_threads,
            per_thread_rate_per_s=listener.per_thread_rate_per_s,
        )
        return targets(load, self.policy)[0]

    def _poison(self, snapshot: Snapshot) -> dict[str, Any]:
        latest: list[dict[str, Any]] = []
        if snapshot.poison_depth:
            messages = browse_poisoned(self.storage, snapshot.queue, limit=LATEST_POISONED)
            latest = [poison_summary(message) for message in messages]
        return {"count": snapshot.poison_depth, "latest": latest}

    def _remember(
        self, history: deque[dict[str, Any]], state: dict[str, Any], at: datetime
    ) -> None:
        history.append(
            {
                "t": at.timestamp(),
                "visible_depth": state["visible_depth"],
                "in_flight": state["in_flight"],
                "threads": state["threads"],
                "target_threads": state["target_threads"],
                "processed_per_s": state["processed_per_s"],
                "worker_threads": {w["id"]: w["active_threads"] for w in state["workers"]},
            }
        )
        while history and at.timestamp() - history[0]["t"] > HISTORY_S:
            history.popleft()

    # -- Reading ----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Every watched queue's latest state and history (columns, as the charts take them)."""
        with self._lock:
            queues = [
                {**watched.state, "history": _columns(watched.history)}
                for watched in self._watched.values()
                if watched.state
            ]
            groups = list(self._group_rows)
        return {
            "at": self._now().isoformat(),
            "storage": self.where,
            "interval_s": self.interval_s,
            "history_s": HISTORY_S,
            "queues": queues,
            "groups": groups,
        }


def _worker_row(worker: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"{worker['host']}-{worker['pid']}", **worker}


def _counters(workers: list[dict[str, Any]], totals: dict[str, Any]) -> dict[str, Any]:
    """Totals over the workers; the cost meter's values are None unless some worker has them."""
    counters: dict[str, Any] = {
        name: sum(int(worker[name]) for worker in workers)
        for name in ("processed", "failed", "poisoned", "dequeue_errors")
    }
    # Items (a batched message holds many); a worker of an older version counted messages only.
    counters["items_processed"] = sum(
        int(
            worker["processed"]
            if worker.get("items_processed") is None
            else worker["items_processed"]
        )
        for worker in workers
    )
    for name in COST_FIELDS:
        values = [worker.get(name) for worker in workers]
        known = [float(value) for value in values if isinstance(value, int | float)]
        counters[name] = sum(known) if known else None
    if counters["storage_transactions_per_hour"] is None:
        # Without a cost meter, the rate measured from the processes' transaction counts.
        counters["storage_transactions_per_hour"] = totals["transactions_per_hour"]
    return counters


def _columns(history: Iterable[dict[str, Any]]) -> dict[str, Any]:
    points = list(history)
    worker_ids = sorted({key for point in points for key in point["worker_threads"]})
    columns: dict[str, Any] = {
        name: [point[name] for point in points]
        for name in ("t", "visible_depth", "in_flight", "threads", "target_threads")
    }
    columns["processed_per_s"] = [point["processed_per_s"] for point in points]
    columns["worker_threads"] = {
        worker: [point["worker_threads"].get(worker) for point in points] for worker in worker_ids
    }
    return columns


__all__ = ["HISTORY_S", "Sampler", "running_queue_names"]
