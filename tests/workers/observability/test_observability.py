"""Probe decisions and metric feeds, on a manual clock and the in-memory store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.consumer.pool_control import ListenerLoad
from cloudqueue.listener.errors import (
    MessageNotFoundError,
    QueueNotFoundError,
    TransientStorageError,
)
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.metered import MeteredPayloadStore, MeteredStorage, blob_counts
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import CloudQueueSettings
from cloudqueue.workers.host.process_observability import ProcessObservability
from cloudqueue.workers.observability.health import (
    Heartbeats,
    ProcessProbes,
    Reachability,
    WatchedPool,
)
from cloudqueue.workers.observability.metrics import WorkerMetrics
from cloudqueue.workers.observability.observed import ObservedHandling, ObservedStorage, rule_target
from cloudqueue.workers.observability.server import ObservabilityServer, observability_app
from tests.support.event_loop_consumer import KINDS, start_either
from tests.support.polling import eventually
from tests.support.scrape import get


def on_thread(name: str, action: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=action, name=name)
    thread.start()
    thread.join()
    return thread


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def probes(clock: ManualClock) -> ProcessProbes:
    return ProcessProbes(
        stall_after_s=10, heartbeats=Heartbeats(clock), reachability=Reachability()
    )


def test_a_thread_silent_in_a_call_past_the_bound_is_wedged(clock: ManualClock) -> None:
    """A dequeue thread whose last sign is older than the bound is named, in a call or between
    calls; a handler thread only while it is in a call (between messages it waits on purpose)."""
    heartbeats = Heartbeats(clock)
    release = threading.Event()

    def enter_then_block() -> None:
        heartbeats.enter()
        release.wait()

    def call_then_wait_for_work() -> None:
        heartbeats.enter()
        heartbeats.enter()  # a storage call inside the handler call
        heartbeats.leave()
        heartbeats.leave()
        release.wait()

    threads = [
        threading.Thread(target=enter_then_block, name="cloudqueue:work:1"),
        threading.Thread(target=enter_then_block, name="cloudqueue:work:handler:1"),
        threading.Thread(target=call_then_wait_for_work, name="cloudqueue:work:handler:2"),
        threading.Thread(target=call_then_wait_for_work, name="cloudqueue:work:2"),
    ]
    for thread in threads:
        thread.start()
    on_thread("some-other-thread", heartbeats.enter)  # not the listener's: never watched
    expected = ["cloudqueue:work:1", "cloudqueue:work:2", "cloudqueue:work:handler:1"]
    try:
        eventually(lambda: heartbeats.silent(-1) == expected)
        clock.advance(10)
        assert heartbeats.silent(10) == []
        clock.advance(0.5)
        assert heartbeats.silent(10) == expected
    finally:
        release.set()
        for thread in threads:
            thread.join()
    assert heartbeats.silent(10) == []  # a thread that has ended is forgotten


def test_a_handler_thread_is_watched_again_in_its_next_call(clock: ManualClock) -> None:
    """Between messages a handler thread is not named however long it waits; its next call is
    watched from its start, as its first was."""
    heartbeats = Heartbeats(clock)
    waiting, second_call, release = threading.Event(), threading.Event(), threading.Event()

    def two_messages() -> None:
        heartbeats.enter()
        heartbeats.leave()
        waiting.set()
        second_call.wait()
        heartbeats.enter()
        release.wait()
        heartbeats.leave()

    thread = threading.Thread(target=two_messages, name="cloudqueue:work:handler:1")
    thread.start()
    try:
        assert waiting.wait(5)
        clock.advance(60)
        assert heartbeats.silent(10) == []  # waiting for work on purpose
        second_call.set()
        eventually(lambda: heartbeats.silent(-1) == ["cloudqueue:work:handler:1"])
        assert heartbeats.silent(10) == []  # its beat is the call's start, not the first call's
        clock.advance(10.5)
        assert heartbeats.silent(10) == ["cloudqueue:work:handler:1"]
    finally:
        second_call.set()
        release.set()
        thread.join()


def test_readiness_is_red_until_started_while_storage_fails_and_once_draining(
    probes: ProcessProbes,
) -> None:
    """Each reason shows on its own; a message-level error is not an outage."""
    assert probes.readiness().reasons == ("starting",)
    probes.started = True
    assert probes.readiness().ok
    probes.reachability.failed(MessageNotFoundError("gone"))
    assert probes.readiness().ok
    probes.reachability.failed(TransientStorageError("connection refused"))
    assert probes.readiness().reasons == ("storage unreachable: TransientStorageError",)
    probes.reachability.succeeded()
    assert probes.readiness().ok
    probes.draining = True
    assert probes.readiness().reasons == ("draining",)


def test_liveness_is_red_when_a_pool_has_fewer_threads_than_its_floor(
    probes: ProcessProbes,
) -> None:
    """A pool below min_threads is dead once started, but not while draining."""
    alive = [1]
    probes.pools = [WatchedPool("work", lambda: alive[0], min_threads=1)]
    probes.started = True
    assert probes.liveness().ok
    alive[0] = 0
    assert probes.liveness().reasons == ("dead: work has fewer than 1 dequeue threads",)
    probes.draining = True
    assert probes.liveness().ok


def test_storage_calls_are_counted_by_queue_and_operation_and_failures_mark_an_outage(
    clock: ManualClock,
) -> None:
    """The metered storage's counts reach the metrics; a failing call marks an outage."""
    metrics, reachability = WorkerMetrics(), Reachability()
    metered = MeteredStorage(InMemoryQueueStorage())
    storage = ObservedStorage(metered, Heartbeats(clock), reachability)
    storage.create_queue("work")
    storage.put_message("work", "x")
    assert storage.approximate_message_count("work") == 1
    with pytest.raises(QueueNotFoundError):
        storage.approximate_message_count("missing")
    assert reachability.outage == "QueueNotFoundError"
    storage.get_messages("work", max_messages=1, visibility_timeout_s=30)
    assert reachability.outage is None
    metrics.sample_storage(metered.counts_by_queue_and_operation())
    storage.put_message("work", "y")
    metrics.sample_storage(metered.counts_by_queue_and_operation())
    count = metrics.registry.get_sample_value
    calls = "cloudqueue_storage_operations_total"
    assert count(calls, {"queue": "work", "operation": "put_message"}) == 2
    assert count(calls, {"queue": "work", "operation": "approximate_message_count"}) == 1
    assert count(calls, {"queue": "missing", "operation": "approximate_message_count"}) == 1


