"""Many messages in flight per dequeue thread, on every store: settlement, renewal, stop.

One dequeue thread with ``concurrency = N`` keeps up to N messages in handling and settles each as
soon as its own handler returns. These tests hold handlers on events (never on sleeps) so that the
state "many in flight" is reached for certain, then check where every message ended.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, MessageCodec, QueueStorage
from cloudqueue.listener.consumer.in_flight import (
    FAST_HANDLER_SLOTS,
    MAX_FOLLOW_ONS,
    WAITING_HANDLER_S,
    HandlerPool,
    InFlight,
    current_slot,
    slots_per_loop,
)
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.host.async_handler import AsyncHandlerRunner
from tests.support.polling import eventually

CODEC: MessageCodec[dict[str, int]] = MessageCodec(dict)
WAIT_S = 30.0
"""Deadline for an event a test's own handlers will set; reached only when the code is broken."""


class RecordingStorage(MeteredStorage):
    """A store that records each delete and its outcome, and may hold deletes on an event."""

    def __init__(self, inner: QueueStorage) -> None:
        super().__init__(inner)
        self.deleted: list[tuple[str, bool]] = []
        self.hold_deletes: threading.Event | None = None
        self.delete_started = threading.Event()
        self._record_lock = threading.Lock()

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        self.delete_started.set()
        if self.hold_deletes is not None:
            assert self.hold_deletes.wait(WAIT_S), "the held delete was never released"
        deleted = super().delete_message(queue_name, message_id, pop_receipt)
        with self._record_lock:
            self.deleted.append((message_id, deleted))
        return deleted


@pytest.fixture
def recording(storage: QueueStorage, queue_name: str) -> RecordingStorage:
    recording = RecordingStorage(storage)
    recording.create_queue(queue_name)
    return recording


@pytest.fixture
def make_listener(
    recording: RecordingStorage, queue_name: str
) -> Iterator[Callable[..., CloudQueueListener[dict[str, int]]]]:
    """Listeners on the real clock over the recording store; always stopped."""
    made: list[CloudQueueListener[dict[str, int]]] = []

    def make(
        *, concurrency: int, visibility_timeout_s: int = 30, **options: Any
    ) -> CloudQueueListener[dict[str, int]]:
        listener: CloudQueueListener[dict[str, int]] = CloudQueueListener(
            recording,
            CloudQueueLocation(queue_name, visibility_timeout_s=visibility_timeout_s),
            dict,
            concurrency=concurrency,
            dequeue_interval_s=0.05,
            **options,
        )
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.stop(timeout_s=WAIT_S)


def put(storage: QueueStorage, queue_name: str, count: int) -> None:
    for n in range(count):
        storage.put_message(queue_name, CODEC.encode({"n": n}))


