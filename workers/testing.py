"""Testing your workers without Azure and without waiting: run one until its queue is drained.

``run_until_drained`` puts items on an in-memory queue, runs the worker's listener on a
``VirtualClock`` and returns once every message is settled: a ``DrainResult``, the list of items
the handler finished, whose ``poisoned`` lists what went to the poison queue and why.
Virtual time moves only while every dequeue thread is waiting and no handler is at work, and then
straight to the next wake-up, so retry back-offs, visibility timeouts and delays take no real
time, and no test races ahead of a handler still at work. The worker runs with its own
concurrency: a plain ``handle`` on up to ``listener.concurrency`` handler threads per dequeue
thread, an ``async def handle`` as that many coroutines on an event loop whose clock is the
virtual one (``cloudqueue.listener.virtual_loop``), so ``asyncio.sleep`` takes no real time and a
handler that is unsafe to run concurrently is caught; ``serial=True`` runs one at a time. With
``fail_fast`` (the default) the first exception a handler raised is raised again in the test, as
dramatiq's ``StubBroker.join(fail_fast=True)`` does.

Example::

    def test_invoices_are_billed() -> None:
        handled = run_until_drained(InvoiceWorker(), [Invoice(invoice_id=1)])
        assert [invoice.invoice_id for invoice in handled] == [1]
        assert handled.poisoned == []
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar, cast

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.errors import (
    CloudQueueError,
    ConfigurationError,
    DecodeError,
    QueueNotFoundError,
)
from cloudqueue.listener.poison.queue import browse_poisoned, poison_queue_name
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.stores.key_ledger import key_ledger_for
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import ManualClock, VirtualClock
from cloudqueue.listener.virtual_loop import VirtualTimeLoop
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.payload import open_message
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from cloudqueue.workers.host.batch_handler import Batcher
from cloudqueue.workers.host.controls import controls_for, subscribe_handler
from cloudqueue.workers.host.key_controls import key_middleware
from cloudqueue.workers.host.lifecycle import call_plain_hook, run_hook, shut_down
from cloudqueue.workers.recorders import BatchRecorder, Recorder
from cloudqueue.workers.settings import CloudQueueSettings

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
"""Real seconds ``run_until_drained`` waits for handlers before it gives up: a handler blocked
on something that never happens must fail the test, not hang it."""


class HandlerFailedError(CloudQueueError):
    """A listener's observer failed while ``run_until_drained`` ran it with ``fail_fast``.

    Raised for a listener, whose observers the helper cannot wrap: the observer's own exception
    is in the ``observer_failed`` log event. For a worker, its exception is raised instead.
    """


class DrainTimeoutError(CloudQueueError):
    """The queue was not drained within the real-time limit: a handler blocked, or no thread ran."""


@dataclass(frozen=True, slots=True)
class PoisonedItem(Generic[T]):
    """An item the run sent to the poison queue, and why."""

    item: T | None
    """The item, or None when its text could not be decoded (``reason`` is then undecodable)."""
    reason: str
    """``max_dequeue_count_exceeded``, ``permanent_failure``, ``undecodable``, ..."""
    error: str
    """The error that decided it, as the poison record holds it (``RuntimeError: ...``)."""
    text: str
    """The item's text as it was in the message."""


class DrainResult(list[T]):
    """The items the handler finished (a list, in the order they finished), ``poisoned``: every
    item in the queue's poison queue when the run ended, with its reason and error, and
    ``virtual_s``: the virtual seconds from the start of the run until the queue was drained."""

    def __init__(
        self,
        handled: Iterable[T],
        poisoned: Iterable[PoisonedItem[T]],
        *,
        virtual_s: float = 0.0,
    ) -> None:
        super().__init__(handled)
        self.poisoned = list(poisoned)
        self.virtual_s = virtual_s

    @property
    def handled(self) -> list[T]:
        return list(self)

    def __repr__(self) -> str:
        return f"DrainResult(handled={list(self)!r}, poisoned={self.poisoned!r})"


