"""``listener.event_loop = "single"`` in the worker host: an ``async def handle`` worker fetched,
handled and settled on one event loop, its ``startup`` on that loop, its counters in the live
state, woken by push triggers; a worker that cannot run there refused at load."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudqueue.listener import Publisher
from cloudqueue.listener.consumer.middleware import MessageContext, Middleware
from cloudqueue.listener.errors import ConfigurationError, StorageError
from cloudqueue.listener.poison.queue import browse_poisoned, poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord, read_record
from cloudqueue.listener.push.triggers import InProcessTriggerChannel, WorkDetected
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.host.cost_meter import UNKNOWN
from cloudqueue.workers.host.live_state import (
    LiveStatePublisher,
    QueueLiveState,
    read_live_states,
)
from cloudqueue.workers.host.loop_worker import LoopWorker, host_loop_worker
from tests.support.payloads import live_payloads
from tests.support.polling import eventually

SINGLE = {"listener": {"event_loop": "single"}}


class CallThreads(SqliteQueueStorage):
    """The embedded store, noting the thread of every get and delete."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.threads: set[int] = set()

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        self.threads.add(threading.get_ident())
        return super().get_messages(
            queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self.threads.add(threading.get_ident())
        return super().delete_message(queue_name, message_id, pop_receipt)


class OnOneLoop(QueueWorker[dict[str, int]]):
    """Notes where its startup and its handlers run."""

    queue_name = "single-loop"
    settings: ClassVar[dict[str, Any]] = SINGLE

    def __init__(self) -> None:
        self.handled: list[int] = []
        self.threads: set[int] = set()
        self.loops: set[asyncio.AbstractEventLoop] = set()
        self.opened: asyncio.Queue[int] | None = None

    async def startup(self) -> None:
        self.opened = asyncio.Queue()  # bound to the loop it is first used on
        self.threads.add(threading.get_ident())
        self.loops.add(asyncio.get_running_loop())

    async def handle(self, item: dict[str, int]) -> None:
        assert self.opened is not None
        await self.opened.put(item["n"])  # fails on any loop but the one startup used
        await asyncio.sleep(0)
        self.threads.add(threading.get_ident())
        self.loops.add(asyncio.get_running_loop())
        self.handled.append(item["n"])


class Plain(QueueWorker[dict[str, int]]):
    queue_name = "single-loop"

    def handle(self, item: dict[str, int]) -> None:
        pass


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[CallThreads]:
    store = CallThreads(tmp_path / "queues.db")
    store.create_queue(OnOneLoop.queue_name)
    yield store
    store.close()


def test_an_async_worker_fetches_handles_and_settles_on_one_loop_thread(
    storage: CallThreads, tmp_path: Path
) -> None:
    """Every get, handler and delete runs on the worker's loop thread, where its startup ran
    (the handlers use what it opened); the live state counts the handled and the poisoned."""
    Publisher(storage, OnOneLoop.queue_name, dict).publish_many([{"n": n} for n in range(40)])
    storage.put_message(OnOneLoop.queue_name, "not json")
    host = WorkerHost([OnOneLoop], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    [looped] = host.looped
    assert host.hosted == []  # no threaded listener for it
    worker = looped.worker
    assert isinstance(worker, OnOneLoop)
    host.start()
    storage.threads.clear()  # the host's own calls at start (queue layout) are not the loop's
    eventually(lambda: storage.approximate_message_count(OnOneLoop.queue_name) == 0)
    published = LiveStatePublisher(tmp_path / "state", worker=looped.name)
    published.publish([], loop_workers=host.looped)
    assert host.stop()
    assert sorted(worker.handled) == list(range(40))
    assert len(worker.loops) == 1
    assert len(worker.threads) == 1
    assert storage.threads == worker.threads  # no message crossed a thread
    [state] = read_live_states(tmp_path / "state", OnOneLoop.queue_name)
    [queue] = state.queues
    assert (queue.processed, queue.poisoned, queue.in_flight) == (40, 1, 0)


class Blobs(QueueWorker[bytes]):
    """Notes the sizes of the items it handles on its loop."""

    queue_name = "single-loop"
    settings: ClassVar[dict[str, Any]] = SINGLE

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def handle(self, item: bytes) -> None:
        self.sizes.append(len(item))


def test_a_large_item_kept_in_the_hosts_payload_store_is_handled_and_retired(
    storage: CallThreads,
) -> None:
    """The host gives the single loop its payload store: a large item's payload is fetched for
    the handler and tombstoned once its message is deleted."""
    payloads = InMemoryPayloadStore()
    large = random.Random(4).randbytes(100 * 1024)  # incompressible: stored, not inline
    Publisher(storage, Blobs.queue_name, bytes, payload_store=payloads).publish(large)
    host = WorkerHost([Blobs], CloudQueueSettings(), storage=storage, payload_store=payloads)
    [looped] = host.looped
    host.start()
    try:
        eventually(lambda: looped.consumer.counters.processed == 1)
    finally:
        assert host.stop()
    assert isinstance(looped.worker, Blobs)
    assert looped.worker.sizes == [len(large)]
    assert payloads.names() != []
    assert live_payloads(payloads) == []


def test_a_plain_handler_on_the_single_loop_is_refused_at_load(storage: CallThreads) -> None:
    """One line naming the worker, the setting and the way back; no queue is read."""
    settings = CloudQueueSettings.model_validate(SINGLE)
    with pytest.raises(ConfigurationError, match=r"'Plain'.*event_loop.*async def handle"):
        WorkerHost([Plain], settings, storage=storage)


def test_a_control_the_single_loop_lacks_is_refused_naming_it(storage: CallThreads) -> None:
    """A worker whose ``on_start`` wants the threaded listener is not run without it: it is
    refused, the hook named with what to use instead."""

    class Starting(OnOneLoop):
        def on_start(self, listener: Any) -> None:
            pass

    with pytest.raises(ConfigurationError, match=r"does not run on_start \(use startup\) yet"):
        WorkerHost([Starting], CloudQueueSettings(), storage=storage)


class Prioritized(QueueWorker[dict[str, int]]):
    """Reads an urgent queue before a normal one, one message at a time, noting the order."""

    queue_name = ("single-urgent", "single-normal")
    settings: ClassVar[dict[str, Any]] = {
        "listener": {"event_loop": "single", "concurrency": 1},
        "scaling": {"min_threads": 1, "max_threads": 1},
    }

    def __init__(self) -> None:
        self.handled: list[int] = []

    async def handle(self, item: dict[str, int]) -> None:
        self.handled.append(item["n"])


def drained_pair(
    storage: SqliteQueueStorage, worker: type[Prioritized], handled: int
) -> tuple[LoopWorker, PoisonRecord, dict[str, QueueLiveState]]:
    """Run ``worker`` until it handled ``handled`` messages and poisoned one (of its normal
    queue): the worker, that poison record, and each queue's live state then."""
    host = WorkerHost([worker], CloudQueueSettings(shutdown_grace_s=5), storage=storage)
    [looped] = host.looped
    host.start()
    try:
        eventually(lambda: looped.consumer.counters.poisoned == 1)
        eventually(lambda: looped.consumer.counters.processed == handled)
        [poisoned] = browse_poisoned(storage, worker.queue_name[1], limit=None)
        states = {q: looped.live_state(UNKNOWN, q) for q in looped.queue_names}
        assert sum(storage.approximate_message_count(q) for q in storage.list_queues()) == 1
    finally:
        assert host.stop()
    record = read_record(poisoned.content)
    assert record is not None
    return looped, record, states


def test_a_worker_on_several_queues_reads_them_in_priority_order(tmp_path: Path) -> None:
    """Five normal and five urgent messages waiting: the urgent ones are all handled first;
    an unreadable message on the normal queue goes to *its* poison queue, named there with its
    own id, and each queue's figures are its own."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    urgent, normal = Prioritized.queue_name
    for queue, first in ((normal, 100), (urgent, 0)):
        storage.create_queue(queue)
        Publisher(storage, queue, dict).publish_many([{"n": first + n} for n in range(5)])
    unreadable = storage.put_message(normal, "not json")
    looped, record, states = drained_pair(storage, Prioritized, 10)
    assert isinstance(looped.worker, Prioritized)
    assert looped.worker.handled == [*range(5), *range(100, 105)]
    assert (record.queue, record.original_id) == (normal, unreadable.id)
    assert (states[urgent].processed, states[urgent].poisoned) == (5, 0)
    assert (states[normal].processed, states[normal].poisoned) == (5, 1)


class Settled(Middleware):
    """Notes each message's outcome and the thread its hook ran on."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []
        self.threads: set[int] = set()

    def after_settle(self, context: MessageContext[Any]) -> None:
        self.outcomes.append("" if context.outcome is None else context.outcome.kind)
        self.threads.add(threading.get_ident())


class WithMiddleware(OnOneLoop):
    middleware: ClassVar[list[Any]] = [Settled]


def test_the_workers_middleware_and_a_rate_limit_run_on_its_loop(storage: CallThreads) -> None:
    """The host gives the single loop the middleware it gives a listener: the worker's own sees
    every outcome on the loop's thread, and a rate limit is accepted rather than refused."""
    Publisher(storage, OnOneLoop.queue_name, dict).publish_many([{"n": n} for n in range(6)])
    settings = CloudQueueSettings.model_validate(
        {"shutdown_grace_s": 5, "rate_limit": {"max_messages_per_s": 1000}}
    )
    host = WorkerHost([WithMiddleware], settings, storage=storage)
    [looped] = host.looped
    [settled] = [m for m in looped.consumer.stack.middleware if isinstance(m, Settled)]
    host.start()
    eventually(lambda: len(settled.outcomes) == 6)
    assert host.stop()
    assert settled.outcomes == ["deleted"] * 6
    assert settled.threads == looped.worker.threads  # type: ignore[attr-defined]


def started_with_triggers(
    storage: CallThreads, channel: InProcessTriggerChannel, watchdog_s: float, **scaling: Any
) -> LoopWorker:
    """The worker on its loop, its idle waits 30 s at least, woken by ``channel``."""
    triggers = {"url": "redis://127.0.0.1:1", "watchdog_interval_s": watchdog_s}
    settings = CloudQueueSettings.model_validate(
        {
            "backoff": {"min_idle_s": 30, "max_idle_s": 30},
            "scaling": scaling,
            "triggers": triggers,  # its url never opened: the channel is given
        }
    )
    looped = host_loop_worker(OnOneLoop(), settings, MeteredStorage(storage))
    looped.start_up()
    looped.start(channel, account="here")
    return looped


@pytest.mark.parametrize(
    ("min_threads", "trigger", "watchdog_s"), [(1, True, 300), (0, True, 300), (0, False, 0.2)]
)
def test_a_trigger_or_the_watchdog_wakes_an_idle_or_scaled_to_zero_consumer(
    storage: CallThreads, min_threads: int, trigger: bool, watchdog_s: float
) -> None:
    """A message announced while the consumer waits out a 30 s idle back-off (or has no task
    left) is handled at once, not after the wait; at zero tasks, one nobody announced (a lost
    trigger) is found by the watchdog's depth check."""
    channel = InProcessTriggerChannel()
    looped = started_with_triggers(
        storage, channel, watchdog_s, min_threads=min_threads, max_threads=2
    )
    try:
        # Waiting after an empty get; at zero, every task gone (the last left at max idle).
        eventually(
            lambda: looped.consumer.gets >= 1 and looped.consumer.active_tasks == min_threads
        )
        Publisher(storage, OnOneLoop.queue_name, dict).publish({"n": 7})
        if trigger:
            channel.publish(WorkDetected("here", OnOneLoop.queue_name, message_count=1))
        eventually(lambda: looped.consumer.counters.processed == 1, timeout_s=10)
    finally:
        looped.request_stop()
        assert looped.stop(10)
        looped.finish()
    worker = looped.worker
    assert isinstance(worker, OnOneLoop)
    assert worker.handled == [7]


class NoCreating(CallThreads):
    """A store whose credential may not create queues (a SAS without the permission): every
    create refused, counted."""

    refused = 0

    def create_queue(self, queue_name: str) -> None:
        self.refused += 1
        raise StorageError("AuthorizationPermissionMismatch: may not create queues")


def test_create_queues_false_uses_the_queues_that_exist(tmp_path: Path) -> None:
    """``listener.create_queues = false`` on the single loop: no create is tried, the existing
    queue is read and a message that cannot be opened goes to the existing poison queue."""
    storage = NoCreating(tmp_path / "queues.db")
    for queue in (OnOneLoop.queue_name, poison_queue_name(OnOneLoop.queue_name)):
        SqliteQueueStorage.create_queue(storage, queue)
    Publisher(storage, OnOneLoop.queue_name, dict).publish_many([{"n": 1}, {"n": 2}])
    storage.put_message(OnOneLoop.queue_name, "not json")
    settings = CloudQueueSettings.model_validate(
        {"shutdown_grace_s": 5, "listener": {"create_queues": False}}
    )
    host = WorkerHost([OnOneLoop], settings, storage=storage)
    [looped] = host.looped
    host.start()
    try:
        eventually(lambda: looped.consumer.counters.poisoned == 1)
        eventually(lambda: looped.consumer.counters.processed == 2)
    finally:
        assert host.stop()
    assert storage.refused == 0


class PartitionedPair(Prioritized):
    """``Prioritized`` with each of its queues spread over two partitions."""

    settings: ClassVar[dict[str, Any]] = {
        "listener": {"event_loop": "single", "partitions": 2},
    }


def test_a_partitioned_worker_reads_every_partition_of_its_queues(tmp_path: Path) -> None:
    """Both queues spread over two partitions each: every message of every partition handled,
    an unreadable one moved to its logical queue's poison queue naming its partition."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    urgent, normal = PartitionedPair.queue_name
    writer = PartitionedQueueStorage([storage], {urgent: 2, normal: 2})
    for queue, first in ((urgent, 0), (normal, 100)):
        writer.create_queue(queue)
        Publisher(writer, queue, dict).publish_many([{"n": first + n} for n in range(4)])
    unreadable = writer.put_message(normal, "not json")
    looped, record, _ = drained_pair(storage, PartitionedPair, 8)
    assert isinstance(looped.worker, PartitionedPair)
    assert sorted(looped.worker.handled) == [*range(4), *range(100, 104)]
    assert (record.queue, record.original_id) == (normal, unreadable.id)
    assert record.partition == unreadable.id.rpartition("@")[2]


def test_partitions_on_a_further_account_are_read_there(tmp_path: Path) -> None:
    """``partition_accounts`` names a second store: the partition it holds is read on its own
    awaitable side, and every message of both partitions is handled."""
    storage = SqliteQueueStorage(tmp_path / "a.db")
    further = f"sqlite:///{tmp_path / 'b.db'}"
    settings = CloudQueueSettings.model_validate(
        {"shutdown_grace_s": 5, "partition_accounts": [further], "listener": {"partitions": 2}}
    )
    host = WorkerHost([OnOneLoop], settings, storage=storage)
    [looped] = host.looped
    assert isinstance(host.listening, PartitionedQueueStorage)
    host.listening.create_queue(OnOneLoop.queue_name)
    Publisher(host.listening, OnOneLoop.queue_name, dict).publish_many([{"n": n} for n in range(6)])
    spread = [
        p.storage.approximate_message_count(p.queue_name)
        for p in host.listening.partitions_of(OnOneLoop.queue_name)
    ]
    host.start()
    try:
        eventually(lambda: looped.consumer.counters.processed == 6)
    finally:
        assert host.stop()
    assert spread == [3, 3]
    assert isinstance(looped.worker, OnOneLoop)
    assert sorted(looped.worker.handled) == list(range(6))
