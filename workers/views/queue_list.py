"""The rows of ``cloudqueue queues list``: each queue of the store with its depth, and a total
row per partitioned queue.

One count per listed queue. A partitioned queue's partitions (``orders-p0``, ``orders-p1``, ...)
are listed as they are and summed into a row of the logical queue's own name; a plain queue of
that name beside them is marked ``beside_partitions``, since no partitioned worker reads it.
"""

from __future__ import annotations

from cloudqueue.listener.stores.partition_names import partition_of_queue
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.views.queue_facts import depth_or_none


def listed_depths(storage: QueueStorage, prefix: str) -> dict[str, int | None]:
    """Each queue whose name starts with ``prefix``, with its depth (None: deleted meanwhile)."""
    return {name: depth_or_none(storage, name) for name in storage.list_queues(prefix)}


def listing_rows(depths: dict[str, int | None]) -> list[dict[str, object]]:
    """A row per queue that still exists, and per partitioned queue its total, sorted by name."""
    rows: list[dict[str, object]] = [
        {"queue": name, "depth": depth} for name, depth in depths.items() if depth is not None
    ]
    totals = _partition_totals(depths)
    for row in rows:
        if any(total["queue"] == row["queue"] for total in totals):
            row["beside_partitions"] = True
    # A plain queue and its partitions' total share a name: the plain one first.
    return sorted(rows + totals, key=lambda row: (str(row["queue"]), "partitions" in row))


def _partition_totals(depths: dict[str, int | None]) -> list[dict[str, object]]:
    """One row per partitioned logical queue: its partitions' count and summed depth."""
    groups: dict[str, list[int]] = {}
    for name, depth in depths.items():
        owner = partition_of_queue(name)
        if owner is not None and depth is not None:
            groups.setdefault(owner[0], []).append(depth)
    return [
        {"queue": logical, "depth": sum(group), "partitions": len(group)}
        for logical, group in sorted(groups.items())
        if len(group) > 1
    ]