def run_until_drained(
    target: QueueWorker[T] | type[QueueWorker[T]] | CloudQueueListener[T],
    items: Iterable[T] = (),
    *,
    fail_fast: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    serial: bool = False,
) -> DrainResult[T]:
    """Publish ``items``, run until the queue is empty and every thread idle; return the handled
    items, with the poisoned ones (``DrainResult.poisoned``: item, reason, error).

    ``target`` is a worker (instance or class), run on a fresh in-memory queue with its own
    ``settings`` (threads, retries, poisoning), or a listener you built on an in-memory store
    with a ``VirtualClock`` as both its clock and its sleeper (not started yet, observers
    subscribed). For a worker, the result is the items its ``handle`` returned from, in the order
    they finished; for a listener, every item its observers were given, retries included.
    A worker class is checked as ``cloudqueue run`` checks it (``ConfigurationError``), and its
    ``startup`` and ``shutdown`` run around the drain on its handlers' event loop.

    A worker runs with its own ``listener.threads`` and ``listener.concurrency``: its handler
    calls overlap as in production (coroutines on a virtual-time event loop; time moves only
    while each message in flight awaits there or waits for a slot, never while a plain handler
    runs). ``serial=True`` runs one message at a time on one thread, for tests that depend on
    order (a ``handle_batch`` worker keeps the slots its batches need; its loop and a serial
    run's keep real time). ``DrainResult.virtual_s`` is how long the run took in virtual time.

    With ``fail_fast`` the first handler failure stops the run and is raised (a worker's own
    exception, or ``HandlerFailedError`` for a listener); without it, failing messages are
    retried and poisoned as in production. Raises ``DrainTimeoutError`` after ``timeout_s`` real
    seconds without draining.
    """
    if isinstance(target, CloudQueueListener):
        return _drain_listener(target, items, fail_fast=fail_fast, timeout_s=timeout_s)
    worker = target() if isinstance(target, type) else target
    return _drain_worker(worker, items, fail_fast=fail_fast, timeout_s=timeout_s, serial=serial)


def _drain_worker(
    worker: QueueWorker[T], items: Iterable[T], *, fail_fast: bool, timeout_s: float, serial: bool
) -> DrainResult[T]:
    type(worker).check()  # refused as `cloudqueue run` refuses it, before anything runs
    # model_construct: defaults plus the worker's own settings, never the environment or a
    # config file, so a test behaves the same on every machine.
    settings = CloudQueueSettings.model_construct().for_worker(worker.settings)
    clock = VirtualClock()
    controls = controls_for(type(worker), settings)
    batched = type(worker).batches()
    # One slot at a time when asked, or when the worker has one anyway (its handler then runs
    # on the dequeue thread, which virtual time could not tell from idle).
    serial = serial or (not batched and controls.concurrency == 1)
    slots = controls.concurrency if batched or not serial else 1  # a batch needs its slots
    listener = _listener_for(worker, settings, clock, concurrency=slots)
    concurrent = not serial and not batched
    runner = AsyncHandlerRunner(
        worker.handle,
        loop_factory=partial(VirtualTimeLoop, clock) if concurrent else asyncio.new_event_loop,
    )
    recorder: Recorder[T] = Recorder(runner)
    batches: BatchRecorder[T] = BatchRecorder(worker.handle_batch)
    batcher = subscribe_handler(
        listener, worker, settings, handler=recorder, batch_handler=batches.batch, loop=runner.loop
    )
    if batcher is not None:
        recorder = batches
    waiting, quiet = _when_time_may_move(listener, runner, batcher, concurrent=concurrent)
    try:
        # As `cloudqueue run` does: startup on the handlers' loop (what it raises is raised
        # here), and shutdown after on_stop on that same loop, its failure only logged.
        run_hook(worker.startup, runner.loop)
        call_plain_hook(worker.on_start, listener)
        try:
            virtual_s = _drain(
                listener,
                items,
                1 if serial else settings.listener.threads,
                recorder,
                fail_fast=fail_fast,
                timeout_s=timeout_s,
                waiting_threads=waiting,
                quiet=quiet,
            )
        finally:
            call_plain_hook(worker.on_stop)
            shut_down(worker, runner.loop)
    finally:
        runner.close()
    return DrainResult(recorder.handled, _poisoned(listener), virtual_s=virtual_s)


