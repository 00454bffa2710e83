"""``cloudqueue poison``: look at what a queue's listeners gave up on, then requeue or purge it.

Every command takes the main queue's name (``invoices``) and works on its poison queue
(``invoices-poison``). A poison message is a JSON record (``listener.poison.PoisonRecord``), or the
original content itself when wrapping it would have exceeded 64 KiB; such an *unwrapped* message
has no original id, so the commands also accept the poison message's own id.

``list`` and ``show`` leave the poison queue as it is. ``requeue`` and ``purge`` change it, so they
ask first on a terminal and refuse to run unattended (stdin not a terminal) without ``--yes``. A
missing queue or message is exit code 1; an invalid queue name or option is exit code 2.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

import click

from listener.errors import DecodeError, QueueNotFoundError
from listener.messages.payload import ENVELOPE_KEY, parse_envelope
from listener.messages.poison import (
    PoisonRecord,
    browse_poisoned,
    find_poisoned,
    poison_queue_name,
    read_record,
    requeue_poisoned,
    requeue_poisoned_by_id,
)
from listener.stores.partition_names import MAX_PARTITIONS
from listener.stores.storage import MAX_BATCH_SIZE, QueueMessage, QueueStorage
from workers.cli.common import (
    checked_queue,
    configured_storage,
    current_settings,
    refuse_unattended,
)
from workers.cli.queues import progress_spinner
from workers.partitioning import PARTITIONS_HELP, partitioned_view

ERROR_WIDTH = 80
"""The most characters of an error's first line that ``list`` shows."""

_UNWRAPPED = "(unwrapped: the original content, kept as it is)"
_YES_HELP = "Do not ask (required when stdin is no terminal)."


@click.group("poison")
def poison_group() -> None:
    """Inspect, requeue and purge the poison queue of QUEUE (QUEUE-poison).

    \b
    Examples:
      cloudqueue poison list invoices
      cloudqueue poison show invoices 5f0c2a4e-0c1d-4d7e-9a55-2b1f0e6c9d10
      cloudqueue poison requeue invoices --yes
      cloudqueue poison purge invoices --yes
    """


@poison_group.command("list")
@click.argument("queue")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=MAX_BATCH_SIZE,
    show_default=True,
    help="List at most N messages.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object a message.")
def list_poisoned(queue: str, limit: int, as_json: bool) -> None:
    """List the poisoned messages of QUEUE.

    Each with its original id, reason, dequeue count, time and error: the first line of the last
    one; `show` prints the whole record. Up to 32 messages
    are peeked, which changes nothing. A longer --limit reads further by taking messages and
    making them visible again at once, so a requeue running meanwhile may miss some for a moment.

    \b
    Examples:
      cloudqueue poison list invoices
      cloudqueue poison list invoices --limit 500
      cloudqueue poison list invoices --json | jq -r '.[].original_id'
    """
    checked_queue(queue)
    source = poison_queue_name(queue)
    with configured_storage(announce=True) as (storage, where):
        depth = _poison_depth(storage, queue, where)
        rows = [poison_summary(message) for message in browse_poisoned(storage, queue, limit=limit)]
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False))
    elif not rows:
        click.echo(f"no poisoned messages in {source} on {where}")
    else:
        _print_table(rows)
        if depth > len(rows):
            click.echo(f"showing {len(rows)} of about {depth} in {source}: use --limit for more")


@poison_group.command()
@click.argument("queue")
@click.argument("original_id")
@click.option("--json", "as_json", is_flag=True, help="Print the record as one JSON object.")
def show(queue: str, original_id: str, as_json: bool) -> None:
    """Show the whole poison record of one message of QUEUE.

    ORIGINAL_ID is the id `list` shows. The record says where and when the message was poisoned,
    why, the first and the last error, and its content: decoded when it is base64 of UTF-8 JSON
    (what `enqueue` and the default codec send), summed up when it is a cloudqueue envelope
    (compressed, batched or stored items), else as it is. The JSON output also carries the
    content verbatim, under "content".

    \b
    Examples:
      cloudqueue poison show invoices 5f0c2a4e-0c1d-4d7e-9a55-2b1f0e6c9d10
      cloudqueue poison show invoices 5f0c2a4e-0c1d-4d7e-9a55-2b1f0e6c9d10 --json | jq .error
    """
    checked_queue(queue)
    with configured_storage(announce=True) as (storage, where):
        _poison_depth(storage, queue, where)
        message = find_poisoned(storage, queue, original_id)
    if message is None:
        raise _not_found(queue, original_id, where)
    details = _details(queue, message)
    if as_json:
        click.echo(json.dumps(details, ensure_ascii=False))
    else:
        click.echo(_render(details))


