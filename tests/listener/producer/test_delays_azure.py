"""Delays beyond one hop against Azurite: the real SDK re-hides a message until it is due.

Azurite runs on real time, so the hop is shortened to one second (``max_hop_s``, on the publisher
and on the listener's delivery policy) and the delay to four: the same mechanics as 7-day hops
over a month (``test_delays.py`` runs those on a virtual clock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, Middleware, Publisher
from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.polling import eventually


@pytest.fixture
def azure(azurite_connection_string: str) -> Iterator[AzureQueueStorage]:
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    yield storage
    storage.close()


class Settled(Middleware):
    """Each settled message's outcome and dequeue count, and the due time it carried."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, datetime | None]] = []
        self._lock = threading.Lock()

    def after_settle(self, context: MessageContext[Any]) -> None:
        assert context.outcome is not None
        with self._lock:
            self.seen.append((context.outcome.kind, context.message.dequeue_count, context.due))


def test_a_message_hops_on_azurite_and_is_handled_once_when_due(
    azure: AzureQueueStorage, queue_name: str
) -> None:
    """Hidden for 1 s at a time, a 4-second delay takes at least two hops -- each a fresh
    message delivered once, so a listener that poisons at the second delivery never does -- and
    the item is handled once, not before its due time."""
    azure.create_queue(queue_name)
    Publisher(azure, queue_name, str, max_hop_s=1).publish("renew", delay_s=4)
    handled: list[tuple[str, datetime]] = []
    settled = Settled()
    listener: CloudQueueListener[str] = CloudQueueListener(
        azure,
        CloudQueueLocation(queue_name),
        str,
        middleware=[settled],
        dequeue_interval_s=0.05,
        delivery=DeliveryPolicy(max_dequeue_count=1, max_hop_s=1),
    )
    listener.subscribe(lambda item: handled.append((item, datetime.now(UTC))))
    listener.start_listener(1)
    try:
        eventually(lambda: handled, timeout_s=30)
        eventually(lambda: azure.approximate_message_count(queue_name) == 0, timeout_s=10)
    finally:
        assert listener.stop(10)
    ((item, handled_at),) = handled
    kinds = [kind for kind, _, _ in settled.seen]
    due = settled.seen[-1][2]
    assert item == "renew"
    assert due is not None
    assert handled_at >= due
    assert kinds[-1] == "deleted"
    assert kinds[:-1] == ["delayed"] * listener.counters.delay_hops
    assert listener.counters.delay_hops >= 2
    assert {count for _, count, _ in settled.seen} == {1}
    assert listener.messages_poisoned == 0
    assert azure.approximate_message_count(poison_queue_name(queue_name)) == 0