def _when_time_may_move(
    listener: CloudQueueListener[T],
    runner: AsyncHandlerRunner,
    batcher: Batcher[T] | None,
    *,
    concurrent: bool,
) -> tuple[Callable[[], int], Callable[[], bool] | None]:
    """How many threads must wait on the clock, and what else must hold, before virtual time
    moves: never while a handler may be at work in real time."""
    if batcher is not None:
        # Threads waiting for a batch to fill wait on the clock too: time moves only once the
        # dequeue threads wait as well, so a batch fills before its deadline comes. Handler
        # threads are not counted, so time also waits for every message in flight to be in the
        # open batch: none in a handler call or being settled (moved on, its visibility could
        # pass and it would be handled twice).
        return (
            lambda: listener.threads_alive + batcher.waiting,
            lambda: listener.counters.in_flight <= batcher.open_messages,
        )
    if not concurrent:
        return (lambda: listener.threads_alive), None  # the dequeue threads run the handler
    loop = runner.loop
    # Handlers run on handler threads, the dequeue threads waiting meanwhile (on the clock, or
    # for a free slot). Time moves only when every message in flight is in a coroutine that
    # awaits on the worker's loop (a virtual-time loop, itself waiting on the clock) or waits in
    # the hand-off for a slot: a plain handler, or a coroutine not yet started or done and being
    # settled, holds it still.
    return (
        lambda: listener.threads_alive - listener.loops_waiting_for_slots + loop.started,
        lambda: listener.counters.in_flight - listener.messages_waiting <= loop.awaiting,
    )


def _listener_for(
    worker: QueueWorker[T], settings: CloudQueueSettings, clock: VirtualClock, *, concurrency: int
) -> CloudQueueListener[T]:
    """The listener ``cloudqueue run`` would build for ``worker``, on an in-memory store in
    virtual time, without its auto-scaler (``settings.listener.threads`` threads throughout),
    with the same middleware: the key controls (its ledger in the same store), the handler
    controls (``cloudqueue.workers.host.controls``), the worker's own ``middleware`` and those of
    its settings; ``concurrency`` handler slots per dequeue thread."""
    options = settings.listener
    controls = controls_for(type(worker), settings)
    storage = InMemoryQueueStorage(clock=clock)
    location = worker.location(options.visibility_timeout_s, options.priority_policy())
    middleware = [
        *key_middleware(worker, settings, location, key_ledger_for(storage)),
        *controls.middleware,
        *worker.own_middleware(),
        *options.build_middleware(),
    ]
    return CloudQueueListener(
        storage,
        location,
        worker.item_type,
        codec=MessageCodec(worker.item_type, encoding=options.encoding),
        middleware=middleware,
        dequeue_batch_size=options.dequeue_batch_size,
        max_error_delay_s=options.max_error_delay_s,
        delivery=controls.delivery,
        concurrency=concurrency,
        clock=clock,
        sleeper=clock,
        time_limit_s=controls.time_limit_s,
        adaptive_slots=controls.adaptive_slots,
        key=worker.key_function(),
    )


def _drain_listener(
    listener: CloudQueueListener[T], items: Iterable[T], *, fail_fast: bool, timeout_s: float
) -> DrainResult[T]:
    if not isinstance(listener.sleeper, VirtualClock) or listener.clock is not listener.sleeper:
        raise ConfigurationError(
            "run_until_drained needs a listener built with clock=clock, sleeper=clock for one "
            "VirtualClock (listener.testing): on real time it could not tell idle from busy"
        )
    recorder: Recorder[T] = Recorder(lambda _: None)
    listener.subscribe(recorder)
    virtual_s = _drain(listener, items, 1, recorder, fail_fast=fail_fast, timeout_s=timeout_s)
    return DrainResult(recorder.handled, _poisoned(listener), virtual_s=virtual_s)


