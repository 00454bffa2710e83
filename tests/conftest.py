"""Shared fixtures: a storage backend of each kind, with Azurite started for the whole session."""

from __future__ import annotations

import compileall
import contextlib
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import ManualClock, VirtualClock
from tests.support.cli_fork import RunningProcess

pytest_plugins = [
    "tests.support.azurite",
    "tests.support.entra",
    "tests.support.redis_server",
    "tests.support.tracing",
]

BACKENDS = ["memory", "sqlite", "azure"]

SOURCE_FOLDERS = ("listener", "workers", "examples", "tests")


def pytest_configure(config: pytest.Config) -> None:
    """Once, in the process that starts the test workers: compile the project's sources. Many
    tests start `cloudqueue` in subprocesses; with PYTHONDONTWRITEBYTECODE set (as on these
    machines) no import writes a cache, so each of them compiled every module it imported again
    -- about 0.2 s of CPU per process start."""
    if hasattr(config, "workerinput"):
        return
    root = Path(__file__).resolve().parents[1]
    _install_azurite_meanwhile(root)
    for folder in SOURCE_FOLDERS:
        compileall.compile_dir(root / folder, quiet=1, workers=1)


def _install_azurite_meanwhile(root: Path) -> None:
    """A fresh checkout installs the pinned Azurite from npm (about 50 s) before its first Azure
    test: started here, it overlaps the compiling above and the test workers' start and
    collection instead of holding every worker that reaches an Azure test first. The fixture
    waits on the same install lock and reports a failure; this thread only starts it early."""
    # Imported here: pytest_plugins loads the module first, with its asserts rewritten.
    from tests.support.azurite import (
        AZURITE_VERSION,
        AzuriteError,
        ensure_installed,
        installed_version,
    )

    if installed_version(root / ".azurite") == AZURITE_VERSION or shutil.which("npm") is None:
        return

    def install() -> None:
        with contextlib.suppress(AzuriteError):
            ensure_installed(root)

    threading.Thread(target=install, name="azurite-install", daemon=True).start()


@pytest.hookimpl(optionalhook=True)  # a run without pytest-xdist has no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the README's test command): one test worker more than the cores this
    process may use. Much of the suite waits -- on Azurite, Redis, `cloudqueue` subprocesses,
    handlers' own pauses -- so two workers on two cores left them idle part of the time:
    `tests/workers/cli` and `tests/listener/consumer` (575 tests) took 162 s with two workers
    and 98 s with three, 117 s with four, on the same 2-core machine one after the other."""
    return len(os.sched_getaffinity(0)) + 1


HEAVY_FIRST = (
    "tests/workers/test_groups_crash.py",
    "tests/project/test_readme.py",
    "tests/listener/stores/test_faults_azure.py",
    "tests/project/test_example_billing_pipeline.py",
    "tests/listener/middleware/test_idempotency_crash.py",
    "tests/workers/observability/test_observability_run.py",
    "tests/workers/dashboard/test_dashboard_browser.py",
    "tests/project/test_docs_site.py",
    "tests/project/test_packaging.py",
    "tests/workers/test_checkpoints_killed.py",
    "tests/workers/test_chains_crash.py",
    "tests/workers/test_periodic_jobs_fleet.py",
    "tests/listener/limits/test_rate_limit_fleet.py",
    "tests/listener/consumer/test_crash_recovery.py",
    "tests/project/test_example_resumable.py",
)
"""The files whose tests take longest (10-60 s each, ``--durations``), run first: pytest-xdist
hands tests out in collection order, and one of these started last kept one worker busy while
the other had nothing left to do."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The heavy files first (``HEAVY_FIRST``, in that order), then the rest as collected."""

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return HEAVY_FIRST.index(path) if path in HEAVY_FIRST else len(HEAVY_FIRST)

    items.sort(key=rank)  # stable: the order within a file, and of the rest, is kept


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    """Every test starts from structlog's defaults, whatever the previous one configured."""
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@pytest.fixture
def processes() -> Iterator[list[RunningProcess]]:
    """Processes a test starts (each in a session of its own): killed with their children at
    teardown if still running, so a failed kill -9 test leaves no worker behind."""
    started: list[RunningProcess] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture
def queue_name() -> str:
    """A fresh, valid queue name, so tests never see each other's messages."""
    return f"q{uuid.uuid4().hex[:20]}"


def make_storage(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> QueueStorage:
    """Build a storage backend of the given kind on the real clock."""
    if kind == "memory":
        return InMemoryQueueStorage()
    if kind == "sqlite":
        return SqliteQueueStorage(tmp_path / "queues.db")
    if kind == "azure":
        from cloudqueue.listener.stores.azure_storage import AzureQueueStorage

        connection_string: str = request.getfixturevalue("azurite_connection_string")
        return AzureQueueStorage.from_connection_string(connection_string)
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[QueueStorage]:
    """Each storage backend in turn (the Azure one against Azurite)."""
    backend = make_storage(request.param, request, tmp_path)
    yield backend
    backend.close()


@pytest.fixture
def clock() -> ManualClock:
    """Time that moves only when a test or a waiting thread moves it."""
    return ManualClock()


@pytest.fixture
def manual_storage(clock: ManualClock, queue_name: str) -> InMemoryQueueStorage:
    """An in-memory store on the manual clock, with the test's queue already created."""
    store = InMemoryQueueStorage(clock=clock)
    store.create_queue(queue_name)
    return store


@pytest.fixture
def virtual_clock() -> VirtualClock:
    """Time that moves only while every dequeue thread waits (``run_until_drained`` moves it)."""
    return VirtualClock()


@pytest.fixture
def virtual_storage(virtual_clock: VirtualClock, queue_name: str) -> InMemoryQueueStorage:
    """An in-memory store on the virtual clock, with the test's queue already created."""
    store = InMemoryQueueStorage(clock=virtual_clock)
    store.create_queue(queue_name)
    return store
