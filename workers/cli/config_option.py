"""The ``--config`` option every command accepts, before or after its name, and where it is kept.

Only click here: the root group adds this option to every command before any command's module
is imported, and ``cloudqueue --version`` imports this module and nothing heavier.
"""

from __future__ import annotations

from pathlib import Path

import click

CONFIG_ERROR_EXIT = 2
"""The exit code of invalid configuration or arguments (``common.BadInput``)."""

CONFIG_HELP = "TOML settings file (default: $CLOUDQUEUE_CONFIG, else config/cloudqueue.toml)."

_CONFIG_FILE = "cloudqueue.config_file"


def remember_config_file(ctx: click.Context, _: click.Parameter, value: Path | None) -> None:
    """``--config`` callback, before or after the subcommand: the last one given wins."""
    if value is not None:
        ctx.find_root().meta[_CONFIG_FILE] = value


def config_option() -> click.Option:
    """The ``--config`` option that every command accepts."""
    return click.Option(
        ["--config"],
        type=click.Path(path_type=Path),
        default=None,
        expose_value=False,
        is_eager=True,
        callback=remember_config_file,
        help=CONFIG_HELP,
    )


def config_file() -> Path | None:
    """The ``--config`` given on the command line, if any."""
    path: Path | None = click.get_current_context().find_root().meta.get(_CONFIG_FILE)
    return path


__all__ = ["CONFIG_ERROR_EXIT", "CONFIG_HELP", "config_file", "config_option"]
