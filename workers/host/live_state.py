"""Running workers' live state, published as files for ``cloudqueue status`` to read.

Each host process writes ``<state_dir>/<hostname>-<pid>.json`` every few seconds -- atomically,
a temporary file then ``os.replace``, so a reader never sees half a file -- and removes it at exit.
Everything in it comes from the listeners' in-memory counters: publishing costs no storage
transaction. A reader ignores the file of a process that is gone: one whose pid no longer runs on
this host, or (on any host, e.g. a shared folder) one not updated within ``STALE_AFTER_S``; and,
when told which storage it looks at, the files of processes on another storage (same queue name,
another account or database).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.stores.file_modes import private_folder
from cloudqueue.workers.host.cost_meter import UNKNOWN, CostMeter, QueueCost

if TYPE_CHECKING:  # the listener (the whole consumer) only for type hints: readers
    # of the files (`cloudqueue status`, `queues list`) never import the consumer
    from cloudqueue.listener.consumer.listener import CloudQueueListener
    from cloudqueue.workers.host.job_scheduler import JobScheduler

PUBLISH_INTERVAL_S = 2.0
STALE_AFTER_S = 3 * PUBLISH_INTERVAL_S
"""A file not rewritten for three publish intervals belongs to a process that hung or died."""

log = structlog.get_logger(__name__)


class LoopConsumerState(Protocol):
    """A worker on an event loop of its own (``loop_worker.LoopWorker``), as published."""

    @property
    def queue_names(self) -> tuple[str, ...]: ...

    def live_state(self, cost: QueueCost, queue: str) -> QueueLiveState: ...


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class QueueLiveState:
    """One listener of a running process: its threads, totals and measured speed."""

    queue: str
    active_threads: int
    peak_threads: int
    processed: int
    """Messages handled (a ``Publisher`` batch is one message of many items)."""
    failed: int
    poisoned: int
    dequeue_errors: int
    in_flight: int
    per_thread_rate_per_s: float | None
    """Messages per second one thread completes (smoothed); None before the first batch."""
    storage_transactions_per_hour: float | None = None
    """Queue and blob calls of this queue's consumers in this process, per hour (recent rate)."""
    projected_cost_per_month_usd: float | None = None
    """A 30-day month at that rate and the ``cost.price_per_10k_transactions_usd`` price; both
    None until the cost meter has counted for its whole window (``cost_meter.WINDOW_S``)."""
    poison_failures: int = 0
    """Moves to the poison queue that failed (the message stayed in its queue); 0 in files
    written before it was published."""
    items_processed: int | None = None
    """Items handled (None in files of older versions, which counted messages only)."""
    delay_hops: int = 0
    """Messages delayed beyond 7 days hidden again, not due yet (0 in older files)."""
    priority_set: list[str] | None = None
    """All the queues of a listener that reads several, highest priority first (None: one).
    Its threads, in flight, rate and errors are the listener's, shared by those queues."""
    stuck_threads: int = 0
    """Handler threads still running past ``listener.time_limit_s`` (0 in older files)."""
    cost_counted_s: float | None = None
    """Seconds the cost meter has counted while its estimate is not known yet (None: known, or
    not said by an older file): the estimate appears at ``cost_meter.WINDOW_S``."""
    progress: tuple[HandlerProgress, ...] = ()
    """What its handlers last reported of the messages they hold (none in older files)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueueLiveState:
        """Read what ``asdict`` wrote; TypeError/ValueError/KeyError if it is not that."""
        reports = tuple(HandlerProgress.from_json(report) for report in data.get("progress", ()))
        return cls(**{**data, "progress": reports})

    @classmethod
    def of(
        cls, listener: CloudQueueListener[Any], cost: QueueCost = UNKNOWN, queue: str | None = None
    ) -> QueueLiveState:
        """The listener's state on ``queue`` (by default its first) now, without touching
        storage (``query_state`` would count)."""
        queue = queue or listener.queue_name
        counters, queues = listener.counters_of(queue), list(listener.queue_names)
        reports = listener.progress_reports()
        return cls(
            queue=queue,
            active_threads=listener.active_dequeue_tasks,
            peak_threads=listener.peak_dequeue_tasks,
            processed=counters["processed"],
            failed=counters["failed"],
            poisoned=counters["poisoned"],
            dequeue_errors=counters["dequeue_errors"],
            in_flight=counters["in_flight"],
            per_thread_rate_per_s=listener.meters.throughput.per_thread_rate_per_s,
            storage_transactions_per_hour=cost.storage_transactions_per_hour,
            projected_cost_per_month_usd=cost.projected_cost_per_month_usd,
            poison_failures=counters["poison_failures"],
            items_processed=counters["items_processed"],
            delay_hops=counters["delay_hops"],
            priority_set=queues if len(queues) > 1 else None,
            stuck_threads=listener.stuck_threads,
            cost_counted_s=None
            if cost.storage_transactions_per_hour is not None
            else cost.counted_s,
            # A listener on one queue holds only its messages (a partition's name included).
            progress=tuple(r for r in reports if len(queues) == 1 or r.queue == queue),
        )


@dataclass(frozen=True, slots=True)
class JobLiveState:
    """One periodic job of a running process: when it fired, when it fires next, its runs."""

    job: str
    schedule: str
    last_fired: str | None
    """The last tick fired by any process, as this one last saw the ledger (ISO 8601, UTC)."""
    next_firing: str | None
    last_fired_here: str | None = None
    running: bool = False
    runs: dict[str, int] = field(default_factory=dict)
    """Counted ticks by outcome: succeeded, failed, timed_out, skipped."""

    @classmethod
    def of(cls, scheduler: JobScheduler) -> JobLiveState:
        return cls(
            job=scheduler.spec.name,
            schedule=str(scheduler.spec.schedule),
            last_fired=_iso(scheduler.last_fired),
            next_firing=_iso(scheduler.next_tick),
            last_fired_here=_iso(scheduler.last_fired_here),
            running=scheduler.running,
            runs=dict(scheduler.runs),
        )


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


@dataclass(frozen=True, slots=True)
class LiveState:
    """What one running host process last published."""

    pid: int
    host: str
    worker: str
    storage: str | None
    """Which storage the process works on, as ``describe_storage`` says it (no secrets)."""
    updated_at: datetime
    queues: tuple[QueueLiveState, ...]
    transactions: int | None = None
    """Storage transactions of the whole process since it started (None: not counted)."""
    jobs: tuple[JobLiveState, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "host": self.host,
            "worker": self.worker,
            "storage": self.storage,
            "updated_at": self.updated_at.isoformat(),
            "queues": [asdict(queue) for queue in self.queues],
            "transactions": self.transactions,
            "jobs": [asdict(job) for job in self.jobs],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LiveState:
        """Parse what ``to_json`` wrote; KeyError/TypeError/ValueError if it is not that."""
        updated_at = datetime.fromisoformat(data["updated_at"])
        if updated_at.tzinfo is None:
            raise ValueError("updated_at has no time zone")
        return cls(
            pid=int(data["pid"]),
            host=str(data["host"]),
            worker=str(data["worker"]),
            storage=None if data.get("storage") is None else str(data["storage"]),
            updated_at=updated_at,
            queues=tuple(QueueLiveState.from_json(queue) for queue in data["queues"]),
            # Absent in files of processes that do not count their transactions.
            transactions=None if data.get("transactions") is None else int(data["transactions"]),
            jobs=tuple(JobLiveState(**job) for job in data.get("jobs", ())),
        )

    def listening_on(self, queue: str) -> list[QueueLiveState]:
        return [state for state in self.queues if state.queue == queue]


class LiveStatePublisher:
    """Writes this process's live state to ``<directory>/<hostname>-<pid>.json``."""

    def __init__(
        self,
        directory: Path,
        *,
        worker: str,
        storage: str | None = None,
        pid: int | None = None,
        host: str | None = None,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.directory = directory
        self.worker = worker
        self.storage = storage
        self.pid = os.getpid() if pid is None else pid
        self.host = socket.gethostname() if host is None else host
        self.path = directory / f"{self.host}-{self.pid}.json"
        self._now = now
        self._failing = False

    def publish(
        self,
        listeners: list[CloudQueueListener[Any]],
        *,
        transactions: int | None = None,
        meter: CostMeter | None = None,
        jobs: Sequence[JobLiveState] = (),
        loop_workers: Sequence[LoopConsumerState] = (),
    ) -> None:
        """Replace the state file; a failure is logged (once while it lasts), never raised.

        ``transactions`` is the process's storage transaction count so far, if it keeps one;
        ``meter`` (sampled here) gives each queue's transactions per hour and monthly cost;
        ``loop_workers`` are the workers on an event loop of their own, which have no listener.
        """
        if meter is not None:
            meter.sample()
        state = LiveState(
            pid=self.pid,
            host=self.host,
            worker=self.worker,
            storage=self.storage,
            updated_at=self._now(),
            queues=tuple(
                QueueLiveState.of(listener, UNKNOWN if meter is None else meter.cost_of(q), q)
                for listener in listeners
                for q in listener.queue_names
            )
            + tuple(
                worker.live_state(UNKNOWN if meter is None else meter.cost_of(q), q)
                for worker in loop_workers
                for q in worker.queue_names
            ),
            transactions=transactions,
            jobs=tuple(jobs),
        )
        try:
            self._write(json.dumps(state.to_json()))
        except OSError as error:
            if not self._failing:
                log.warning("live_state_not_published", path=str(self.path), error=str(error))
            self._failing = True
        else:
            self._failing = False

    def _write(self, text: str) -> None:
        private_folder(self.directory, ours=False)  # 0700 when created; mkstemp's files are 0600
        descriptor, temporary = tempfile.mkstemp(
            dir=self.directory, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def remove(self) -> None:
        """Delete the state file (at exit), if it is there."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as error:
            log.warning("live_state_not_removed", path=str(self.path), error=str(error))


def read_live_states(
    directory: Path,
    queue: str,
    *,
    storage: str | None = None,
    now: datetime | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> list[LiveState]:
    """The states of running processes that listen on ``queue``, by host and pid.

    Skips files that are unreadable or not live state, older than ``stale_after_s`` at ``now``,
    written on this host by a pid that no longer runs, or -- given ``storage`` -- published by a
    process that named another storage.
    """
    running = _running_states(directory, storage, now or utc_now(), stale_after_s)
    return [state for state in running if state.listening_on(queue)]


def read_running_states(
    directory: Path, *, storage: str | None = None, now: datetime | None = None
) -> list[LiveState]:
    """The states of every running process (skipped as ``read_live_states`` skips)."""
    return _running_states(directory, storage, now or utc_now(), STALE_AFTER_S)


def read_job_states(
    directory: Path, *, storage: str | None = None, now: datetime | None = None
) -> list[tuple[LiveState, JobLiveState]]:
    """Each periodic job of each running process (skipped as ``read_live_states`` skips)."""
    running = _running_states(directory, storage, now or utc_now(), STALE_AFTER_S)
    return [(state, job) for state in running for job in state.jobs]


def _running_states(
    directory: Path, storage: str | None, now: datetime, stale_after_s: float
) -> list[LiveState]:
    this_host = socket.gethostname()
    states = []
    for path in directory.glob("*.json"):
        state = _read(path)
        if state is None:
            continue
        if storage is not None and state.storage not in (None, storage):
            continue
        if (now - state.updated_at).total_seconds() > stale_after_s:
            continue
        if state.host == this_host and not pid_is_alive(state.pid):
            continue
        states.append(state)
    return sorted(states, key=lambda state: (state.host, state.pid))


def running_queue_names(state_dir: Path) -> set[str]:
    """Queue names in the live-state files; ``read_live_states`` then keeps the running ones."""
    names: set[str] = set()
    for path in state_dir.glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            names.update(str(queue["queue"]) for queue in data["queues"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # removed meanwhile, or not a live-state file
    return names


def _read(path: Path) -> LiveState | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LiveState.from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # removed meanwhile, or not a live-state file: not a running worker


def pid_is_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (signal 0 checks without signalling)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


__all__ = [
    "PUBLISH_INTERVAL_S",
    "STALE_AFTER_S",
    "JobLiveState",
    "LiveState",
    "LiveStatePublisher",
    "QueueLiveState",
    "read_job_states",
    "read_live_states",
    "read_running_states",
    "running_queue_names",
]
