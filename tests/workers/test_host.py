"""WorkerHost in-process: lifecycle hooks, extra observers, async handlers, per-worker settings."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr, ValidationError

from cloudqueue.listener import CloudQueueListener, InMemoryQueueStorage, MessageCodec
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.support.polling import eventually

SETTINGS = CloudQueueSettings(shutdown_grace_s=5)


def fill(storage: InMemoryQueueStorage, queue: str, items: list[Any]) -> None:
    storage.create_queue(queue)
    codec = MessageCodec(dict)
    for item in items:
        storage.put_message(queue, codec.encode(item))


class Lifecycle(QueueWorker[dict[str, int]]):
    queue_name = "lifecycle"
    events: ClassVar[list[str]] = []
    seen_by_extra: ClassVar[list[int]] = []

    def on_start(self, listener: CloudQueueListener[dict[str, int]]) -> None:
        self.events.append("start")
        listener.subscribe(lambda item: self.seen_by_extra.append(item["n"]))

    def handle(self, item: dict[str, int]) -> None:
        self.events.append(f"handle {item['n']}")

    def on_stop(self) -> None:
        self.events.append("stop")


def test_hooks_run_around_handling_and_extra_observers_see_every_item() -> None:
    """on_start precedes handling, on_stop follows it; an observer added in on_start gets all."""
    storage = InMemoryQueueStorage()
    fill(storage, "lifecycle", [{"n": 1}, {"n": 2}])
    host = WorkerHost([Lifecycle], SETTINGS, storage=storage)
    host.start()
    eventually(lambda: len(Lifecycle.seen_by_extra) == 2)
    assert host.stop()
    assert Lifecycle.events[0] == "start"
    assert Lifecycle.events[-1] == "stop"
    assert sorted(Lifecycle.events[1:-1]) == ["handle 1", "handle 2"]


class AsyncWorker(QueueWorker[dict[str, int]]):
    queue_name = "async-work"
    loops: ClassVar[set[int]] = set()
    done: ClassVar[list[int]] = []

    async def handle(self, item: dict[str, int]) -> None:
        await asyncio.sleep(0)
        self.loops.add(id(asyncio.get_running_loop()))
        self.done.append(item["n"])


def test_async_handlers_run_to_completion_on_the_dequeue_threads_loops() -> None:
    """An async def handler is awaited before the message is deleted, on a per-thread loop."""
    storage = InMemoryQueueStorage()
    fill(storage, "async-work", [{"n": n} for n in range(20)])
    host = WorkerHost([AsyncWorker], SETTINGS, storage=storage)
    host.start()
    eventually(lambda: storage.approximate_message_count("async-work") == 0)
    assert host.stop()
    assert sorted(AsyncWorker.done) == list(range(20))
    assert 1 <= len(AsyncWorker.loops) <= SETTINGS.scaling.max_threads


class Tuned(QueueWorker[str]):
    queue_name = "tuned"
    settings: ClassVar[dict[str, dict[str, Any]]] = {
        "listener": {"visibility_timeout_s": 120, "dequeue_batch_size": 8},
        "scaling": {"max_threads": 2},
    }

    def handle(self, item: str) -> None:
        pass


class Plain(QueueWorker[str]):
    queue_name = "plain"

    def handle(self, item: str) -> None:
        pass


def test_per_worker_settings_override_the_process_settings_for_that_worker_only() -> None:
    """Two workers in one host: one with its own visibility timeout and batch size."""
    host = WorkerHost([Tuned, Plain], SETTINGS, storage=InMemoryQueueStorage())
    tuned, plain = host.hosted
    assert (tuned.listener.location.visibility_timeout_s, tuned.listener.dequeue_batch_size) == (
        120,
        8,
    )
    assert tuned.settings.scaling.max_threads == 2
    assert (plain.listener.location.visibility_timeout_s, plain.settings.scaling.max_threads) == (
        30,
        16,
    )


class BadOverride(QueueWorker[str]):
    queue_name = "bad"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"listener": {"dequeue_batch_size": 33}}


class WrongSection(QueueWorker[str]):
    queue_name = "bad"
    settings: ClassVar[dict[str, dict[str, Any]]] = {"logging": {"level": "DEBUG"}}


def test_invalid_worker_settings_fail_before_storage_is_opened() -> None:
    """A bad override is a validation error; an override of a process-wide section is refused."""
    with pytest.raises(ValidationError, match="dequeue_batch_size"):
        WorkerHost([BadOverride], SETTINGS, storage=InMemoryQueueStorage())
    with pytest.raises(ConfigurationError, match="logging"):
        WorkerHost([WrongSection], SETTINGS, storage=InMemoryQueueStorage())


class Failing(QueueWorker[str]):
    queue_name = "failing-stop"
    stopped = threading.Event()

    def handle(self, item: str) -> None:
        pass

    def on_stop(self) -> None:
        self.stopped.set()
        raise RuntimeError("cleanup failed")


def test_an_on_stop_failure_is_logged_and_the_host_still_stops() -> None:
    """A worker's cleanup error does not keep the process from shutting down."""
    host = WorkerHost([Failing], SETTINGS, storage=InMemoryQueueStorage())
    host.start()
    assert host.stop()
    assert Failing.stopped.is_set()


class ZeroThreads(Plain):
    settings: ClassVar[dict[str, dict[str, Any]]] = {"scaling": {"min_threads": 0}}


class Misspelt(Plain):
    settings: ClassVar[dict[str, dict[str, Any]]] = {"scaling": {"max_thread": 2}}


def test_worker_settings_are_checked_by_the_rules_across_sections() -> None:
    """min_threads = 0 in a worker class needs triggers as it does process-wide (no watchdog)."""
    with pytest.raises(ValidationError, match=r"triggers\.url"):
        WorkerHost([ZeroThreads], SETTINGS, storage=InMemoryQueueStorage())


def test_an_unknown_key_in_worker_settings_names_the_worker_and_the_closest_key() -> None:
    """A misspelt override is refused, not ignored: the worker would run on the default."""
    with pytest.raises(ConfigurationError) as refused:
        WorkerHost([Misspelt], SETTINGS, storage=InMemoryQueueStorage())
    assert str(refused.value) == (
        "unknown setting scaling.max_thread in settings of tests.workers.test_host:Misspelt: "
        "did you mean scaling.max_threads?"
    )


class RecordingPayloadStore(InMemoryPayloadStore):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_payload_store_the_host_opened_is_closed_when_it_stops(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the host opens from the settings it also closes (an Azure blob client holds sockets)."""
    opened = RecordingPayloadStore()
    monkeypatch.setattr(
        "cloudqueue.workers.host.host.open_payload_store_from_settings", lambda *_, **__: opened
    )
    settings = SETTINGS.model_copy(
        update={"connection_string": SecretStr(f"sqlite:///{tmp_path / 'q.db'}")}
    )
    host = WorkerHost([Plain], settings)
    host.start()
    assert host.stop()
    assert opened.closed


class NotAMapping(Plain):
    settings: ClassVar[Any] = {"scaling": 3}


def test_a_worker_section_that_is_not_a_mapping_is_a_configuration_error() -> None:
    """settings = {"scaling": 3} is refused with a sentence, not a TypeError traceback."""
    with pytest.raises(ConfigurationError, match="'scaling' must map setting names to values"):
        WorkerHost([NotAMapping], SETTINGS, storage=InMemoryQueueStorage())
