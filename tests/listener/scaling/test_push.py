"""Scale to zero with push triggers: prompt wake-up, a watchdog for lost triggers, Redis outages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    MeteredStorage,
)
from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel
from cloudqueue.listener.push.triggers import InProcessTriggerChannel, TriggerChannel, WorkDetected
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.scaling.waker import TriggerWaker, Watchdog
from cloudqueue.listener.testing import ManualClock
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer

ACCOUNT = "memory"


class TickSleeper:
    """A sleeper whose waits end only when the test says a period has passed."""

    def __init__(self) -> None:
        self._ticks = threading.Semaphore(0)

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        while not self._ticks.acquire(timeout=0.05):
            if stop_event.is_set():
                return True
        return stop_event.is_set()

    def tick(self) -> None:
        self._ticks.release()


class Scenario:
    """A listener that idles down to zero threads, with its scaler, on a metered store."""

    def __init__(
        self, queue_name: str, channel: TriggerChannel, *, clock: Clock = SYSTEM_CLOCK, **waker: Any
    ) -> None:
        self.storage = MeteredStorage(InMemoryQueueStorage())
        self.storage.create_queue(queue_name)
        self.queue_name = queue_name
        self.handled: list[int] = []
        self.listener: CloudQueueListener[int] = CloudQueueListener(
            self.storage, CloudQueueLocation(queue_name), int
        )
        self.scaler = ElasticScaler(
            self.listener.pool_control,
            ScalingPolicy(min_threads=0, max_threads=4, max_idle_s=0.1),
            clock=clock,
        )
        self.listener.subscribe(self.handled.append)
        self.waker = TriggerWaker(self.listener, self.scaler, channel, account=ACCOUNT, **waker)

    def put(self, number: int) -> None:
        self.storage.put_message(self.queue_name, MessageCodec(int).encode(number))

    def idle_at_zero(self) -> None:
        self.listener.start_listener(1)
        eventually(lambda: self.listener.threads_alive == 0)

    def close(self) -> None:
        self.waker.close()
        self.listener.stop(5)


@pytest.fixture
def channel() -> InProcessTriggerChannel:
    return InProcessTriggerChannel()


@pytest.fixture
def scenario(queue_name: str, channel: InProcessTriggerChannel) -> Iterator[Scenario]:
    made = Scenario(queue_name, channel)
    yield made
    made.close()


def test_with_triggers_the_last_thread_stops_and_idle_costs_nothing(scenario: Scenario) -> None:
    """At zero threads the listener makes no storage calls at all."""
    scenario.idle_at_zero()
    before = scenario.storage.transactions
    for _ in range(20):
        threading.Event().wait(0.01)  # let any straggler run; nothing may call storage
    assert scenario.storage.transactions == before
    assert scenario.listener.active_dequeue_tasks == 0


def test_a_trigger_wakes_a_listener_at_zero_threads_and_it_drains(
    scenario: Scenario, channel: InProcessTriggerChannel
) -> None:
    """The producer's trigger starts a thread, which handles the message."""
    scenario.idle_at_zero()
    scenario.put(1)
    channel.publish(WorkDetected(ACCOUNT, scenario.queue_name))
    eventually(lambda: scenario.handled == [1])


def test_triggers_for_other_queues_or_accounts_are_ignored(
    scenario: Scenario, channel: InProcessTriggerChannel
) -> None:
    """Someone else's work neither starts threads nor costs a transaction."""
    scenario.idle_at_zero()
    before = scenario.storage.transactions
    channel.publish(WorkDetected(ACCOUNT, "another-queue"))
    channel.publish(WorkDetected("another-account", scenario.queue_name))
    assert scenario.waker.triggers_seen == 0
    assert scenario.storage.transactions == before
    assert scenario.listener.active_dequeue_tasks == 0


def test_a_burst_of_triggers_costs_a_bounded_number_of_storage_calls(
    queue_name: str, channel: InProcessTriggerChannel
) -> None:
    """1,000 triggers within the back-off floor wake the idle listener once, and once more when
    the floor has passed -- not 1,000 times (finding 3: 1,811 triggers, 5,113 transactions)."""
    clock, ticks = ManualClock(), TickSleeper()
    scenario = Scenario(queue_name, channel, clock=clock, sleeper=ticks)
    try:
        scenario.idle_at_zero()
        before = scenario.storage.transactions
        for _ in range(1_000):
            channel.publish(WorkDetected(ACCOUNT, queue_name))
        eventually(lambda: scenario.listener.threads_alive == 0)
        assert scenario.storage.transactions - before <= 10
        assert (scenario.waker.wakes, scenario.waker.debounced) == (1, 999)
        ticks.tick()  # the floor has passed: one wake covers the 999 that were held back
        eventually(lambda: scenario.waker.wakes == 2)
        eventually(lambda: scenario.listener.threads_alive == 0)
        assert scenario.storage.transactions - before <= 20
    finally:
        scenario.close()


