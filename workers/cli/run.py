"""``cloudqueue run``: host workers until a signal, in this process or under a supervisor."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import click
import structlog
from rich.console import Console

from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.workers.api.periodic_job import PeriodicJob, load_target
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.cli.common import (
    BadInput,
    current_settings,
    import_from_working_directory,
    parse_overrides,
    worker_settings,
)
from cloudqueue.workers.cli.config_option import config_file
from cloudqueue.workers.fleet.reload import run_reloading, watched_folders
from cloudqueue.workers.fleet.supervisor import Supervisor
from cloudqueue.workers.host.controls import controls_for
from cloudqueue.workers.host.host import WorkerHost
from cloudqueue.workers.host.partitioning import check_layouts, worker_queues
from cloudqueue.workers.logging import configure_logging
from cloudqueue.workers.progress import ConsoleStream, LiveProgress, shows_progress
from cloudqueue.workers.settings import CloudQueueSettings

log = structlog.get_logger(__name__)


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
@click.option(
    "--reload",
    is_flag=True,
    help="For development only: restart the workers when a .py file in their package changes "
    "(in-flight messages drain first). Needs cloudqueue[reload].",
)
def run(
    *,
    targets: tuple[str, ...],
    processes: int,
    metrics_port: int | None,
    assignments: tuple[str, ...],
    record: Path | None,
    progress: bool,
    reload: bool,
) -> None:
    """Run workers and periodic jobs until SIGTERM/SIGINT, then drain in-flight items and exit.

    Each MODULE:CLASS is a QueueWorker or a PeriodicJob; however many processes run a job on one
    store, each of its ticks fires once.

    A second SIGTERM/SIGINT exits at once; unfinished messages reappear after their
    visibility timeout, so nothing is lost.

    \b
    Examples:
      cloudqueue run examples.billing:InvoiceWorker
      cloudqueue run app.workers:Processor app.workers:Controller --set scaling.max_threads=8
      cloudqueue run app.workers:Renderer --processes 4
      cloudqueue run app.workers:Renderer --processes 4 --metrics-port 9464
      cloudqueue run app.workers:Renderer --record day.jsonl
      cloudqueue run hello_worker:HelloWorker --reload     # development only
      cloudqueue run app.jobs:NightlyReport app.workers:Processor   # a periodic job beside
    """
    if metrics_port is not None:
        assignments = (*assignments, f"observability.metrics_port={metrics_port}")
    if record is not None:
        assignments = (*assignments, f"observability.record_path={record}")
    # The working folder on the import path: workers and custom rules beside them import.
    import_from_working_directory()
    settings = current_settings(parse_overrides(assignments))
    loaded = {target: load_target(target) for target in targets}
    job_types = [found for found in loaded.values() if issubclass(found, PeriodicJob)]
    workers = {t: found for t, found in loaded.items() if issubclass(found, QueueWorker)}
    worker_targets, worker_types = list(workers), list(workers.values())
    # Checked here, not in every child; a custom rule is imported here, the only command that
    # runs code the settings name (docs/security/surfaces.md).
    effective = [
        worker_settings(settings, *pair) for pair in zip(worker_targets, worker_types, strict=True)
    ]
    for worker_type, options in zip(worker_types, effective, strict=True):
        options.scaling.build_rule()
        controls_for(worker_type, options)  # a batch wait longer than the time limit, ...
    queues = {
        queue: listener
        for worker_type, options in zip(worker_types, effective, strict=True)
        for queue, listener in worker_queues(worker_type, options.listener).items()
    }
    if reload:
        # The children run without --reload (and may show their status line); this one watches.
        command = _child_command(targets, assignments, progress=progress, processes=processes)
        supervisor = Supervisor(
            command, 1, grace_s=settings.shutdown_grace_s, wait_for_restart=True
        )
        sys.exit(run_reloading(supervisor, watched_folders(t.__module__ for t in loaded.values())))
    try:
        if processes > 1:
            check_layouts(settings, queues)  # a recorded layout they disagree with, too
            sys.exit(_supervise(settings, _child_command(targets, assignments), processes))
        host = WorkerHost(worker_types, settings, jobs=job_types)
    except StorageError as error:  # the store it names cannot be opened
        where = describe_storage(settings.connection_string_value(), credential=settings.credential)
        raise BadInput(f"cannot start on {where}: {error}") from None
    for target, worker_type, own in zip(worker_targets, worker_types, effective, strict=True):
        announce_concurrency(target, worker_type, own)
    console = Console(stderr=True)
    if not shows_progress(console, wanted=progress):
        sys.exit(host.run())
    # Log lines print above the status line instead of tearing it.
    configure_logging(settings.logging, stream=ConsoleStream(console))
    with LiveProgress(host.listeners, loops=host.consumers, console=console):
        code = host.run()
    sys.exit(code)


def _supervise(settings: CloudQueueSettings, command: list[str], processes: int) -> int:
    """Run the children under a supervisor; with metrics on, it serves them all on one port."""
    port = settings.observability.metrics_port
    if port is None:
        return Supervisor(command, processes, grace_s=settings.shutdown_grace_s).run()
    # Imported here: prometheus_client only when metrics are on.
    from cloudqueue.workers.observability.multiprocess import SupervisorEndpoint

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


def announce_concurrency(
    target: str, worker_type: type[QueueWorker[Any]], settings: CloudQueueSettings
) -> None:
    """Say once, at debug, that a plain ``def handle`` (or ``handle_batch``) runs on several
    threads at once, and what sets it: the docs (developing, "A plain def handle runs several at
    once") and ``QueueWorker.handle`` explain it; a log line at every start would be noise."""
    batches = worker_type.batches()
    handler = worker_type.handle_batch if batches else worker_type.handle
    if inspect.iscoroutinefunction(handler):
        return  # coroutines on one event loop: no two run Python code at the same moment
    per_thread = settings.listener.concurrency
    at_most = per_thread * settings.scaling.max_threads
    if at_most > 1:
        log.debug(
            "sync_handler_concurrency",
            worker=target,
            at_most=at_most,
            hint="thread-safe handler; set by listener.concurrency x scaling.max_threads",
        )


def _child_command(
    targets: tuple[str, ...],
    assignments: tuple[str, ...],
    *,
    progress: bool = False,
    processes: int = 1,
) -> list[str]:
    """The same run with the same config file and overrides: in one process by default, and
    without a status line (one terminal cannot show one per child)."""
    config = config_file()
    command = [sys.executable, "-m", "cloudqueue"]
    if config is not None:
        command += ["--config", str(config)]
    command += ["run", "--progress" if progress else "--no-progress"]
    command += ["--processes", str(processes), *targets]
    for assignment in assignments:
        command += ["--set", assignment]
    return command
