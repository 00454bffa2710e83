"""``cloudqueue status`` without a queue: a table of every queue, then the periodic jobs.

What it shows is computed by ``cloudqueue.workers.views.overview`` (the queues and the workers on
them) and ``cloudqueue.workers.views.jobs`` (the running periodic jobs, with their last and next
firing).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import click

from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.workers.cli.common import opened_storage
from cloudqueue.workers.host.partitioning import LayoutViews, plain_queue_warning
from cloudqueue.workers.settings import CloudQueueSettings
from cloudqueue.workers.views.fleet import WorkerView
from cloudqueue.workers.views.jobs import JobRow, job_rows
from cloudqueue.workers.views.overview import QueueRow, overview, overview_report

Look = Callable[[], Callable[[], None]]
"""Reads the store and the workers' state now; returns what prints what was read."""


def print_overview(settings: CloudQueueSettings, *, as_json: bool) -> None:
    """``cloudqueue status`` with no queue: look at every queue once and print what was seen."""
    with overview_looks(settings, as_json=as_json) as look:
        look()()


@contextmanager
def overview_looks(settings: CloudQueueSettings, *, as_json: bool) -> Iterator[Look]:
    """The store opened once, for as many looks at every queue as ``--watch`` takes."""
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    with opened_storage(settings) as storage, closing(LayoutViews(storage, settings)) as views:

        def look() -> Callable[[], None]:
            rows = overview(views.accounts, settings.state_dir, where)
            jobs = job_rows(settings.state_dir, where)
            return lambda: _print(rows, jobs, settings, where=where, as_json=as_json)

        yield look


def _print(
    rows: list[QueueRow],
    jobs: list[JobRow],
    settings: CloudQueueSettings,
    *,
    where: str,
    as_json: bool,
) -> None:
    if as_json:
        report = overview_report(rows, where)
        click.echo(json.dumps({**report, "jobs": [job.report() for job in jobs]}))
        return
    if rows or not jobs:
        show_overview(rows, where=where, state_dir=settings.state_dir, as_json=False)
    else:
        click.echo(f"no queues on {where}")
    show_jobs(jobs)


def show_overview(rows: list[QueueRow], *, where: str, state_dir: Path, as_json: bool) -> None:
    """Print the rows as a table (or, with ``as_json``, one JSON object)."""
    if as_json:
        click.echo(json.dumps(overview_report(rows, where)))
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


def show_jobs(rows: list[JobRow]) -> None:
    """Print the jobs as a table (nothing when no running process hosts one)."""
    if not rows:
        return
    width = max(len("JOB"), *(len(row.job) for row in rows))
    click.echo(f"\n{'JOB':<{width}}  {'SCHEDULE':<20}  {'LAST FIRED':<25}  {'NEXT':<25}  PROCESSES")
    for row in rows:
        running = f", running in {', '.join(row.running_in)}" if row.running_in else ""
        click.echo(
            f"{row.job:<{width}}  {row.schedule:<20}  {row.last_fired or 'never':<25}  "
            f"{row.next_firing or '-':<25}  {len(row.processes)}{running}"
        )
