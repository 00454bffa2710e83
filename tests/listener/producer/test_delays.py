"""Delays beyond 7 days: a listener hides a message again, hop after hop, until it is due.

The embedded stores run on a ``VirtualClock``, so a month passes in a fraction of a second of real
time; Azurite, on real time, is in ``test_delays_azure.py`` with hops of a second.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryPayloadStore,
    InMemoryQueueStorage,
    MessageCodec,
    Middleware,
    PoisonRecord,
    Publisher,
    QueueStorage,
    SqliteQueueStorage,
    TransientStorageError,
    poison_queue_name,
)
from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.errors import ConfigurationError, DecodeError
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.delays import MAX_HOP_S
from cloudqueue.listener.queue_limits import NEVER_EXPIRES
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.listener.testing import ManualClock, VirtualClock
from cloudqueue.listener.wire.due import due_of, with_due
from cloudqueue.listener.wire.envelope import envelope_text, inline_envelope, parse_envelope
from cloudqueue.listener.wire.frames import pack
from tests.support.paths import REPO_ROOT

QUEUE = "reminders"
DAY_S = 86_400
STEP_S = 6 * 3600
"""How far virtual time moves whenever every dequeue thread waits: due times fall on a step."""


@pytest.fixture(params=["memory", "sqlite"])
def store(
    request: pytest.FixtureRequest, virtual_clock: VirtualClock, tmp_path: Path
) -> Iterator[QueueStorage]:
    """Each embedded store on the virtual clock, with the queue created."""
    backend: QueueStorage
    if request.param == "memory":
        backend = InMemoryQueueStorage(clock=virtual_clock)
    else:
        backend = SqliteQueueStorage(tmp_path / "queues.db", clock=virtual_clock)
    backend.create_queue(QUEUE)
    yield backend
    backend.close()


class Settled(Middleware):
    """Records each settled message: its outcome, dequeue count, hops so far and due time."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int, datetime | None]] = []
        self.fields: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def after_settle(self, context: MessageContext[Any]) -> None:
        assert context.outcome is not None
        hops = 0 if context.envelope is None else context.envelope.hops
        with self._lock:
            self.seen.append(
                (context.outcome.kind, context.message.dequeue_count, hops, context.due)
            )
            self.fields.append({} if context.envelope is None else dict(context.envelope.fields))

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, *_ in self.seen]


class Handled:
    """The items observers were given, each with the virtual time it was handled at."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.items: list[tuple[object, datetime]] = []

    def __call__(self, item: object) -> None:
        self.items.append((item, self.clock.now()))


def run_for(
    listener: CloudQueueListener[Any],
    clock: VirtualClock,
    seconds: float,
    *,
    step_s: float = STEP_S,
    until: Callable[[], bool] = lambda: False,
) -> None:
    """Run the listener while virtual time moves ``seconds`` on (or until ``until()``), a step
    at a time, each step only once every dequeue thread waits."""
    end = clock.monotonic() + seconds
    deadline = time.monotonic() + 60
    listener.start_listener(1)
    try:
        while clock.monotonic() < end and not until():
            if clock.all_waiting(lambda: listener.threads_alive):
                clock.advance(step_s)
            assert time.monotonic() < deadline, f"stuck: {listener!r}, {clock!r}"
    finally:
        assert listener.stop(10)


def listener_on(
    storage: QueueStorage,
    clock: VirtualClock,
    *middleware: Middleware,
    delivery: DeliveryPolicy | None = None,
    item_type: type[Any] = str,
) -> CloudQueueListener[Any]:
    return CloudQueueListener(
        storage,
        CloudQueueLocation(QUEUE),
        item_type,
        middleware=list(middleware),
        # One delivery allowed: a hop that counted as a delivery would poison the message.
        delivery=delivery or DeliveryPolicy(max_dequeue_count=1),
        clock=clock,
        sleeper=clock,
    )


# -- hops, end to end -------------------------------------------------------------------------


@pytest.mark.parametrize(("days", "hops"), [(7, 0), (8, 1), (30, 4)])
def test_a_delayed_message_is_handled_once_when_due_after_a_hop_every_7_days(
    store: QueueStorage, virtual_clock: VirtualClock, days: int, hops: int
) -> None:
    """Published ``days`` ahead, the message is handled once, at its due time, after a hop at
    each 7 days; every hop is a fresh message, delivered once, so even a listener that poisons
    at the second delivery never poisons it."""
    start = virtual_clock.now()
    Publisher(store, QUEUE, str, clock=virtual_clock).publish(
        "call back", delay=timedelta(days=days)
    )
    settled, handled = Settled(), Handled(virtual_clock)
    listener = listener_on(store, virtual_clock, settled)
    listener.subscribe(handled)
    run_for(listener, virtual_clock, (days + 10) * DAY_S)
    due = start + timedelta(days=days)
    assert handled.items == [("call back", due)]
    assert listener.counters.delay_hops == hops
    assert settled.kinds == ["delayed"] * hops + ["deleted"]
    assert [count for _, count, _, _ in settled.seen] == [1] * (hops + 1)
    assert [seen_hops for _, _, seen_hops, _ in settled.seen] == list(range(hops + 1))
    assert {seen_due for _, _, _, seen_due in settled.seen} == ({due} if hops else {None})
    assert listener.messages_poisoned == 0
    assert store.approximate_message_count(QUEUE) == 0


class FoundGets(Middleware):
    """Counts the gets that returned messages."""

    def __init__(self) -> None:
        self.count = 0

    def after_fetch(self, queue_name: str, messages: Any) -> None:
        self.count += bool(messages)


DOCS_PAGE = REPO_ROOT / "docs" / "concepts" / "delays.md"
COST_ROW = re.compile(r"^\| (\d+) days? \| (\d+) \| (\d+) \| (\d+) \|$", re.MULTILINE)


def cost_rows() -> list[tuple[int, int, int, int]]:
    """The docs' cost table: delay in days, hops, transactions in all and for the delay."""
    rows = COST_ROW.findall(DOCS_PAGE.read_text())
    assert len(rows) >= 4, "the cost table is gone from the docs page"
    return [(int(days), int(hops), int(total), int(extra)) for days, hops, total, extra in rows]


