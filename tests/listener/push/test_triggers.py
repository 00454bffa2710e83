"""Trigger channels: in-process and Redis pub/sub (a real redis-server), with outages."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel
from cloudqueue.listener.push.triggers import ANY, InProcessTriggerChannel, WorkDetected, account_of
from cloudqueue.listener.testing import ManualClock
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer

VALID = b'{"account": "acct", "queue_name": "orders"}'
MALFORMED = {
    "infinite size": b'{"account": "a", "queue_name": "q", "payload_size": Infinity}',
    "NaN count": b'{"account": "a", "queue_name": "q", "message_count": NaN}',
    "overflowing float": b'{"account": "a", "queue_name": "q", "payload_size": 1e400}',
    "20,000 brackets": b"[" * 20_000,
    "deep inside an object": b'{"account": "a", "queue_name": "q", "x": '
    + b"[" * 5_000
    + b"]" * 5_000
    + b"}",
    "invalid UTF-8": b'{"account": "\xff\xfe", "queue_name": "q"}',
    "an encoded surrogate": b'{"account": "a", "queue_name": "\xed\xa0\x80"}',
    "an escaped lone surrogate": b'{"account": "a", "queue_name": "\\ud800"}',
    "a terminal escape": b'{"account": "a", "queue_name": "q\\u001b[2J"}',
    "oversize": b'{"account": "a", "queue_name": "q", "pad": "' + b"x" * 100_000 + b'"}',
    "negative size": b'{"account": "a", "queue_name": "q", "payload_size": -1}',
    "count as a boolean": b'{"account": "a", "queue_name": "q", "message_count": true}',
    "count as a fraction": b'{"account": "a", "queue_name": "q", "message_count": 2.5}',
    "count as text": b'{"account": "a", "queue_name": "q", "message_count": "12"}',
    "count too large": b'{"account": "a", "queue_name": "q", "payload_size": 1' + b"0" * 30 + b"}",
    "4,400 digits": b'{"account": "a", "queue_name": "q", "payload_size": ' + b"9" * 4_400 + b"}",
    "not an object": b"[1, 2]",
    "no queue": b'{"account": "a"}',
    "queue not text": b'{"account": "a", "queue_name": 5}',
    "empty": b"",
}


class Inbox:
    """Collects events from a channel, thread-safely."""

    def __init__(self) -> None:
        self.events: list[WorkDetected] = []
        self._lock = threading.Lock()

    def __call__(self, event: WorkDetected) -> None:
        with self._lock:
            self.events.append(event)


def subscribed(channel: RedisTriggerChannel) -> Inbox:
    """An inbox receiving the channel's events, once its receiver has subscribed."""
    inbox = Inbox()
    channel.events.subscribe(inbox)
    assert channel.connected.wait(10)
    return inbox


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


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_trigger_is_refused_with_a_value_error(raw: bytes) -> None:
    """Size, encoding, depth, numbers and names are all checked: only ValueError comes out."""
    with pytest.raises(ValueError):  # noqa: PT011 - which rule it broke is not the point here
        WorkDetected.from_json(raw)


def test_names_may_hold_brackets_and_any_printable_text() -> None:
    """A store's file path is its account: brackets and spaces in it are not nesting."""
    raw = (
        b'{"account": "/data/[x] {y}/q.db", "queue_name": "orders", '
        b'"payload_size": 9007199254740992}'
    )
    event = WorkDetected.from_json(raw)
    assert event.account == "/data/[x] {y}/q.db"
    assert event.payload_size == 2**53


def test_malformed_triggers_neither_kill_the_receiver_nor_hide_the_next_one(
    redis_server: RedisServer, redis_channel: RedisTriggerChannel
) -> None:
    """Every bad trigger is counted and dropped; the valid one after them is still delivered."""
    inbox = subscribed(redis_channel)
    with redis_server.client() as hostile:
        for raw in MALFORMED.values():
            hostile.publish(redis_channel.channel, raw)
        hostile.publish(redis_channel.channel, VALID)
    eventually(lambda: inbox.events == [WorkDetected("acct", "orders")])
    assert redis_channel.rejected == len(MALFORMED)


