"""What every command shares: settings, storage, queue-name checks and error translation.

Configuration errors exit with code 2 and one line naming the source and the field
(``BadInput``); storage errors exit with code 1. ``translated_errors`` is the one boundary where
the project's errors become those exits, for every command. Secrets are never printed: every
message passes ``redact``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import pydantic
import structlog

from cloudqueue.listener.errors import CloudQueueError, ConfigurationError, StorageError
from cloudqueue.listener.redaction import redact
from cloudqueue.listener.stores.connection import describe_storage, outlives_process
from cloudqueue.listener.stores.storage import QueueStorage, validate_queue_name
from cloudqueue.workers.cli.config_option import CONFIG_ERROR_EXIT, config_file
from cloudqueue.workers.logging import configure_logging
from cloudqueue.workers.settings import CloudQueueSettings, load_settings
from cloudqueue.workers.settings.connections import open_storage_from_settings
from cloudqueue.workers.settings.keys import closest, known_keys

if TYPE_CHECKING:  # hinted only: `config show` must not import the worker API to check one
    from cloudqueue.workers.api.worker import QueueWorker

SECRET_FIELDS = frozenset({"connection_string", "triggers.url", "dashboard.token"})

log = structlog.get_logger(__name__)


class BadInput(click.ClickException):
    """Invalid configuration or arguments: one line on stderr, exit code 2, no usage text."""

    exit_code = CONFIG_ERROR_EXIT

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


@contextmanager
def translated_errors() -> Iterator[None]:
    """The one error path of every command: project errors become one line and an exit code."""
    try:
        yield
    except pydantic.ValidationError as error:
        raise BadInput(one_line(error)) from None
    except ConfigurationError as error:
        raise BadInput(str(error)) from None
    except CloudQueueError as error:
        raise click.ClickException(redact(str(error))) from None


def current_settings(overrides: Mapping[str, Any] | None = None) -> CloudQueueSettings:
    """The effective settings, with the --config file and CLI overrides; exit 2 if invalid."""
    with translated_errors():
        settings = load_settings(config_file(), **(overrides or {}))
    # Every command logs through the redacting pipeline to stderr: structlog's unconfigured
    # default would print to stdout, into the command's output, and unredacted.
    configure_logging(settings.logging)
    return settings


def import_from_working_directory() -> None:
    """Let ``module:Class`` arguments name modules in the working directory, as ``python -m``."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())


def one_line(error: pydantic.ValidationError, source: str | None = None) -> str:
    """The first validation problem as one line naming the field (and the value, unless secret).

    ``source`` says where the values came from when one source holds them all (a worker class).
    """
    first = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"])
    where = f" in {source}" if source else ""
    if first["type"] == "extra_forbidden":
        suggestion = closest(field, known_keys(CloudQueueSettings))
        hint = f": did you mean {suggestion}?" if suggestion else ""
        return f"unknown setting {field}{where}{hint}"
    reason = first["msg"].removeprefix("Value error, ")
    if not field:  # a rule across sections, e.g. min_threads = 0 needs triggers.url
        return f"invalid settings{where}: {reason}"
    message = f"invalid setting {field}{where}: {reason}"
    if field in SECRET_FIELDS or not isinstance(first.get("input"), str | int | float):
        return message  # never echo a secret, nor a whole nested structure
    return f"{message} (got {first['input']!r})"


def worker_settings(
    settings: CloudQueueSettings, target: str, worker_type: type[QueueWorker[Any]]
) -> CloudQueueSettings:
    """The worker class's effective settings; an invalid override names the worker and field."""
    source = f"settings of {target}"
    try:
        return settings.for_worker(worker_type.settings, source=source)
    except pydantic.ValidationError as error:
        raise BadInput(one_line(error, source)) from None


def parse_overrides(assignments: tuple[str, ...]) -> dict[str, Any]:
    """``("scaling.max_threads=8", ...)`` as nested settings overrides (validated on load)."""
    overrides: dict[str, Any] = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator or not key.strip():
            raise BadInput(f"--set takes KEY=VALUE, e.g. scaling.max_threads=8; got {key!r}")
        *sections, field = key.strip().split(".")
        target = overrides
        for section in sections:
            target = target.setdefault(section, {})
        target[field] = value
    return overrides


@contextmanager
def opened_storage(settings: CloudQueueSettings) -> Iterator[QueueStorage]:
    """Storage for one short command, closed afterwards; storage failures become exit code 1.

    ``memory://`` is refused (exit 2): its queues would vanish with this process, so what the
    command did could be seen by no other. A store that cannot be opened is exit code 2 too.
    """
    connection_string = settings.connection_string_value()
    if not outlives_process(connection_string):
        raise BadInput(
            "memory:// keeps queues inside one process, so this command's work would be lost "
            "when it exits: use sqlite:///PATH or an Azure Storage connection string"
        )
    try:
        storage = open_storage_from_settings(settings)
    except StorageError as error:
        where = describe_storage(connection_string, credential=settings.credential)
        raise BadInput(f"cannot open {where}: {error}") from None
    try:
        with translated_errors():
            yield storage
    finally:
        storage.close()


def checked_queue(queue: str) -> str:
    """The queue name, or an error (exit code 2) saying what a valid one looks like."""
    try:
        return validate_queue_name(queue)
    except ConfigurationError as error:
        raise BadInput(str(error)) from None


@contextmanager
def configured_storage(*, announce: bool = False) -> Iterator[tuple[QueueStorage, str]]:
    """The configured storage (closed afterwards) and its safe description, for messages.

    With ``announce`` the store and its absolute path are logged: for commands whose output may
    not name it (the others print ``where`` in their result line, once is enough).
    """
    settings = current_settings()
    where = describe_storage(settings.connection_string_value(), credential=settings.credential)
    with opened_storage(settings) as storage:
        if announce:
            log.info("store_opened", storage=where)
        yield storage, where


def json_text(value: Any) -> str:
    """``value`` as the JSON the commands print: every non-ASCII character escaped, as the JSON
    logs have it, so no control character reaches a terminal raw and nothing is shortened."""
    return json.dumps(value, ensure_ascii=True)


def refuse_unattended(yes: bool, action: str) -> None:
    """Refuse a destructive action nobody can confirm: no --yes and stdin is not a terminal."""
    if not yes and not sys.stdin.isatty():
        raise BadInput(f"refusing to {action} without --yes: stdin is not a terminal to confirm on")