@poison_group.command()
@click.argument("queue")
@click.option("--limit", type=click.IntRange(min=1), help="Requeue at most N (default: all).")
@click.option("--id", "original_id", help="Requeue only the message with this id, as `list` shows.")
@click.option("--yes", "-y", is_flag=True, help=_YES_HELP)
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), help=PARTITIONS_HELP)
def requeue(
    queue: str, limit: int | None, original_id: str | None, yes: bool, partitions: int | None
) -> None:
    """Move poisoned messages back to QUEUE with their original content.

    Do it once the cause is fixed: the messages are handled again from a dequeue count of 1. Each
    is put back before it leaves the poison queue, so an interruption leaves a duplicate, never a
    loss. QUEUE must exist. A partitioned queue's message goes back to the partition it came from.

    \b
    Examples:
      cloudqueue poison requeue invoices
      cloudqueue poison requeue invoices --limit 10 --yes
      cloudqueue poison requeue invoices --id 5f0c2a4e-0c1d-4d7e-9a55-2b1f0e6c9d10 --yes
    """
    checked_queue(queue)
    if limit is not None and original_id is not None:
        raise click.UsageError("use --limit or --id, not both")
    source = poison_queue_name(queue)
    refuse_unattended(yes, f"requeue from {source}")
    with (
        configured_storage() as (opened, where),
        # A partitioned queue's messages go back to their own partitions, on their own accounts.
        partitioned_view(opened, current_settings(), queue, partitions) as storage,
    ):
        _depth(storage, queue, where)
        depth = _poison_depth(storage, queue, where)
        if original_id is not None:
            _requeue_one(storage, queue, original_id, where=where, yes=yes)
            return
        count = depth if limit is None else min(limit, depth)
        if not yes and count:
            click.confirm(
                f"Move {count} poisoned message(s) from {source} back to {queue} on {where}?",
                abort=True,
            )
        moved = requeue_poisoned(storage, queue, limit=limit)
    click.echo(f"requeued {moved} message(s) from {source} to {queue} on {where}")


@poison_group.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help=_YES_HELP)
def purge(queue: str, yes: bool) -> None:
    """Delete every poisoned message of QUEUE.

    They cannot be requeued afterwards.

    \b
    Examples:
      cloudqueue poison purge invoices
      cloudqueue poison purge invoices --yes
    """
    checked_queue(queue)
    source = poison_queue_name(queue)
    refuse_unattended(yes, f"purge {source}")
    with configured_storage() as (storage, where):
        depth = _poison_depth(storage, queue, where)
        if not yes:
            click.confirm(
                f"Delete all {depth} poisoned message(s) in {source} on {where}?", abort=True
            )
        with progress_spinner(f"purging {source}"):
            storage.clear_queue(source)
    click.echo(f"purged {source} on {where} ({depth} message(s) before)")


def _requeue_one(
    storage: QueueStorage, queue: str, wanted_id: str, *, where: str, yes: bool
) -> None:
    message = find_poisoned(storage, queue, wanted_id)
    if message is None:
        raise _not_found(queue, wanted_id, where)
    if not yes:
        record = read_record(message.content)
        reason = f" ({record.reason})" if record else ""
        click.confirm(f"Move message {wanted_id}{reason} back to {queue} on {where}?", abort=True)
    if not requeue_poisoned_by_id(storage, queue, wanted_id):
        raise _not_found(queue, wanted_id, where)  # requeued or purged by someone else meanwhile
    click.echo(
        f"requeued message {wanted_id} from {poison_queue_name(queue)} to {queue} on {where}"
    )


# -- Storage access -------------------------------------------------------------------------------


def _depth(storage: QueueStorage, queue: str, where: str, *, hint: str = "") -> int:
    """The queue's approximate depth; exit code 1 naming the queue when it does not exist."""
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        raise click.ClickException(f"queue {queue} does not exist on {where}{hint}") from None


def _poison_depth(storage: QueueStorage, queue: str, where: str) -> int:
    """The approximate depth of the queue's poison queue (exit code 1 when there is none)."""
    hint = " (a listener creates it when it starts)"
    return _depth(storage, poison_queue_name(queue), where, hint=hint)


def _not_found(queue: str, wanted_id: str, where: str) -> click.ClickException:
    source = poison_queue_name(queue)
    return click.ClickException(f"no poisoned message with id {wanted_id} in {source} on {where}")


# -- What a poison message says -------------------------------------------------------------------


