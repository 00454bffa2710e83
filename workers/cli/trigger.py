"""``cloudqueue trigger``: send a WorkDetected push trigger by hand."""

from __future__ import annotations

import click

from cloudqueue.listener.push.triggers import WorkDetected, account_of
from cloudqueue.workers.cli.common import BadInput, checked_queue, current_settings
from cloudqueue.workers.settings.connections import open_trigger_channel


@click.command()
@click.argument("queue")
def trigger(queue: str) -> None:
    """Tell listeners of QUEUE that work is waiting (needs CLOUDQUEUE_TRIGGERS__URL).

    Useful after enqueueing with a tool that sends no triggers, or to test the wiring.

    \b
    Examples:
      CLOUDQUEUE_TRIGGERS__URL=redis://127.0.0.1:6379/0 cloudqueue trigger invoices
    """
    settings = current_settings()
    checked_queue(queue)
    channel = open_trigger_channel(settings)
    if channel is None:
        raise BadInput("no trigger channel: set triggers.url (CLOUDQUEUE_TRIGGERS__URL)")
    try:
        event = WorkDetected(
            account=account_of(settings.connection_string_value()), queue_name=queue
        )
        if not channel.publish(event):
            raise click.ClickException("the trigger channel is unreachable; see the log above")
    finally:
        channel.close()
    click.echo(f"trigger sent for {queue}")
