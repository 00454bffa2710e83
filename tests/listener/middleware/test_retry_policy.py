"""A worker's ``Retry``: give up at once on the exceptions it names (or on any not in
``retry_on``), wait its own delays by visibility, poison after its own number of deliveries;
a partly failed batch message keeps its done items done."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    ConfigurationError,
    MessageCodec,
    MessageContext,
    Middleware,
    PermanentFailure,
    Publisher,
    QueueStorage,
    Retry,
    RetryPolicy,
)
from cloudqueue.listener.poison.queue import browse_poisoned
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.policies.delivery import DeliveryPolicy, retry_visibility_s
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.payload import open_message
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.testing import run_until_drained
from tests.support.polling import eventually


class Flaky(QueueWorker[int]):
    """1 raises ValueError, 2 raises KeyError, 3 raises ConnectionError; the rest succeed."""

    queue_name = "flaky"
    calls: dict[int, int]

    def __init__(self) -> None:
        self.calls = {}
        self._lock = threading.Lock()

    def handle(self, item: int) -> None:
        with self._lock:
            self.calls[item] = self.calls.get(item, 0) + 1
        failure = {1: ValueError("one is bad"), 2: KeyError("two"), 3: ConnectionError("down")}
        if item in failure:
            raise failure[item]


class GiveUpOnValueError(Flaky):
    retry = Retry(give_up_on=(ValueError,))


class RetryOnlyConnectionErrors(Flaky):
    retry = Retry(retry_on=(ConnectionError,), max_deliveries=3)


class AsyncGiveUp(QueueWorker[int]):
    queue_name = "flaky"
    retry = Retry(give_up_on=(ValueError,))
    calls = 0

    async def handle(self, item: int) -> None:
        AsyncGiveUp.calls += 1
        raise ValueError(f"bad {item}")


def test_give_up_on_poisons_at_the_first_failure_with_the_exception_in_the_reason() -> None:
    """Done-when: a ValueError item is handled once and poisoned, its reason naming the type and
    message; the others keep the settings' retries (5 deliveries)."""
    worker = GiveUpOnValueError()
    result = run_until_drained(worker, [0, 1, 2], fail_fast=False)
    assert list(result) == [0]
    assert worker.calls == {0: 1, 1: 1, 2: 5}
    reasons = {p.item: p.reason for p in result.poisoned}
    assert reasons[1] == "give_up: ValueError: one is bad"
    assert reasons[2] == "max_dequeue_count_exceeded"


def test_an_exception_not_in_retry_on_is_poisoned_at_once() -> None:
    """Done-when: with retry_on given, a KeyError (a miss) and a ValueError are given up on at
    their first failure; the ConnectionError is retried up to max_deliveries (3)."""
    worker = RetryOnlyConnectionErrors()
    result = run_until_drained(worker, [1, 2, 3], fail_fast=False)
    assert worker.calls == {1: 1, 2: 1, 3: 3}
    reasons = {p.item: p.reason for p in result.poisoned}
    assert reasons == {
        1: "give_up: ValueError: one is bad",
        2: "give_up: KeyError: 'two'",
        3: "max_dequeue_count_exceeded",
    }


def test_an_async_handler_is_judged_alike() -> None:
    """``async def handle`` raising ValueError is given up on after one call."""
    AsyncGiveUp.calls = 0
    result = run_until_drained(AsyncGiveUp(), [7], fail_fast=False)
    assert AsyncGiveUp.calls == 1
    assert [p.reason for p in result.poisoned] == ["give_up: ValueError: bad 7"]


def test_permanent_failure_keeps_its_own_reason_under_retry_on() -> None:
    """A PermanentFailure is no ``retry_on`` miss: it is poisoned as permanent_failure."""

    class Permanent(QueueWorker[int]):
        queue_name = "flaky"
        retry = Retry(retry_on=(ConnectionError,))

        def handle(self, item: int) -> None:
            raise PermanentFailure("never")

    result = run_until_drained(Permanent(), [1], fail_fast=False)
    assert [p.reason for p in result.poisoned] == ["permanent_failure"]


