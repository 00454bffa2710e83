"""Waiting for a result costs few reads: without push triggers a back-off from 0.1 s to 5 s (at
most one read per second on average after the first 5 s), with them one read before waiting and
one for the value; a timeout names the key. Counted on a manual clock, never on wall time."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from cloudqueue.listener.push.triggers import ANY, InProcessTriggerChannel, WorkDetected
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.workflows.result_handle import ResultHandle
from cloudqueue.listener.workflows.result_signals import ResultSignals
from cloudqueue.listener.workflows.result_stores import InMemoryResultStore
from tests.support.polling import eventually
from tests.support.result_workers import WakeUps


class Total(BaseModel):
    amount: int


class CountedStore(InMemoryResultStore):
    """A memory result store that notes when each read happened (on its clock)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.clock = clock
        self.reads: list[float] = []
        self.appears: tuple[float, str, str] | None = None
        """(monotonic time, key, value): the value stored then, as a worker would."""

    def get(self, key: str) -> str | None:
        now = self.clock.monotonic()
        self.reads.append(now)
        if self.appears is not None and now >= self.appears[0]:
            super().put(self.appears[1], self.appears[2], ttl_s=60)
        return super().get(key)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def polling(store: CountedStore, clock: ManualClock, key: str = "k-1") -> ResultHandle:
    return ResultHandle(key, lambda: store, as_type=Total, clock=clock, sleeper=clock)


def test_a_timeout_raises_naming_the_key_after_reads_backing_off_to_every_5_s(
    clock: ManualClock,
) -> None:
    """A result that never comes: TimeoutError naming the key after 120 s, the waits 0.1, 0.2,
    0.4 ... 3.2 s, then 5 s each; after the first 5 s at most 1 read per second on average."""
    store = CountedStore(clock)
    start = clock.monotonic()
    with pytest.raises(TimeoutError, match=r"'k-1'.*120 s"):
        polling(store, clock).result(timeout_s=120)
    assert clock.waits[:7] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0])
    assert max(clock.waits) == 5.0
    late = [at - start for at in store.reads if at - start > 5]
    assert len(late) / (120 - 5) <= 1.0
    assert len(store.reads) == 7 + 23  # 6.3 s of back-off, then one read per 5 s to 120 s


def test_a_result_stored_while_waiting_is_returned_as_the_handlers_model(
    clock: ManualClock,
) -> None:
    """The value appears 30 s in: the next read returns it, decoded as the model."""
    store = CountedStore(clock)
    store.appears = (clock.monotonic() + 30, "k-1", '{"amount": 42}')
    assert polling(store, clock).result(timeout_s=60) == Total(amount=42)
    assert len(store.reads) == 7 + 5  # to 6.3 s, then 11.3 ... 31.3 s


@pytest.fixture
def channel() -> Iterator[InProcessTriggerChannel]:
    made = InProcessTriggerChannel()
    yield made
    made.close()


def test_with_push_triggers_waiting_reads_once_then_only_for_the_value(
    channel: InProcessTriggerChannel,
) -> None:
    """Subscribed to the channel, the waiter reads once, then not at all until the worker
    announces the key, which wakes its one wait: the value comes with the second read."""
    store = CountedStore(ManualClock())
    signals = ResultSignals(channel, account="memory")
    wake_ups = WakeUps()
    handle = ResultHandle("k-2", lambda: store, signals=signals, sleeper=wake_ups)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(handle.result(timeout_s=25)))
    waiter.start()
    eventually(lambda: len(store.reads) == 1, timeout_s=10)
    signals.announce("k-other")  # another key's result: no read
    store.put("k-2", '{"amount": 7}', ttl_s=60)
    signals.announce("k-2")
    waiter.join(20)
    assert got == [{"amount": 7}]
    assert len(store.reads) == 2
    assert wake_ups.ended == [True]  # woken by the announcement, not at a time-out


def test_a_wildcard_trigger_makes_the_waiter_look_again(channel: InProcessTriggerChannel) -> None:
    """After the channel reconnects it sends a wildcard (triggers may have been missed): the
    waiter reads the store again, and finds the value announced while it was cut off."""
    store = CountedStore(ManualClock())
    wake_ups = WakeUps()
    signals = ResultSignals(channel, account="memory")
    handle = ResultHandle("k-3", lambda: store, signals=signals, sleeper=wake_ups)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(handle.result(timeout_s=25)))
    waiter.start()
    eventually(lambda: len(store.reads) == 1, timeout_s=10)
    store.put("k-3", "3", ttl_s=60)  # its announcement lost
    channel.publish(WorkDetected(ANY, ANY))
    waiter.join(20)
    assert got == [3]
    assert wake_ups.ended == [True]


def test_a_handle_without_a_key_or_refused_says_why_without_reading() -> None:
    """``result`` of a handle that can have none raises ValueError with its reason."""
    store = CountedStore(ManualClock())
    with pytest.raises(ValueError, match="keeps no results"):
        ResultHandle("k", lambda: store, refusal="Mailer keeps no results").result(timeout_s=1)
    with pytest.raises(ValueError, match="without a key"):
        ResultHandle(None, lambda: store).result(timeout_s=1)
    assert store.reads == []