class Gate:
    """Handlers that record themselves and wait until the test opens the gate."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.started: list[int] = []
        self.finished: list[int] = []
        self._lock = threading.Lock()

    def handle(self, item: dict[str, int]) -> None:
        with self._lock:
            self.started.append(item["n"])
        assert self.opened.wait(WAIT_S), "the test never opened the gate"
        with self._lock:
            self.finished.append(item["n"])


def test_one_thread_keeps_its_concurrency_of_messages_in_handling_at_once(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """With concurrency 8 one dequeue thread has 8 handlers running together; all are deleted."""
    put(recording, queue_name, 20)
    gate = Gate()
    listener = make_listener(concurrency=8)
    listener.subscribe(gate.handle)
    listener.start_listener(1)
    eventually(lambda: len(gate.started) == 8, timeout_s=WAIT_S)
    assert recording.deleted == []  # none settled while its handler is still running
    gate.opened.set()
    eventually(lambda: listener.messages_processed == 20, timeout_s=WAIT_S)
    assert sorted(gate.finished) == list(range(20))
    assert all(deleted for _, deleted in recording.deleted)
    assert len(recording.deleted) == 20


def test_a_handler_does_not_wait_for_the_previous_messages_delete(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """While one message's delete is held, the thread's next messages are handled meanwhile."""
    put(recording, queue_name, 5)
    recording.hold_deletes = threading.Event()
    handled: list[int] = []
    listener = make_listener(concurrency=2)
    listener.subscribe(lambda item: handled.append(item["n"]))
    listener.start_listener(1)
    assert recording.delete_started.wait(WAIT_S)
    eventually(lambda: len(handled) >= 2, timeout_s=WAIT_S)
    recording.hold_deletes.set()
    eventually(lambda: listener.messages_processed == 5, timeout_s=WAIT_S)


def test_a_message_is_deleted_only_after_every_observer_returned(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """A message one observer failed on is retried, not deleted; the others, each handled by
    both observers, are deleted."""
    put(recording, queue_name, 12)
    both: dict[int, int] = {}
    lock = threading.Lock()

    def observer(item: dict[str, int]) -> None:
        with lock:
            both[item["n"]] = both.get(item["n"], 0) + 1

    def failing_on_seven(item: dict[str, int]) -> None:
        if item["n"] == 7:
            raise RuntimeError("seven fails")
        observer(item)

    listener = make_listener(
        concurrency=6, delivery=DeliveryPolicy(max_dequeue_count=100, retry_delay_s=30)
    )
    listener.subscribe(observer)
    listener.subscribe(failing_on_seven)
    listener.start_listener(1)
    eventually(lambda: listener.messages_processed == 11, timeout_s=WAIT_S)
    eventually(lambda: listener.messages_failed >= 1, timeout_s=WAIT_S)
    assert len(recording.deleted) == 11
    assert all(count == 2 for n, count in both.items() if n != 7)
    assert both.get(7) == 1  # the first observer ran, the second failed: not deleted
    assert recording.approximate_message_count(queue_name) == 1


def test_held_messages_are_renewed_and_deleted_with_the_newest_pop_receipt(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """Handlers outlasting the 1 s visibility timeout, and messages waiting for a slot meanwhile,
    are renewed; every delete then succeeds and no message is handled twice."""
    put(recording, queue_name, 6)
    gate = Gate()
    listener = make_listener(concurrency=3, visibility_timeout_s=1)
    listener.subscribe(gate.handle)
    listener.start_listener(1)
    eventually(lambda: len(gate.started) == 3, timeout_s=WAIT_S)
    # Six leases were taken (one get); renewal at half the timeout has renewed them all twice.
    eventually(lambda: listener.visibility_renewals >= 12, timeout_s=WAIT_S)
    gate.opened.set()
    eventually(lambda: listener.messages_processed == 6, timeout_s=WAIT_S)
    assert sorted(gate.started) == list(range(6))  # none came back to be handled again
    assert [deleted for _, deleted in recording.deleted] == [True] * 6
    assert recording.approximate_message_count(queue_name) == 0


def test_stop_waits_for_the_messages_in_flight_to_be_settled(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """stop() returns only after the in-flight handlers finished and their messages were
    deleted; the fetched messages that never started go back to the queue."""
    put(recording, queue_name, 10)
    gate = Gate()
    listener = make_listener(concurrency=4)
    listener.subscribe(gate.handle)
    listener.start_listener(1)
    eventually(lambda: len(gate.started) == 4, timeout_s=WAIT_S)
    outcome: list[tuple[bool, int, int]] = []

    def stop() -> None:
        stopped = listener.stop(timeout_s=WAIT_S)
        outcome.append((stopped, len(gate.finished), len(recording.deleted)))

    stopper = threading.Thread(target=stop)
    stopper.start()
    eventually(lambda: listener.stopped, timeout_s=WAIT_S)
    gate.opened.set()
    stopper.join(WAIT_S)
    assert outcome == [(True, 4, 4)]
    assert recording.approximate_message_count(queue_name) == 6
    assert len(recording.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)) == 6


def test_async_handlers_run_concurrently_on_one_event_loop(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """Eight coroutines of one dequeue thread await together on the worker's single loop."""
    put(recording, queue_name, 16)
    loops: set[int] = set()
    waiting = 0
    all_in = asyncio.Event()

    async def handle(item: dict[str, int]) -> None:
        nonlocal waiting
        loops.add(id(asyncio.get_running_loop()))
        waiting += 1
        if waiting >= 8:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), WAIT_S)

    runner = AsyncHandlerRunner(handle)
    listener = make_listener(concurrency=8)
    listener.subscribe(runner)
    listener.start_listener(1)
    try:
        eventually(lambda: listener.messages_processed == 16, timeout_s=WAIT_S)
    finally:
        listener.stop(WAIT_S)
        runner.close()
    assert len(loops) == 1


