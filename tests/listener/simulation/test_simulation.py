"""The workload simulator: Azure's queue semantics, workloads, and the real policies driving it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.scaling_rules import ScalingInput, steps
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.simulation import (
    PRESETS,
    ServiceModel,
    bursts,
    cloudqueue_defaults,
    cloudqueue_push,
    constant,
    day_profile,
    fixed_pool,
    functions_like,
    idle,
    naive_poller,
    read_day_profile,
    simulate,
)
from cloudqueue.listener.simulation.queue import SimulatedQueue
from cloudqueue.listener.simulation.simulator import PolicySimulation


def test_the_design_table_comes_out_exactly() -> None:
    """22 idle hours: 1 thread at 1 s makes 79,200 gets ($2.38/month), 200 threads $475.20."""
    scenario = PRESETS["design-table"]()
    one, two_hundred, defaults, push = simulate(
        scenario.workload, scenario.policies, service=scenario.service, samples=20
    )
    assert one.transactions == {"get_messages": 79_200}
    assert round(one.cost_per_month_usd(), 2) == 2.38
    assert two_hundred.total_transactions == 200 * 79_200
    assert round(two_hundred.cost_per_month_usd(), 2) == 475.20
    assert defaults.total_transactions < one.total_transactions
    assert push.total_transactions < 300  # a watchdog check every 5 minutes, and little else


def test_a_get_hides_messages_until_their_visibility_timeout_ends() -> None:
    """A message not deleted in time is delivered again with a higher dequeue count."""
    queue = SimulatedQueue()
    queue.put(0.0)
    (first,) = queue.get(0.0, max_messages=32, visibility_timeout_s=30)
    assert queue.get(29.0, max_messages=32, visibility_timeout_s=30) == []
    (again,) = queue.get(30.0, max_messages=32, visibility_timeout_s=30)
    assert again is first
    assert again.dequeue_count == 2
    assert queue.approximate_count() == 1  # hidden messages count, as in Azure


def test_a_delete_with_a_stale_pop_receipt_fails_and_is_still_billed() -> None:
    """After a redelivery, the first receipt no longer deletes the message."""
    queue = SimulatedQueue()
    queue.put(0.0)
    (message,) = queue.get(0.0, max_messages=1, visibility_timeout_s=1)
    stale = message.pop_receipt
    queue.get(5.0, max_messages=1, visibility_timeout_s=1)
    assert not queue.delete(message, stale)
    assert queue.delete(message, message.pop_receipt)
    assert queue.transactions["delete_message"] == 2
    assert queue.depth == 0


def test_workloads_place_their_arrivals() -> None:
    """Constant, bursts, idle and a day profile produce the arrivals they describe."""
    assert constant(2.0, 3.0).arrivals_s == (0.0, 0.5, 1.0, 1.5, 2.0, 2.5)
    assert bursts(3, 60.0, 120.0).arrivals_s == (0.0, 0.0, 0.0, 60.0, 60.0, 60.0)
    chained = bursts(1, 10.0, 10.0).then(idle(50.0)).then(constant(1.0, 2.0))
    assert (chained.arrivals_s, chained.duration_s) == ((0.0, 60.0, 61.0), 62.0)
    day = day_profile([(1, 2), (0, 1)])
    assert (day.arrivals_s, day.day_count) == ((0.0, 60.0, 90.0), 1.0)


def test_a_day_profile_is_read_from_a_minute_count_csv(tmp_path: Path) -> None:
    """The CSV needs the header minute,count; anything else is a clear configuration error."""
    good = tmp_path / "day.csv"
    good.write_text("minute,count\n600,4\n601,0\n", encoding="utf-8")
    assert read_day_profile(good).arrivals_s == (36_000.0, 36_015.0, 36_030.0, 36_045.0)
    bad = tmp_path / "bad.csv"
    bad.write_text("hour,n\n1,2\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="minute,count"):
        read_day_profile(bad)


def test_every_message_is_handled_and_latency_measured() -> None:
    """Each policy drains every burst; pickup latency percentiles are ordered."""
    for result in simulate(bursts(100, 600.0, 3_600.0), [naive_poller(), cloudqueue_defaults()]):
        assert (result.handled, result.left_in_queue) == (600, 0)
        assert result.transactions["delete_message"] == 600
        p50, p90, p99 = result.latency.p50_s, result.latency.p90_s, result.latency.p99_s
        assert p50 is not None
        assert p90 is not None
        assert p99 is not None
        assert 0 <= p50 <= p90 <= p99


def test_swapping_the_scaling_rule_changes_the_simulation() -> None:
    """The simulator drives the real scaler: a rule asking for 12 threads gives a peak of 12."""
    workload = bursts(400, 900.0, 3_600.0)
    default_rule, twelve_threads = simulate(
        workload,
        [
            cloudqueue_defaults(),
            cloudqueue_defaults(ScalingPolicy(rule=steps([(0, 1), (1, 12)]), rule_name="steps")),
        ],
    )
    assert default_rule.peak_threads == 13  # proportional(32): ceil(400 / 32)
    assert twelve_threads.peak_threads == 12
    assert twelve_threads.thread_seconds != default_rule.thread_seconds


def test_push_mode_scales_to_zero_and_wakes_on_each_burst() -> None:
    """With push, threads stop between bursts and start again when a burst is announced."""
    (result,) = simulate(bursts(50, 1_800.0, 7_200.0), [cloudqueue_push()])
    assert result.handled == 200
    assert min(sample.threads for sample in result.samples[1:]) == 0
    assert result.latency.p99_s is not None
    assert result.latency.p99_s < 5.0


def test_functions_like_polling_backs_off_to_a_minute() -> None:
    """An idle Functions-like poller makes about one get a minute once backed off."""
    (result,) = simulate(idle(3_600.0), [functions_like()])
    assert 60 <= result.transactions["get_messages"] <= 75


def test_fast_forwarding_idle_polls_changes_no_figure() -> None:
    """Counting a fixed-interval poller's empty gets at once gives what polling one by one does."""
    workload = bursts(20, 97.3, 1_000.0).then(idle(2_000.0))
    service = ServiceModel(request_latency_s=0.013)
    fast, slow = (
        PolicySimulation(naive_poller(3, 0.7), workload, service, fast_forward=flag).run()
        for flag in (True, False)
    )
    assert fast.transactions == slow.transactions
    assert fast.latency.p99_s == pytest.approx(slow.latency.p99_s)
    assert fast.latency.p50_s == pytest.approx(slow.latency.p50_s)
    assert [s.transactions for s in fast.samples] == [s.transactions for s in slow.samples]


