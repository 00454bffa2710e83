"""``cloudqueue status``: a queue's depth and the workers on it, once or as a live view.

The workers' side comes from the live-state files running ``cloudqueue run`` processes publish
(``workers.live_state``): reading them costs no storage transaction. The queue's facts cost three
per refresh: its count, its poison queue's count, and one peek that splits the depth into visible
and in-flight messages and dates the oldest waiting one (``workers.cli.queue_facts``); on a
partitioned queue the count is one per partition, shown per partition, plus one count of a plain
queue of the same name, whose messages no worker reads. Its layout is read once, at start, from
the store (``listener.stores.layouts``). Without a queue it shows every queue
(``workers.cli.status_overview``).
``--watch`` compares each refresh with the one before it to show rates: messages handled per
second and storage transactions per hour.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import click
from click.core import ParameterSource

from listener.errors import QueueNotFoundError
from listener.poison.queue import poison_queue_name
from listener.stores.connection import describe_storage
from listener.stores.partition_names import MAX_PARTITIONS
from listener.stores.partitioned import PartitionedQueueStorage
from listener.stores.storage import QueueStorage
from workers.cli.common import checked_queue, current_settings, opened_storage
from workers.cli.interrupts import ended_by_ctrl_c
from workers.cli.queue_facts import QueueFacts, describe_facts, queue_facts
from workers.cli.status_overview import print_overview
from workers.cli.status_views import WorkerView, worker_report
from workers.live_state import QueueLiveState, read_live_states, utc_now
from workers.partitioning import (
    PARTITIONS_HELP,
    partitioned_view,
    plain_queue_depth,
    plain_queue_warning,
)
from workers.progress import processed_text

DEFAULT_INTERVAL_S = 2.0

wait_s: Callable[[float], None] = time.sleep
"""How ``--watch`` waits between refreshes; tests replace it so that they never sleep."""


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
    partitions and the workers running on it.

    \b
    Examples:
      cloudqueue status
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
        if watch or partitions is not None:
            raise click.UsageError("--watch and --partitions need a QUEUE")
        print_overview(settings, as_json=as_json)
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
    """Refresh ``count`` times (forever by default); Ctrl-C is ``ended_by_ctrl_c``'s to handle."""
    clear = not as_json and sys.stdout.isatty()
    previous: Snapshot | None = None
    shown = 0
    while True:
        current = look(previous)
        if clear:
            click.clear()
        elif shown and not as_json:
            click.echo()
        _show(current, as_json=as_json, rates=True)
        shown += 1
        if count is not None and shown >= count:
            return
        previous = current
        wait_s(interval_s)


def take_snapshot(
    storage: QueueStorage, queue: str, state_dir: Path, where: str, previous: Snapshot | None
) -> Snapshot:
    partitions = _partition_depths(storage, queue)
    depth = (
        sum(d for _, d in partitions) if partitions else storage.approximate_message_count(queue)
    )
    poison_depth = _depth_or_zero(storage, poison_queue_name(queue))
    before = {view.key: view for view in previous.workers} if previous else {}
    workers = [
        _with_rates(WorkerView(state, listener), before.get((state.host, state.pid)))
        for state in read_live_states(state_dir, queue, storage=where)
        for listener in state.listening_on(queue)
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
        (part.queue_name, _depth_or_none(part.storage, part.queue_name)) for part in parts
    )
    if all(depth is None for _, depth in depths):
        raise QueueNotFoundError(f"queue {queue} does not exist (none of its partitions does)")
    # A partition not created yet (after K grew, before a worker wrote to it) holds nothing.
    return tuple((name, depth or 0) for name, depth in depths)


def _with_rates(view: WorkerView, before: WorkerView | None) -> WorkerView:
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


def _depth_or_zero(storage: QueueStorage, queue: str) -> int:
    return _depth_or_none(storage, queue) or 0


def _depth_or_none(storage: QueueStorage, queue: str) -> int | None:
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        return None


def _show(snapshot: Snapshot, *, as_json: bool, rates: bool) -> None:
    if as_json:
        click.echo(json.dumps(snapshot_report(snapshot, rates=rates)))
        return
    click.echo(_headline(snapshot, rates=rates))
    click.echo(describe_facts(snapshot.facts))
    if snapshot.partitions:
        rows = " · ".join(f"{name} {depth}" for name, depth in snapshot.partitions)
        click.echo(f"  partitions: {rows}")
    if snapshot.plain_depth:
        click.echo(plain_queue_warning(snapshot.queue, snapshot.plain_depth))
    for view in snapshot.workers:
        click.echo(_worker_line(view, rates=rates))
    if not snapshot.workers:
        click.echo(f"  no running worker publishes its state in {snapshot.storage_dir}")


def snapshot_report(snapshot: Snapshot, *, rates: bool) -> dict[str, object]:
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
        report["totals"] = _totals(snapshot.workers)
    else:
        report["totals"] = _estimated_totals(snapshot.workers)
    return report


def _totals(workers: list[WorkerView]) -> dict[str, object]:
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


def _estimated_totals(workers: list[WorkerView]) -> dict[str, object]:
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


def _headline(snapshot: Snapshot, *, rates: bool) -> str:
    line = f"{snapshot.queue}: {snapshot.depth} message(s), poison: {snapshot.poison_depth}"
    if not rates:
        return line
    totals = _totals(snapshot.workers)
    at = utc_now().strftime("%H:%M:%S")
    return (
        f"{line} ({at} UTC); {len(snapshot.workers)} worker(s), {totals['threads']} thread(s), "
        f"{_rate(totals['rate_per_s'])}, {_per_hour(totals['transactions_per_hour'])}"
    )


def _worker_line(view: WorkerView, *, rates: bool) -> str:
    state, listener = view.state, view.listener
    rate = listener.per_thread_rate_per_s
    speed = "no rate measured yet" if rate is None else f"{rate:.1f} msg/s per thread"
    age_s = (utc_now() - state.updated_at).total_seconds()
    line = (
        f"  {state.host}-{state.pid} ({state.worker}): {listener.active_threads} thread(s), "
        f"peak {listener.peak_threads}; "
        f"processed {processed_text(listener.items_processed, listener.processed)}, "
        f"failed {listener.failed}, "
        f"poisoned {listener.poisoned}, dequeue errors {listener.dequeue_errors}, "
        f"in flight {listener.in_flight}; {speed}; updated {age_s:.0f} s ago"
    )
    line += _estimates(listener)
    if rates:
        line += f"; now {_rate(view.rate_per_s)}, {_per_hour(view.transactions_per_hour)}"
    return line


def _estimates(listener: QueueLiveState) -> str:
    """The worker's own estimates of its storage transactions and their cost, when it made any."""
    per_hour, cost = listener.storage_transactions_per_hour, listener.projected_cost_per_month_usd
    if per_hour is None or cost is None:
        return "; cost — (measured over its first 10 minutes)"
    return f"; {per_hour:,.0f} transactions/h (its estimate); ${cost:,.2f}/month projected"


def _rate(rate_per_s: object) -> str:
    return "measuring msg/s" if rate_per_s is None else f"{rate_per_s:.1f} msg/s"


def _per_hour(transactions_per_hour: object) -> str:
    if transactions_per_hour is None:
        return "measuring transactions/h"
    return f"{transactions_per_hour:,.0f} transactions/h"