def test_rejected_triggers_are_logged_once_a_minute_with_their_count(
    redis_server: RedisServer,
) -> None:
    """A flood of bad triggers makes one warning at once, then one summary per minute."""
    clock = ManualClock()
    channel = RedisTriggerChannel(redis_server.url, clock=clock)
    subscribed(channel)
    try:
        with capture_logs() as logs, redis_server.client() as hostile:
            for _ in range(50):
                hostile.publish(channel.channel, b"[[[]]]")
            eventually(lambda: channel.rejected == 50)
            rejected = [e for e in logs if e["event"] == "trigger_rejected"]
            assert [e["count"] for e in rejected] == [1]
            clock.advance(61)
            # No further trigger needed: the receiver summarises what it counted meanwhile.
            eventually(lambda: len([e for e in logs if e["event"] == "trigger_rejected"]) == 2)
        summary = [e for e in logs if e["event"] == "trigger_rejected"][-1]
        assert summary["count"] == 49
        assert summary["reason"] == "nested deeper than 2"
        assert not any(e.get("exc_info") for e in logs)
    finally:
        channel.close()


def test_a_received_wildcard_is_dropped_unless_accepted(redis_server: RedisServer) -> None:
    """`*` wakes every listener: from the wire it counts only when the channel accepts it."""
    strict = RedisTriggerChannel(redis_server.url)
    lenient = RedisTriggerChannel(redis_server.url, accept_wildcard=True)
    try:
        strict_inbox, lenient_inbox = subscribed(strict), subscribed(lenient)
        assert strict.publish(WorkDetected(ANY, ANY))
        assert strict.publish(WorkDetected("acct", ANY))
        assert strict.publish(WorkDetected("acct", "orders"))
        eventually(lambda: len(lenient_inbox.events) == 3)
        eventually(lambda: strict_inbox.events == [WorkDetected("acct", "orders")])
        assert strict.rejected == 2
    finally:
        strict.close()
        lenient.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_receiver_thread_that_dies_is_replaced_and_re_announces(
    redis_server: RedisServer, redis_channel: RedisTriggerChannel
) -> None:
    """Something raised past every guard ends the thread: a new one subscribes and emits ANY."""

    def exit_once(event: WorkDetected) -> None:
        if event.queue_name == "die":
            raise SystemExit  # not an Exception: nothing in the receiver catches it

    redis_channel.events.subscribe(exit_once)
    inbox = subscribed(redis_channel)
    assert redis_channel.publish(WorkDetected("acct", "die"))
    eventually(lambda: redis_channel.restarts == 1)
    eventually(lambda: WorkDetected(ANY, ANY) in inbox.events)
    assert redis_channel.publish(WorkDetected("acct", "orders"))
    eventually(lambda: WorkDetected("acct", "orders") in inbox.events)


def test_an_unexpected_error_in_the_receiver_is_logged_and_it_resubscribes(
    redis_channel: RedisTriggerChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the receive loop (here: parsing raises what it never should) costs a log event
    and a resubscription with ANY, not the thread."""
    parse = WorkDetected.from_json
    failures = iter([RuntimeError("a bug")])

    def failing_once(text: str | bytes) -> WorkDetected:
        for failure in failures:
            raise failure
        return parse(text)

    inbox = subscribed(redis_channel)
    monkeypatch.setattr(WorkDetected, "from_json", staticmethod(failing_once))
    with capture_logs() as logs:
        assert redis_channel.publish(WorkDetected("acct", "lost"))
        eventually(lambda: WorkDetected(ANY, ANY) in inbox.events)
    assert [e["event"] for e in logs if e.get("exc_info")] == ["trigger_receiver_failed"]
    assert redis_channel.publish(WorkDetected("acct", "orders"))
    eventually(lambda: WorkDetected("acct", "orders") in inbox.events)
    assert redis_channel.restarts == 0


def test_a_killed_connection_is_re_established_and_announced(
    redis_server: RedisServer, redis_channel: RedisTriggerChannel
) -> None:
    """Redis closing the subscriber's connection: the receiver resubscribes and emits ANY."""
    inbox = subscribed(redis_channel)
    with redis_server.client() as admin:
        assert admin.client_kill_filter(_type="pubsub") == 1
    eventually(lambda: WorkDetected(ANY, ANY) in inbox.events, timeout_s=15)
    assert redis_channel.publish(WorkDetected("acct", "orders"))
    eventually(lambda: WorkDetected("acct", "orders") in inbox.events)
