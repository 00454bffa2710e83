"""Recorded workload profiles: what a worker or producer writes, and what tune/replay read back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cloudqueue.listener import InMemoryQueueStorage
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel
from cloudqueue.listener.push.triggers import WorkDetected
from cloudqueue.listener.simulation.profile import (
    FLUSH_AFTER_S,
    ProfileRecorder,
    load_profile,
    read_profile,
)
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer

START = datetime(2026, 11, 25, 5, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, at: datetime) -> None:
        self.now_s = at.timestamp()

    def __call__(self) -> float:
        return self.now_s


def recorder_at(path: Path, clock: FakeClock) -> ProfileRecorder:
    return ProfileRecorder(path, clock=clock)


def test_arrivals_are_counted_by_the_second_they_were_put(tmp_path: Path) -> None:
    """Three puts in one second and one a minute later read back at those seconds."""
    clock = FakeClock(START)
    recorder = recorder_at(tmp_path / "p.jsonl", clock)
    for _ in range(3):
        recorder.arrived(START + timedelta(seconds=7))
    recorder.arrived(START + timedelta(seconds=67))
    recorder.close()

    profile = read_profile(tmp_path / "p.jsonl")
    assert profile.messages == 4
    assert profile.workload().arrivals_s == (7.0, 7.0, 7.0, 67.0)
    assert profile.duration_s == 120.0


def test_handling_times_failures_and_sizes_are_kept_as_histograms(tmp_path: Path) -> None:
    """Handling times become an empirical service model; failures a rate; sizes percentiles."""
    clock = FakeClock(START)
    recorder = recorder_at(tmp_path / "p.jsonl", clock)
    recorder.arrived(START)
    for _ in range(9):
        recorder.handled(0.030, size_bytes=200, failed=False)
    recorder.handled(3.0, size_bytes=40_000, failed=True)
    recorder.close()

    profile = read_profile(tmp_path / "p.jsonl")
    assert (profile.handled, profile.failed) == (9, 1)
    assert profile.failure_rate == pytest.approx(0.1)
    service = profile.service(request_latency_s=0.01)
    assert service is not None
    assert service.distribution == "empirical"
    assert 0.02 <= min(service.observed_s) <= 0.05  # the 20-50 ms bucket
    assert 2.0 <= max(service.observed_s) <= 5.0  # the 2-5 s bucket
    assert profile.size_percentile_bytes(50) == 256
    assert profile.size_percentile_bytes(100) == 49_152


def test_a_minute_is_written_once_it_is_old_and_the_rest_at_close(tmp_path: Path) -> None:
    """A long-running worker appends as it goes: an old minute is on disk before close."""
    path = tmp_path / "p.jsonl"
    clock = FakeClock(START)
    recorder = recorder_at(path, clock)
    recorder.arrived(START)
    clock.now_s += FLUSH_AFTER_S + 61
    recorder.arrived(datetime.fromtimestamp(clock.now_s, UTC))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("minute") for line in lines[1:]] == [int(START.timestamp()) // 60]
    recorder.close()
    assert read_profile(path).messages == 2


def test_a_restarted_worker_appends_to_the_same_profile(tmp_path: Path) -> None:
    """Two recorders on one file (a restart, or two processes): the counts add up."""
    path = tmp_path / "p.jsonl"
    for _ in range(2):
        recorder = recorder_at(path, FakeClock(START))
        recorder.arrived(START + timedelta(seconds=1))
        recorder.close()
    assert read_profile(path).arrivals == {int(START.timestamp()) + 1: 2}


def test_a_publisher_records_each_message_it_puts(tmp_path: Path) -> None:
    """A producer can record arrivals too (the put time, to the second)."""
    path = tmp_path / "p.jsonl"
    recorder = ProfileRecorder(path)
    storage = InMemoryQueueStorage()
    storage.create_queue("orders")
    publisher = Publisher(storage, "orders", str, recorder=recorder)
    publisher.publish_many(["a", "b", "c"])
    recorder.close()
    assert read_profile(path).messages == 3


def test_a_producer_announcing_its_work_records_its_puts_too(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A push-trigger producer (announcements on Redis) records each put as it announces it."""
    path = tmp_path / "p.jsonl"
    recorder = ProfileRecorder(path)
    storage = InMemoryQueueStorage()
    storage.create_queue("orders")
    channel = RedisTriggerChannel(redis_server.url)
    heard: list[WorkDetected] = []
    try:
        channel.events.subscribe(heard.append)
        assert channel.connected.wait(10)
        announcer = WorkAnnouncer(channel, account="devstoreaccount1")
        publisher = Publisher(storage, "orders", str, announcer=announcer, recorder=recorder)
        for item in ("a", "b", "c"):
            publisher.publish(item)
        eventually(lambda: len(heard) == 3, timeout_s=10)
    finally:
        channel.close()
        recorder.close()
    assert read_profile(path).messages == 3


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"minute": 1}', "not a profile line"),
        (
            '{"minute": 1, "arrivals": [[0, true]], "handled": 0, "failed": 0, '
            '"handler_ms": [], "size_bytes": []}',
            "not a profile line",
        ),
        (
            '{"minute": 1, "arrivals": [[60, 1]], "handled": 0, "failed": 0, '
            '"handler_ms": [], "size_bytes": []}',
            "not a profile line",
        ),
        ('{"cloudqueue_profile": 99}', "another format version"),
    ],
)
def test_a_damaged_profile_is_refused_naming_its_line(
    tmp_path: Path, line: str, problem: str
) -> None:
    """Bad input gets one clear error naming the file and line, never a traceback."""
    path = tmp_path / "p.jsonl"
    recorder = ProfileRecorder(path)
    recorder.arrived(START)
    recorder.close()
    with path.open("a") as file:
        file.write(line + "\n")
    with pytest.raises(ConfigurationError, match=problem) as raised:
        read_profile(path)
    assert f"{path}:3" in str(raised.value)


def test_a_hand_made_csv_day_profile_is_still_read(tmp_path: Path) -> None:
    """``minute,count`` CSV files, which simulate --profile always took, load as a day."""
    path = tmp_path / "day.csv"
    path.write_text("minute,count\n0,2\n60,1\n")
    loaded = load_profile(path)
    assert loaded.recorded is None
    assert len(loaded.workload.arrivals_s) == 3
    assert loaded.workload.duration_s == 86_400.0
