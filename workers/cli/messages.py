"""``cloudqueue enqueue`` and ``cloudqueue status``: put work on a queue and look at it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict

import click

from listener.errors import QueueNotFoundError
from listener.messages.codec import MessageCodec
from listener.messages.poison import poison_queue_name
from listener.messages.publisher import Publisher
from listener.push.announce import WorkAnnouncer
from listener.push.triggers import account_of
from listener.stores.connection import describe_storage, open_payload_store_if_available
from listener.stores.storage import QueueStorage
from workers.cli.common import checked_queue, current_settings, opened_storage
from workers.host import open_trigger_channel
from workers.live_state import LiveState, QueueLiveState, read_live_states, utc_now


@click.command()
@click.argument("queue")
@click.argument("items", nargs=-1)
@click.option("--plain", is_flag=True, help="Store the text as is instead of base64.")
@click.option(
    "--batch", is_flag=True, help="Pack many items per message (gzip), for small items in bulk."
)
def enqueue(queue: str, items: tuple[str, ...], plain: bool, batch: bool) -> None:
    """Put ITEMS (or one item per line of stdin) on QUEUE, creating it if needed.

    Items too large for a message are compressed, then kept in blob storage (or the embedded
    store's payload folder) with a reference in the queue. With triggers configured
    (CLOUDQUEUE_TRIGGERS__URL), listeners are told about the new work.

    \b
    Examples:
      cloudqueue enqueue invoices '{"invoice_id": 1, "customer": "acme", "lines": []}'
      cat items.jsonl | cloudqueue enqueue invoices --batch
    """
    settings = current_settings()
    checked_queue(queue)
    connection_string = settings.connection_string_value()
    channel = open_trigger_channel(settings)
    announcer = (
        None
        if channel is None
        else WorkAnnouncer(
            channel, account=account_of(connection_string), mode=settings.triggers.publish
        )
    )
    try:
        with opened_storage(settings) as storage:
            storage.create_queue(queue)
            publisher = Publisher(
                storage,
                queue,
                str,
                codec=MessageCodec(str, base64=not plain),
                payload_store=open_payload_store_if_available(
                    connection_string, credential=settings.credential
                ),
                batch=batch,
                announcer=announcer,
            )
            with _counted(_items(items), label=f"enqueueing on {queue}") as pending:
                publisher.publish_many(pending)
    finally:
        if channel is not None:
            channel.close()
    click.echo(
        f"enqueued {publisher.items_sent} item(s) on {queue} in {publisher.messages_sent} "
        f"message(s) ({describe_storage(connection_string, credential=settings.credential)})"
    )


def _items(arguments: Iterable[str]) -> Iterator[str]:
    given = list(arguments)
    if given:
        yield from given
        return
    for line in sys.stdin:
        stripped = line.rstrip("\n")
        if stripped:
            yield stripped


def _counted(items: Iterator[str], *, label: str) -> AbstractContextManager[Iterable[str]]:
    """The items, with a running count on stderr when it is a terminal (and nothing otherwise).

    The number of lines on stdin is unknown, so it shows a count rather than a bar.
    """
    stderr = sys.stderr
    if not stderr.isatty():
        return nullcontext(items)
    return click.progressbar(
        items, label=label, file=stderr, show_pos=True, bar_template="%(label)s: %(info)s"
    )


@click.command()
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(queue: str, as_json: bool) -> None:
    """Show the approximate depth of QUEUE and of its poison queue, and the workers on it.

    Workers are the running `cloudqueue run` processes that publish their live state (threads,
    counters, measured rate) in the state_dir setting's folder (.cloudqueue/run by default).

    \b
    Examples:
      cloudqueue status invoices
      cloudqueue status invoices --json
    """
    settings = current_settings()
    checked_queue(queue)
    with opened_storage(settings) as storage:
        report = {
            "queue": queue,
            "depth": storage.approximate_message_count(queue),
            "poison_depth": _depth_or_zero(storage, poison_queue_name(queue)),
        }
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    running = [
        (state, listener)
        for state in read_live_states(settings.state_dir, queue, storage=where)
        for listener in state.listening_on(queue)
    ]
    if as_json:
        click.echo(json.dumps({**report, "workers": [_worker_report(*item) for item in running]}))
    else:
        click.echo(f"{queue}: {report['depth']} message(s), poison: {report['poison_depth']}")
        for item in running:
            click.echo(_worker_line(*item))
        if not running:
            click.echo(f"  no running worker publishes its state in {settings.state_dir}")


def _depth_or_zero(storage: QueueStorage, queue: str) -> int:
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        return 0


def _worker_report(state: LiveState, listener: QueueLiveState) -> dict[str, object]:
    """One running listener on the queue: its process, threads, counters and measured rate."""
    measured = {key: value for key, value in asdict(listener).items() if key != "queue"}
    process = {"pid": state.pid, "host": state.host, "worker": state.worker}
    return {**process, "updated_at": state.updated_at.isoformat(), **measured}


def _worker_line(state: LiveState, listener: QueueLiveState) -> str:
    rate = listener.per_thread_rate_per_s
    speed = "no rate measured yet" if rate is None else f"{rate:.1f} msg/s per thread"
    age_s = (utc_now() - state.updated_at).total_seconds()
    return (
        f"  {state.host}-{state.pid} ({state.worker}): {listener.active_threads} thread(s), "
        f"peak {listener.peak_threads}; processed {listener.processed}, failed {listener.failed}, "
        f"poisoned {listener.poisoned}, dequeue errors {listener.dequeue_errors}, "
        f"in flight {listener.in_flight}; {speed}; updated {age_s:.0f} s ago"
    )