@pytest.mark.parametrize(("days", "hops", "total", "extra"), cost_rows())
def test_the_cost_table_in_the_docs_is_what_a_metered_run_counts(
    virtual_clock: VirtualClock, days: int, hops: int, total: int, extra: int
) -> None:
    """Each row of the docs' table: the hops, the transactions from put to delete, and those
    beyond an undelayed message's 3."""
    metered = MeteredStorage(InMemoryQueueStorage(clock=virtual_clock))
    metered.create_queue(QUEUE)
    found = FoundGets()
    Publisher(metered, QUEUE, str, clock=virtual_clock).publish("x", delay=timedelta(days=days))
    listener = listener_on(metered, virtual_clock, found)
    listener.subscribe(lambda _: None)
    run_for(listener, virtual_clock, (days + 1) * DAY_S, step_s=DAY_S)
    counts = metered.counts()
    counted = counts["put_message"] + found.count + counts["delete_message"]
    assert (listener.counters.delay_hops, counted, counted - 3) == (hops, total, extra)


def test_a_batch_and_a_stored_payload_wait_for_their_due_time_too(
    virtual_clock: VirtualClock,
) -> None:
    """Every kind of message carries the due time: a batch of items and an item kept in the
    payload store are handled at 10 days, after one hop each."""
    storage = InMemoryQueueStorage(clock=virtual_clock)
    storage.create_queue(QUEUE)
    payloads = InMemoryPayloadStore()
    batched = Publisher(storage, QUEUE, str, batch=True, clock=virtual_clock)
    batched.publish_many([f"item {n}" for n in range(50)], delay=timedelta(days=10))
    large = Publisher(storage, QUEUE, str, payload_store=payloads, clock=virtual_clock)
    large.publish(random_text(200_000), delay=timedelta(days=10))
    assert (batched.messages_sent, large.payloads_stored) == (1, 1)
    handled = Handled(virtual_clock)
    listener = CloudQueueListener(
        storage,
        CloudQueueLocation(QUEUE),
        str,
        payload_store=payloads,
        clock=virtual_clock,
        sleeper=virtual_clock,
    )
    listener.subscribe(handled)
    run_for(listener, virtual_clock, 12 * DAY_S)
    due = virtual_clock.now() - timedelta(days=2)
    assert len(handled.items) == 51
    assert {at for _, at in handled.items} == {due}
    assert listener.counters.delay_hops == 2


