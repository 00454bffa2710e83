"""Every queue of the store, with the workers on it: ``cloudqueue status`` without a queue.

Queues are those the store lists on account 0 (partitions ``orders-p0`` ... and poison queues
``orders-poison`` fold into their queue's row) and those any running worker publishes its live
state for. Per queue it costs one count per physical queue and one for its poison queue, and one
metadata read for a partitioned queue's recorded layout; the workers' side comes from their
live-state files, which cost nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout
from cloudqueue.listener.stores.partition_names import partition_of_queue
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.host.live_state import running_queue_names
from cloudqueue.workers.host.partitioning import plain_queue_depth
from cloudqueue.workers.settings.layouts import over_accounts
from cloudqueue.workers.views.fleet import WorkerView, running_workers, worker_report
from cloudqueue.workers.views.queue_facts import depth_or_none

POISON_SUFFIX = poison_queue_name("")


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One logical queue: its depths, its layout and the running workers on it."""

    queue: str
    depth: int | None
    """None when the queue does not exist (yet) in the store, though a worker runs on it."""
    poison_depth: int
    partitions: int
    workers: list[WorkerView]
    plain_depth: int | None = None


def overview(accounts: Sequence[QueueStorage], state_dir: Path, where: str) -> list[QueueRow]:
    """A row per logical queue of ``accounts[0]`` and of the running workers, sorted by name."""
    account = accounts[0]
    listed = account.list_queues()
    layouts = _layouts(account, listed)
    names = sorted(set(layouts) | running_queue_names(state_dir))
    return [_row(accounts, name, layouts.get(name), state_dir, where) for name in names]


def _layouts(account: QueueStorage, listed: list[str]) -> dict[str, QueueLayout]:
    """Each logical queue's layout: recorded, else as many partitions as its names say."""
    highest: dict[str, int] = {}
    for name in listed:
        if name.endswith(POISON_SUFFIX):
            continue
        owner = partition_of_queue(name)
        logical, index = owner if owner is not None else (name, -1)
        highest[logical] = max(highest.get(logical, -1), index)
    return {
        logical: QueueLayout(1)
        if index < 0
        else read_layout(account, logical) or QueueLayout(index + 1)
        for logical, index in highest.items()
    }


def _row(
    accounts: Sequence[QueueStorage],
    queue: str,
    layout: QueueLayout | None,
    state_dir: Path,
    where: str,
) -> QueueRow:
    view = accounts[0]
    if layout is not None and (len(accounts) > 1 or not layout.plain):
        view = over_accounts(accounts, {queue: layout})
    workers = running_workers(state_dir, queue, where)
    return QueueRow(
        queue=queue,
        depth=depth_or_none(view, queue),
        poison_depth=depth_or_none(accounts[0], poison_queue_name(queue)) or 0,
        partitions=1 if layout is None else layout.partitions,
        workers=workers,
        plain_depth=plain_queue_depth(view, queue),
    )


def overview_report(rows: list[QueueRow], where: str) -> dict[str, object]:
    """The rows as ``cloudqueue status --json`` prints them, under the storage they are on."""
    return {"storage": where, "queues": [_row_report(row) for row in rows]}


def _row_report(row: QueueRow) -> dict[str, object]:
    report: dict[str, object] = {
        "queue": row.queue,
        "depth": row.depth,
        "poison_depth": row.poison_depth,
        "partitions": row.partitions,
        "workers": [worker_report(view, rates=False) for view in row.workers],
    }
    if row.plain_depth is not None:
        report["plain_queue_depth"] = row.plain_depth
    return report