def poison_summary(message: QueueMessage) -> dict[str, Any]:
    """One ``list`` row: ids, reason, dequeue count, time and the first line of the last error."""
    record = read_record(message.content)
    if record is None:
        return {
            "original_id": None,
            "poison_id": message.id,
            "reason": None,
            "dequeue_count": None,
            "poisoned_on": None,
            "error": _UNWRAPPED,
        }
    first_line = record.error.strip().partition("\n")[0]
    if len(first_line) > ERROR_WIDTH:
        first_line = first_line[: ERROR_WIDTH - 3] + "..."
    return {
        "original_id": record.original_id,
        "poison_id": message.id,
        "reason": record.reason,
        "dequeue_count": record.dequeue_count,
        "poisoned_on": record.poisoned_on,
        "error": first_line,
    }


def _print_table(rows: list[dict[str, Any]]) -> None:
    table = [
        [
            row["original_id"] or row["poison_id"],
            row["reason"] or "-",
            "-" if row["dequeue_count"] is None else str(row["dequeue_count"]),
            _seconds(row["poisoned_on"]),
            row["error"],
        ]
        for row in rows
    ]
    header = ["ORIGINAL ID", "REASON", "DEQUEUES", "POISONED ON", "ERROR"]
    widths = [max(len(cells[column]) for cells in [header, *table]) for column in range(4)]
    for cells in [header, *table]:
        aligned = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
        click.echo("  ".join([*aligned, cells[4]]))


def _seconds(timestamp: str | None) -> str:
    """An ISO time to the second (the record keeps microseconds); "-" when there is none."""
    if timestamp is None:
        return "-"
    try:
        return datetime.fromisoformat(timestamp).isoformat(sep=" ", timespec="seconds")
    except ValueError:
        return timestamp


def _details(queue: str, message: QueueMessage) -> dict[str, Any]:
    """The whole record (fields None when the message is unwrapped) and a view of its content."""
    record = read_record(message.content)
    if record is None:
        values: dict[str, Any] = {field.name: None for field in fields(PoisonRecord)}
        values.update(queue=queue, content=message.content)
    else:
        values = asdict(record)
    return {
        "poison_id": message.id,
        "wrapped": record is not None,
        **values,
        "content_view": content_view(values["content"]),
    }


def content_view(content: str) -> dict[str, Any]:
    """How to show a message's content: a cloudqueue envelope's header, decoded base64 JSON, or raw.

    ``{"format": "envelope", "kind", "count", "inner", "bytes", "blob"}`` (or ``"error"`` when the
    envelope is malformed), ``{"format": "base64-json", "value"}``, or ``{"format": "raw"}``.
    """
    try:
        envelope = parse_envelope(content)
    except DecodeError as error:
        return {"format": "envelope", "error": str(error)}
    if envelope is not None:
        if envelope.packed is not None:
            size = len(envelope.packed.data)
        else:
            size = json.loads(content)[ENVELOPE_KEY].get("bytes")
        return {
            "format": "envelope",
            "kind": envelope.kind,
            "count": envelope.count,
            "inner": envelope.inner,
            "bytes": size,
            "blob": envelope.payload_name,
        }
    try:
        value = json.loads(base64.b64decode(content, validate=True).decode("utf-8"))
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {"format": "raw"}
    return {"format": "base64-json", "value": value}


def _render(details: dict[str, Any]) -> str:
    """``show``'s text: one labelled line a field, multi-line values indented below their label."""
    lines = [("poison id", details["poison_id"])]
    if details["wrapped"]:
        lines += [
            ("original id", details["original_id"]),
            ("queue", details["queue"]),
            ("reason", details["reason"]),
            ("dequeue count", str(details["dequeue_count"])),
            ("inserted on", details["inserted_on"]),
            ("poisoned on", details["poisoned_on"]),
            ("worker", details["worker"]),
            ("first error", details["first_error"]),
            ("last error", details["error"]),
        ]
    else:
        lines.append(("record", _UNWRAPPED + ": wrapping it would have exceeded 64 KiB"))
    lines.append(("content", _content_text(details["content"], details["content_view"])))
    return "\n".join(_labelled(label, value) for label, value in lines)


def _content_text(content: str, view: dict[str, Any]) -> str:
    if view["format"] == "envelope":
        if "error" in view:
            return f"malformed cloudqueue envelope, {len(content)} characters: {view['error']}"
        where = f", stored as {view['blob']}" if view["blob"] else ""
        return (
            f"cloudqueue envelope: {view['kind']}, {view['count']} item(s), "
            f"{view['bytes']} bytes compressed ({view['inner']} items){where}"
        )
    if view["format"] == "base64-json":
        decoded = json.dumps(view["value"], indent=2, ensure_ascii=False)
        return f"base64 of JSON, decoded:\n{decoded}"
    return "(empty)" if content == "" else f"raw text:\n{content}"


def _labelled(label: str, value: str) -> str:
    first, *rest = value.splitlines() or [""]
    return "\n".join([f"{label + ':':<15} {first}", *(f"{'':16}{line}" for line in rest)])