def test_push_without_a_scaler_is_refused() -> None:
    """Push wakes a scaler; a policy without one cannot use it."""
    spec = naive_poller()
    with pytest.raises(ConfigurationError, match="push"):
        PolicySimulation(type(spec)(spec.name, push=True), constant(1.0, 10.0), ServiceModel())


def test_running_idle_polls_in_place_keeps_the_figures_of_polling_one_by_one() -> None:
    """Idle gets run in place cost what the event-by-event run costs, within 2 %."""
    workload = bursts(200, 900.0, 3_600.0)
    for spec in (fixed_pool(4), cloudqueue_defaults(), functions_like()):
        fast, slow = (
            PolicySimulation(spec, workload, ServiceModel(), fast_forward=flag).run()
            for flag in (True, False)
        )
        assert fast.total_transactions == pytest.approx(slow.total_transactions, rel=0.02)
        assert fast.thread_seconds == pytest.approx(slow.thread_seconds, rel=0.02)
        assert fast.handled == slow.handled == 800


def test_failed_deliveries_follow_the_real_retry_and_poison_policy() -> None:
    """Always failing: 5 deliveries each, 4 retry back-offs, then a poison put and a delete."""
    service = ServiceModel(failure_rate=1.0)
    (result,) = simulate(bursts(10, 3_600.0, 3_600.0), [cloudqueue_defaults()], service=service)
    assert (result.handled, result.failed, result.poisoned) == (0, 50, 10)
    assert result.transactions["update_visibility"] == 40
    assert result.transactions["put_message"] == 10
    assert result.transactions["delete_message"] == 10
    assert result.left_in_queue == 0


def test_sometimes_failing_messages_are_all_settled() -> None:
    """With a 30 % failure rate every message ends handled or poisoned, none lost."""
    service = ServiceModel(failure_rate=0.3)
    (result,) = simulate(bursts(100, 1_800.0, 3_600.0), [cloudqueue_defaults()], service=service)
    assert result.failed > 0
    assert result.handled + result.poisoned == 200
    assert result.transactions["update_visibility"] == result.failed - result.poisoned


def test_a_simulation_keeps_its_scaler_quiet_without_touching_the_logging_setup() -> None:
    """Thousands of simulated scaling events stay out of the log, and the process's structlog
    configuration stays as it is while the simulation runs (other threads keep logging)."""
    seen_during_run: list[object] = []

    def rule(load: ScalingInput) -> int:
        seen_during_run.append(structlog.get_config()["wrapper_class"])
        return math.ceil(load.depth / 32)

    with capture_logs() as captured:
        before = structlog.get_config()["wrapper_class"]
        simulate(bursts(200, 600.0, 1_800.0), [cloudqueue_defaults(ScalingPolicy(rule=rule))])
    assert seen_during_run
    assert all(wrapper is before for wrapper in seen_during_run)
    assert "scaled_up" not in [entry["event"] for entry in captured]


def test_a_storage_service_of_limited_rate_makes_a_burst_wait_for_it() -> None:
    """With storage answering 100 calls a second, 200 messages put at once take at least two
    seconds to delete, whatever the pool; without a limit the same burst drains far sooner."""
    burst = bursts(200, 600.0, 600.0)
    unlimited = ServiceModel(service_s=0.001, request_latency_s=0.005)
    limited = ServiceModel(service_s=0.001, request_latency_s=0.005, storage_calls_per_s=100.0)
    [fast] = simulate(burst, [cloudqueue_defaults()], service=unlimited)
    [slow] = simulate(burst, [cloudqueue_defaults()], service=limited)
    assert fast.handled == slow.handled == 200
    assert slow.longest_to_done_s is not None
    assert fast.longest_to_done_s is not None
    assert slow.longest_to_done_s >= 2.0
    assert fast.longest_to_done_s < 1.0


def test_a_limited_storage_service_answers_the_producers_puts_in_turn() -> None:
    """At 100 calls a second, 200 puts at once hold storage for two seconds before the first
    delete is answered: the burst's last delete comes after four seconds, not two."""
    burst = bursts(200, 600.0, 600.0)
    limited = ServiceModel(service_s=0.001, request_latency_s=0.005, storage_calls_per_s=100.0)
    [result] = simulate(burst, [cloudqueue_defaults()], service=limited)
    assert result.handled == 200
    assert result.longest_to_done_s is not None
    assert result.longest_to_done_s >= 4.0
    assert result.transactions.get("put_message", 0) == 0  # answered, never billed
