"""``cloudqueue enqueue``: put work on a queue, now or later, from arguments or stdin."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext

import click

from cloudqueue.listener import tracing
from cloudqueue.listener.clock import SYSTEM_CLOCK
from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.delays import plan_timing
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.push.triggers import account_of
from cloudqueue.listener.stores.connection import describe_storage, open_payload_store_if_available
from cloudqueue.listener.stores.partition_names import MAX_PARTITIONS
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.workers.cli.common import BadInput, checked_queue, current_settings, opened_storage
from cloudqueue.workers.cli.durations import Duration
from cloudqueue.workers.host.partitioning import PARTITIONS_HELP, partitioned_view
from cloudqueue.workers.settings.connections import open_trigger_channel


@click.command()
@click.argument("queue")
@click.argument("items", nargs=-1)
@click.option("--plain", is_flag=True, help="Store the text as is instead of base64.")
@click.option(
    "--batch", is_flag=True, help="Pack many items per message (gzip), for small items in bulk."
)
@click.option(
    "--trace-envelope",
    is_flag=True,
    help="With opentelemetry installed, carry the trace context of single items too, in a "
    "one-item envelope (only cloudqueue listeners read it; not for Azure Functions).",
)
@click.option(
    "--delay",
    "delay_s",
    type=Duration(),
    default=0,
    help="Keep the items invisible this long (30s, 5m, 1h, 30d; past 7d a worker hides them "
    "again every 7 days until then).",
)
@click.option(
    "--ttl",
    "time_to_live_s",
    type=Duration(allow_never=True),
    default=None,
    help="Expire the items this long after the put, handled or not (1h, 30d, never) "
    "[7d after the delay].",
)
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), help=PARTITIONS_HELP)
@click.option(
    "--key",
    "key_field",
    help="Give each item the key in this JSON field: it travels with the message (idempotent "
    "handling, per-key limits, cancel) and routes it (one key, one partition) [no key].",
)
def enqueue(
    *,
    queue: str,
    items: tuple[str, ...],
    plain: bool,
    batch: bool,
    trace_envelope: bool,
    delay_s: int,
    time_to_live_s: int | None,
    partitions: int | None,
    key_field: str | None,
) -> None:
    """Put ITEMS (or one item per line of stdin) on QUEUE, creating it if needed.

    An ITEM "-" stands for the lines of stdin, as in most Unix tools: to put the text "-"
    itself, send it on stdin.

    Items too large for a message are compressed, then kept in blob storage (or the embedded
    store's payload folder) with a reference in the queue. With triggers configured
    (CLOUDQUEUE_TRIGGERS__URL), listeners are told about the new work. With opentelemetry
    installed, the put continues the trace named by $TRACEPARENT, if set.

    \b
    Examples:
      cloudqueue enqueue invoices '{"invoice_id": 1, "customer": "acme", "lines": []}'
      cat items.jsonl | cloudqueue enqueue invoices --batch
      cat more.jsonl | cloudqueue enqueue invoices '{"invoice_id": 1}' -
      cloudqueue enqueue reminders '{"user": 7}' --delay 30m --ttl 1d
      cloudqueue enqueue renewals '{"user": 7}' --delay 30d
      cloudqueue enqueue orders '{"customer": "acme"}' --partitions 4 --key customer
    """
    settings = current_settings()
    checked_queue(queue)
    _check_times(delay_s, time_to_live_s)
    if items.count(STDIN) > 1:
        raise click.UsageError("'-' (stdin) may be given only once")
    connection_string = settings.connection_string_value()
    channel = open_trigger_channel(settings)
    announcer = (
        None
        if channel is None
        else WorkAnnouncer(
            channel, account=account_of(connection_string), mode=settings.triggers.publish
        )
    )
    payload_store = None
    try:
        with (
            opened_storage(settings) as opened,
            partitioned_view(opened, settings, queue, partitions) as storage,
        ):
            storage.create_queue(queue)
            payload_store = open_payload_store_if_available(
                connection_string, credential=settings.credential
            )
            publisher = Publisher(
                storage,
                queue,
                str,
                codec=MessageCodec(str, base64=not plain),
                payload_store=payload_store,
                batch=batch,
                announcer=announcer,
                trace_envelope=trace_envelope,
                key=None if key_field is None else _json_field(key_field),
            )
            with (
                tracing.context_from_environment(),
                _counted(_items(items), label=f"enqueueing on {queue}") as pending,
            ):
                try:
                    publisher.publish_many(pending, delay_s=delay_s, time_to_live_s=time_to_live_s)
                except ValueError as error:  # an item without its --key field
                    raise BadInput(f"{error} ({publisher.items_sent} sent before it)") from None
    finally:
        if payload_store is not None:
            payload_store.close()
        if channel is not None:
            channel.close()
    click.echo(
        f"enqueued {publisher.items_sent} item(s) on {queue} in {publisher.messages_sent} "
        f"message(s) ({describe_storage(connection_string, credential=settings.credential)})"
    )


def _json_field(field: str) -> Callable[[str], str]:
    """A message key: the item's JSON field ``field`` (ValueError naming it when missing)."""

    def key(text: str) -> str:
        try:
            return str(json.loads(text)[field])
        except (ValueError, KeyError, TypeError, IndexError):
            raise ValueError(
                f"--key {field}: the item {text[:40]!r} is not a JSON object with that field"
            ) from None

    return key


def _check_times(delay_s: int, time_to_live_s: int | None) -> None:
    """Refuse a delay or TTL the publisher would refuse, before storage is opened or stdin read."""
    try:
        plan_timing(delay_s, time_to_live_s, now=SYSTEM_CLOCK.now())
    except ValueError as error:
        message = str(error).replace("delay_s", "--delay").replace("time_to_live_s", "--ttl")
        raise BadInput(f"{message} (values in seconds)") from None


STDIN = "-"
"""As an item, "read the items from stdin here", as in most Unix tools."""

STDIN_HINT = "reading items from stdin, one per line; Ctrl-D to finish"


def _items(arguments: Iterable[str]) -> Iterator[str]:
    """The given items, with stdin's lines in place of ``-``; stdin's lines when none is given."""
    for item in list(arguments) or [STDIN]:
        if item == STDIN:
            yield from _stdin_lines()
        else:
            yield item


def _stdin_lines() -> Iterator[str]:
    # Someone typing needs to know the command waits for them, and how to end; a pipe does not.
    if sys.stdin.isatty():
        click.echo(STDIN_HINT, err=True)
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
