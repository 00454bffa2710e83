"""``cloudqueue run``: host workers until a signal, in this process or under a supervisor."""

from __future__ import annotations

import sys

import click

from listener.errors import ConfigurationError
from listener.redaction import redact
from workers.cli.common import current_settings, import_from_working_directory, parse_overrides
from workers.host import WorkerHost
from workers.supervisor import Supervisor
from workers.worker import load_worker


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="MODULE:CLASS...")
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes to run under one supervising parent (for CPU-bound handlers).",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a setting (highest priority), e.g. --set scaling.max_threads=8. Repeatable.",
)
def run(targets: tuple[str, ...], processes: int, assignments: tuple[str, ...]) -> None:
    """Run workers until SIGTERM/SIGINT, then drain in-flight items and exit.

    A second SIGTERM/SIGINT exits at once; unfinished messages reappear after their
    visibility timeout, so nothing is lost.

    \b
    Examples:
      cloudqueue run examples.billing:InvoiceWorker
      cloudqueue run app.workers:Processor app.workers:Controller --set scaling.max_threads=8
      cloudqueue run app.workers:Renderer --processes 4
    """
    settings = current_settings(parse_overrides(assignments))
    import_from_working_directory()
    try:
        worker_types = [load_worker(target) for target in targets]
        for worker_type in worker_types:
            settings.for_worker(worker_type.settings)  # fail here, not in every child
        if processes > 1:
            command = _child_command(targets, assignments)
            sys.exit(Supervisor(command, processes, grace_s=settings.shutdown_grace_s).run())
        host = WorkerHost(worker_types, settings)
    except ConfigurationError as error:
        raise click.UsageError(redact(str(error))) from error
    sys.exit(host.run())


def _child_command(targets: tuple[str, ...], assignments: tuple[str, ...]) -> list[str]:
    """The same run, in one process, with the same config file and overrides."""
    config = click.get_current_context().find_root().params.get("config")
    command = [sys.executable, "-m", "workers"]
    if config is not None:
        command += ["--config", str(config)]
    command += ["run", *targets]
    for assignment in assignments:
        command += ["--set", assignment]
    return command
