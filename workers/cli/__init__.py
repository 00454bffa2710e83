"""The ``cloudqueue`` command line (``python -m workers`` too).

Built on click, the well-kept standard for Python command lines, so every command has ``--help``
with examples. Each command lives in its own module; this one only assembles the group.
"""

from __future__ import annotations

from pathlib import Path

import click

from workers.cli.common import CONFIG_ERROR_EXIT
from workers.cli.config_cmd import config_group
from workers.cli.demo import demo
from workers.cli.messages import enqueue
from workers.cli.poison import poison_group
from workers.cli.queues import queues_group
from workers.cli.run import run
from workers.cli.status import status
from workers.cli.trigger import trigger


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    type=click.Path(path_type=Path),
    default=None,
    help="TOML settings file (default: $CLOUDQUEUE_CONFIG, else config/cloudqueue.toml).",
)
def cli(config: Path | None) -> None:
    """cloudqueue: auto-scaling queue workers for Azure Storage Queues.

    The storage comes from CLOUDQUEUE_CONNECTION_STRING (an Azure connection string,
    sqlite:///path or memory://); unset means the embedded store .cloudqueue/queues.db.
    """


for command in (run, enqueue, status, config_group, demo, queues_group, poison_group, trigger):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="cloudqueue")


__all__ = ["CONFIG_ERROR_EXIT", "cli", "main"]