def test_a_message_whose_trigger_was_debounced_is_still_handled(
    queue_name: str, channel: InProcessTriggerChannel
) -> None:
    """The wake at the end of the floor covers a trigger held back during it: nothing waits for
    the watchdog."""
    clock, ticks = ManualClock(), TickSleeper()
    scenario = Scenario(queue_name, channel, clock=clock, sleeper=ticks)
    try:
        scenario.idle_at_zero()
        channel.publish(WorkDetected(ACCOUNT, queue_name))  # wakes; finds nothing; idles out
        eventually(lambda: scenario.listener.threads_alive == 0)
        scenario.put(7)
        channel.publish(WorkDetected(ACCOUNT, queue_name))  # within the floor: held back
        assert scenario.waker.debounced == 1
        ticks.tick()
        eventually(lambda: scenario.handled == [7])
        clock.advance(scenario.waker.floor_s)  # past the floor, a trigger wakes at once
        eventually(lambda: scenario.listener.threads_alive == 0)
        scenario.put(8)
        channel.publish(WorkDetected(ACCOUNT, queue_name))
        eventually(lambda: scenario.handled == [7, 8])
        assert scenario.waker.wakes == 3
    finally:
        scenario.close()


def test_the_watchdog_finds_work_whose_trigger_was_lost(scenario: Scenario) -> None:
    """No trigger at all: one depth check per watchdog period still starts the drain."""
    scenario.idle_at_zero()
    ticks = TickSleeper()
    watchdog = Watchdog(scenario.listener, scenario.scaler, interval_s=300, sleeper=ticks).start()
    try:
        ticks.tick()  # an empty period: one cheap depth check, nothing to do
        eventually(lambda: watchdog.checks == 1)
        assert scenario.listener.active_dequeue_tasks == 0
        scenario.put(5)  # enqueued without a trigger
        ticks.tick()
        eventually(lambda: scenario.handled == [5])
    finally:
        watchdog.close()


def test_a_trigger_racing_the_last_threads_exit_still_gets_its_message_handled(
    queue_name: str, channel: InProcessTriggerChannel
) -> None:
    """Put + trigger at every moment of the scale-down: every message is handled promptly."""
    scenario = Scenario(queue_name, channel)
    try:
        for number in range(30):
            scenario.listener.start_listener(1)
            scenario.put(number)
            channel.publish(WorkDetected(ACCOUNT, queue_name))
            eventually(lambda n=number: n in scenario.handled, timeout_s=5)  # type: ignore[misc]
    finally:
        scenario.close()
    assert sorted(scenario.handled) == list(range(30))


def test_over_redis_a_listener_at_zero_wakes_and_survives_a_redis_restart(
    redis_server: RedisServer, queue_name: str
) -> None:
    """Triggers over a real Redis wake the listener; after Redis dies and comes back, a message
    enqueued during the outage (its trigger lost) is handled thanks to the reconnect re-check."""
    listening = RedisTriggerChannel(redis_server.url, max_reconnect_delay_s=0.5)
    producing = RedisTriggerChannel(redis_server.url)
    scenario = Scenario(queue_name, listening)
    try:
        assert listening.connected.wait(10)
        scenario.idle_at_zero()
        scenario.put(1)
        assert producing.publish(WorkDetected(ACCOUNT, queue_name))
        eventually(lambda: scenario.handled == [1])
        eventually(lambda: scenario.listener.threads_alive == 0)
        redis_server.stop()
        scenario.put(2)
        assert not producing.publish(WorkDetected(ACCOUNT, queue_name))  # lost, not raised
        redis_server.start()
        eventually(lambda: scenario.handled == [1, 2], timeout_s=20)
        eventually(lambda: scenario.listener.threads_alive == 0)
        scenario.put(3)
        assert producing.publish(WorkDetected(ACCOUNT, queue_name))
        eventually(lambda: scenario.handled == [1, 2, 3])
    finally:
        scenario.close()
        listening.close()
        producing.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_listener_is_woken_after_its_trigger_receiver_died(
    redis_server: RedisServer, queue_name: str
) -> None:
    """A receiver thread ended past every guard is replaced, and its re-announcement wakes the
    idle listener for a message put while nobody was receiving."""
    listening = RedisTriggerChannel(redis_server.url, max_reconnect_delay_s=0.5)
    producing = RedisTriggerChannel(redis_server.url)

    def exit_on_poison(event: WorkDetected) -> None:
        if event.queue_name == "poison-pill":
            raise SystemExit  # escapes every `except Exception`: the thread ends

    listening.events.subscribe(exit_on_poison)
    scenario = Scenario(queue_name, listening)
    try:
        assert listening.connected.wait(10)
        scenario.idle_at_zero()
        assert producing.publish(WorkDetected(ACCOUNT, "poison-pill"))
        scenario.put(1)  # its trigger, if any, would be missed while the receiver is down
        eventually(lambda: scenario.handled == [1])
        assert listening.restarts == 1
    finally:
        scenario.close()
        listening.close()
        producing.close()


def test_zero_threads_without_a_trigger_channel_is_refused() -> None:
    """min_threads = 0 with nothing to wake the listener would strand work: a settings error."""
    from pydantic import ValidationError

    from cloudqueue.workers.settings import load_settings

    with pytest.raises(ValidationError, match=r"triggers\.url"):
        load_settings(scaling={"min_threads": 0})
    settings = load_settings(scaling={"min_threads": 0}, triggers={"url": "redis://127.0.0.1:1/0"})
    assert settings.scaling.min_threads == 0
