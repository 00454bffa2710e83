"""Publisher: puts items on a queue, one per message or packed into batches, large ones compressed
or kept in a payload store (the wire format is in ``listener.wire.payload``).

Each message is one storage transaction to put and two to take (get + delete), so packing a
hundred small items into one message makes them a hundred times cheaper to move; a listener hands
them to its observers one by one. A batch item that fails is retried alone, in a new message,
while the items that succeeded are done (see ``listener.consumer.processing``).

Delivery is at-least-once from this end too. A put that fails with ``TransientStorageError`` (a
timeout, a 500 or 503) may have happened all the same. The publisher does not retry it itself: it
raises, and a caller that publishes again may create a duplicate. That is tolerated by design,
because handlers must be idempotent anyway (any message can be delivered twice). cloudqueue adds
no message key for deduplication: a key minted here would differ between the original put and
the caller's retry, so it could not recognise exactly the duplicates that matter, and plain items
carry no envelope to hold one. Deduplicate on a key that belongs to the item (an invoice number,
an idempotency token), which survives any retry.

A stored payload whose message could not be put is deleted again when the failure was definite,
and kept after a transient one: the message referring to it may exist.

Delayed and expiring work: ``delay_s`` (or ``delay``, a timedelta) keeps a message invisible that
long after the put, any length: beyond 7 days (Azure's cap) in hops that listeners re-hide
(``listener.producer.delays``). ``time_to_live_s`` makes it expire that long after the put,
delivered or not (``NEVER_EXPIRES``, -1, for never; by default 7 days after it is due). Both are
checked before anything is sent or stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Generic, Protocol, TypeVar

import structlog

from listener import tracing
from listener.clock import SYSTEM_CLOCK, Clock
from listener.errors import MessageTooLargeError, StorageError, TransientStorageError
from listener.producer.announce import WorkAnnouncer
from listener.producer.delays import MAX_HOP_S, Timing, check_max_hop_s, delay_seconds, plan_timing
from listener.producer.routing import PartitionKey, PartitionRouter
from listener.stores.partitioned import PartitionedQueueStorage
from listener.stores.payload_store import PayloadStore, new_payload_name
from listener.stores.storage import (
    MAX_MESSAGE_BYTES,
    QueueStorage,
    check_put_times,
    validate_queue_name,
)
from listener.wire.codec import Codec, MessageCodec
from listener.wire.due import with_due
from listener.wire.envelope import blob_envelope
from listener.wire.frames import Packed
from listener.wire.packing import PlannedMessage, message_bytes, plan_batches, single_message

T = TypeVar("T")

log = structlog.get_logger(__name__)

PENDING_BYTES = 1024 * 1024
"""In batch mode, items are packed whenever this much encoded text is waiting, so a stream of
items of any length is sent with bounded memory."""


class ArrivalRecorder(Protocol):
    """Told of each message put: a workload recording (``listener.simulation.ProfileRecorder``)."""

    def arrived(self, at: datetime, count: int = 1) -> None: ...


class Publisher(Generic[T]):
    """Sends items of one type to one queue.

    ``batch=False`` (the default) sends one item per message, byte-for-byte what Azure Functions
    expects whenever the item fits. ``batch=True`` packs the items given to ``publish_many`` into
    as few gzip-compressed messages as fit. Either way an item too large for a message is sent
    gzip-compressed, and if still too large, kept in ``payload_store`` with only a reference in
    the queue; without a store that raises MessageTooLargeError. The queue must exist.

    With opentelemetry installed, each call runs in a producer span whose trace context goes
    into envelopes and CloudEvents (``listener.tracing``); ``trace_envelope=True`` sends
    single items in a one-item envelope too, so they carry it -- for queues only cloudqueue
    listeners read.

    A partitioned queue (``partitions`` > 1, or read from a ``PartitionedQueueStorage``) gets
    its messages round-robin over ``<queue>-p0`` ..., or by ``partition_key`` (a function of the
    item or a field name): one key always lands on one partition, and batches pack per partition.

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
        partition_key: PartitionKey[T] | None = None,
        recorder: ArrivalRecorder | None = None,
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
        self.router = PartitionRouter(
            self.queue_name, partitions or _partition_count(storage, queue_name), partition_key
        )
        check_put_times(time_to_live_s, 0)
        self.time_to_live_s = time_to_live_s
        self.clock = clock
        self.max_hop_s = check_max_hop_s(max_hop_s)
        self.messages_sent = 0
        self.items_sent = 0
        self.payloads_stored = 0
        self._bytes_sent = 0

    def publish(
        self,
        item: T,
        *,
        delay_s: int = 0,
        time_to_live_s: int | None = None,
        delay: timedelta | None = None,
    ) -> None:
        """Send one item in a message of its own (and announce it, if triggers are set up).

        ``delay_s`` (whole seconds, any length) or ``delay`` (a timedelta) hides it from
        listeners that long; ``time_to_live_s`` (>= 1 s and more than the delay, or
        ``NEVER_EXPIRES``) overrides the publisher's. A value out of range raises ValueError
        before anything is sent.
        """
        timing = self._timing(delay_seconds(delay_s, delay), time_to_live_s)
        target = self.router.queue_for(item)
        self._traced(lambda: self._send_alone(self.codec.encode(item), timing, target))

    def publish_many(
        self,
        items: Iterable[T],
        *,
        delay_s: int = 0,
        time_to_live_s: int | None = None,
        delay: timedelta | None = None,
    ) -> int:
        """Send the items (read lazily, in order) and return how many messages that took.

        The delay and ``time_to_live_s`` apply to every message, as in ``publish``. If a put
        fails, the error is raised and the messages before it stay sent (and are announced:
        listeners should not wait for the watchdog because a later put failed).
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

    def _send_many(self, items: Iterable[T], timing: Timing) -> int:
        router = self.router
        if not self.batch:
            return sum(
                self._send_alone(self.codec.encode(item), timing, router.queue_for(item))
                for item in items
            )
        # Keyed items are packed per partition, so each message goes where all its keys belong;
        # without a key one buffer is packed and its messages go round-robin.
        buffers: dict[str | None, _Pending] = {}
        sent = 0
        for item in items:
            target = router.queue_for(item) if router.keyed else None
            pending = buffers.setdefault(target, _Pending())
            pending.add(self.codec.encode(item))
            if pending.bytes >= PENDING_BYTES:
                planned = plan_batches(pending.texts)
                sent += self._send_planned(planned[:-1], timing, target)
                buffers[target] = _Pending(planned[-1].texts)  # room for the next items
        for target, pending in buffers.items():
            sent += self._send_planned(plan_batches(pending.texts), timing, target)
        return sent

    def _send_planned(
        self, planned: list[PlannedMessage], timing: Timing, target: str | None
    ) -> int:
        """Send planned messages to ``target``, or round-robin when it is None."""
        for message in planned:
            queue = target or self.router.next_queue()
            if message.content is None:
                self._send_alone(message.texts[0], timing, queue)
            else:
                self._put(message.content, len(message.texts), timing, queue)
        return len(planned)

    def _send_alone(self, text: str, timing: Timing, target: str) -> int:
        message = single_message(text, enveloped=timing.due is not None)
        if isinstance(message, Packed):
            self._put_stored(message, message_bytes(text), timing, target)
        else:
            self._put(message, 1, timing, target)
        return 1

    def _put_stored(self, packed: Packed, text_bytes: int, timing: Timing, target: str) -> None:
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
            self._put(blob_envelope(name, packed), packed.count, timing, target)
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


class _Pending:
    """Encoded items waiting to be packed, and their size in bytes."""

    def __init__(self, texts: list[str] | None = None) -> None:
        self.texts: list[str] = []
        self.bytes = 0
        for text in texts or []:
            self.add(text)

    def add(self, text: str) -> None:
        self.texts.append(text)
        self.bytes += message_bytes(text)


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
