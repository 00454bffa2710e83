"""The ``cloudqueue`` command line (``python -m cloudqueue`` too).

Built on click, the well-kept standard for Python command lines, so every command has ``--help``
with examples. Each command lives in its own module, imported only when the command runs
(``LazyGroup``); this one names them, gives every command the ``--config`` option, and routes
every command's errors through one path.
"""

from __future__ import annotations

from typing import Any

import click

from cloudqueue._version import __version__
from cloudqueue.workers.cli.config_option import CONFIG_ERROR_EXIT, config_option
from cloudqueue.workers.cli.lazy_group import LazyCommand, LazyGroup

COMMANDS = {
    "cancel": LazyCommand(
        "cloudqueue.workers.cli.cancel:cancel",
        "Cancel KEYS on QUEUE: a worker deletes their messages unhandled when it next fetches "
        "them.",
    ),
    "config": LazyCommand(
        "cloudqueue.workers.cli.config_cmd:config_group",
        "Inspect the settings a worker would run with.",
    ),
    "dashboard": LazyCommand(
        "cloudqueue.workers.cli.dashboard:dashboard",
        "Serve a live web dashboard of QUEUES and of every queue a running worker publishes.",
    ),
    "demo": LazyCommand(
        "cloudqueue.workers.cli.demo:demo",
        "Drain a burst of invoices with an auto-scaling worker on the embedded store.",
    ),
    "enqueue": LazyCommand(
        "cloudqueue.workers.cli.messages:enqueue",
        "Put ITEMS (or one item per line of stdin) on QUEUE, creating it if needed.",
    ),
    "groups": LazyCommand(
        "cloudqueue.workers.cli.groups:groups_group",
        "Show the groups sent with send_group: counts, age and members still pending.",
    ),
    "poison": LazyCommand(
        "cloudqueue.workers.cli.poison:poison_group",
        "Inspect, requeue and purge the poison queue of QUEUE (QUEUE-poison).",
    ),
    "queues": LazyCommand(
        "cloudqueue.workers.cli.queues:queues_group", "List, create, clear and delete queues."
    ),
    "replay": LazyCommand(
        "cloudqueue.workers.cli.replay:replay_command",
        "Put a profile's arrivals on QUEUE, sped up, while a worker with the given settings "
        "drains it here; print the measured transactions and pickup beside the simulator's "
        "prediction.",
    ),
    "run": LazyCommand(
        "cloudqueue.workers.cli.run:run",
        "Run workers and periodic jobs until SIGTERM/SIGINT, then drain in-flight items and exit.",
    ),
    "simulate": LazyCommand(
        "cloudqueue.workers.cli.simulate:simulate",
        "Simulate a workload under several polling policies and compare what they cost.",
    ),
    "status": LazyCommand(
        "cloudqueue.workers.cli.status:status",
        "Show the approximate depth of QUEUE and of its poison queue, and the workers on it.",
    ),
    "trigger": LazyCommand(
        "cloudqueue.workers.cli.trigger:trigger",
        "Tell listeners of QUEUE that work is waiting (needs CLOUDQUEUE_TRIGGERS__URL).",
    ),
    "tune": LazyCommand(
        "cloudqueue.workers.cli.tune:tune_command",
        "Find the cheapest settings that meet pickup and drain goals for a recorded workload.",
    ),
}
"""Every command, imported when it runs: ``cloudqueue --version`` or ``enqueue`` imports neither
the host nor the dashboard. Each summary is the first sentence of the command's help (a test
holds them equal), so that ``cloudqueue --help`` lists the commands without importing them."""


class CloudQueueGroup(LazyGroup):
    """The root group: ``--config`` on every subcommand, one error path for all of them."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _give_config_option(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        # Imported here: the settings and stores it names are what --version must not import.
        from cloudqueue.workers.cli.common import translated_errors

        with translated_errors():
            return super().invoke(ctx)


def _give_config_option(command: click.Command) -> None:
    """``cloudqueue run --config f.toml`` works as ``cloudqueue --config f.toml run`` does."""
    if not any(param.name == "config" for param in command.params):
        command.params.append(config_option())
    if isinstance(command, click.Group):
        for subcommand in command.commands.values():
            _give_config_option(subcommand)


@click.group(
    cls=CloudQueueGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="cloudqueue")
def cli() -> None:
    """cloudqueue: auto-scaling queue workers for Azure Storage Queues.

    The storage comes from CLOUDQUEUE_CONNECTION_STRING: an Azure Storage connection string,
    memory:// (one process only: for `run` and `demo`), or sqlite:///PATH -- three slashes for a
    path relative to the working directory (sqlite:///data/q.db), four for an absolute one
    (sqlite:////var/lib/q.db). Unset means the embedded store .cloudqueue/queues.db.
    """


cli.params.append(config_option())


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="cloudqueue")


__all__ = ["CONFIG_ERROR_EXIT", "cli", "main"]
