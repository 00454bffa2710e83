"""``cloudqueue enqueue`` and ``cloudqueue status``: put work on a queue and look at it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator

import click

from listener.codec import MessageCodec
from listener.connection import describe_storage
from listener.errors import QueueNotFoundError
from listener.poison import poison_queue_name
from listener.storage import QueueStorage
from workers.cli.common import checked_queue, current_settings, opened_storage


@click.command()
@click.argument("queue")
@click.argument("items", nargs=-1)
@click.option("--plain", is_flag=True, help="Store the text as is instead of base64.")
def enqueue(queue: str, items: tuple[str, ...], plain: bool) -> None:
    """Put ITEMS (or one item per line of stdin) on QUEUE, creating it if needed.

    \b
    Examples:
      cloudqueue enqueue invoices '{"invoice_id": 1, "customer": "acme", "lines": []}'
      cat items.jsonl | cloudqueue enqueue invoices
    """
    settings = current_settings()
    checked_queue(queue)
    codec = MessageCodec(str, base64=not plain)
    with opened_storage(settings) as storage:
        storage.create_queue(queue)
        count = 0
        for item in _items(items):
            storage.put_message(queue, codec.encode(item))
            count += 1
    where = describe_storage(settings.connection_string_value())
    click.echo(f"enqueued {count} item(s) on {queue} ({where})")


def _items(arguments: Iterable[str]) -> Iterator[str]:
    given = list(arguments)
    if given:
        yield from given
        return
    for line in sys.stdin:
        stripped = line.rstrip("\n")
        if stripped:
            yield stripped


@click.command()
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(queue: str, as_json: bool) -> None:
    """Show the approximate depth of QUEUE and of its poison queue.

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
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(f"{queue}: {report['depth']} message(s), poison: {report['poison_depth']}")


def _depth_or_zero(storage: QueueStorage, queue: str) -> int:
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        return 0
