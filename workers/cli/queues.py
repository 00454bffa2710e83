"""``cloudqueue queues``: list, create, clear and delete the queues of the configured storage.

Clearing and deleting destroy messages, so both ask first on a terminal and refuse to run
unattended (stdin not a terminal) without ``--yes``. A missing queue is exit code 1 with a message
that names it and the storage; an invalid queue name is exit code 2.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import click

from cloudqueue.listener.errors import QueueNotFoundError
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout, record_layout
from cloudqueue.listener.stores.partition_names import MAX_PARTITIONS
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.cli.common import (
    BadInput,
    checked_queue,
    configured_storage,
    current_settings,
    refuse_unattended,
)
from cloudqueue.workers.host.live_state import utc_now
from cloudqueue.workers.host.partitioning import (
    PARTITIONS_HELP,
    partitioned_view,
    plain_queue_depth,
    plain_queue_warning,
    viewed_as,
)
from cloudqueue.workers.host.plain_queue import merge_plain_queue
from cloudqueue.workers.settings.layouts import command_layout
from cloudqueue.workers.views.queue_list import listed_depths, listing_rows

PARTITIONS_OPTION = click.option(
    "--partitions", type=click.IntRange(1, MAX_PARTITIONS), help=PARTITIONS_HELP
)

SPINNER_DELAY_S = 0.5
"""A call that returns sooner shows no spinner: only long, many-request work does (e.g. Azure
clearing a big queue, one Clear Messages call after another)."""

SPINNER_INTERVAL_S = 0.1


@click.group("queues")
def queues_group() -> None:
    """List, create, clear and delete queues.

    \b
    Examples:
      cloudqueue queues list
      cloudqueue queues create invoices
      cloudqueue queues clear invoices-poison --yes
    """


@queues_group.command("list")
@click.option("--prefix", default="", help="Only queues whose names start with this text.")
@click.option("--json", "as_json", is_flag=True, help='Print a JSON array of {"queue", "depth"}.')
def list_queues(prefix: str, as_json: bool) -> None:
    """List the queues with their approximate depths.

    A depth counts every message in the queue, those a worker has taken but not yet deleted too.
    A partitioned queue (QUEUE-p0, QUEUE-p1, ...) gets a row of its own with the total depth.

    \b
    Examples:
      cloudqueue queues list
      cloudqueue queues list --prefix invoices
      cloudqueue queues list --json | jq '.[] | select(.depth > 0)'
    """
    with configured_storage(announce=True) as (storage, where):
        depths = listed_depths(storage, prefix)
    rows = listing_rows(depths)
    if as_json:
        click.echo(json.dumps(rows))
    elif not rows:
        matching = f" starting with {prefix!r}" if prefix else ""
        click.echo(f"no queues{matching} on {where}")
    else:
        width = max(len("QUEUE"), *(len(name) for name in depths))
        click.echo(f"{'QUEUE':<{width}}  DEPTH")
        for row in rows:
            click.echo(f"{row['queue']:<{width}}  {row['depth']}{_note(row)}")


@queues_group.command()
@click.argument("queue")
@PARTITIONS_OPTION
def create(queue: str, partitions: int | None) -> None:
    """Create QUEUE; succeed if it already exists.

    On Azure a just-deleted name stays reserved for 40 s or more (409 QueueBeingDeleted): run the
    command again after that.

    \b
    Examples:
      cloudqueue queues create invoices
      CLOUDQUEUE_CONNECTION_STRING=sqlite:///jobs.db cloudqueue queues create thumbnails
      cloudqueue queues create orders --partitions 4
    """
    checked_queue(queue)
    with configured_storage() as (account, where):
        settings = current_settings()
        layout = command_layout(account, settings, queue, partitions)
        with viewed_as(account, settings, queue, layout) as storage:
            existed = _exists(storage, queue)
            storage.create_queue(queue)
            _record(account, queue, layout)
            stray = plain_queue_depth(storage, queue)
    shown = queue if layout.plain else f"{queue} as {layout}"
    click.echo(
        f"queue {shown} already exists on {where}" if existed else f"created {shown} on {where}"
    )
    if stray:
        click.echo(plain_queue_warning(queue, stray), err=True)


@queues_group.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (required when stdin is no terminal).")
@PARTITIONS_OPTION
def clear(queue: str, yes: bool, partitions: int | None) -> None:
    """Delete every message in QUEUE; the queue stays.

    Messages that workers have taken but not yet deleted go too. On Azure a big queue takes
    several Clear Messages calls; a spinner shows on a terminal while they run.

    \b
    Examples:
      cloudqueue queues clear invoices
      cloudqueue queues clear invoices-poison --yes
    """
    checked_queue(queue)
    refuse_unattended(yes, f"clear {queue}")
    with _partitioned(queue, partitions) as (storage, where), _existing(queue, where):
        depth = storage.approximate_message_count(queue)
        if not yes:
            click.confirm(f"Delete all {depth} message(s) in {queue} on {where}?", abort=True)
        with progress_spinner(f"clearing {queue}"):
            storage.clear_queue(queue)
    click.echo(f"cleared {queue} on {where} ({depth} message(s) before)")


@queues_group.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (required when stdin is no terminal).")
@PARTITIONS_OPTION
def delete(queue: str, yes: bool, partitions: int | None) -> None:
    """Delete QUEUE and all its messages.

    On Azure the name stays reserved for 40 s or more afterwards: creating the queue again
    meanwhile fails with 409 QueueBeingDeleted.

    \b
    Examples:
      cloudqueue queues delete scratch
      cloudqueue queues delete scratch --yes
    """
    checked_queue(queue)
    refuse_unattended(yes, f"delete {queue}")
    with _partitioned(queue, partitions) as (storage, where), _existing(queue, where):
        if not yes:
            depth = storage.approximate_message_count(queue)
            click.confirm(f"Delete {queue} and its {depth} message(s) on {where}?", abort=True)
        storage.delete_queue(queue)
    click.echo(f"deleted {queue} on {where}")


@queues_group.command("merge-plain")
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (required when stdin is no terminal).")
def merge_plain(queue: str, yes: bool) -> None:
    """Move the messages of a plain QUEUE onto QUEUE's partitions, where its workers read them.

    A producer that did not know QUEUE is partitioned (an old enqueue, another SDK, a Functions
    binding) put them on the plain queue of that name, which partitioned workers never read.
    Each message goes to a partition round-robin with its content and remaining time-to-live,
    put there first and deleted from the plain queue second (an interruption leaves a
    duplicate, never a loss). Messages invisible just now (delayed, or taken) stay: run it
    again later. The plain queue itself stays.

    \b
    Examples:
      cloudqueue queues merge-plain orders
      cloudqueue queues merge-plain orders --yes
    """
    checked_queue(queue)
    refuse_unattended(yes, f"move the messages of the plain queue {queue}")
    with _partitioned(queue, None) as (storage, where):
        depth = plain_queue_depth(storage, queue)
        if depth is None:
            raise BadInput(
                f"queue {queue} is not partitioned on {where}: its workers read the plain "
                "queue itself, so there is nothing to merge"
            )
        if not yes:
            click.confirm(
                f"Move {depth} message(s) from the plain queue {queue} to its partitions on "
                f"{where}?",
                abort=True,
            )
        moved = merge_plain_queue(storage, queue, now=utc_now())
        left = plain_queue_depth(storage, queue) or 0
    click.echo(f"moved {moved} message(s) from the plain queue {queue} to its partitions ({where})")
    if left:
        click.echo(f"{left} message(s) stay on the plain queue (invisible now): run it again later")


@contextmanager
def _partitioned(queue: str, partitions: int | None) -> Iterator[tuple[QueueStorage, str]]:
    """The configured storage, seeing QUEUE as its partitions when it is partitioned."""
    with (
        configured_storage() as (storage, where),
        partitioned_view(storage, current_settings(), queue, partitions) as view,
    ):
        yield view, where


def _record(storage: QueueStorage, queue: str, layout: QueueLayout) -> None:
    """Record a partitioned queue's layout on account 0, where every command and worker finds
    it (a plain queue needs no record)."""
    if not layout.plain and read_layout(storage, queue) != layout:
        record_layout(storage, queue, layout)


def _exists(storage: QueueStorage, queue: str) -> bool:
    """Whether the queue (every partition of a partitioned one) exists already."""
    if not isinstance(storage, PartitionedQueueStorage):
        return queue in storage.list_queues(queue)
    listed = set(storage.list_queues(queue))
    return all(p.queue_name in listed for p in storage.partitions_of(queue) if p.writable)


@contextmanager
def _existing(queue: str, where: str) -> Iterator[None]:
    """Turn QueueNotFoundError into exit code 1 with a message naming the queue and storage."""
    try:
        yield
    except QueueNotFoundError:
        raise click.ClickException(f"queue {queue} does not exist on {where}") from None


def _note(row: dict[str, object]) -> str:
    """What a row of ``queues list`` is, when it is not simply a queue."""
    if "partitions" in row:
        return f"  (total of {row['partitions']} partitions)"
    if row.get("beside_partitions"):
        return "  (plain queue beside the partitions below)"
    return ""


@contextmanager
def progress_spinner(
    label: str,
    *,
    stream: TextIO | None = None,
    delay_s: float = SPINNER_DELAY_S,
    interval_s: float = SPINNER_INTERVAL_S,
) -> Iterator[None]:
    """While the block runs, show a spinner and the elapsed seconds on a terminal.

    It appears only once the block has run for ``delay_s``, and never when ``stream`` (stderr by
    default) is not a terminal; the line is erased at the end.
    """
    output = stream or sys.stderr
    if not output.isatty():
        yield
        return
    done = threading.Event()
    started = time.monotonic()

    def spin() -> None:
        if done.wait(delay_s):
            return
        for frame in itertools.cycle("|/-\\"):
            output.write(f"\r{frame} {label} ({time.monotonic() - started:.0f} s)")
            output.flush()
            if done.wait(interval_s):
                break
        output.write("\r\x1b[K")
        output.flush()

    spinner = threading.Thread(target=spin, name="progress-spinner", daemon=True)
    spinner.start()
    try:
        yield
    finally:
        done.set()
        spinner.join()
