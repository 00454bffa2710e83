"""Reliability under injected faults, against Azurite through a fault-injecting proxy.

Every message must end handled (and deleted), still queued, or poisoned with a reason: these
tests count them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    poison_queue_name,
)
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.azurite import AzuriteFactory, AzuriteProcess
from tests.support.event_loop_consumer import running_async_consumer
from tests.support.fault_proxy import FaultProxy, Faults
from tests.support.polling import eventually

MESSAGES = 2000


@pytest.fixture
def fresh_azurite(azurite_factory: AzuriteFactory) -> AzuriteProcess:
    """A fresh Azurite: thousands of deletes slow a long-lived one down (its GC pass)."""
    return azurite_factory()


@pytest.fixture
def proxy(fresh_azurite: AzuriteProcess) -> Iterator[FaultProxy]:
    """5% of requests fail: 2% 503 ServerBusy, 1.5% reset before, 1.5% reset after forwarding."""
    port = fresh_azurite.services[0].port
    faults = Faults(busy_503=0.02, reset_before=0.015, reset_after=0.015, latency=0.01)
    running = FaultProxy(port, faults, seed=7).start()
    yield running
    running.stop()


def through(proxy: FaultProxy, connection_string: str, port: int) -> str:
    return connection_string.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")


def fill(storage: AzureQueueStorage, queue_name: str, count: int) -> None:
    codec = MessageCodec(int)
    storage.create_queue(queue_name)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: storage.put_message(queue_name, codec.encode(n)), range(count)))


# The event loop's run is shorter: its path is new and switched off, and the suite has 10 minutes.
@pytest.mark.parametrize(("path", "messages"), [("threads", MESSAGES), ("event_loop", 600)])
def test_5_percent_faults_over_2000_messages_lose_nothing(
    fresh_azurite: AzuriteProcess, proxy: FaultProxy, queue_name: str, path: str, messages: int
) -> None:
    """With 503s and resets on 5% of calls, every message is handled at least once and both the
    queue and the poison queue end empty: on dequeue threads, and on one event loop's tasks over
    the aio SDK."""
    direct = AzureQueueStorage.from_connection_string(fresh_azurite.connection_string)
    fill(direct, queue_name, messages)
    faulty = AzureQueueStorage.from_connection_string(
        through(proxy, fresh_azurite.connection_string, fresh_azurite.services[0].port)
    )
    handled: set[int] = set()
    lock = threading.Lock()

    def handle(number: int) -> None:
        with lock:
            handled.add(number)

    policy = ScalingPolicy(max_threads=8, max_idle_s=0.5)
    with consuming(path, faulty, queue_name, handle, policy):
        eventually(lambda: len(handled) == messages, timeout_s=240)
        eventually(lambda: direct.approximate_message_count(queue_name) == 0, timeout_s=120)
    faulty.close()
    assert direct.approximate_message_count(poison_queue_name(queue_name)) == 0
    assert sum(proxy.injected.values()) > 0.03 * messages  # the faults really happened
    assert {"busy_503", "reset_before", "reset_after"} <= set(proxy.injected)
    direct.close()


@contextmanager
def consuming(
    path: str,
    storage: AzureQueueStorage,
    queue_name: str,
    handle: Callable[[int], None],
    policy: ScalingPolicy,
) -> Iterator[None]:
    """``handle`` run on ``queue_name`` by the threaded listener, or as an ``async def`` handler
    by the event-loop consumer, until the block ends."""
    if path == "event_loop":

        async def handle_async(number: int) -> None:
            handle(number)

        codec = MessageCodec(int)
        with running_async_consumer(
            storage, queue_name, handle_async, codec, scaling=policy, max_error_delay_s=1.0
        ):
            yield
        return
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), int, max_error_delay_s=1.0
    )
    ElasticScaler(listener.pool_control, policy)
    listener.subscribe(handle)
    listener.start_listener(2)
    try:
        yield
    finally:
        listener.stop(30)


@pytest.mark.parametrize("path", ["threads", "event_loop"])
def test_a_job_running_three_visibility_timeouts_completes_once(
    azurite_connection_string: str, queue_name: str, path: str
) -> None:
    """Renewal keeps a 6 s job's message (2 s timeout) from every other dequeue thread (or task,
    on the event loop): one delivery."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    storage.create_queue(queue_name)
    storage.put_message(queue_name, MessageCodec(int).encode(1))
    deliveries: list[int] = []
    done = threading.Event()

    def long_job(number: int) -> None:
        deliveries.append(number)
        done.wait(6)  # the job itself: three visibility timeouts long

    async def long_async_job(number: int) -> None:
        deliveries.append(number)
        await asyncio.sleep(6)

    if path == "event_loop":
        three = ScalingPolicy(min_threads=3, max_threads=3, max_idle_s=0.1)
        with running_async_consumer(
            storage,
            queue_name,
            long_async_job,
            MessageCodec(int),
            scaling=three,
            visibility_timeout_s=2,
        ) as consumer:
            eventually(lambda: consumer.counters.processed == 1, timeout_s=30)
        storage.close()
        assert deliveries == [1]
        assert consumer.leases.renewals >= 4
        return
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name, visibility_timeout_s=2),
        int,
        dequeue_interval_s=0.1,
    )
    listener.subscribe(long_job)
    listener.start_listener(3)
    try:
        eventually(lambda: listener.messages_processed == 1, timeout_s=30)
    finally:
        listener.stop(10)
        storage.close()
    assert deliveries == [1]
    assert listener.visibility_renewals >= 4
