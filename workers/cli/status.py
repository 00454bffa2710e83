"""``cloudqueue status``: a queue's depth and the workers on it, once or as a live view.

What a refresh sees is computed by ``cloudqueue.workers.views.snapshot`` (the queue's depths and
facts, and the workers' published live state) and worded by ``cloudqueue.workers.cli.status_text``.
The queue's layout is read once, at start, from the store (``cloudqueue.listener.stores.layouts``).
Without a queue it shows every queue (``cloudqueue.workers.cli.status_overview``).
``--watch`` compares each refresh with the one before it to show rates: messages handled per
second and storage transactions per hour.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import click
from click.core import ParameterSource

from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.stores.partition_names import MAX_PARTITIONS
from cloudqueue.workers.cli.common import checked_queue, current_settings, opened_storage
from cloudqueue.workers.cli.interrupts import ended_by_ctrl_c
from cloudqueue.workers.cli.status_overview import overview_looks, print_overview
from cloudqueue.workers.cli.status_text import (
    describe_facts,
    headline,
    progress_line,
    worker_line,
)
from cloudqueue.workers.host.partitioning import (
    PARTITIONS_HELP,
    partitioned_view,
    plain_queue_warning,
)
from cloudqueue.workers.views.snapshot import Snapshot, snapshot_report, take_snapshot

DEFAULT_INTERVAL_S = 2.0

wait_s: Callable[[float], None] = time.sleep
"""How ``--watch`` waits between refreshes; tests replace it so that they never sleep."""


@click.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per refresh).")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C, with rates between refreshes.")
@click.option(
    "--interval",
    "interval_s",
    type=click.FloatRange(min=0),
    default=DEFAULT_INTERVAL_S,
    show_default=True,
    help="Seconds between refreshes with --watch (each costs three storage transactions).",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=None,
    help="With --watch, stop after this many refreshes.",
)
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), help=PARTITIONS_HELP)
def status(
    *,
    queue: str | None,
    as_json: bool,
    watch: bool,
    interval_s: float,
    count: int | None,
    partitions: int | None,
) -> None:
    """Show the approximate depth of QUEUE and of its poison queue, and the workers on it.

    The depth is split into visible and in-flight (or delayed) messages, with the age of the
    oldest visible one (one peek: exact below 32 visible, estimated above).

    Workers are the running `cloudqueue run` processes that publish their live state (threads,
    counters, measured rate) in the state_dir setting's folder (.cloudqueue/run by default).
    With --watch it refreshes every --interval seconds and adds, per worker and in total, the
    messages handled per second and the storage transactions per hour since the last refresh.
    A partitioned queue shows its total and a depth per partition (one count per partition),
    found from its layout recorded in the store, and warns about messages on a plain queue of
    the same name beside the partitions, which no worker reads (one more count).

    Without QUEUE: every queue in the store, one row each, with its depth, poison depth,
    partitions and the workers running on it; with --watch, refreshed every --interval seconds.

    \b
    Examples:
      cloudqueue status
      cloudqueue status --watch
      cloudqueue status invoices
      cloudqueue status invoices --json
      cloudqueue status invoices --watch --interval 5
    """
    _refuse_watch_options_without_watch(watch, count)
    if not watch:
        _status(queue, partitions, as_json=as_json)
        return
    with ended_by_ctrl_c():
        _status(queue, partitions, as_json=as_json, watch=(interval_s, count))


def _status(
    queue: str | None,
    partitions: int | None,
    *,
    as_json: bool,
    watch: tuple[float, int | None] | None = None,
) -> None:
    """One report, or with ``watch`` (interval, count) the live view."""
    settings = current_settings()
    if queue is None:
        if partitions is not None:
            raise click.UsageError("--partitions needs a QUEUE")
        if watch is None:
            print_overview(settings, as_json=as_json)
            return
        with overview_looks(settings, as_json=as_json) as look_at_all:
            _repeat(look_at_all, as_json=as_json, interval_s=watch[0], count=watch[1])
        return
    checked_queue(queue)
    with (
        opened_storage(settings) as opened,
        partitioned_view(opened, settings, queue, partitions) as storage,
    ):
        where = describe_storage(settings.connection_string_value(), credential=settings.credential)

        def look(previous: Snapshot | None) -> Snapshot:
            return take_snapshot(storage, queue, settings.state_dir, where, previous)

        if watch is None:
            _show(look(None), as_json=as_json, rates=False)
            return
        interval_s, count = watch
        _watch(look, as_json=as_json, interval_s=interval_s, count=count)


def _refuse_watch_options_without_watch(watch: bool, count: int | None) -> None:
    """--count and --interval mean nothing without --watch: say so rather than ignore them."""
    context = click.get_current_context()
    interval_given = context.get_parameter_source("interval_s") != ParameterSource.DEFAULT
    if not watch and (count is not None or interval_given):
        raise click.UsageError("--count and --interval only apply with --watch")


def _watch(
    look: Callable[[Snapshot | None], Snapshot],
    *,
    as_json: bool,
    interval_s: float,
    count: int | None,
) -> None:
    """The queue's live view: each refresh compared with the one before it, for rates."""
    previous: Snapshot | None = None

    def refresh() -> Callable[[], None]:
        nonlocal previous
        current = look(previous)
        previous = current
        return lambda: _show(current, as_json=as_json, rates=True)

    _repeat(refresh, as_json=as_json, interval_s=interval_s, count=count)


def _repeat(
    look: Callable[[], Callable[[], None]],
    *,
    as_json: bool,
    interval_s: float,
    count: int | None,
) -> None:
    """Look and print ``count`` times (forever by default), the screen cleared only once the
    next look is in; Ctrl-C is ``ended_by_ctrl_c``'s to handle."""
    clear = not as_json and sys.stdout.isatty()
    shown = 0
    while True:
        show = look()
        if clear:
            click.clear()
        elif shown and not as_json:
            click.echo()
        show()
        shown += 1
        if count is not None and shown >= count:
            return
        wait_s(interval_s)


def _show(snapshot: Snapshot, *, as_json: bool, rates: bool) -> None:
    if as_json:
        click.echo(json.dumps(snapshot_report(snapshot, rates=rates)))
        return
    click.echo(headline(snapshot, rates=rates))
    click.echo(describe_facts(snapshot.facts))
    if snapshot.partitions:
        rows = " · ".join(f"{name} {depth}" for name, depth in snapshot.partitions)
        click.echo(f"  partitions: {rows}")
    if snapshot.plain_depth:
        click.echo(plain_queue_warning(snapshot.queue, snapshot.plain_depth))
    for view in snapshot.workers:
        click.echo(worker_line(view, rates=rates))
        for report in view.listener.progress:
            click.echo(progress_line(report))
    if not snapshot.workers:
        click.echo(f"  no running worker publishes its state in {snapshot.storage_dir}")
