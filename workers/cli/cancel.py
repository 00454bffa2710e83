"""``cloudqueue cancel``: withdraw the queued messages of one or more keys."""

from __future__ import annotations

import click

from cloudqueue.listener.errors import QueueNotFoundError
from cloudqueue.listener.producer.cancelling import CANCEL_HOLD_S, cancel_keys
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.stores.key_connection import open_key_ledger
from cloudqueue.listener.stores.key_records import Cancelled
from cloudqueue.listener.wire.keys import check_key
from cloudqueue.workers.cli.common import (
    BadInput,
    checked_queue,
    current_settings,
    json_text,
    opened_storage,
)
from cloudqueue.workers.cli.durations import Duration
from cloudqueue.workers.host.partitioning import partitioned_view

_SAID: dict[Cancelled, str] = {
    "cancelled": "cancelled: its queued messages will be deleted unhandled",
    "too_late": "too late: a message of it is being handled now and finishes "
    "(messages of it still queued are cancelled)",
    "done": "too late: a message of it was already handled (messages of it still queued are "
    "cancelled)",
}


@click.command()
@click.argument("queue")
@click.argument("keys", nargs=-1, required=True)
@click.option(
    "--hold",
    "hold_s",
    type=Duration(),
    default=CANCEL_HOLD_S,
    show_default="7d",
    help="How long the cancel holds: messages of the key fetched later are handled again.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: key -> result.")
def cancel(*, queue: str, keys: tuple[str, ...], hold_s: int, as_json: bool) -> None:
    """Cancel KEYS on QUEUE: a worker deletes their messages unhandled when it next fetches them.

    A key is the one a message carries (enqueue --key FIELD, Publisher(key=...)) or the worker's
    key(item). The cancel is recorded in the queue's own store; workers check it before each
    keyed message (the cancel.check setting). A key a worker is handling right now is reported
    too late: that message finishes. Exit code 2 when the queue does not exist.

    \b
    Examples:
      cloudqueue cancel reminders user-7 user-9
      cloudqueue cancel reminders user-7 --hold 30d
    """
    checked_queue(queue)
    if hold_s <= 0:
        raise click.UsageError("--hold must be longer than 0s")
    for key in keys:
        try:
            check_key(key)
        except ValueError as error:
            raise BadInput(f"key {key[:40]!r}: {error}") from None
    settings = current_settings()
    connection_string = settings.connection_string_value()
    where = describe_storage(connection_string, credential=settings.credential)
    with opened_storage(settings) as opened, partitioned_view(opened, settings, queue) as storage:
        try:
            storage.approximate_message_count(queue)
        except QueueNotFoundError:
            raise BadInput(f"queue {queue} does not exist on {where}") from None
        ledger = open_key_ledger(connection_string, credential=settings.credential)
        try:
            answers = cancel_keys(ledger, queue, keys, hold_s=hold_s)
        finally:
            ledger.close()
    if as_json:
        click.echo(json_text(answers))
        return
    for key, answer in answers.items():
        click.echo(f"{json_text(key)} on {queue}: {_SAID[answer]}")


__all__ = ["cancel"]
