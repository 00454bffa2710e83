"""The testing helpers shipped in the package: virtual time and run_until_drained."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

from cloudqueue.listener import (
    CallNext,
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageContext,
    Middleware,
)
from cloudqueue.listener.errors import ConfigurationError, PermanentFailure
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.testing import DrainTimeoutError, HandlerFailedError, run_until_drained


class Job(BaseModel):
    job_id: int


class FlakyWorker(QueueWorker[Job]):
    """Fails each job's first attempt."""

    queue_name = "jobs"
    settings = {"listener": {"retry_delay_s": 30}}  # noqa: RUF012 - as users write it

    def __init__(self) -> None:
        self.attempts: dict[int, int] = {}

    def handle(self, item: Job) -> None:
        self.attempts[item.job_id] = self.attempts.get(item.job_id, 0) + 1
        if self.attempts[item.job_id] == 1:
            raise RuntimeError(f"job {item.job_id} failed")


def wait_until_waiting(clock: VirtualClock, count: int) -> None:
    while clock.waiting < count:
        clock.wait_for_change(10)


def test_a_wait_on_the_virtual_clock_lasts_until_time_is_advanced() -> None:
    """A waiting thread blocks; advancing time by its delay wakes it, and not before."""
    clock = VirtualClock()
    woke = threading.Event()
    never_set = threading.Event()

    def sleep() -> None:
        clock.wait(never_set, 5.0)
        woke.set()

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    wait_until_waiting(clock, 1)
    clock.advance(4.0)
    assert clock.waiting == 1
    clock.advance(1.0)
    sleeper.join(10)
    assert woke.is_set()


def test_a_stop_event_ends_a_virtual_wait_at_once() -> None:
    """Stop does not wait for virtual time: the wait returns True as soon as the event is set."""
    clock = VirtualClock()
    stop = threading.Event()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(clock.wait(stop, 3600)))
    waiter.start()
    wait_until_waiting(clock, 1)
    stop.set()
    waiter.join(10)
    assert result == [True]
    assert clock.monotonic() == 1_000.0


def test_an_idle_listener_does_not_move_virtual_time(queue_name: str) -> None:
    """Unlike ManualClock, an idle poller waits for time instead of racing it forward."""
    clock = VirtualClock()
    storage = InMemoryQueueStorage(clock=clock)
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), Job, clock=clock, sleeper=clock
    )
    listener.start_listener(1)
    try:
        wait_until_waiting(clock, 1)
        started = clock.now()
        assert clock.advance_when_all_waiting(lambda: listener.threads_alive)
        wait_until_waiting(clock, 1)
        assert (clock.now() - started).total_seconds() == 1.0  # one dequeue interval, no more
        assert clock.waits == [1.0, 1.0]
    finally:
        listener.stop(5)


def test_run_until_drained_returns_the_items_the_worker_handled() -> None:
    """Every published item is handled once and returned; the queue ends empty."""

    class Collect(QueueWorker[Job]):
        queue_name = "jobs"

        def handle(self, item: Job) -> None:
            pass

    handled = run_until_drained(Collect, [Job(job_id=n) for n in range(5)])
    assert sorted(job.job_id for job in handled) == list(range(5))


def test_fail_fast_raises_the_handlers_own_exception() -> None:
    """The first handler error fails the test with the handler's exception, not a timeout."""
    with pytest.raises(RuntimeError, match="job 1 failed"):
        run_until_drained(FlakyWorker(), [Job(job_id=1)])


def test_without_fail_fast_a_failed_item_is_retried_after_its_back_off_in_virtual_time() -> None:
    """A 30 s retry back-off passes in virtual time; the second attempt succeeds."""
    worker = FlakyWorker()
    handled = run_until_drained(worker, [Job(job_id=1), Job(job_id=2)], fail_fast=False)
    assert sorted(job.job_id for job in handled) == [1, 2]
    assert worker.attempts == {1: 2, 2: 2}


def test_the_workers_own_settings_apply_threads_and_poisoning() -> None:
    """Two threads share the work; an always-failing job is poisoned after max_dequeue_count."""
    threads_seen: set[str] = set()
    attempts: list[int] = []
    both_busy = threading.Barrier(2, timeout=10)

    class TwoThreads(QueueWorker[Job]):
        queue_name = "jobs"
        settings = {  # noqa: RUF012 - as users write it
            "listener": {"threads": 2, "dequeue_batch_size": 1},
            "poison": {"max_dequeue_count": 2},
        }

        def handle(self, item: Job) -> None:
            threads_seen.add(threading.current_thread().name)
            if item.job_id < 2:
                both_busy.wait()  # returns only when both threads handle a job at once
                return
            attempts.append(item.job_id)
            raise RuntimeError("always")

    jobs = [Job(job_id=n) for n in range(3)]
    handled = run_until_drained(TwoThreads, jobs, fail_fast=False)
    assert sorted(job.job_id for job in handled) == [0, 1]
    # Handler calls run on the worker's handler threads (threads x concurrency of them, since
    # run_until_drained runs its concurrency): the barrier above proved two at once.
    assert len(threads_seen) >= 2
    assert attempts == [2, 2]


