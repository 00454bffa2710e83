"""A click group that imports a command's module only when that command runs.

Each command's module imports what the command needs (the host, the Azure SDK, Redis, the
dashboard's web stack...); importing all of them would make every command, ``--version``
included, start in a second and a half. ``LazyGroup`` knows each command by name, module and
one-line summary (``LazyCommand``): it imports a module when its command is resolved or its own
``--help`` is asked for, and lists the commands with their summaries without importing any.
A test holds each summary equal to the short help click would make from the command itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click
from click.exceptions import NoSuchCommand


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (``module:attribute``) and the one line ``--help`` lists it with."""

    path: str
    summary: str

    def load(self) -> click.Command:
        module, _, attribute = self.path.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.path} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group whose commands are imported on first use, named up front in ``lazy_commands``."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, LazyCommand], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        loaded = super().get_command(ctx, cmd_name)
        if loaded is not None or cmd_name not in self.lazy_commands:
            return loaded
        command = self.lazy_commands[cmd_name].load()
        self.add_command(command, cmd_name)  # what an eager group would have done up front
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except NoSuchCommand as error:  # click suggests from the loaded commands only
            raise NoSuchCommand(
                error.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, with the summaries of commands not imported yet."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self._short_help(ctx, name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, ctx: click.Context, name: str, limit: int) -> str:
        lazy = self.lazy_commands.get(name)
        if lazy is not None and name not in self.commands:
            # Shortened as click shortens a loaded command's help (a stand-in holding the text).
            return click.Command(name, help=lazy.summary).get_short_help_str(limit)
        command = super().get_command(ctx, name)
        return "" if command is None else command.get_short_help_str(limit)


__all__ = ["LazyCommand", "LazyGroup"]
