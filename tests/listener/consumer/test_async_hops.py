"""Delays beyond 7 days on the event-loop consumer: a message taken before its due time is
hidden again unhandled (a copy, its dequeue count from zero), and handled once when due."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cloudqueue.listener import InMemoryQueueStorage, Publisher
from cloudqueue.listener.consumer.middleware import MessageContext, Middleware
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.codec import MessageCodec
from tests.support.event_loop_consumer import ONE_TASK, LoopConsumer
from tests.support.polling import eventually

QUEUE = "reminders"
DAY_S = 86_400


class Outcomes(Middleware):
    """Each settled message's outcome and reason."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def after_settle(self, context: MessageContext[Any]) -> None:
        assert context.outcome is not None
        self.seen.append((context.outcome.kind, context.outcome.reason))


def test_a_message_taken_before_it_is_due_hops_and_is_handled_when_due() -> None:
    """Published 10 days ahead (hidden 7 days): taken at day 7 it is hidden again for the 3
    days left, unhandled, with one delivery allowed; taken again at day 10 it is handled."""
    clock = ManualClock()
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(QUEUE)
    Publisher(storage, QUEUE, str, clock=clock).publish("call back", delay=timedelta(days=10))
    handled: list[str] = []

    async def handle(item: str) -> None:
        handled.append(item)

    outcomes = Outcomes()
    consumer = LoopConsumer(
        storage,
        QUEUE,
        handle,
        MessageCodec(str),
        scaling=ONE_TASK,
        clock=clock,
        middleware=[outcomes],
        delivery=DeliveryPolicy(max_dequeue_count=1),  # a hop counted as a delivery would poison
    ).start()
    try:
        clock.advance(7 * DAY_S + 1)
        eventually(lambda: outcomes.seen == [("delayed", "not_due")])
        assert handled == []
        assert consumer.consumer.counters.delay_hops == 1
        clock.advance(3 * DAY_S)
        eventually(lambda: handled == ["call back"])
    finally:
        assert consumer.stop(10)
    assert outcomes.seen == [("delayed", "not_due"), ("deleted", None)]
    assert consumer.messages_poisoned == 0
    assert storage.approximate_message_count(QUEUE) == 0
