"""The command-line reference: every ``cloudqueue`` command, as its own ``--help`` prints it.

Walks the click group the console script runs, so a command added there is on the page at the
next build, with the help text its users see on a terminal.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from cloudqueue.workers.cli import cli

PROGRAM = "cloudqueue"
HELP_WIDTH = 78
"""Narrow enough for the page's text column: help blocks read without scrolling sideways."""


def command_paths(
    command: click.Command = cli, path: tuple[str, ...] = (PROGRAM,)
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command with its full name (``("cloudqueue", "poison", "requeue")``), groups first."""
    yield path, command
    if isinstance(command, click.Group):
        context = click.Context(command, info_name=path[-1])
        for name in command.list_commands(context):  # the root's are imported on first ask
            subcommand = command.get_command(context, name)
            if subcommand is not None:
                yield from command_paths(subcommand, (*path, name))


def help_text(path: tuple[str, ...], command: click.Command) -> str:
    """What ``PATH --help`` prints, at a fixed width so the page does not depend on a terminal."""
    parent: click.Context | None = None
    for name in path[:-1]:
        parent = click.Context(cli, info_name=name, parent=parent)
    context = click.Context(
        command,
        info_name=path[-1],
        parent=parent,
        terminal_width=HELP_WIDTH,
        max_content_width=HELP_WIDTH,
    )
    return command.get_help(context)


def render() -> str:
    """One section per command: its full name as a heading, then its help in a text block."""
    parts: list[str] = []
    for path, command in command_paths():
        heading = "#" * min(len(path) + 1, 4)
        parts.append(f"{heading} `{' '.join(path)}`\n")
        parts.append(f"```text\n{help_text(path, command)}\n```\n")
    return "\n".join(parts)
