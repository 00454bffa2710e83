"""The ``cloudqueue`` command line (``python -m cloudqueue`` too).

Built on click, the well-kept standard for Python command lines, so every command has ``--help``
with examples. Each command lives in its own module; this one only assembles the group, gives
every command the ``--config`` option, and routes every command's errors through one path.
"""

from __future__ import annotations

from typing import Any

import click

from cloudqueue.workers.cli.cancel import cancel
from cloudqueue.workers.cli.common import CONFIG_ERROR_EXIT, config_option, translated_errors
from cloudqueue.workers.cli.config_cmd import config_group
from cloudqueue.workers.cli.dashboard import dashboard
from cloudqueue.workers.cli.demo import demo
from cloudqueue.workers.cli.messages import enqueue
from cloudqueue.workers.cli.poison import poison_group
from cloudqueue.workers.cli.queues import queues_group
from cloudqueue.workers.cli.replay import replay_command
from cloudqueue.workers.cli.run import run
from cloudqueue.workers.cli.simulate import simulate
from cloudqueue.workers.cli.status import status
from cloudqueue.workers.cli.trigger import trigger
from cloudqueue.workers.cli.tune import tune_command


class CloudQueueGroup(click.Group):
    """The root group: ``--config`` on every subcommand, one error path for all of them."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _give_config_option(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        with translated_errors():
            return super().invoke(ctx)


def _give_config_option(command: click.Command) -> None:
    """``cloudqueue run --config f.toml`` works as ``cloudqueue --config f.toml run`` does."""
    if not any(param.name == "config" for param in command.params):
        command.params.append(config_option())
    if isinstance(command, click.Group):
        for subcommand in command.commands.values():
            _give_config_option(subcommand)


@click.group(cls=CloudQueueGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cloudqueue", prog_name="cloudqueue")
def cli() -> None:
    """cloudqueue: auto-scaling queue workers for Azure Storage Queues.

    The storage comes from CLOUDQUEUE_CONNECTION_STRING: an Azure Storage connection string,
    memory:// (one process only: for `run` and `demo`), or sqlite:///PATH -- three slashes for a
    path relative to the working directory (sqlite:///data/q.db), four for an absolute one
    (sqlite:////var/lib/q.db). Unset means the embedded store .cloudqueue/queues.db.
    """


cli.params.append(config_option())
commands = (run, enqueue, status, dashboard, config_group, demo, queues_group, poison_group)
for command in (*commands, cancel, trigger, simulate, tune_command, replay_command):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="cloudqueue")


__all__ = ["CONFIG_ERROR_EXIT", "cli", "main"]