class Settled(Middleware):
    """Notes each settlement: its hiding is done by then."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = outcomes

    def after_settle(self, context: MessageContext[Any]) -> None:
        self.outcomes.append(str(context.outcome))


def test_the_delays_are_honoured_by_visibility_within_a_second(queue_name: str) -> None:
    """Done-when, on an injected clock: after the 1st failure the message stays hidden 5 s, after
    the 2nd 30 s (then the last delay repeats); nothing sleeps, the store's visibility waits."""
    clock = ManualClock()
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(queue_name)
    retry = Retry(delays_s=(5, 30))
    delivered: list[float] = []
    settled: list[str] = []
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        int,
        dequeue_interval_s=0.01,
        delivery=retry.applied_to(DeliveryPolicy()),
        clock=clock,
        middleware=[Settled(settled)],
    )

    def fail(item: int) -> None:
        delivered.append(clock.monotonic())
        raise ConnectionError("down")

    listener.subscribe(fail)
    storage.put_message(queue_name, "1")
    listener.start_listener(1)
    try:
        for delay_s, deliveries in ((5, 2), (30, 3), (30, 4)):
            eventually(lambda n=deliveries: len(settled) == n - 1)  # type: ignore[misc]
            clock.advance(delay_s - 0.5)
            assert not storage.peek_messages(queue_name, max_messages=1)  # still hidden
            clock.advance(0.5)
            eventually(lambda n=deliveries: len(delivered) == n)  # type: ignore[misc]
        gaps = [later - earlier for earlier, later in itertools.pairwise(delivered)]
        assert gaps == [5, 30, 30]
    finally:
        listener.stop(10)


def test_delays_round_up_to_whole_seconds_and_the_last_repeats() -> None:
    """A visibility takes whole seconds: 1.2 s waits 2 s, never less; past the list, its last."""
    policy = Retry(delays_s=(1.2, 3)).applied_to(DeliveryPolicy(max_dequeue_count=9))
    assert [retry_visibility_s(n, policy, rng=None) for n in (1, 2, 3, 8)] == [2, 3, 3, 3]  # type: ignore[arg-type]
    assert policy.max_dequeue_count == 9  # no max_deliveries: the settings' count stays


def test_giving_up_on_one_item_of_a_batch_message_keeps_the_others_done(
    storage: QueueStorage, queue_name: str
) -> None:
    """A message of three items whose second raises ValueError: on every store, only that item
    goes to the poison queue (its record holds it alone), the others are handled once."""
    storage.create_queue(queue_name)
    calls: list[int] = []

    def handle(item: int) -> None:
        calls.append(item)
        if item == 2:
            raise ValueError("two is bad")

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        int,
        dequeue_interval_s=0.02,
        middleware=[RetryPolicy(Retry(give_up_on=(ValueError,)))],
    )
    listener.subscribe(handle)
    Publisher(storage, queue_name, int, batch=True).publish_many([1, 2, 3])
    listener.start_listener(1)
    try:
        records = eventually(lambda: list(browse_poisoned(storage, queue_name, limit=5)))
        record = read_record(records[0].content)
        assert record is not None
        assert record.reason == "give_up: ValueError: two is bad"
        eventually(lambda: storage.approximate_message_count(queue_name) == 0)
        assert sorted(calls) == [1, 2, 3]
        assert open_message(record.content, None).texts == [MessageCodec(int).encode(2)]
    finally:
        listener.stop(10)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"retry_on": (42,)}, "retry_on"),
        ({"give_up_on": ("ValueError",)}, "give_up_on"),
        ({"give_up_on": int}, "give_up_on"),
        ({"delays_s": (-1,)}, "delays_s"),
        ({"delays_s": (8 * 24 * 3600,)}, "delays_s"),
        ({"max_deliveries": 0}, "max_deliveries"),
    ],
)
def test_a_retry_naming_what_is_no_exception_or_no_delay_is_refused(
    arguments: dict[str, Any], named: str
) -> None:
    """Bad values fail where the class is defined, naming the argument."""
    with pytest.raises(ConfigurationError, match=named):
        Retry(**arguments)


def test_a_retry_attribute_that_is_no_retry_is_refused() -> None:
    """``retry = (ValueError,)`` (a tuple, not a Retry) is refused when the worker is checked."""

    class Sloppy(Flaky):
        retry = (ValueError,)  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match=r"retry must be a workers\.Retry"):
        Sloppy.check()
