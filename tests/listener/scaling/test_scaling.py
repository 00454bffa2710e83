"""Elastic scaling: the back-off curve, the stop decision, rules, hysteresis, races, scale-in."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    BatchProcessed,
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    Middleware,
    QueueEmpty,
    QueueEmptyDecision,
    QueueWorkDetected,
)
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.scaling_rules import (
    ScalingInput,
    bounded,
    drain_time,
    import_rule,
    proportional,
    steps,
)
from cloudqueue.listener.scaling.cpu import ProcessCpuMeter
from cloudqueue.listener.scaling.scaler import (
    ElasticScaler,
    ScalingPolicy,
    decide,
    idle_delay_s,
    should_stop_idle,
    targets,
)
from cloudqueue.listener.testing import ManualClock
from tests.support.polling import eventually


class FixedCpu:
    """A CPU meter that reports what the test says."""

    def __init__(self, cores: float) -> None:
        self.cores = cores

    def cores_used(self) -> float:
        return self.cores


# -- the back-off curve ------------------------------------------------------------------------


def test_the_idle_curve_matches_the_seed_formula_for_idle_counts_1_to_12() -> None:
    """Each delay is min_idle + (2^n - 1) x U(0.8, 1.2) x delta, drawn from the injected source."""
    policy = ScalingPolicy(delta_backoff_s=0.1, min_idle_s=0.05, max_idle_s=1_000.0)
    ours, reference = random.Random(42), random.Random(42)
    for idle_count in range(1, 13):
        expected = 0.05 + (2**idle_count - 1) * reference.uniform(0.08, 0.12)
        delay = idle_delay_s(idle_count, policy, ours)
        assert delay == pytest.approx(expected)
        nominal = (2**idle_count - 1) * 0.1
        assert 0.05 + 0.8 * nominal <= delay <= 0.05 + 1.2 * nominal


def test_the_idle_curve_is_capped_at_max_idle_and_restarts_after_work() -> None:
    """Long idleness waits max_idle_s; idle count 0 (work was found) waits min_idle_s."""
    policy = ScalingPolicy(max_idle_s=2.0, min_idle_s=0.0)
    rng = random.Random(1)
    assert [idle_delay_s(n, policy, rng) for n in (5, 8, 30)] == [2.0, 2.0, 2.0]
    assert idle_delay_s(0, policy, rng) == 0.0


@pytest.mark.parametrize(
    ("delay_s", "active", "min_threads", "stop"),
    [
        (2.0, 2, 1, True),
        (2.0, 1, 1, False),
        (1.9, 5, 1, False),
        (2.0, 1, 0, True),
        (2.0, 0, 0, False),
    ],
)
def test_an_idle_thread_stops_only_at_the_cap_and_above_the_floor(
    delay_s: float, active: int, min_threads: int, stop: bool
) -> None:
    """Stop when the back-off reached max_idle and more than min_threads are active."""
    policy = ScalingPolicy(min_threads=min_threads, max_idle_s=2.0)
    assert should_stop_idle(delay_s, active, policy) is stop


# -- rules -------------------------------------------------------------------------------------


def load(depth: int, *, active: int = 1, rate: float | None = None) -> ScalingInput:
    return ScalingInput(depth=depth, active_threads=active, per_thread_rate_per_s=rate)


@pytest.mark.parametrize(
    ("depth", "threads"), [(0, 10), (99, 10), (100, 50), (999, 50), (1000, 100), (10**6, 100)]
)
def test_the_steps_rule_reproduces_the_seeds_table(depth: int, threads: int) -> None:
    """depth < 100 -> 10, < 1000 -> 50, else 100."""
    assert steps([(0, 10), (100, 50), (1000, 100)])(load(depth)) == threads


@pytest.mark.parametrize(("depth", "threads"), [(0, 0), (1, 1), (32, 1), (33, 2), (320, 10)])
def test_the_proportional_rule_is_the_ceiling_of_depth_per_thread(depth: int, threads: int) -> None:
    """ceil(depth / messages_per_thread)."""
    assert proportional(32)(load(depth)) == threads


def test_the_drain_time_rule_uses_the_measured_rate_and_an_assumption_before_it() -> None:
    """threads = depth / (rate x target): slow handlers get more threads, fast ones fewer."""
    rule = drain_time(10.0, assumed_rate_per_s=5.0)
    assert rule(load(1000, rate=None)) == 20  # 1000 / (5 x 10)
    assert rule(load(1000, rate=2.0)) == 50  # a slow handler
    assert rule(load(1000, rate=100.0)) == 1  # a fast one


def test_rules_are_bounded_by_min_and_max_threads() -> None:
    """Whatever the rule says, the pool stays within its bounds."""
    assert bounded(500, min_threads=1, max_threads=16) == 16
    assert bounded(0, min_threads=1, max_threads=16) == 1
    assert bounded(0, min_threads=0, max_threads=16) == 0


def test_a_custom_rule_is_imported_from_its_path() -> None:
    """'package.module:callable' names a rule; a bad path is a configuration error."""
    rule = import_rule("tests.support.rules:double_the_pool")
    assert rule(load(7, active=3)) == 6
    for bad in ("tests.support.rules", "tests.nowhere:rule", "tests.support.rules:missing"):
        with pytest.raises(ConfigurationError):
            import_rule(bad)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: steps([]),
        lambda: proportional(0),
        lambda: drain_time(0),
        lambda: ScalingPolicy(min_threads=3, max_threads=2),
    ],
)
def test_invalid_rule_parameters_are_refused(bad: Callable[[], object]) -> None:
    """Rules and policies check their parameters when built, not when first used."""
    with pytest.raises(ConfigurationError):
        bad()


# -- hysteresis ----------------------------------------------------------------------------------


def test_growth_is_immediate() -> None:
    """A grow target above the pool adds the difference at once."""
    decision = decide(
        active=2, grow_target=6, shrink_target=6, below_since=None, now=0, scale_in_delay_s=15
    )
    assert decision.change == 4


def test_shrinking_waits_for_the_target_to_stay_below_the_pool() -> None:
    """Below-target readings shrink the pool only after scale_in_delay_s of them."""
    first = decide(
        active=8, grow_target=2, shrink_target=2, below_since=None, now=100, scale_in_delay_s=15
    )
    assert (first.change, first.reason, first.below_since) == (0, "hysteresis", 100)
    later = decide(
        active=8, grow_target=2, shrink_target=2, below_since=100, now=114, scale_in_delay_s=15
    )
    assert later.change == 0
    settled = decide(
        active=8, grow_target=2, shrink_target=2, below_since=100, now=115, scale_in_delay_s=15
    )
    assert settled.change == -6


def test_a_reading_back_on_target_resets_the_hysteresis_clock() -> None:
    """A brief dip followed by a recovery never shrinks the pool: no flapping."""
    dip = decide(
        active=8, grow_target=2, shrink_target=2, below_since=None, now=0, scale_in_delay_s=15
    )
    back = decide(
        active=8,
        grow_target=8,
        shrink_target=8,
        below_since=dip.below_since,
        now=10,
        scale_in_delay_s=15,
    )
    assert back.below_since is None
    again = decide(
        active=8,
        grow_target=2,
        shrink_target=2,
        below_since=back.below_since,
        now=20,
        scale_in_delay_s=15,
    )
    assert again.change == 0


def test_in_flight_messages_hold_the_pool_while_the_visible_queue_is_empty() -> None:
    """Grow on the visible backlog; shrink on visible plus in-flight (busy threads count)."""
    policy = ScalingPolicy(rule=proportional(32), max_threads=16)
    busy = ListenerLoad(
        approximate_depth=256, in_flight=256, active_threads=8, per_thread_rate_per_s=None
    )
    assert busy.visible_depth == 0
    assert targets(busy, policy) == (1, 8)


# -- the scaler on a live listener ---------------------------------------------------------------


@pytest.fixture
def storage(manual_storage: InMemoryQueueStorage) -> InMemoryQueueStorage:
    """This module's store: in memory, on the manual clock (conftest's ``manual_storage``)."""
    return manual_storage


@pytest.fixture
def listeners() -> Iterator[list[CloudQueueListener[Any]]]:
    made: list[CloudQueueListener[Any]] = []
    yield made
    for listener in made:
        listener.stop(5)


def fill(storage: InMemoryQueueStorage, queue_name: str, count: int) -> None:
    codec = MessageCodec(int)
    for number in range(count):
        storage.put_message(queue_name, codec.encode(number))


def make_listener(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> CloudQueueListener[int]:
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), int, clock=clock, sleeper=clock
    )
    listeners.append(listener)
    return listener


def test_work_detected_starts_threads_up_to_the_rule_and_logs_the_decision(
    held: CloudQueueListener[int], queue_name: str, clock: ManualClock
) -> None:
    """300 waiting messages with proportional(32) and max 8: the pool goes to 8, logged once.
    (Held messages: a pool that drained the queue would scale down before the check.)"""
    listener = held
    scaler = ElasticScaler(
        listener.pool_control,
        ScalingPolicy(rule=proportional(32), max_threads=8),
        clock=clock,
        cpu_meter=FixedCpu(0.1),
    )
    with capture_logs() as logs:
        scaler.rescale(trigger="work_detected")
    assert listener.query_state().active_dequeue_tasks == 8
    (event,) = [e for e in logs if e["event"] == "scaled_up"]
    assert {k: event[k] for k in ("queue", "depth", "active", "target", "rule")} == {
        "queue": queue_name,
        "depth": 300,
        "active": 8,
        "target": 8,
        "rule": "proportional",
    }


def test_two_threads_detecting_work_at_once_do_not_overshoot(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """Concurrent work-detected events start the rule's target once, not twice."""
    fill(storage, queue_name, 200)
    listener = make_listener(storage, queue_name, clock, listeners)
    scaler = ElasticScaler(
        listener.pool_control,
        ScalingPolicy(rule=proportional(50), max_threads=16),
        clock=clock,
        cpu_meter=FixedCpu(0.1),
    )
    gate = threading.Barrier(8)

    def detect() -> None:
        gate.wait()
        scaler.on_queue_work_detected()

    racers = [threading.Thread(target=detect) for _ in range(8)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(10)
    assert listener.query_state().total_dequeue_tasks == 4


def test_a_saturated_cpu_caps_growth_and_says_why(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """Growth stops at one thread while the process is CPU-bound; scaling_capped explains it."""
    fill(storage, queue_name, 300)
    listener = make_listener(storage, queue_name, clock, listeners)
    scaler = ElasticScaler(
        listener.pool_control,
        ScalingPolicy(max_threads=8),
        clock=clock,
        cpu_meter=FixedCpu(0.97),
    )
    with capture_logs() as logs:
        scaler.rescale(trigger="work_detected")
    assert listener.active_dequeue_tasks == 1  # never zero: someone must look at the queue
    assert [e["reason"] for e in logs if e["event"] == "scaling_capped"] == ["cpu_saturated"]


class CpuReadings:
    """A CPU meter that reports the given readings in turn, then the last one for ever."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def cores_used(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_the_first_cpu_window_opens_at_the_first_reading_not_at_start_up() -> None:
    """A busy start-up (one core for 10 s before the first decision) is not read as load."""
    cpu, wall = [0.0], [0.0]
    meter = ProcessCpuMeter(cpu_time=lambda: cpu[0], wall_time=lambda: wall[0])
    cpu[0], wall[0] = 10.0, 10.0  # start-up: on_start, imports, queue creation
    assert meter.cores_used() is None  # nothing measured yet: never a reason to cap
    cpu[0], wall[0] = 10.5, 12.0
    assert meter.cores_used() == pytest.approx(0.25)


@pytest.fixture
def held(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> Iterator[CloudQueueListener[int]]:
    """A listener on 300 messages whose handlers hold every message until the test ends: the
    backlog stays, and only a scaling decision can add threads."""
    fill(storage, queue_name, 300)
    listener = make_listener(storage, queue_name, clock, listeners)
    release = threading.Event()

    def hold(_: int) -> None:
        release.wait()

    listener.subscribe(hold)
    yield listener
    release.set()


def test_a_capped_scale_up_is_looked_at_again_on_a_timer(
    held: CloudQueueListener[int], clock: ManualClock
) -> None:
    """Refused while the CPU is saturated, the scale-up happens one rescale interval later when it
    no longer is -- without waiting for a message to finish."""
    ElasticScaler(
        held.pool_control,
        ScalingPolicy(max_threads=8, rescale_interval_s=2.5),
        clock=clock,
        sleeper=clock,
        cpu_meter=CpuReadings(0.97, 0.1),
    )
    with capture_logs() as logs:
        held.start_listener(1)  # its first batch asks the scaler, which is capped
        eventually(lambda: held.active_dequeue_tasks == 8)
        # The scaler logs once the threads have started: wait for the line, not just the threads.
        eventually(lambda: any(e["event"] == "scaled_up" for e in logs))
    assert 2.5 in clock.waits
    assert [e["reason"] for e in logs if e["event"] == "scaling_capped"] == ["cpu_saturated"]
    assert [e["reason"] for e in logs if e["event"] == "scaled_up"] == [
        "cpu_recheck:backlog_above_pool"
    ]
    assert held.messages_processed == 0  # no message finished: the timer alone decided


def test_a_closed_scaler_cancels_its_pending_re_check(held: CloudQueueListener[int]) -> None:
    """Closing ends the re-check's wait at once and nothing is decided after it."""
    scaler = ElasticScaler(
        held.pool_control,
        ScalingPolicy(max_threads=8, rescale_interval_s=3_600),
        cpu_meter=FixedCpu(0.97),
    )
    held.start_listener(1)
    name = f"cloudqueue:{held.queue_name}:recheck"
    rechecks = eventually(lambda: [t for t in threading.enumerate() if t.name == name])
    assert len(rechecks) == 1
    scaler.close()
    rechecks[0].join(5)
    assert not rechecks[0].is_alive()
    assert held.active_dequeue_tasks == 1


def test_scale_in_lets_threads_finish_their_message_and_abandons_nothing(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """Threads asked to leave finish their current message first: every message is handled once."""
    fill(storage, queue_name, 400)
    listener = make_listener(storage, queue_name, clock, listeners)
    release = threading.Event()
    handled: list[int] = []
    busy = threading.Semaphore(0)
    lock = threading.Lock()

    def handle(number: int) -> None:
        busy.release()
        release.wait(10)
        with lock:
            handled.append(number)

    listener.subscribe(handle)
    listener.start_listener(6)
    for _ in range(6):
        assert busy.acquire(timeout=10)  # every thread is in the middle of a message
    assert listener.pool_control.request_scale_in(10, floor=1) == 5
    assert listener.active_dequeue_tasks == 1  # the decision shows at once
    release.set()
    eventually(lambda: len(handled) == 400, timeout_s=20)
    assert sorted(handled) == list(range(400))
    assert listener.messages_failed == 0
    eventually(lambda: listener.threads_alive == 1)


def test_idle_threads_stop_down_to_one_poller(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """With an empty queue, surplus threads stop once their back-off reaches max_idle; one stays."""
    listener = make_listener(storage, queue_name, clock, listeners)
    ElasticScaler(
        listener.pool_control,
        ScalingPolicy(min_threads=1, max_idle_s=1.0),
        clock=clock,
        rng=random.Random(3),
    )
    listener.start_listener(5)
    eventually(lambda: listener.threads_alive == 1)
    assert listener.active_dequeue_tasks == 1
    assert listener.query_state().total_dequeue_tasks == 5


def test_the_busy_pool_rescales_periodically(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """While batches flow, a growing backlog adds threads without any idle thread."""
    fill(storage, queue_name, 64)
    listener = make_listener(storage, queue_name, clock, listeners)
    ElasticScaler(
        listener.pool_control,
        ScalingPolicy(rule=proportional(32), max_threads=8, rescale_interval_s=1.0),
        clock=clock,
        cpu_meter=FixedCpu(0.1),
    )
    busy = threading.Event()
    carry_on = threading.Event()

    def handle(_: int) -> None:
        busy.set()
        carry_on.wait(10)  # every thread stays busy until the backlog has grown

    listener.subscribe(handle)
    listener.start_listener(1)
    assert busy.wait(10)
    assert listener.active_dequeue_tasks == 2  # the first get scaled to proportional(32) of 64
    fill(storage, queue_name, 256)  # the backlog grows while every thread is busy
    clock.advance(2.0)
    carry_on.set()
    eventually(lambda: listener.query_state().total_dequeue_tasks >= 8)


# -- a listener started on a backlog of slow messages -------------------------------------------


class VirtualHandler:
    """A handler that "takes" ``seconds`` of manual-clock time, as if the threads ran in parallel.

    Each call waits until the clock reaches its own finish time; the clock is moved by the test
    (``run``), which always jumps to the earliest finish time among the busy calls, so N threads
    handling at once take ``seconds``, not N x ``seconds``.
    """

    def __init__(self, clock: ManualClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.handled = 0
        self._finishing: list[float] = []
        self._changed = threading.Condition()

    def __call__(self, _: int) -> None:
        with self._changed:
            finish = self.clock.monotonic() + self.seconds
            self._finishing.append(finish)
            self._changed.notify_all()
            while self.clock.monotonic() < finish:
                self._changed.wait(0.01)
            self._finishing.remove(finish)
            self.handled += 1
            self._changed.notify_all()

    def run(self, listener: CloudQueueListener[int], total: int, *, busy: int) -> float:
        """Move the clock until ``total`` messages are handled; return the virtual seconds taken."""
        started = self.clock.monotonic()
        deadline = time.monotonic() + 60  # a real-time safety net only; nothing asserts on it
        while self.handled < total:
            assert time.monotonic() < deadline, f"stuck after {self.handled} messages"
            with self._changed:
                # Let every thread that can start a message do so before time moves on.
                self._changed.wait_for(
                    lambda: (
                        len(self._finishing) >= min(busy, listener.active_dequeue_tasks)
                        or self.handled >= total
                    ),
                    timeout=0.05,
                )
                if self._finishing:
                    self.clock.advance(max(0.0, min(self._finishing) - self.clock.monotonic()))
                self._changed.notify_all()
        return self.clock.monotonic() - started


class VirtualSleeper:
    """Waits until the manual clock, moved only by ``VirtualHandler.run``, has passed the delay."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        until = self.clock.monotonic() + delay_s
        while self.clock.monotonic() < until:
            if stop_event.wait(0.005):
                return True
        return stop_event.is_set()


def test_a_listener_started_on_a_backlog_of_slow_messages_scales_at_once_and_shares_the_work(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """200 x 0.25 s, drain_time(5 s), 1 thread: more threads before the first batch is done, and
    idle threads take the fetched messages, so the drain takes about 6 s, not 16 s."""
    fill(storage, queue_name, 200)
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), int, clock=clock, sleeper=VirtualSleeper(clock)
    )
    listeners.append(listener)
    ElasticScaler(
        listener.pool_control,
        ScalingPolicy(rule=drain_time(5.0), max_threads=10),
        clock=clock,
        cpu_meter=FixedCpu(0.1),
    )
    handler = VirtualHandler(clock, seconds=0.25)
    listener.subscribe(handler)
    with capture_logs() as logs:
        listener.start_listener(1)
        drained_s = handler.run(listener, 200, busy=10)
    first_growth = next(e for e in logs if e["event"] == "scaled_up")
    assert first_growth["reason"] == "work_detected:backlog_above_pool"
    assert listener.peak_dequeue_tasks == 10
    # One thread holding its batch of 32 alone needs 8 s for it; the old loop drained in 16 s.
    assert drained_s <= 6.5
    assert listener.messages_processed == 200


def test_a_scaler_leaves_the_listeners_own_handlers_alone(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """A middleware's QueueWorkDetected and BatchProcessed keep firing with a scaler; a
    middleware deciding idle waits and a scaler cannot both decide, so binding is refused."""
    fill(storage, queue_name, 3)
    detected, processed = threading.Event(), threading.Event()

    class Watch(Middleware):
        def on_queue_work_detected(self, event: QueueWorkDetected) -> None:
            detected.set()

        def on_batch_processed(self, event: BatchProcessed) -> None:
            processed.set()

    class Deciding(Middleware):
        def on_queue_empty(self, event: QueueEmpty) -> QueueEmptyDecision:
            return QueueEmptyDecision(stop=False, delay_s=1.0)

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        int,
        clock=clock,
        sleeper=clock,
        middleware=[Watch()],
    )
    listeners.append(listener)
    scaler = ElasticScaler(listener.pool_control, clock=clock, cpu_meter=FixedCpu(0.1))
    assert scaler.pool is listener.pool_control
    listener.subscribe(lambda _: clock.advance(1.0))
    listener.start_listener(1)
    assert detected.wait(10)
    assert processed.wait(10)
    deciding: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), int, middleware=[Deciding()]
    )
    with pytest.raises(ConfigurationError, match="decide idle waits"):
        ElasticScaler(deciding.pool_control)


def test_a_scale_up_that_races_the_stop_starts_nothing_and_raises_nothing(
    storage: InMemoryQueueStorage,
    queue_name: str,
    clock: ManualClock,
    listeners: list[CloudQueueListener[Any]],
) -> None:
    """A scaling decision made just before ``stop()`` may arrive after it: a stopping listener
    grows no more, and the scaler's call is not an error."""
    listener = make_listener(storage, queue_name, clock, listeners)
    listener.subscribe(lambda item: None)
    listener.start_listener(1)
    listener.request_stop()
    listener.pool_control.start_threads(3)
    assert listener.active_dequeue_tasks <= 1