def test_the_rule_target_grows_at_once_and_shrinks_to_the_rule() -> None:
    """The target gauge shows where the scaler steers: up to the backlog, down to the rule."""
    policy = ScalingPolicy(min_threads=1, max_threads=8)
    assert rule_target(ListenerLoad(200, 0, 2, None), policy) > 2
    assert rule_target(ListenerLoad(0, 0, 4, None), policy) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_listener_run_fills_the_handle_and_pickup_histograms_and_the_counters(
    kind: str, clock: ManualClock
) -> None:
    """Handled items are timed by either consumer (the event-loop one steps the timing on its
    loop); sampled counters follow the threaded listener's own."""
    storage = InMemoryQueueStorage()
    storage.create_queue("work")
    for n in range(3):
        storage.put_message("work", f'{{"n": {n}}}')
    metrics = WorkerMetrics()
    timing = ObservedHandling("work", "proportional", metrics, Heartbeats(clock))
    listener = start_either(kind, storage, "work", lambda item: None, middleware=[timing])
    try:
        eventually(lambda: listener.messages_processed == 3)
    finally:
        listener.stop(5)
    count = metrics.registry.get_sample_value
    assert count("cloudqueue_handle_seconds_count", {"queue": "work"}) == 3
    assert count("cloudqueue_pickup_seconds_count", {"queue": "work"}) == 3
    if isinstance(listener, CloudQueueListener):  # its counters, as the process samples them
        metrics.sample_counters("work", listener.counters_of("work"))
        processed = {"queue": "work", "outcome": "processed"}
        assert count("cloudqueue_messages_total", processed) == 3


@pytest.fixture
def served(probes: ProcessProbes) -> Iterator[int]:
    metrics = WorkerMetrics()
    metrics.messages.labels("work", "processed").inc(2)
    server = ObservabilityServer(
        observability_app(metrics.registry, probes), host="127.0.0.1", port=0
    ).start()
    yield server.port
    server.close()


def test_the_server_answers_metrics_and_each_probe_with_its_status(
    served: int, probes: ProcessProbes
) -> None:
    """/metrics parses; a red probe answers 503 with its reasons; unknown paths 404."""
    status, body = get(served, "/metrics")
    names = {family.name for family in text_string_to_metric_families(body)}
    assert status == 200
    assert "cloudqueue_messages" in names
    assert get(served, "/readyz") == (503, "starting\n")
    probes.started = True
    assert get(served, "/readyz") == (200, "ok\n")
    assert get(served, "/healthz") == (200, "ok\n")
    assert get(served, "/nothing")[0] == 404


def test_blob_calls_billed_beside_the_queue_calls_reach_the_storage_operations_metric() -> None:
    """A large payload's blob calls are billed transactions too: sampled under the operation
    payload_blob (the key ledger's under key_record_blob), by the payload's queue."""
    observability = ProcessObservability(CloudQueueSettings(), serve=False)
    payloads = MeteredPayloadStore(InMemoryPayloadStore())
    observability.count_blobs_from(blob_counts(payloads, None))
    name = "work/" + "0" * 32
    payloads.put(name, b"x")
    observability.sample()
    payloads.get(name)
    payloads.delete(name)
    observability.sample()
    count = observability.metrics.registry.get_sample_value
    calls = "cloudqueue_storage_operations_total"
    assert count(calls, {"queue": "work", "operation": "payload_blob"}) == 3