def _poisoned(listener: CloudQueueListener[T]) -> list[PoisonedItem[T]]:
    """Every item in the listener's poison queues, each with its record's reason and error."""
    return [item for queue in listener.queue_names for item in _poisoned_in(listener, queue)]


def _poisoned_in(listener: CloudQueueListener[T], queue: str) -> list[PoisonedItem[T]]:
    storage = listener.storage
    try:
        count = storage.approximate_message_count(poison_queue_name(queue))
    except QueueNotFoundError:
        return []  # nothing was ever poisoned
    poisoned: list[PoisonedItem[T]] = []
    for message in browse_poisoned(storage, queue, limit=max(count, 1)):
        record = read_record(message.content)
        if record is None:  # kept unwrapped (too large to wrap): its reason is only in the log
            continue
        try:
            texts = open_message(record.content, listener.payload_store).texts
        except CloudQueueError:
            texts = [record.content]  # e.g. its stored payload is gone: the envelope itself
        # A message over a limit was refused because building its items would cost too much:
        # its texts are listed, not decoded here either.
        decode = record.reason != "over_limit"
        poisoned += [
            _poisoned_item(listener, text, record.reason, record.error, decode=decode)
            for text in texts
        ]
    return poisoned


def _poisoned_item(
    listener: CloudQueueListener[T], text: str, reason: str, error: str, *, decode: bool
) -> PoisonedItem[T]:
    item: T | None = None
    if decode:
        try:
            item = listener.codec.decode(text)
        except DecodeError:
            item = None
    return PoisonedItem(item, reason, error, text)


def _drain(
    listener: CloudQueueListener[T],
    items: Iterable[T],
    threads: int,
    recorder: Recorder[T],
    *,
    fail_fast: bool,
    timeout_s: float,
    waiting_threads: Callable[[], int] | None = None,
    quiet: Callable[[], bool] | None = None,
) -> float:
    """Publish, start, and move virtual time whenever ``waiting_threads()`` threads (the dequeue
    threads by default) all wait and ``quiet()`` holds, until the queue is empty; the virtual
    seconds that took."""
    clock = cast(VirtualClock, listener.sleeper)  # both callers made sure
    threads_waiting = waiting_threads or (lambda: listener.threads_alive)
    storage, queue = listener.storage, listener.queue_name
    storage.create_queue(queue)
    # The listener's codec writes what it reads; the item type only matters for a new codec.
    publisher = Publisher(storage, queue, cast(type[T], object), codec=listener.codec)
    publisher.publish_many(items)
    failures_before = _failures(listener)
    started = clock.monotonic()
    listener.start_listener(threads)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if fail_fast:
                _raise_first_failure(listener, recorder, failures_before)
            if clock.all_waiting(threads_waiting):
                if quiet is not None and not quiet():
                    time.sleep(0.001)  # a handler thread is still at work: a real pause, then look
                elif storage.approximate_message_count(queue) == 0:
                    return clock.monotonic() - started  # every thread idle and nothing left
                else:
                    clock.advance_to_next_wake_up()
            if time.monotonic() > deadline:
                raise DrainTimeoutError(
                    f"queue {queue} not drained within {timeout_s} s of real time: "
                    f"{listener!r}, {clock!r}"
                )
    finally:
        listener.stop(timeout_s)


def _raise_first_failure(
    listener: CloudQueueListener[Any], recorder: Recorder[Any], failures_before: int
) -> None:
    if recorder.first_error is not None:
        raise recorder.first_error
    failed = _failures(listener) - failures_before
    if failed:
        raise HandlerFailedError(
            f"{failed} delivery(ies) on queue {listener.queue_name} failed in an observer; "
            "its exception is in the observer_failed log event"
        )


def _failures(listener: CloudQueueListener[Any]) -> int:
    """Failed deliveries so far, but for those a handler asked to retry later (no fault)."""
    return listener.messages_failed - listener.counters.retried_later


__all__ = [
    "DrainResult",
    "DrainTimeoutError",
    "HandlerFailedError",
    "ManualClock",
    "PoisonedItem",
    "VirtualClock",
    "run_until_drained",
]
