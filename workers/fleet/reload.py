"""``cloudqueue run --reload``: restart the workers when their Python source changes.

For development only. The parent runs the workers as children under the ``Supervisor`` (as
``--processes`` does) and watches, with ``watchfiles`` (the optional ``reload`` extra, the watcher
uvicorn uses), the folder of each worker's top-level package or module. A change to a ``.py``
file there drains every child as SIGTERM would -- in-flight messages finish, nothing is lost --
and starts it again on the new code. Only Python files count: the SQLite store, logs and state
files written beside the worker do not restart it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from cloudqueue.listener.imports import import_extra
from cloudqueue.workers.fleet.supervisor import Supervisor

log = structlog.get_logger(__name__)


def watched_folders(modules: Iterable[str]) -> list[Path]:
    """The folder of each module's top-level package (or of the module itself), once each."""
    folders: dict[Path, None] = {}
    for name in modules:
        top = sys.modules[name.partition(".")[0]]
        package_path = getattr(top, "__path__", None)
        if package_path:
            folders[Path(next(iter(package_path))).resolve().parent] = None
        elif top.__file__ is not None:
            folders[Path(top.__file__).resolve().parent] = None
    return list(folders)


def run_reloading(supervisor: Supervisor, folders: list[Path]) -> int:
    """Run the supervisor's children, restarting them on every change to a .py file in
    ``folders``, until SIGTERM/SIGINT; its exit code."""
    watchfiles = import_extra("watchfiles", extra="reload", needed_by="cloudqueue run --reload")
    log.warning(
        "reload_enabled",
        watching=[str(folder) for folder in folders],
        note="for development only: a change to a .py file there restarts the workers",
    )
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch,
        args=(watchfiles, folders, supervisor, stop),
        name="cloudqueue:reload",
        daemon=True,
    )
    watcher.start()
    try:
        return supervisor.run()
    finally:
        stop.set()
        watcher.join(5)


def _watch(
    watchfiles: Any, folders: list[Path], supervisor: Supervisor, stop: threading.Event
) -> None:
    changes: set[tuple[Any, str]]
    for changes in watchfiles.watch(
        *folders, watch_filter=watchfiles.PythonFilter(), stop_event=stop, raise_interrupt=False
    ):
        log.info("source_changed", files=sorted({path for _, path in changes}))
        supervisor.restart()


__all__ = ["run_reloading", "watched_folders"]
