"""``cloudqueue run``: host workers in this process until a signal."""

from __future__ import annotations

import sys

import click

from listener.errors import ConfigurationError
from listener.redaction import redact
from workers.cli.common import current_settings
from workers.host import WorkerHost
from workers.logging import configure_logging
from workers.worker import load_worker


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="MODULE:CLASS...")
def run(targets: tuple[str, ...]) -> None:
    """Run workers until SIGTERM/SIGINT, then drain in-flight items and exit.

    \b
    Examples:
      cloudqueue run examples.billing:InvoiceWorker
      CLOUDQUEUE_SCALING__MAX_THREADS=8 cloudqueue run app.workers:Processor app.workers:Controller
    """
    settings = current_settings()
    configure_logging(settings.logging)
    try:
        host = WorkerHost([load_worker(target) for target in targets], settings)
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error
    sys.exit(host.run())
