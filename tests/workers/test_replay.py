"""``cloudqueue.workers.replay.replay``: what a replay measures, and what its prediction is told
of the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from cloudqueue.listener.simulation import ServiceModel, Workload
from cloudqueue.listener.simulation.report import Latency
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.workers.replay.replay import _Pickups, replay
from cloudqueue.workers.replay.replay_prediction import ReplayReport, service_met
from cloudqueue.workers.settings import BackoffSettings, CloudQueueSettings


def test_the_prediction_is_told_the_handling_and_storage_times_the_run_met() -> None:
    """The handlers' measured times (not the recording's), the mean delete (slow calls add up
    in a drain), the measured capacity, and no failures: a replay fails none."""
    recorded = ServiceModel(service_s=0.2, failure_rate=0.3)
    met = service_met(recorded, [0.004, 0.006], [0.002, 0.002, 0.011], 420.0)
    assert met.distribution == "empirical"
    assert met.observed_s == (0.004, 0.006)
    assert met.service_s == pytest.approx(0.005)
    assert met.request_latency_s == pytest.approx(0.005)
    assert met.storage_calls_per_s == 420.0
    assert met.failure_rate == 0.0


def test_without_handled_messages_the_recordings_times_stand() -> None:
    """Nothing handled (an empty stretch): the sped-up recording's handling times, no failures."""
    recorded = ServiceModel(service_s=0.2, failure_rate=0.3)
    met = service_met(recorded, [], [], None)
    assert met.service_s == 0.2
    assert met.failure_rate == 0.0
    assert met.request_latency_s == 0.0


def test_pickup_runs_from_the_put_returning_to_the_handler_starting() -> None:
    """A message taken before its put's answer reached the producer counts as picked up at once;
    a second delivery of the same message is not a pickup."""
    pickups = _Pickups(expected=2)
    pickups.picked(0, 10.25)
    pickups.picked(1, 10.95)
    pickups.picked(0, 12.0)  # redelivered
    assert sorted(pickups.latencies_s([10.0, 11.0])) == [0.0, 0.25]
    assert pickups.all_handled.is_set()


def test_visibility_updates_count_among_the_consumers_transactions() -> None:
    """Releases and retries update visibility: billed calls the settings decide."""
    no_pickup = Latency(None, None, None)
    report = ReplayReport(
        measured_transactions={"get_messages": 5, "delete_message": 4, "update_visibility": 2},
        predicted_transactions={"get_messages": 5, "delete_message": 4, "update_visibility": 1},
        measured_pickup=no_pickup,
        predicted_pickup=no_pickup,
        messages=4,
        handled=4,
        request_latency_s=0.0,
        storage_calls_per_s=None,
        producer_late_s=0.0,
        wall_s=1.0,
    )
    assert (report.measured_total, report.predicted_total) == (11, 10)


def test_a_replay_predicts_the_arrivals_as_they_were_put(tmp_path: Path) -> None:
    """On the embedded store: every message handled once, each put done at or after its
    recorded time, and the prediction deletes as many as were put."""
    connection = f"sqlite:///{tmp_path / 'q.db'}"
    settings = CloudQueueSettings(
        connection_string=SecretStr(connection),
        state_dir=tmp_path / "state",
        backoff=BackoffSettings(max_idle_s=0.2),
    )
    burst = Workload(tuple([0.0] * 20 + [30.0] * 10), 60.0)
    storage = open_storage(connection)
    try:
        report = replay(
            burst, ServiceModel(service_s=0.06), settings, storage, "replayed", speedup=60
        )
    finally:
        storage.close()
    assert report.handled == report.messages == 30
    assert report.producer_late_s >= 0.0
    assert report.measured_transactions["delete_message"] == 30
    assert report.predicted_transactions["delete_message"] == 30
    assert report.measured_pickup.p95_s is not None
    assert report.predicted_pickup.p95_s is not None