def test_an_unexpected_failure_in_flight_is_counted_for_the_loop_to_back_off() -> None:
    """A task that fails unexpectedly frees its slot and is reported once to its receive loop."""
    in_flight = InFlight(2, HandlerPool("test"))
    done = threading.Event()

    def failing() -> bool:
        done.set()
        return False

    in_flight.reserve()
    assert in_flight.start(failing) is True
    assert done.wait(WAIT_S)
    in_flight.drain()
    assert in_flight.take_failures() == 1
    assert in_flight.take_failures() == 0


def test_concurrency_one_handles_on_the_dequeue_thread_itself() -> None:
    """The default keeps today's path: the task runs at once and its outcome is returned."""
    in_flight = InFlight(1, HandlerPool("test"))
    threads: list[threading.Thread] = []

    def record() -> bool:
        threads.append(threading.current_thread())
        return True

    in_flight.reserve()
    assert in_flight.start(record) is True
    assert threads == [threading.current_thread()]
    assert in_flight.start(lambda: False) is False


def test_handler_threads_are_daemons_reused_when_idle() -> None:
    """A stuck handler never blocks the process's exit; an idle thread takes the next task."""
    pool = HandlerPool("test")
    seen: list[threading.Thread] = []
    done = threading.Event()

    def task() -> None:
        seen.append(threading.current_thread())
        done.set()

    pool.submit(task)
    assert done.wait(WAIT_S)
    eventually(lambda: pool.threads == 1 and pool._idle == 1, timeout_s=WAIT_S)
    done.clear()
    pool.submit(task)
    assert done.wait(WAIT_S)
    assert seen[0] is seen[1]
    assert seen[0].daemon
    pool.close()


def test_closing_the_runner_fails_handlers_still_awaiting_instead_of_hanging() -> None:
    """A coroutine still awaiting when the worker closes is cancelled; its caller sees an error."""
    started = threading.Event()

    async def never_done(item: int) -> None:
        started.set()
        await asyncio.Event().wait()

    runner = AsyncHandlerRunner(never_done)
    failures: list[BaseException] = []

    def call() -> None:
        try:
            runner(1)
        except BaseException as failure:
            failures.append(failure)

    caller = threading.Thread(target=call)
    caller.start()
    assert started.wait(WAIT_S)
    runner.close()
    caller.join(WAIT_S)
    assert not caller.is_alive()
    assert len(failures) == 1
    assert isinstance(failures[0], Exception)


def test_handlers_that_wait_get_the_full_concurrency_and_fast_ones_two_slots() -> None:
    """A loop keeps ``concurrency`` in flight for handlers that wait (or are not measured yet)
    and two for handlers that return at once: one handled while the previous one settles."""
    assert slots_per_loop(8, None) == 8
    assert slots_per_loop(8, WAITING_HANDLER_S) == 8
    assert slots_per_loop(8, 0.05) == 8
    assert slots_per_loop(8, WAITING_HANDLER_S / 10) == FAST_HANDLER_SLOTS == 2
    assert slots_per_loop(1, 0.0001) == 1


def test_a_handler_thread_takes_on_waiting_messages_in_its_slot_up_to_a_batch() -> None:
    """After its task, a handler thread runs the follow-on tasks the loop offers in the same slot
    and on the same thread, at most ``MAX_FOLLOW_ONS`` of them; then the slot goes back, and the
    loop is told how many it took on."""
    waiting = list(range(MAX_FOLLOW_ONS + 5))
    ran: list[tuple[int, str]] = []

    def task_for(n: int) -> Callable[[], bool]:
        def task() -> bool:
            ran.append((n, threading.current_thread().name))
            return True

        return task

    def follow_on() -> Callable[[], bool] | None:
        return task_for(waiting.pop(0)) if waiting else None

    in_flight = InFlight(8, HandlerPool("chain"), limit=lambda: 2, follow_on=follow_on)
    in_flight.reserve()
    in_flight.start(task_for(-1))
    in_flight.drain()
    assert [n for n, _ in ran] == list(range(-1, MAX_FOLLOW_ONS))
    assert len({name for _, name in ran}) == 1
    assert in_flight.take_followed() == MAX_FOLLOW_ONS
    assert in_flight.take_followed() == 0
    assert in_flight.in_use == 0


