"""Publisher: puts items on a queue, one per message or packed into batches, large ones compressed
or kept in a payload store (the wire format is in ``cloudqueue.listener.wire.payload``).

Each message is one storage transaction to put and two to take (get + delete), so packing a
hundred small items into one message makes them a hundred times cheaper to move; a listener hands
them to its observers one by one. A batch item that fails is retried alone, in a new message,
while the items that succeeded are done (see ``cloudqueue.listener.consumer.processing``).

Delivery is at-least-once from this end too. A put that fails with ``TransientStorageError`` (a
timeout, a 500 or 503) may have happened all the same. The publisher does not retry it itself: it
raises, and a caller that publishes again may create a duplicate. That is tolerated by design,
because handlers must be idempotent anyway (any message can be delivered twice). cloudqueue mints
no message id for deduplication (it would differ between the put and the caller's retry); the
message *key* belongs to the item instead (``key=``, an invoice number, an idempotency token):
it travels with the message (``cloudqueue.listener.wire.keys``), survives any retry, and a listener
with idempotent handling handles a key once. ``effect_once_s`` goes further for handlers that
publish (``cloudqueue.listener.producer.effect_once``), and ``cancel(key)`` withdraws the queued
messages of a key.

A stored payload whose message could not be put is deleted again when the failure was definite,
and kept after a transient one: the message referring to it may exist.

Delayed and expiring work: ``delay_s`` (or ``delay``, a timedelta) keeps a message invisible that
long after the put, any length: beyond 7 days (Azure's cap) in hops that listeners re-hide
(``cloudqueue.listener.producer.delays``). ``time_to_live_s`` makes it expire that long after the
put, delivered or not (``NEVER_EXPIRES``, -1, for never; by default 7 days after it is due). Both
are checked before anything is sent or stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

import structlog

from cloudqueue.listener import tracing
from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import (
    ConfigurationError,
    MessageTooLargeError,
    StorageError,
    TransientStorageError,
)
from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.batching import PENDING_BYTES, Destination, packed_per_destination
from cloudqueue.listener.producer.cancelling import CANCEL_HOLD_S, cancel_keys
from cloudqueue.listener.producer.delays import (
    MAX_HOP_S,
    Timing,
    check_max_hop_s,
    delay_seconds,
    plan_timing,
)
from cloudqueue.listener.producer.effect_once import EffectOnce
from cloudqueue.listener.producer.routing import ItemKey, PartitionRouter, key_of_item
from cloudqueue.listener.queue_limits import NEVER_EXPIRES
from cloudqueue.listener.stores.key_ledger import required_ledger
from cloudqueue.listener.stores.key_records import Cancelled, KeyLedger
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.payload_store import PayloadStore, new_payload_name
from cloudqueue.listener.stores.storage import (
    MAX_MESSAGE_BYTES,
    QueueStorage,
    check_put_times,
    validate_queue_name,
)
from cloudqueue.listener.wire.codec import Codec, MessageCodec
from cloudqueue.listener.wire.due import with_due
from cloudqueue.listener.wire.envelope import blob_envelope
from cloudqueue.listener.wire.frames import Packed
from cloudqueue.listener.wire.keys import check_key
from cloudqueue.listener.wire.packing import PlannedMessage, message_bytes, single_message

if TYPE_CHECKING:
    from cloudqueue.listener.workflows.sending import GroupHandle

T = TypeVar("T")

log = structlog.get_logger(__name__)


class ArrivalRecorder(Protocol):
    """Told of each message put: a workload recording
    (``cloudqueue.listener.simulation.ProfileRecorder``)."""

    def arrived(self, at: datetime, count: int = 1) -> None: ...


class Publisher(Generic[T]):
    """Sends items of one type to one queue.

    ``batch=False`` (the default) sends one item per message, byte-for-byte what Azure Functions
    expects whenever the item fits. ``batch=True`` packs the items given to ``publish_many`` into
    as few gzip-compressed messages as fit. Either way an item too large for a message is sent
    gzip-compressed, and if still too large, kept in ``payload_store`` with only a reference in
    the queue; without a store that raises MessageTooLargeError. The queue must exist.

    With opentelemetry installed, each call runs in a producer span whose trace context goes
    into envelopes and CloudEvents (``cloudqueue.listener.tracing``); ``trace_envelope=True`` sends
    single items in a one-item envelope too, so they carry it -- for queues only cloudqueue
    listeners read.

    ``key`` (a function of the item, or a field name) gives each message its key, which travels
    with it (in a one-item envelope for a single item) and routes it: a partitioned queue
    (``partitions`` > 1, or a ``PartitionedQueueStorage``) gets one key's messages on one
    partition, others round-robin over ``<queue>-p0`` .... Batches pack per key.
    ``partition_key`` routes alike but sends no key (plain items stay plain). The key ledger
    (``ledger``: found for the embedded stores, ``open_key_ledger`` for Azure) serves ``cancel``
    and ``effect_once_s``.

    A delay longer than ``max_hop_s`` (7 days) goes in hops, its due time read on ``clock``.
    """

    def __init__(
        self,
        storage: QueueStorage,
        queue_name: str,
        item_type: type[T],
        *,
        codec: Codec[T] | None = None,
        payload_store: PayloadStore | None = None,
        batch: bool = False,
        time_to_live_s: int | None = None,
        announcer: WorkAnnouncer | None = None,
        trace_envelope: bool = False,
        partitions: int | None = None,
        key: ItemKey[T] | None = None,
        partition_key: ItemKey[T] | None = None,
        recorder: ArrivalRecorder | None = None,
        ledger: KeyLedger | None = None,
        effect_once_s: int = 0,
        clock: Clock = SYSTEM_CLOCK,
        max_hop_s: int = MAX_HOP_S,
    ) -> None:
        self.storage = storage
        self.recorder = recorder
        self.trace_envelope = trace_envelope
        self.announcer = announcer
        self.queue_name = validate_queue_name(queue_name)
        self.codec: Codec[T] = codec or MessageCodec(item_type)
        self.payload_store = payload_store
        self.batch = batch
        if key is not None and partition_key is not None:
            raise ConfigurationError("give key or partition_key, not both: a key routes too")
        self.key = key
        self.router = PartitionRouter(
            self.queue_name, partitions or _partition_count(storage, queue_name), partition_key
        )
        self._ledger = ledger
        self.once = (
            None if not effect_once_s else EffectOnce(self.ledger, self.queue_name, effect_once_s)
        )
        check_put_times(time_to_live_s, 0)
        self.time_to_live_s = time_to_live_s
        self.clock = clock
        self.max_hop_s = check_max_hop_s(max_hop_s)
        self.messages_sent = 0
        self.items_sent = 0
        self.payloads_stored = 0
        self._bytes_sent = 0

    @property
    def ledger(self) -> KeyLedger:
        """The key ledger of the queue's store; ConfigurationError when none is known."""
        self._ledger = self._ledger or required_ledger(self.storage)
        return self._ledger

    def publish(
        self,
        item: T | Mapping[str, Any],
        *,
        key: str | None = None,
        delay_s: int = 0,
        time_to_live_s: int | None = None,
        delay: timedelta | None = None,
    ) -> None:
        """Send one item in a message of its own (and announce it, if triggers are set up).

        ``key`` is its message key (else the publisher's ``key`` of the item, if any).
        ``delay_s`` (whole seconds, any length) or ``delay`` (a timedelta) hides it from
        listeners that long; ``time_to_live_s`` (>= 1 s and more than the delay, or
        ``NEVER_EXPIRES``) overrides the publisher's. A value out of range raises ValueError
        before anything is sent. The item is checked against the item type first (see
        ``validated``).
        """
        timing = self._timing(delay_seconds(delay_s, delay), time_to_live_s)
        item = self.validated(item)
        carried, target = self._destination(item, key)
        text = self.codec.encode(item)
        self._traced(lambda: self._send_alone(text, timing, target, carried))

    def validated(self, item: object) -> T:
        """``item`` as an item of the publisher's type: a dict made into the model, a value of
        another type (or a model built without validation) refused with pydantic's
        ValidationError naming the field, before anything is sent. A custom ``codec`` checks
        its own items."""
        if isinstance(self.codec, MessageCodec):
            return cast(T, self.codec.validated(item))
        return cast(T, item)

    def cancel(self, *keys: str, hold_s: int = CANCEL_HOLD_S) -> dict[str, Cancelled]:
        """Cancel the queued messages of each key for ``hold_s``: a listener deletes them
        unhandled when it next fetches them. Says per key ``cancelled``, or ``too_late`` (a
        message of it is being handled now: it finishes) or ``done`` (one was completed, as far
        as idempotent handling remembers); the cancel is recorded either way."""
        return cancel_keys(self.ledger, self.queue_name, keys, hold_s=hold_s)

    def send_group(
        self, items: Iterable[T], *, on_complete: object, group_id: str | None = None
    ) -> GroupHandle:
        """Send the items as the members of a new group, each in a message of its own; when every
        member settled (handled or poisoned), ``on_complete`` (a worker class, or a queue name)
        receives one ``GroupDone`` (``cloudqueue.listener.workflows``). GroupError for no items
        or an ``on_complete`` that is neither."""
        from cloudqueue.listener.workflows.sending import send_group

        return send_group(self, items, on_complete=on_complete, group_id=group_id)

    def add_to_group(self, items: Iterable[T], *, group_id: str | None = None) -> list[str]:
        """From a member's handler, before it returns: add the items to its group (or to
        ``group_id``) as members it waits for too; their member ids."""
        from cloudqueue.listener.workflows.sending import add_to_group

        return add_to_group(self, items, group_id=group_id)

    def put_members(self, messages: Sequence[tuple[str, str]]) -> int:
        """Put group members' messages, each ``(text, queue)`` as ``cloudqueue.listener
        .workflows.sending`` made it, one by one (each carries its own membership): in one
        producer span, announced once on the trigger channel. They never expire unless this
        publisher sets a time to live (a member that expired unhandled would hold its group
        open). A failed put raises; the members before it stay put, and announced."""
        ttl_s = NEVER_EXPIRES if self.time_to_live_s is None else self.time_to_live_s
        timing = self._timing(0, ttl_s)

        def send() -> int:
            for content, target in messages:
                self._put(content, 1, timing, target)
            return len(messages)

        return self._traced(send)

    def publish_many(
        self,
        items: Iterable[T | Mapping[str, Any]],
        *,
        delay_s: int = 0,
        time_to_live_s: int | None = None,
        delay: timedelta | None = None,
    ) -> int:
        """Send the items (read lazily, in order) and return how many messages that took.

        The delay and ``time_to_live_s`` apply to every message, as in ``publish``. If a put
        fails, the error is raised and the messages before it stay sent (and are announced:
        listeners should not wait for the watchdog because a later put failed). Each item is
        checked as ``publish`` checks it, as it is read: an invalid one raises there.
        """
        timing = self._timing(delay_seconds(delay_s, delay), time_to_live_s)
        return self._traced(lambda: self._send_many(items, timing))

    def _timing(self, delay_s: int, time_to_live_s: int | None) -> Timing:
        ttl_s = self.time_to_live_s if time_to_live_s is None else time_to_live_s
        return plan_timing(delay_s, ttl_s, now=self.clock.now(), max_hop_s=self.max_hop_s)

    def _traced(self, send: Callable[[], int]) -> int:
        """One publish call in one producer span (a no-op without opentelemetry)."""
        with tracing.producer_span(self.queue_name) as sent:
            messages = self._announced(send)
            sent(messages)
            return messages

    def _announced(self, send: Callable[[], int]) -> int:
        announcer = self.announcer
        if announcer is None:
            return send()
        announcer.batch_starting(self.storage, self.queue_name)
        messages_before, bytes_before = self.messages_sent, self._bytes_sent
        try:
            return send()
        finally:
            announcer.batch_done(
                self.queue_name,
                messages=self.messages_sent - messages_before,
                size=self._bytes_sent - bytes_before,
            )

    def _destination(self, item: T, key: str | None) -> tuple[str | None, str]:
        """The key the item's message carries (None: none) and the queue it goes to."""
        if key is not None:
            carried: str | None = check_key(key)
        elif self.key is not None:
            carried = key_of_item(item, self.key)
        else:
            return None, self.router.queue_for(item)
        return carried, self.router.queue_for_key(carried)

    def _send_many(self, given: Iterable[T | Mapping[str, Any]], timing: Timing) -> int:
        items = (self.validated(item) for item in given)
        if not self.batch:
            sent = 0
            for item in items:
                carried, target = self._destination(item, None)
                sent += self._send_alone(self.codec.encode(item), timing, target, carried)
            return sent
        sent = 0
        for into, planned in packed_per_destination(
            items,
            destination=lambda item: self._destination(item, None),
            encode=self.codec.encode,
            routed_by_key=self.router.keyed,
        ):
            sent += self._send_planned(planned, timing, into)
        return sent

    def _send_planned(
        self, planned: list[PlannedMessage], timing: Timing, into: Destination
    ) -> int:
        """Send planned messages of one key to their queue, or round-robin when it is None."""
        key, target, sent = *into, 0
        for message in planned:
            queue = target or self.router.next_queue()
            if message.content is None:
                sent += self._send_alone(message.texts[0], timing, queue, key)
            else:
                put = partial(self._put, message.content, len(message.texts), timing, queue)
                sent += self._once(key, message.texts, put)
        return sent

    def _send_alone(self, text: str, timing: Timing, target: str, key: str | None) -> int:
        return self._once(key, [text], partial(self._put_alone, text, timing, target, key))

    def _once(self, key: str | None, texts: list[str], put: Callable[[], None]) -> int:
        """``put()`` unless effect-once finds it put already; the messages put (1 or 0)."""
        if self.once is None:
            put()
            return 1
        return self.once.put_once(key, texts, put)

    def _put_alone(self, text: str, timing: Timing, target: str, key: str | None) -> None:
        message = single_message(text, enveloped=timing.due is not None, key=key)
        if isinstance(message, Packed):
            self._put_stored(message, message_bytes(text), timing, target, key)
        else:
            self._put(message, 1, timing, target)

    def _put_stored(
        self, packed: Packed, text_bytes: int, timing: Timing, target: str, key: str | None
    ) -> None:
        store = self.payload_store
        if store is None:
            raise MessageTooLargeError(
                f"an item of {text_bytes} bytes exceeds the {MAX_MESSAGE_BYTES}-byte message "
                f"limit even compressed ({len(packed.data)} bytes): pass a payload_store to "
                "keep large items in blob storage"
            )
        name = new_payload_name(self.queue_name)
        store.put(name, packed.data)
        self.payloads_stored += 1
        log.debug("payload_stored", queue=self.queue_name, payload=name, size=len(packed.data))
        try:
            self._put(blob_envelope(name, packed, key=key), packed.count, timing, target)
        except TransientStorageError:
            log.warning("payload_kept_after_failed_put", queue=self.queue_name, payload=name)
            raise
        except Exception:
            _discard(store, name)
            raise

    def _put(self, content: str, item_count: int, timing: Timing, target: str) -> None:
        if timing.due is not None:  # an envelope: single items were wrapped for it
            content = with_due(content, timing.due)
        content = tracing.stamp(content, wrap_plain=self.trace_envelope)
        self.storage.put_message(
            target,
            content,
            time_to_live_s=timing.time_to_live_s,
            visibility_delay_s=timing.visibility_delay_s,
        )
        self.messages_sent += 1
        self.items_sent += item_count
        self._bytes_sent += len(content)
        if self.announcer is not None:
            self.announcer.message_put(self.queue_name, len(content))
        if self.recorder is not None:
            self.recorder.arrived(datetime.now(UTC))

    def __repr__(self) -> str:
        return (
            f"Publisher(queue={self.queue_name!r}, batch={self.batch}, "
            f"messages_sent={self.messages_sent}, items_sent={self.items_sent}, "
            f"payloads_stored={self.payloads_stored})"
        )


def _partition_count(storage: QueueStorage, queue_name: str) -> int:
    """The partitions a PartitionedQueueStorage spreads the queue over; 1 for any other storage."""
    return (
        storage.partition_count(queue_name) if isinstance(storage, PartitionedQueueStorage) else 1
    )


def _discard(store: PayloadStore, name: str) -> None:
    try:
        store.delete(name)
    except StorageError as failure:
        log.warning("payload_delete_failed", payload=name, error=str(failure))


__all__ = ["PENDING_BYTES", "Publisher"]