def random_text(length: int) -> str:
    """Text that does not compress, so it must go to the payload store."""
    return secrets.token_hex(length // 2)


def test_a_hop_keeps_every_field_of_the_envelope(
    store: QueueStorage, virtual_clock: VirtualClock
) -> None:
    """Fields a listener does not know (a key, a trace context) travel with every hop."""
    content = with_due(
        inline_envelope(pack([MessageCodec(str).encode("renew")])),
        virtual_clock.now() + timedelta(days=12),
    )
    extra = {"key": "order-7", "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    store.put_message(
        QUEUE,
        _with_fields(content, extra),
        visibility_delay_s=MAX_HOP_S,
        time_to_live_s=30 * DAY_S,
    )
    settled = Settled()
    listener = listener_on(store, virtual_clock, settled)
    listener.subscribe(lambda _: None)
    run_for(listener, virtual_clock, 20 * DAY_S)
    assert settled.kinds == ["delayed", "deleted"]
    assert all(fields.items() >= extra.items() for fields in settled.fields)
    assert settled.fields[-1]["hops"] == 1


def _with_fields(content: str, extra: Mapping[str, object]) -> str:
    envelope = parse_envelope(content)
    assert envelope is not None
    return envelope_text({**envelope.fields, **extra})


class SkipAtHop(Middleware):
    """Skips (deletes unhandled) any message that is not due yet: a cancelled key's way out."""

    def around_handle(self, context: MessageContext[Any], call_next: Callable[[], Any]) -> Any:
        if context.due is not None and not context.deliverable:
            context.skip("cancelled")
            return None
        return call_next()


def test_a_middleware_may_skip_a_delayed_message_at_a_hop(
    store: QueueStorage, virtual_clock: VirtualClock
) -> None:
    """The hop runs inside the middleware chain: one that decides instead of going on settles
    the message its way (here deleted at the first hop, never handled, never hopped)."""
    Publisher(store, QUEUE, str, clock=virtual_clock).publish("x", delay=timedelta(days=30))
    settled, handled = Settled(), Handled(virtual_clock)
    listener = listener_on(store, virtual_clock, settled, SkipAtHop())
    listener.subscribe(handled)
    run_for(listener, virtual_clock, 31 * DAY_S)
    assert (handled.items, settled.kinds, listener.counters.delay_hops) == ([], ["skipped"], 0)
    assert store.approximate_message_count(QUEUE) == 0


class FailingPuts(ForwardingStorage):
    """Passes every call on, except that put number ``fail_at`` (counting from 1) fails."""

    def __init__(self, inner: QueueStorage, *, fail_at: int) -> None:
        super().__init__(inner)
        self.fail_at, self.puts = fail_at, 0

    def put_message(self, queue_name: str, content: str, **times: Any) -> QueueMessage:
        self.puts += 1
        if self.puts == self.fail_at:
            raise TransientStorageError("put_message: 503 ServerBusy (injected)")
        return super().put_message(queue_name, content, **times)


def test_a_hop_that_cannot_put_its_copy_is_a_failed_delivery_and_the_message_stays(
    virtual_clock: VirtualClock,
) -> None:
    """The first hop's put fails: the message is neither deleted nor lost; it comes back after
    the retry back-off, hops, and is handled once, when due."""
    storage = FailingPuts(InMemoryQueueStorage(clock=virtual_clock), fail_at=2)
    storage.create_queue(QUEUE)
    start = virtual_clock.now()
    Publisher(storage, QUEUE, str, clock=virtual_clock).publish("x", delay=timedelta(days=9))
    handled = Handled(virtual_clock)
    listener = listener_on(storage, virtual_clock, delivery=DeliveryPolicy())
    listener.subscribe(handled)
    run_for(listener, virtual_clock, 12 * DAY_S, step_s=60)
    assert handled.items == [("x", start + timedelta(days=9))]
    assert (listener.messages_failed, listener.counters.delay_hops) == (1, 1)
    assert listener.messages_poisoned == 0


def test_a_malformed_due_time_is_poisoned_as_undecodable(virtual_clock: VirtualClock) -> None:
    """A ``due`` that is no ISO 8601 time with its offset cannot be honoured: poisoned at once."""
    storage = InMemoryQueueStorage(clock=virtual_clock)
    storage.create_queue(QUEUE)
    envelope = inline_envelope(pack([MessageCodec(str).encode("x")]))
    storage.put_message(QUEUE, _with_fields(envelope, {"due": "next tuesday"}))
    listener = listener_on(storage, virtual_clock)
    listener.subscribe(lambda _: None)
    run_for(listener, virtual_clock, 60, step_s=1, until=lambda: listener.messages_poisoned > 0)
    (record,) = storage.peek_messages(poison_queue_name(QUEUE), max_messages=1)
    parsed = PoisonRecord.from_json(record.content)
    assert parsed.reason == "undecodable"
    assert "due" in parsed.error


# -- the wire ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "due", ["2026-02-01T09:00:00", "tomorrow", 1769936400, "2026-02-01T09:00:00Z" * 3]
)
def test_a_due_time_must_be_an_iso_8601_time_with_its_offset(due: object) -> None:
    """Anything else makes the envelope malformed, naming the field."""
    envelope = inline_envelope(pack(["eA=="]))
    parsed = parse_envelope(envelope)
    assert parsed is not None
    with pytest.raises(DecodeError, match="due"):
        parse_envelope(envelope_text({**parsed.fields, "due": due}))


