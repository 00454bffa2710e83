"""One queue as ``cloudqueue status QUEUE`` and the dashboard see it at one refresh.

The workers' side comes from the live-state files running ``cloudqueue run`` processes publish
(``cloudqueue.workers.views.fleet``): reading them costs no storage transaction. The queue's facts
cost three per refresh: its count, its poison queue's count, and one peek that splits the depth into
visible and in-flight messages and dates the oldest waiting one
(``cloudqueue.workers.views.queue_facts``); on a partitioned queue the count is one per partition,
plus one count of a plain queue of the same name, whose messages no worker reads. Given the previous
snapshot, each worker's rates are measured since it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from cloudqueue.listener.errors import QueueNotFoundError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.host.live_state import utc_now
from cloudqueue.workers.host.partitioning import plain_queue_depth
from cloudqueue.workers.views.fleet import (
    WorkerView,
    estimated_totals,
    running_workers,
    totals,
    with_rates,
    worker_report,
)
from cloudqueue.workers.views.queue_facts import QueueFacts, depth_or_none, queue_facts


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one refresh saw."""

    queue: str
    depth: int
    poison_depth: int
    workers: list[WorkerView]
    storage_dir: Path
    facts: QueueFacts
    partitions: tuple[tuple[str, int], ...] = ()
    """A partitioned queue's physical queues and their depths (empty for a plain queue)."""
    plain_depth: int | None = None
    """Messages on a plain queue of the same name beside the partitions, which no worker reads
    (None when the queue is not partitioned, or its workers read the plain queue too)."""


def take_snapshot(
    storage: QueueStorage, queue: str, state_dir: Path, where: str, previous: Snapshot | None
) -> Snapshot:
    """Look at ``queue`` once; raises QueueNotFoundError when it does not exist."""
    partitions = _partition_depths(storage, queue)
    depth = (
        sum(d for _, d in partitions) if partitions else storage.approximate_message_count(queue)
    )
    poison_depth = depth_or_none(storage, poison_queue_name(queue)) or 0
    before = {view.key: view for view in previous.workers} if previous else {}
    workers = [
        with_rates(view, before.get(view.key)) for view in running_workers(state_dir, queue, where)
    ]
    held = sum(view.listener.in_flight for view in workers)
    facts = queue_facts(storage, queue, depth=depth, held_by_workers=held, now=utc_now())
    plain_depth = plain_queue_depth(storage, queue)
    return Snapshot(queue, depth, poison_depth, workers, state_dir, facts, partitions, plain_depth)


def _partition_depths(storage: QueueStorage, queue: str) -> tuple[tuple[str, int], ...]:
    """Each partition's depth, read once (their sum is the queue's); () for a plain queue."""
    if not isinstance(storage, PartitionedQueueStorage):
        return ()
    parts = storage.partitions_of(queue)
    if len(parts) == 1 and parts[0].queue_name == queue:
        return ()
    depths = tuple(
        (part.queue_name, depth_or_none(part.storage, part.queue_name)) for part in parts
    )
    if all(depth is None for _, depth in depths):
        raise QueueNotFoundError(f"queue {queue} does not exist (none of its partitions does)")
    # A partition not created yet (after K grew, before a worker wrote to it) holds nothing.
    return tuple((name, depth or 0) for name, depth in depths)


def snapshot_report(snapshot: Snapshot, *, rates: bool) -> dict[str, object]:
    """The snapshot as ``cloudqueue status --json`` prints it; with ``rates`` (between two
    refreshes) the measured totals, else the workers' own estimates."""
    report: dict[str, object] = {
        "queue": snapshot.queue,
        "depth": snapshot.depth,
        "poison_depth": snapshot.poison_depth,
        **asdict(snapshot.facts),
        "workers": [worker_report(view, rates=rates) for view in snapshot.workers],
    }
    if snapshot.partitions:
        report["partitions"] = [
            {"queue": name, "depth": depth} for name, depth in snapshot.partitions
        ]
    if snapshot.plain_depth is not None:
        report["plain_queue_depth"] = snapshot.plain_depth
    if rates:
        report["at"] = utc_now().isoformat()
        report["totals"] = totals(snapshot.workers)
    else:
        report["totals"] = estimated_totals(snapshot.workers)
    return report