def test_the_result_lists_the_poisoned_items_with_their_reasons() -> None:
    """Beside the handled items, the result says which items were poisoned, why, and the error."""

    class Picky(QueueWorker[Job]):
        queue_name = "jobs"
        settings = {"poison": {"max_dequeue_count": 2}}  # noqa: RUF012 - as users write it

        def handle(self, item: Job) -> None:
            if item.job_id == 1:
                raise RuntimeError("job 1 keeps failing")
            if item.job_id == 2:
                raise PermanentFailure("job 2 is hopeless")

    result = run_until_drained(Picky, [Job(job_id=n) for n in range(3)], fail_fast=False)
    assert [job.job_id for job in result] == [0]
    assert result.handled == [Job(job_id=0)]
    poisoned = {item.item.job_id: item for item in result.poisoned if item.item is not None}
    assert sorted(poisoned) == [1, 2]
    assert poisoned[1].reason == "max_dequeue_count_exceeded"
    assert poisoned[1].error == "RuntimeError: job 1 keeps failing"
    assert poisoned[2].reason == "permanent_failure"
    assert poisoned[2].error == "PermanentFailure: job 2 is hopeless"


def test_the_workers_own_middleware_and_its_key_controls_run_as_under_cloudqueue_run() -> None:
    """A worker's ``middleware`` sees every message (here it skips odd jobs), and its idempotency
    setting skips a job whose key was already handled: what the test drains is what runs."""

    class SkipOdd(Middleware):
        def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
            if context.items and context.items[0].job_id % 2:
                context.skip("odd")
                return
            call_next()

    class Once(QueueWorker[Job]):
        queue_name = "jobs"
        middleware = [SkipOdd]  # noqa: RUF012 - as users write it
        settings = {"idempotency": {"window_s": 3600}}  # noqa: RUF012

        def key(self, item: Job) -> str:
            return str(item.job_id)

        def handle(self, item: Job) -> None:
            pass

    jobs = [Job(job_id=n) for n in (0, 1, 2, 0, 3, 2)]
    assert sorted(job.job_id for job in run_until_drained(Once, jobs)) == [0, 2]


def test_an_item_that_cannot_be_decoded_is_listed_as_poisoned_with_its_text(
    queue_name: str,
) -> None:
    """A message no Job can be read from is poisoned as undecodable; its text is kept."""
    clock = VirtualClock()
    storage = InMemoryQueueStorage(clock=clock)
    listener: CloudQueueListener[Job] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), Job, clock=clock, sleeper=clock
    )
    storage.create_queue(queue_name)
    storage.put_message(queue_name, '{"job_id": "not a number"}')
    result = run_until_drained(listener, [Job(job_id=1)])
    assert [job.job_id for job in result] == [1]
    [poisoned] = result.poisoned
    assert poisoned.item is None
    assert poisoned.reason == "undecodable"
    assert poisoned.text == '{"job_id": "not a number"}'


def test_an_async_handler_is_awaited() -> None:
    """async def handlers run to completion as with `cloudqueue run`."""

    class AsyncWorker(QueueWorker[Job]):
        queue_name = "jobs"

        async def handle(self, item: Job) -> None:
            if item.job_id < 0:
                raise ValueError("negative")

    assert [job.job_id for job in run_until_drained(AsyncWorker, [Job(job_id=3)])] == [3]
    with pytest.raises(ValueError, match="negative"):
        run_until_drained(AsyncWorker, [Job(job_id=-1)])


def test_a_listener_runs_until_drained_and_an_observer_failure_fails_fast(
    queue_name: str,
) -> None:
    """A listener built on a VirtualClock drains too; its observers' failures are reported."""
    clock = VirtualClock()
    listener: CloudQueueListener[Job] = CloudQueueListener(
        InMemoryQueueStorage(clock=clock),
        CloudQueueLocation(queue_name),
        Job,
        clock=clock,
        sleeper=clock,
    )

    def refuse_two(job: Job) -> None:
        if job.job_id == 2:
            raise RuntimeError("two")

    listener.subscribe(refuse_two)
    with pytest.raises(HandlerFailedError, match="observer_failed"):
        run_until_drained(listener, [Job(job_id=1), Job(job_id=2)])


def test_a_listener_on_real_time_is_refused(queue_name: str) -> None:
    """Without a VirtualClock the helper could not tell idle from busy: a clear error."""
    listener: CloudQueueListener[Job] = CloudQueueListener(
        InMemoryQueueStorage(), CloudQueueLocation(queue_name), Job
    )
    with pytest.raises(ConfigurationError, match="VirtualClock"):
        run_until_drained(listener, [Job(job_id=1)])


def test_a_handler_that_never_returns_fails_at_the_real_time_limit() -> None:
    """A blocked handler is reported as not drained instead of hanging the suite."""
    release = threading.Event()

    class Stuck(QueueWorker[Job]):
        queue_name = "jobs"

        def handle(self, item: Job) -> None:
            release.wait(10)

    try:
        with pytest.raises(DrainTimeoutError, match="not drained"):
            run_until_drained(Stuck, [Job(job_id=1)], timeout_s=0.2)
    finally:
        release.set()


def test_the_pytest_plugin_is_registered(pytestconfig: pytest.Config) -> None:
    """Installing cloudqueue registers its fixtures with pytest (entry point pytest11)."""
    assert pytestconfig.pluginmanager.has_plugin("cloudqueue")


def test_the_plugin_fixtures_share_one_virtual_clock(
    cloudqueue_clock: VirtualClock, cloudqueue_storage: InMemoryQueueStorage
) -> None:
    """Messages in the fixture store age with the fixture clock."""
    cloudqueue_storage.create_queue("jobs")
    message = cloudqueue_storage.put_message("jobs", "x", time_to_live_s=60)
    assert message.inserted_on == cloudqueue_clock.now()
    cloudqueue_clock.advance(60)
    assert cloudqueue_storage.approximate_message_count("jobs") == 0
