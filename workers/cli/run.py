"""``cloudqueue run``: host workers until a signal, in this process or under a supervisor."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import pydantic
from rich.console import Console

from listener.errors import StorageError
from listener.stores.connection import describe_storage
from workers.cli.common import (
    BadInput,
    config_file,
    current_settings,
    import_from_working_directory,
    one_line,
    parse_overrides,
)
from workers.host import WorkerHost
from workers.logging import configure_logging
from workers.observability.multiprocess import SupervisorEndpoint
from workers.progress import ConsoleStream, LiveProgress, shows_progress
from workers.settings import CloudQueueSettings
from workers.supervisor import Supervisor
from workers.worker import QueueWorker, load_worker


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
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    metavar="PORT",
    help="Serve /metrics, /healthz and /readyz on this port "
    "(the same as --set observability.metrics_port=PORT).",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a setting (highest priority), e.g. --set scaling.max_threads=8. Repeatable.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Append the workload this worker sees to FILE, for `cloudqueue tune` "
    "(the same as --set observability.record_path=FILE).",
)
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="On a terminal, a live status line per queue: depth, threads, processed.",
)
def run(
    *,
    targets: tuple[str, ...],
    processes: int,
    metrics_port: int | None,
    assignments: tuple[str, ...],
    record: Path | None,
    progress: bool,
) -> None:
    """Run workers until SIGTERM/SIGINT, then drain in-flight items and exit.

    A second SIGTERM/SIGINT exits at once; unfinished messages reappear after their
    visibility timeout, so nothing is lost.

    \b
    Examples:
      cloudqueue run examples.billing:InvoiceWorker
      cloudqueue run app.workers:Processor app.workers:Controller --set scaling.max_threads=8
      cloudqueue run app.workers:Renderer --processes 4
      cloudqueue run app.workers:Renderer --processes 4 --metrics-port 9464
      cloudqueue run app.workers:Renderer --record day.jsonl
    """
    if metrics_port is not None:
        assignments = (*assignments, f"observability.metrics_port={metrics_port}")
    if record is not None:
        assignments = (*assignments, f"observability.record_path={record}")
    # First: a custom scaling rule beside the worker module is imported while settings validate.
    import_from_working_directory()
    settings = current_settings(parse_overrides(assignments))
    worker_types = [load_worker(target) for target in targets]
    for target, worker_type in zip(targets, worker_types, strict=True):
        worker_settings(settings, target, worker_type)  # fail here, not in every child
    if processes > 1:
        sys.exit(_supervise(settings, _child_command(targets, assignments), processes))
    try:
        host = WorkerHost(worker_types, settings)
    except StorageError as error:  # the store it names cannot be opened
        where = describe_storage(settings.connection_string_value(), credential=settings.credential)
        raise BadInput(f"cannot start on {where}: {error}") from None
    console = Console(stderr=True)
    if not shows_progress(console, wanted=progress):
        sys.exit(host.run())
    # Log lines print above the status line instead of tearing it.
    configure_logging(settings.logging, stream=ConsoleStream(console))
    with LiveProgress(host.listeners, console=console, depth_of=host.storage.last_depth):
        code = host.run()
    sys.exit(code)


def _supervise(settings: CloudQueueSettings, command: list[str], processes: int) -> int:
    """Run the children under a supervisor; with metrics on, it serves them all on one port."""
    port = settings.observability.metrics_port
    if port is None:
        return Supervisor(command, processes, grace_s=settings.shutdown_grace_s).run()
    endpoint = SupervisorEndpoint(settings.observability, port)
    supervisor = Supervisor(
        command,
        processes,
        grace_s=settings.shutdown_grace_s,
        child_env=endpoint.child_environment,
        observer=endpoint,
    )
    endpoint.start()
    try:
        return supervisor.run()
    finally:
        endpoint.close()


def worker_settings(
    settings: CloudQueueSettings, target: str, worker_type: type[QueueWorker[Any]]
) -> CloudQueueSettings:
    """The worker class's effective settings; an invalid override names the worker and field."""
    source = f"settings of {target}"
    try:
        return settings.for_worker(worker_type.settings, source=source)
    except pydantic.ValidationError as error:
        raise BadInput(one_line(error, source)) from None


def _child_command(targets: tuple[str, ...], assignments: tuple[str, ...]) -> list[str]:
    """The same run, in one process, with the same config file and overrides."""
    config = config_file()
    command = [sys.executable, "-m", "workers"]
    if config is not None:
        command += ["--config", str(config)]
    # One terminal cannot show a status line per child: the children print their logs only.
    command += ["run", "--no-progress", *targets]
    for assignment in assignments:
        command += ["--set", assignment]
    return command
