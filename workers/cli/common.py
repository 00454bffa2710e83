"""What every command shares: settings, storage, queue-name checks and error translation.

Configuration errors exit with code 2 (click's usage error) and a one-line message naming the
field; storage errors exit with code 1. Secrets are never printed: every message passes ``redact``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click
import pydantic

from listener.errors import CloudQueueError, ConfigurationError
from listener.redaction import redact
from listener.stores.connection import describe_storage, open_storage
from listener.stores.storage import QueueStorage, validate_queue_name
from workers.logging import configure_logging
from workers.settings import CloudQueueSettings, load_settings

CONFIG_ERROR_EXIT = 2


def current_settings(overrides: Mapping[str, Any] | None = None) -> CloudQueueSettings:
    """The effective settings, with the root command's --config file and CLI overrides."""
    config = click.get_current_context().find_root().params.get("config")
    try:
        settings = load_settings(config, **(overrides or {}))
    except pydantic.ValidationError as error:
        raise click.UsageError(redact(one_line(error))) from error
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error
    # Every command logs through the redacting pipeline to stderr: structlog's unconfigured
    # default would print to stdout, into the command's output, and unredacted.
    configure_logging(settings.logging)
    return settings


def import_from_working_directory() -> None:
    """Let ``module:Class`` arguments name modules in the working directory, as ``python -m``."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())


def one_line(error: pydantic.ValidationError) -> str:
    """The first validation problem as one line naming the field (and the value, unless secret)."""
    first = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "settings"
    message = f"invalid setting {field}: {first['msg']}"
    if "connection_string" in field or not isinstance(first.get("input"), str | int | float):
        return message  # never echo a secret, nor a whole nested structure
    return f"{message} (got {first['input']!r})"


def parse_overrides(assignments: tuple[str, ...]) -> dict[str, Any]:
    """``("scaling.max_threads=8", ...)`` as nested settings overrides (validated on load)."""
    overrides: dict[str, Any] = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator or not key.strip():
            raise click.UsageError(
                f"--set takes KEY=VALUE, e.g. scaling.max_threads=8; got {key!r}"
            )
        *sections, field = key.strip().split(".")
        target = overrides
        for section in sections:
            target = target.setdefault(section, {})
        target[field] = value
    return overrides


@contextmanager
def opened_storage(settings: CloudQueueSettings) -> Iterator[QueueStorage]:
    """Storage for one command, closed afterwards; storage failures become exit code 1."""
    try:
        storage = open_storage(settings.connection_string_value(), credential=settings.credential)
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error
    try:
        yield storage
    except CloudQueueError as error:
        raise click.ClickException(redact(str(error))) from error
    finally:
        storage.close()


def checked_queue(queue: str) -> str:
    """The queue name, or a usage error saying what a valid one looks like."""
    try:
        return validate_queue_name(queue)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from error


@contextmanager
def configured_storage() -> Iterator[tuple[QueueStorage, str]]:
    """The configured storage (closed afterwards) and its safe description, for messages."""
    settings = current_settings()
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    with opened_storage(settings) as storage:
        yield storage, where


def refuse_unattended(yes: bool, action: str) -> None:
    """Refuse a destructive action nobody can confirm: no --yes and stdin is not a terminal."""
    if not yes and not sys.stdin.isatty():
        raise click.UsageError(
            f"refusing to {action} without --yes: stdin is not a terminal to confirm on"
        )
