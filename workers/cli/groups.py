"""``cloudqueue groups``: the groups of the queue's store, and one group's counts and members.

Groups are read from the ledger in the same store as the queues (see
``cloudqueue.listener.workflows.group_ledger``); these commands only read. An unknown group id is
exit code 1, naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import click

from cloudqueue.listener.clock import SYSTEM_CLOCK
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.listener.workflows.group_ledger import GroupLedger
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.cli.common import BadInput, current_settings, json_text, opened_storage
from cloudqueue.workers.cli.status_text import progress_line
from cloudqueue.workers.host.live_progress import running_progress
from cloudqueue.workers.logging import printable
from cloudqueue.workers.settings import CloudQueueSettings
from cloudqueue.workers.views.groups import group_detail, group_rows


@click.group("groups")
def groups_group() -> None:
    """Show the groups sent with send_group: counts, age and members still pending."""


@groups_group.command("show")
@click.argument("group_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
def show(*, group_id: str, as_json: bool) -> None:
    """Show GROUP_ID: total, handled, poisoned and pending members, its age, the first pending
    members' ids, and the progress its running members last reported (read from the live state
    of the workers that publish it here). Exit code 1 when there is no such group.

    \b
    Example:
      cloudqueue groups show 3f2a9c01 --json
    """
    settings = current_settings()
    with group_ledger(settings) as ledger:
        detail = group_detail(ledger, group_id, SYSTEM_CLOCK.now())
    if detail is None:
        raise click.ClickException(f"no group {printable(group_id)!r} in this store")
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    running = running_progress(settings.state_dir, storage=where, group=group_id)
    detail["progress"] = [asdict(report) for report in running]
    if as_json:
        click.echo(json_text(detail))
        return
    click.echo(_summary(detail))
    for report in running:
        click.echo(progress_line(report))
    pending: list[str] = detail["pending_members"]
    if pending:
        more = detail["pending"] - len(pending)
        tail = f" (and {more} more)" if more > 0 else ""
        click.echo(f"pending members: {', '.join(pending)}{tail}")


@groups_group.command("list")
@click.option("--running", is_flag=True, help="Only groups with members still pending.")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Newest N."
)
@click.option("--json", "as_json", is_flag=True, help="A JSON array instead of text.")
def list_groups(*, running: bool, limit: int, as_json: bool) -> None:
    """List the newest groups with their counts, state and age.

    \b
    Examples:
      cloudqueue groups list
      cloudqueue groups list --running --json
    """
    with group_ledger(current_settings()) as ledger:
        rows = group_rows(ledger, SYSTEM_CLOCK.now(), limit=limit, running_only=running)
    if as_json:
        click.echo(json_text(rows))
    elif not rows:
        click.echo("no running groups" if running else "no groups")
    for row in [] if as_json else rows:
        click.echo(_summary(row))


@contextmanager
def group_ledger(settings: CloudQueueSettings) -> Iterator[GroupLedger]:
    """The group ledger of the configured store (exit code 2 where groups are not kept)."""
    with opened_storage(settings) as storage:
        ledger = group_ledger_for(storage)
        if ledger is None:
            raise BadInput("groups are kept in the embedded stores (SQLite) for now")
        yield ledger


def _summary(row: dict[str, Any]) -> str:
    return (
        f"{printable(row['group'])}  {row['state']}  {row['handled']} handled, "
        f"{row['poisoned']} poisoned, {row['pending']} pending of {row['total']}  "
        f"age {_age(row['age_s'])}  -> {printable(row['on_complete'])}"
    )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


__all__ = ["groups_group"]