class Offers:
    """A loop's follow-on that records each time it is asked and offers a task that succeeds."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self) -> Callable[[], bool] | None:
        self.asked += 1
        return lambda: True


def test_a_failed_task_ends_the_run_so_the_loop_sees_it_first() -> None:
    """A task that failed is counted for the loop, and nothing more is taken on after it."""
    follow_on = Offers()
    in_flight = InFlight(8, HandlerPool("failing"), limit=lambda: 2, follow_on=follow_on)
    in_flight.reserve()
    in_flight.start(lambda: False)
    in_flight.drain()
    assert follow_on.asked == 0
    assert in_flight.take_failures() == 1


def test_a_slot_given_back_by_a_time_limit_takes_nothing_more_on() -> None:
    """A task whose slot the time limit gave back (its handler overran) ends the run: the thread
    no longer holds a slot, so it must not start another message."""
    follow_on = Offers()

    def overrunning() -> bool:
        slot = current_slot()
        assert slot is not None
        slot.give_back()  # what the time limit does when the handler overruns
        return True

    in_flight = InFlight(8, HandlerPool("overrun"), limit=lambda: 2, follow_on=follow_on)
    in_flight.reserve()
    in_flight.start(overrunning)
    in_flight.drain()
    assert follow_on.asked == 0
    assert in_flight.in_use == 0


def test_a_draining_loop_takes_on_no_more() -> None:
    """Once the loop drains (it is leaving), a running task's thread takes nothing more on."""
    release, started = threading.Event(), threading.Event()
    follow_on = Offers()

    def held() -> bool:
        started.set()
        return release.wait(WAIT_S)

    in_flight = InFlight(8, HandlerPool("draining"), limit=lambda: 2, follow_on=follow_on)
    in_flight.reserve()
    in_flight.start(held)
    assert started.wait(WAIT_S)
    drained = threading.Thread(target=in_flight.drain, daemon=True)
    drained.start()
    eventually(lambda: in_flight._closing, timeout_s=WAIT_S)
    release.set()
    drained.join(WAIT_S)
    assert not drained.is_alive()
    assert follow_on.asked == 0


def test_quick_messages_reach_the_handler_threads_without_a_hand_over_each(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
) -> None:
    """With two slots, most of a backlog of quick messages is taken on by the handler threads
    themselves: far fewer hand-overs than messages, and every message settled once."""
    listener = make_listener(concurrency=2)
    handled: list[int] = []
    listener.subscribe(lambda item: handled.append(item["n"]))
    submitted = []
    submit = listener._parts.handlers.submit

    def counting_submit(task: Callable[[], None]) -> None:
        submitted.append(1)
        submit(task)

    listener._parts.handlers.submit = counting_submit  # type: ignore[method-assign]
    put(recording, queue_name, 200)
    listener.start_listener(1)
    eventually(lambda: listener.messages_processed == 200, timeout_s=WAIT_S)
    assert sorted(handled) == list(range(200))
    assert len(recording.deleted) == 200
    assert len(submitted) < 100


def test_a_loop_takes_no_message_beyond_the_limit_it_is_given() -> None:
    """With a limit of 2 the third reservation waits until a started message is settled."""
    in_flight = InFlight(8, HandlerPool("test"), limit=lambda: 2)
    release = threading.Event()
    third_reserved = threading.Event()

    def held() -> bool:
        return release.wait(WAIT_S)

    for _ in range(2):
        in_flight.reserve()
        in_flight.start(held)

    def reserve_third() -> None:
        in_flight.reserve()
        third_reserved.set()

    threading.Thread(target=reserve_third, daemon=True).start()
    assert not third_reserved.wait(0.2)  # a negative check: broken code reserves at once
    assert in_flight.in_use == 2
    release.set()
    assert third_reserved.wait(WAIT_S)
    in_flight.cancel()
    in_flight.drain()
    assert in_flight.in_use == 0


@pytest.mark.parametrize(("handler_s", "slots"), [(0.0005, 2), (0.05, 8)])
def test_a_listener_sizes_each_thread_s_slots_by_its_handlers_own_time(
    make_listener: Callable[..., CloudQueueListener[dict[str, int]]],
    recording: RecordingStorage,
    queue_name: str,
    handler_s: float,
    slots: int,
) -> None:
    """The observers' own time per message (settlement excluded) decides the slots per thread,
    and the scaler is told that in-flight capacity, not the configured concurrency."""
    clock = ManualClock()
    listener = make_listener(concurrency=8, clock=clock)
    listener.subscribe(lambda _item: clock.advance(handler_s))
    put(recording, queue_name, 3)
    listener.start_listener(1)
    eventually(lambda: listener.messages_processed == 3, timeout_s=WAIT_S)
    assert listener.meters.handler_time.seconds_per_message == pytest.approx(handler_s)
    assert listener.slots_per_thread() == slots
    assert listener.pool_control.measure_load().concurrency == slots
