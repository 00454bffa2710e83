"""A worker's and a job's ``startup`` / ``shutdown``: plain or async, on the handlers' event loop,
once around the handling, in the host and in ``run_until_drained``; a raising ``startup`` takes
no message, a raising ``shutdown`` is logged."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Iterator
from datetime import datetime
from typing import Any, ClassVar

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import InMemoryQueueStorage, Publisher
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.tick_ledger import InMemoryTickLedger
from cloudqueue.workers import CloudQueueSettings, PeriodicJob, QueueWorker, WorkerHost
from cloudqueue.workers.host.lifecycle import StartupFailedError
from cloudqueue.workers.testing import run_until_drained
from tests.support.hook_workers import FailingStartup, SessionWorker, http_server
from tests.support.polling import eventually

SETTINGS = CloudQueueSettings(shutdown_grace_s=5)


@pytest.fixture
def base_url() -> Iterator[str]:
    with http_server() as url:
        yield url


def test_an_async_startup_opens_one_session_that_a_hundred_async_handlers_use(
    base_url: str,
) -> None:
    """run_until_drained awaits ``startup`` on the handlers' loop; all 100 handlers GET through
    its session; ``shutdown`` closes it there: no "Unclosed client session" when it is freed."""
    worker = SessionWorker(base_url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # serial: real network calls want real time (virtual time could jump past a timeout
        # while a reply is on its way on a loaded machine)
        handled = run_until_drained(worker, [{"n": n} for n in range(100)], serial=True)
        session = worker.session
        assert session is not None
        assert session.closed
        assert len(worker.loops) == 1  # startup, every handler and shutdown: one loop
        del worker, session
        gc.collect()
    assert sorted(item["n"] for item in handled) == list(range(100))
    assert not [w for w in caught if "Unclosed" in str(w.message)]


def test_the_host_runs_startup_before_the_first_message_and_shutdown_after_the_drain(
    base_url: str,
) -> None:
    """WorkerHost: the session exists before any handler runs and is closed at stop, after
    every message was handled, on the loop the handlers ran on."""
    storage = InMemoryQueueStorage()
    storage.create_queue(SessionWorker.queue_name)
    Publisher(storage, SessionWorker.queue_name, dict).publish_many([{"n": n} for n in range(100)])
    host = WorkerHost([SessionWorker], SETTINGS, storage=storage)
    [hosted] = host.hosted
    worker = hosted.worker
    assert isinstance(worker, SessionWorker)
    worker.base_url = base_url
    host.start()
    eventually(lambda: storage.approximate_message_count(SessionWorker.queue_name) == 0)
    assert host.stop()
    assert worker.session is not None
    assert worker.session.closed
    assert len(worker.loops) == 1


class Ordered(QueueWorker[int]):
    queue_name = "ordered"
    calls: ClassVar[list[str]]

    def startup(self) -> None:
        type(self).calls.append("startup")

    def on_start(self, listener: Any) -> None:
        type(self).calls.append("on_start")

    def handle(self, item: int) -> None:
        type(self).calls.append(f"handle {item}")

    def on_stop(self) -> None:
        type(self).calls.append("on_stop")

    def shutdown(self) -> None:
        type(self).calls.append("shutdown")


def test_plain_hooks_run_once_each_around_on_start_and_on_stop() -> None:
    """startup, on_start, the handling, on_stop, shutdown: in that order, each once."""
    Ordered.calls = []
    run_until_drained(Ordered, [1, 2])
    assert Ordered.calls == ["startup", "on_start", "handle 1", "handle 2", "on_stop", "shutdown"]


class BrokenShutdown(QueueWorker[int]):
    queue_name = "broken-shutdown"

    def handle(self, item: int) -> None:
        pass

    async def shutdown(self) -> None:
        raise OSError("pool already closed")


def test_a_raising_shutdown_is_logged_not_raised() -> None:
    """The run's result stands; the failure is one ``shutdown_failed`` event with the error."""
    with capture_logs() as logs:
        assert run_until_drained(BrokenShutdown, [1, 2]) == [1, 2]
    [failed] = [event for event in logs if event["event"] == "shutdown_failed"]
    assert failed["log_level"] == "error"


def test_a_raising_startup_raises_in_run_until_drained_and_nothing_is_handled() -> None:
    """The test sees the worker's own exception; no handler ran."""
    with pytest.raises(ConnectionRefusedError, match="db:5432"):
        run_until_drained(FailingStartup, [{"n": 1}])


class OpensThenFails(QueueWorker[int]):
    queue_name = "opens-then-fails"
    shut: ClassVar[list[str]] = []

    def handle(self, item: int) -> None:
        pass

    def shutdown(self) -> None:
        type(self).shut.append(type(self).__name__)


def test_a_raising_startup_in_the_host_takes_no_message_and_shuts_down_only_what_started() -> None:
    """One ``startup_failed`` line names the worker and the exception; the queue keeps its
    message; the worker whose startup returned is shut down, the failed one is not."""
    storage = InMemoryQueueStorage()
    storage.create_queue(FailingStartup.queue_name)
    Publisher(storage, FailingStartup.queue_name, dict).publish({"n": 1})
    host = WorkerHost([OpensThenFails, FailingStartup], SETTINGS, storage=storage)
    with capture_logs() as logs, pytest.raises(StartupFailedError):
        host.start()
    assert host.stop()
    [failed] = [event for event in logs if event["event"] == "startup_failed"]
    assert failed["worker"].endswith(":FailingStartup")
    assert failed["error"] == "ConnectionRefusedError: database at db:5432 refused the connection"
    assert "hook_workers.py:" in failed["at"]  # where it was raised
    assert storage.approximate_message_count(FailingStartup.queue_name) == 1
    assert OpensThenFails.shut == ["OpensThenFails"]


class Returning(QueueWorker[int]):
    """A plain ``on_stop`` that hands back a coroutine: it would never be awaited."""

    queue_name = "returning"

    def handle(self, item: int) -> None:
        pass

    def on_start(self, listener: Any) -> Any:
        return asyncio.sleep(0)


def test_a_plain_hook_returning_a_coroutine_is_an_error_not_dropped() -> None:
    with pytest.raises(ConfigurationError, match="returned an awaitable"):
        run_until_drained(Returning, [1])


def test_a_jobs_async_startup_runs_on_the_loop_its_async_runs_use() -> None:
    """A job's ``startup`` and its ``async def run`` share one loop; ``shutdown`` follows stop."""
    ran, loops, calls = threading.Event(), set(), []

    class Pinging(PeriodicJob):
        every_s = 0.2

        async def startup(self) -> None:
            loops.add(asyncio.get_running_loop())
            calls.append("startup")

        async def run(self, tick: datetime) -> None:
            loops.add(asyncio.get_running_loop())
            ran.set()

        async def shutdown(self) -> None:
            loops.add(asyncio.get_running_loop())
            calls.append("shutdown")

    host = WorkerHost(
        [],
        SETTINGS,
        storage=InMemoryQueueStorage(),
        jobs=[Pinging],
        tick_ledger=InMemoryTickLedger(),
    )
    host.start()
    assert ran.wait(10)
    assert host.stop()
    assert calls == ["startup", "shutdown"]
    assert len(loops) == 1
