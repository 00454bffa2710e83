"""Trigger channels: in-process and Redis pub/sub (a real redis-server), with outages."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from listener.push.redis_triggers import RedisTriggerChannel
from listener.push.triggers import ANY, InProcessTriggerChannel, WorkDetected, account_of
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer


class Inbox:
    """Collects events from a channel, thread-safely."""

    def __init__(self) -> None:
        self.events: list[WorkDetected] = []
        self._lock = threading.Lock()

    def __call__(self, event: WorkDetected) -> None:
        with self._lock:
            self.events.append(event)


@pytest.fixture
def redis_channel(redis_server: RedisServer) -> Iterator[RedisTriggerChannel]:
    channel = RedisTriggerChannel(redis_server.url, max_reconnect_delay_s=0.5)
    yield channel
    channel.close()


def test_an_event_matches_its_own_account_and_queue_or_a_wildcard() -> None:
    """Listeners react to their queue on their account, and to the after-reconnect wildcard."""
    event = WorkDetected(account="acct", queue_name="orders")
    assert event.matches("acct", "orders")
    assert not event.matches("acct", "invoices")
    assert not event.matches("other", "orders")
    assert WorkDetected(account=ANY, queue_name=ANY).matches("acct", "invoices")


def test_events_survive_their_json_form() -> None:
    """The wire form round-trips every field."""
    event = WorkDetected(account="a", queue_name="q", payload_size=1234, message_count=7)
    assert WorkDetected.from_json(event.to_json()) == event


def test_the_in_process_channel_delivers_to_every_subscriber() -> None:
    """Each published event reaches each observer."""
    channel = InProcessTriggerChannel()
    first, second = Inbox(), Inbox()
    channel.events.subscribe(first)
    channel.events.subscribe(second)
    assert channel.publish(WorkDetected("a", "q"))
    assert first.events == second.events == [WorkDetected("a", "q")]


def test_redis_carries_events_between_channels(redis_server: RedisServer) -> None:
    """A publisher's event reaches a subscriber on another connection (another process, say)."""
    producer = RedisTriggerChannel(redis_server.url)
    consumer = RedisTriggerChannel(redis_server.url)
    inbox = Inbox()
    consumer.events.subscribe(inbox)
    try:
        assert consumer.connected.wait(10)
        assert producer.publish(WorkDetected("acct", "orders", payload_size=10))
        eventually(lambda: inbox.events == [WorkDetected("acct", "orders", payload_size=10)])
    finally:
        producer.close()
        consumer.close()


def test_publishing_while_redis_is_down_reports_failure_without_raising(
    redis_server: RedisServer, redis_channel: RedisTriggerChannel
) -> None:
    """A put must never fail because the trigger channel is down: publish just says False."""
    redis_server.stop()
    assert redis_channel.publish(WorkDetected("acct", "orders")) is False


def test_a_dropped_connection_is_re_established_and_announced_with_a_wildcard(
    redis_server: RedisServer, redis_channel: RedisTriggerChannel
) -> None:
    """After Redis restarts, the receiver resubscribes and emits ANY/ANY so listeners re-check."""
    inbox = Inbox()
    redis_channel.events.subscribe(inbox)
    assert redis_channel.connected.wait(10)
    redis_server.stop()
    eventually(lambda: not redis_channel.connected.is_set(), timeout_s=15)
    redis_server.start()
    eventually(redis_channel.connected.is_set, timeout_s=15)
    eventually(lambda: WorkDetected(ANY, ANY) in inbox.events, timeout_s=5)
    assert redis_channel.publish(WorkDetected("acct", "orders"))
    eventually(lambda: WorkDetected("acct", "orders") in inbox.events)


@pytest.mark.parametrize(
    ("connection_string", "account"),
    [
        ("DefaultEndpointsProtocol=http;AccountName=prodacct;AccountKey=a2V5;", "prodacct"),
        ("memory://", "memory"),
        ("UseDevelopmentStorage=true", "devstoreaccount1"),
    ],
)
def test_a_store_is_identified_by_its_account(connection_string: str, account: str) -> None:
    """Triggers name Azure accounts by name and embedded stores by their file."""
    assert account_of(connection_string) == account
    assert account_of("sqlite:///x/q.db").endswith("/x/q.db")