def test_the_due_time_reads_first_in_the_text_and_to_the_second() -> None:
    """``due`` comes before the data, in UTC with a Z, rounded up to the second (never early)."""
    due = datetime.fromisoformat("2026-02-01T09:00:00.250+01:00")
    content = with_due(inline_envelope(pack(["eA=="])), due)
    assert '"due":"2026-02-01T08:00:01Z","data":' in content
    assert due_of(content) == datetime.fromisoformat("2026-02-01T08:00:01+00:00")
    assert due_of("plain text") is None
    assert due_of('{"$cloudqueue": 5}') is None


# -- the publisher ----------------------------------------------------------------------------


def test_a_long_delay_is_put_as_an_envelope_hidden_for_7_days_that_expires_7_days_after_due(
    manual_storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> None:
    """30 days: hidden for the first hop (7 days), due in 30, gone 7 days after that."""
    Publisher(manual_storage, queue_name, str, clock=clock).publish("x", delay_s=30 * DAY_S)
    clock.advance(MAX_HOP_S - 1)
    assert manual_storage.peek_messages(queue_name, max_messages=1) == []
    clock.advance(1)
    (message,) = manual_storage.peek_messages(queue_name, max_messages=1)
    assert due_of(message.content) == message.inserted_on + timedelta(days=30)
    assert message.expires_on == message.inserted_on + timedelta(days=37)


def test_a_delay_of_up_to_7_days_is_the_puts_own_and_leaves_the_item_as_it_is(
    manual_storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> None:
    """No envelope (Azure Functions still reads it), and 7 days of life after its delay -- so a
    delay of exactly 7 days is accepted with the default time-to-live."""
    codec = MessageCodec(str)
    Publisher(manual_storage, queue_name, str, clock=clock).publish("x", delay_s=MAX_HOP_S)
    clock.advance(MAX_HOP_S)
    (message,) = manual_storage.peek_messages(queue_name, max_messages=1)
    assert message.content == codec.encode("x")
    assert message.expires_on == message.inserted_on + timedelta(days=14)


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"delay": timedelta(seconds=-1)}, "delay_s must be >= 0"),
        ({"delay_s": -1}, "delay_s must be >= 0"),
        ({"delay_s": 1.5}, "whole number"),
        ({"delay": 30, "delay_s": 0}, "timedelta"),
        ({"delay": timedelta(days=8), "delay_s": 5}, "not both"),
        ({"delay": timedelta(days=30), "time_to_live_s": 29 * DAY_S}, "expire before it is due"),
    ],
)
def test_a_delay_out_of_range_is_refused_before_anything_is_sent(
    manual_storage: InMemoryQueueStorage,
    clock: ManualClock,
    queue_name: str,
    arguments: dict[str, Any],
    complaint: str,
) -> None:
    """ValueError naming the value; the queue stays empty."""
    publisher = Publisher(manual_storage, queue_name, str, clock=clock)
    with pytest.raises(ValueError, match=complaint):
        publisher.publish("x", **arguments)
    assert manual_storage.approximate_message_count(queue_name) == 0


def test_a_delay_that_never_expires_and_a_fraction_of_a_second_rounded_up(
    manual_storage: InMemoryQueueStorage, clock: ManualClock, queue_name: str
) -> None:
    """``NEVER_EXPIRES`` works with any delay; a timedelta's fraction makes a whole second more."""
    publisher = Publisher(manual_storage, queue_name, str, clock=clock)
    publisher.publish("x", delay=timedelta(days=8, microseconds=1), time_to_live_s=NEVER_EXPIRES)
    clock.advance(MAX_HOP_S)
    (message,) = manual_storage.peek_messages(queue_name, max_messages=1)
    assert message.expires_on is None
    assert due_of(message.content) == message.inserted_on + timedelta(days=8, seconds=1)


@pytest.mark.parametrize("max_hop_s", [0, MAX_HOP_S + 1])
def test_a_hop_longer_than_azure_allows_or_shorter_than_a_second_is_refused(
    manual_storage: InMemoryQueueStorage, queue_name: str, max_hop_s: int
) -> None:
    """On the publisher (ValueError) and on the listener's delivery policy (ConfigurationError)."""
    with pytest.raises(ValueError, match="max_hop_s"):
        Publisher(manual_storage, queue_name, str, max_hop_s=max_hop_s)
    with pytest.raises(ConfigurationError, match="max_hop_s"):
        DeliveryPolicy(max_hop_s=max_hop_s)
