"""``cloudqueue status`` without a queue: every queue of the store, with the workers on it.

Queues are those the store lists on account 0 (partitions ``orders-p0`` ... and poison queues
``orders-poison`` fold into their queue's row) and those any running worker publishes its live
state for. Per queue it costs one count per physical queue and one for its poison queue, and one
metadata read for a partitioned queue's recorded layout; the workers' side comes from their
live-state files, which cost nothing. Running periodic jobs follow, with their last and next
firing (``status_jobs``, from the same files).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import click

from listener.errors import QueueNotFoundError
from listener.poison.queue import poison_queue_name
from listener.stores.connection import describe_storage
from listener.stores.layouts import QueueLayout, read_layout
from listener.stores.partition_names import partition_of_queue
from listener.stores.storage import QueueStorage
from workers.cli.common import opened_storage
from workers.cli.status_jobs import job_rows, show_jobs
from workers.cli.status_views import WorkerView, worker_report
from workers.live_state import read_live_states, running_queue_names
from workers.partitioning import (
    LayoutViews,
    over_accounts,
    plain_queue_depth,
    plain_queue_warning,
)
from workers.settings import CloudQueueSettings

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


def print_overview(settings: CloudQueueSettings, *, as_json: bool) -> None:
    """``cloudqueue status`` with no queue: look at every queue once and print what was seen."""
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    with opened_storage(settings) as storage, closing(LayoutViews(storage, settings)) as views:
        rows = overview(views.accounts, settings.state_dir, where)
    jobs = job_rows(settings.state_dir, where)
    if as_json:
        report = {"storage": where, "queues": [_report(row) for row in rows]}
        click.echo(json.dumps({**report, "jobs": [job.report() for job in jobs]}))
        return
    if rows or not jobs:
        show_overview(rows, where=where, state_dir=settings.state_dir, as_json=False)
    else:
        click.echo(f"no queues on {where}")
    show_jobs(jobs)


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
    workers = [
        WorkerView(state, listener)
        for state in read_live_states(state_dir, queue, storage=where)
        for listener in state.listening_on(queue)
    ]
    return QueueRow(
        queue=queue,
        depth=_count(view, queue),
        poison_depth=_count(accounts[0], poison_queue_name(queue)) or 0,
        partitions=1 if layout is None else layout.partitions,
        workers=workers,
        plain_depth=plain_queue_depth(view, queue),
    )


def _count(storage: QueueStorage, queue: str) -> int | None:
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        return None


def show_overview(rows: list[QueueRow], *, where: str, state_dir: Path, as_json: bool) -> None:
    """Print the rows as a table (or, with ``as_json``, one JSON object)."""
    if as_json:
        click.echo(json.dumps({"storage": where, "queues": [_report(row) for row in rows]}))
        return
    if not rows:
        click.echo(
            f"no queues on {where}, and no running worker publishes its state in {state_dir}"
        )
        return
    width = max(len("QUEUE"), *(len(row.queue) for row in rows))
    click.echo(f"{'QUEUE':<{width}}  {'DEPTH':>7}  {'POISON':>7}  {'PARTITIONS':>10}  WORKERS")
    for row in rows:
        depth = "missing" if row.depth is None else str(row.depth)
        click.echo(
            f"{row.queue:<{width}}  {depth:>7}  {row.poison_depth:>7}  {row.partitions:>10}  "
            f"{_workers(row.workers)}"
        )
        if row.plain_depth:
            click.echo(plain_queue_warning(row.queue, row.plain_depth))


def _workers(workers: list[WorkerView]) -> str:
    if not workers:
        return "none running"
    return ", ".join(
        f"{view.state.host}-{view.state.pid} ({view.state.worker}): "
        f"{view.listener.active_threads} thread(s), processed {view.listener.processed}"
        for view in workers
    )


def _report(row: QueueRow) -> dict[str, object]:
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
