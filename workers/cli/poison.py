"""``cloudqueue poison``: look at what a queue's listeners gave up on, then requeue or purge it.

Every command takes the main queue's name (``invoices``) and works on its poison queue
(``invoices-poison``). A poison message is a JSON record
(``cloudqueue.listener.poison.record.PoisonRecord``), or the original content itself when wrapping
it would have exceeded 64 KiB; such an *unwrapped* message has no original id, so the commands also
accept the poison message's own id. Any id may be given as a unique prefix (as git takes commits);
an ambiguous one lists the candidates (exit code 2).

Anyone who may add messages to the poison queue can write anything there: every command shows a
message that holds no valid record as "not a readable poison record", with why and its start, and
``requeue`` leaves such a record where it is. Text output escapes control characters (a terminal
would act on them); JSON output escapes every non-ASCII character and is never shortened.

``list`` and ``show`` leave the poison queue as it is. ``requeue`` and ``purge`` change it, so they
ask first on a terminal and refuse to run unattended (stdin not a terminal) without ``--yes``. A
missing queue or message is exit code 1; an invalid queue name or option is exit code 2.
"""

from __future__ import annotations

import click

from cloudqueue.listener.errors import AmbiguousIdError, QueueNotFoundError, UnreadableRecordError
from cloudqueue.listener.poison.queue import browse_poisoned, find_poisoned, poison_queue_name
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.poison.requeue import requeue_all, requeue_poisoned_by_id
from cloudqueue.listener.stores.partition_names import MAX_PARTITIONS
from cloudqueue.listener.stores.storage import MAX_BATCH_SIZE, QueueMessage, QueueStorage
from cloudqueue.workers.cli.common import (
    BadInput,
    checked_queue,
    configured_storage,
    current_settings,
    json_text,
    refuse_unattended,
)
from cloudqueue.workers.cli.poison_text import render, table_lines
from cloudqueue.workers.cli.queues import progress_spinner
from cloudqueue.workers.host.partitioning import PARTITIONS_HELP, partitioned_view
from cloudqueue.workers.logging import printable
from cloudqueue.workers.views.poison import details, poison_summary

MIN_PREFIX = 4
"""The shortest id prefix taken (git's minimum): shorter ones too easily name the wrong message."""

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
    one (--json has all of it; `show` prints the whole record). Up to 32 messages
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
        click.echo(json_text(rows))
    elif not rows:
        click.echo(f"no poisoned messages in {source} on {where}")
    else:
        click.echo("\n".join(table_lines(rows)))
        if depth > len(rows):
            click.echo(f"showing {len(rows)} of about {depth} in {source}: use --limit for more")


@poison_group.command()
@click.argument("queue")
@click.argument("original_id")
@click.option("--json", "as_json", is_flag=True, help="Print the record as one JSON object.")
def show(queue: str, original_id: str, as_json: bool) -> None:
    """Show the whole poison record of one message of QUEUE.

    ORIGINAL_ID is the id `list` shows, or a prefix of it no other id starts with (the 8
    characters the demo prints will do). The record says where and when the message was poisoned,
    why, the first and the last error, and its content: decoded when it is base64 of UTF-8 JSON
    (what `enqueue` and the default codec send), summed up when it is a cloudqueue envelope
    (compressed, batched or stored items), else as it is. The JSON output also carries the
    content verbatim, under "content".

    \b
    Examples:
      cloudqueue poison show invoices 5f0c2a4e-0c1d-4d7e-9a55-2b1f0e6c9d10
      cloudqueue poison show invoices 5f0c2a4e
      cloudqueue poison show invoices 5f0c2a4e-0c1d-4d7e-9a55-2b1f0e6c9d10 --json | jq .error
    """
    checked_queue(queue)
    with configured_storage(announce=True) as (storage, where):
        _poison_depth(storage, queue, where)
        message = _found(storage, queue, original_id, where)
    shown = details(queue, message)
    click.echo(json_text(shown) if as_json else render(shown))


@poison_group.command()
@click.argument("queue")
@click.option("--limit", type=click.IntRange(min=1), help="Requeue at most N (default: all).")
@click.option("--id", "original_id", help="Requeue only the message with this id or id prefix.")
@click.option("--yes", "-y", is_flag=True, help=_YES_HELP)
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), help=PARTITIONS_HELP)
def requeue(
    queue: str, limit: int | None, original_id: str | None, yes: bool, partitions: int | None
) -> None:
    """Move poisoned messages back to QUEUE with their original content.

    Do it once the cause is fixed: the messages are handled again from a dequeue count of 1. Each
    is put back before it leaves the poison queue, so an interruption leaves a duplicate, never a
    loss. QUEUE must exist. A partitioned queue's message goes back to the partition it came from.
    A poison message that claims to be a record but is not one (forged or damaged) is skipped,
    named on stderr, and stays in the poison queue.

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
        done = requeue_all(storage, queue, limit=limit)
    click.echo(f"requeued {done.moved} message(s) from {source} to {queue} on {where}")
    if done.skipped:
        click.echo(
            f"skipped {len(done.skipped)} unreadable poison record(s), left in {source}: "
            f"{', '.join(done.skipped)} (see `cloudqueue poison show {queue} ID`)",
            err=True,
        )


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
    message = _found(storage, queue, wanted_id, where)
    record = read_record(message.content)
    full_id = message.id if record is None else record.original_id
    if not yes:
        reason = f" ({printable(record.reason)})" if record else ""
        click.confirm(
            f"Move message {printable(full_id)}{reason} back to {queue} on {where}?", abort=True
        )
    try:
        moved = requeue_poisoned_by_id(storage, queue, full_id)
    except UnreadableRecordError as unreadable:
        raise click.ClickException(
            f"message {printable(full_id)} in {poison_queue_name(queue)} is not a readable "
            f"poison record ({printable(unreadable.problem)}): it stays there; see `show`"
        ) from None
    if not moved:
        raise _not_found(queue, wanted_id, where)  # requeued or purged by someone else meanwhile
    click.echo(
        f"requeued message {printable(full_id)} from {poison_queue_name(queue)} to {queue} "
        f"on {where}"
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


def _found(storage: QueueStorage, queue: str, wanted_id: str, where: str) -> QueueMessage:
    """The poison message with this id or unique id prefix; exit 1 if none, 2 if ambiguous."""
    try:
        message = find_poisoned(storage, queue, wanted_id, min_prefix=MIN_PREFIX)
    except AmbiguousIdError as ambiguous:
        candidates = "\n".join(f"  {printable(candidate)}" for candidate in ambiguous.candidates)
        raise BadInput(
            f"id {printable(wanted_id)} is ambiguous in {poison_queue_name(queue)}: "
            f"{len(ambiguous.candidates)} ids start with it; give more of one:\n{candidates}"
        ) from None
    if message is None and len(wanted_id) < MIN_PREFIX:
        raise BadInput(f"an id prefix needs at least {MIN_PREFIX} characters, as in git")
    if message is None:
        raise _not_found(queue, wanted_id, where)
    return message


def _not_found(queue: str, wanted_id: str, where: str) -> click.ClickException:
    source = poison_queue_name(queue)
    return click.ClickException(
        f"no poisoned message with id {printable(wanted_id)} in {source} on {where}"
    )
