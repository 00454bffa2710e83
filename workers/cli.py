"""The ``cloudqueue`` command line: run workers, enqueue items, show queue status.

Built on click (the well-kept standard for Python CLIs) so every command has ``--help``.
Configuration errors exit with code 2 and a one-line message; secrets are never printed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import click
import pydantic

from listener.codec import MessageCodec
from listener.connection import describe_storage, open_storage
from listener.errors import CloudQueueError, ConfigurationError, QueueNotFoundError
from listener.poison import poison_queue_name
from listener.redaction import redact
from listener.storage import QueueStorage, validate_queue_name
from workers.host import WorkerHost
from workers.logging import configure_logging
from workers.settings import CloudQueueSettings, load_settings
from workers.worker import load_worker

CONFIG_ERROR_EXIT = 2


def _settings() -> CloudQueueSettings:
    config = click.get_current_context().find_root().params.get("config")
    try:
        return load_settings(config)
    except pydantic.ValidationError as error:
        raise click.UsageError(redact(_one_line(error))) from error
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error


def _one_line(error: pydantic.ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "settings"
    message = f"invalid setting {field}: {first['msg']}"
    if "connection_string" in field or not isinstance(first.get("input"), str | int | float):
        return message  # never echo a secret, nor a whole nested structure
    return f"{message} (got {first['input']!r})"


def _storage(settings: CloudQueueSettings) -> QueueStorage:
    try:
        return open_storage(settings.connection_string_value())
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error


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


@cli.command()
@click.argument("targets", nargs=-1, required=True, metavar="MODULE:CLASS...")
def run(targets: tuple[str, ...]) -> None:
    """Run workers until SIGTERM/SIGINT, then drain in-flight items and exit.

    Example: cloudqueue run examples.billing:InvoiceWorker
    """
    settings = _settings()
    configure_logging(settings.logging)
    try:
        host = WorkerHost([load_worker(target) for target in targets], settings)
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error
    sys.exit(host.run())


@cli.command()
@click.argument("queue")
@click.argument("items", nargs=-1)
@click.option("--plain", is_flag=True, help="Store the text as is instead of base64.")
def enqueue(queue: str, items: tuple[str, ...], plain: bool) -> None:
    """Put ITEMS (or one item per line of stdin) on QUEUE, creating it if needed.

    Example: cloudqueue enqueue invoices '{"invoice_id": 1, "amount_cents": 990}'
    """
    settings = _settings()
    storage = _storage(settings)
    codec = MessageCodec(str, base64=not plain)
    try:
        _checked_queue(queue)
        storage.create_queue(queue)
        count = 0
        for item in _items(items):
            storage.put_message(queue, codec.encode(item))
            count += 1
    except CloudQueueError as error:
        raise click.ClickException(redact(str(error))) from error
    finally:
        storage.close()
    where = describe_storage(settings.connection_string_value())
    click.echo(f"enqueued {count} item(s) on {queue} ({where})")


def _items(arguments: Iterable[str]) -> Iterator[str]:
    given = list(arguments)
    if given:
        yield from given
        return
    for line in sys.stdin:
        stripped = line.rstrip("\n")
        if stripped:
            yield stripped


@cli.command()
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(queue: str, as_json: bool) -> None:
    """Show the approximate depth of QUEUE and of its poison queue.

    Example: cloudqueue status invoices --json
    """
    settings = _settings()
    storage = _storage(settings)
    try:
        _checked_queue(queue)
        depth = storage.approximate_message_count(queue)
        poison_depth = _depth_or_zero(storage, poison_queue_name(queue))
    except CloudQueueError as error:
        raise click.ClickException(redact(str(error))) from error
    finally:
        storage.close()
    report = {"queue": queue, "depth": depth, "poison_depth": poison_depth}
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(f"{queue}: {depth} message(s), poison: {poison_depth}")


def _checked_queue(queue: str) -> None:
    try:
        validate_queue_name(queue)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from error


def _depth_or_zero(storage: QueueStorage, queue: str) -> int:
    try:
        return storage.approximate_message_count(queue)
    except QueueNotFoundError:
        return 0


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="cloudqueue")


__all__ = ["CONFIG_ERROR_EXIT", "cli", "main"]
