"""A fleet-wide rate limit through a real Redis: shared across limiters, processes, and outages."""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
)
from cloudqueue.listener.limits.redis_limiter import (
    DEFAULT_MAX_WAITING,
    RedisRateLimiter,
    bucket_key,
)
from cloudqueue.listener.middleware.rate_limit import RateLimit
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.host.rate_limits import open_rate_limiter
from cloudqueue.workers.settings import CloudQueueSettings, load_settings
from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer
from tests.support.runs import start_cloudqueue
from tests.support.written_lines import log_events


@pytest.fixture
def key() -> str:
    return bucket_key("test", f"q{uuid.uuid4().hex[:12]}")


@pytest.fixture
def limiters(redis_server: RedisServer) -> Iterator[list[RedisRateLimiter]]:
    """Limiters made by a test, always closed."""
    made: list[RedisRateLimiter] = []
    yield made
    for limiter in made:
        limiter.close()


def test_limiters_on_one_key_share_one_bucket(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter]
) -> None:
    """After one limiter took ten turns at 10/s, another on the same key waits about a second."""
    first = RedisRateLimiter(redis_server.url, key, 10, burst=1)
    second = RedisRateLimiter(redis_server.url, key, 10, burst=1)
    elsewhere = RedisRateLimiter(redis_server.url, key + "-other", 10, burst=1)
    limiters.extend([first, second, elsewhere])
    for _ in range(10):
        first.reserve_s()
    assert second.reserve_s() > 0.8  # 1.0 s, less the few ms the ten calls took
    assert elsewhere.reserve_s() == 0.0


def test_a_redis_outage_falls_back_to_the_local_limit_and_recovers(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter]
) -> None:
    """Redis down: one warning, turns keep coming at the local pace; back up: the fleet's again."""
    clock = ManualClock()
    limiter = RedisRateLimiter(
        redis_server.url, key, 10, burst=1, clock=clock, sleeper=clock, retry_after_s=5
    )
    limiters.append(limiter)
    stop = threading.Event()
    limiter.acquire(stop)
    redis_server.stop()
    with capture_logs() as logs:
        waits = [limiter.acquire(stop) for _ in range(3)]
    assert waits == pytest.approx([0.0, 0.1, 0.1])
    assert [e["event"] for e in logs] == ["fleet_rate_limit_unavailable"]
    assert limiter.degraded
    redis_server.start()
    clock.advance(5)
    with capture_logs() as logs:
        limiter.acquire(stop)
    assert [e["event"] for e in logs] == ["fleet_rate_limit_restored"]
    assert not limiter.degraded


def forge(server: RedisServer, key: str, value: str) -> None:
    """Write the bucket as someone with access to the fleet's Redis might: a plain SET."""
    with server.client() as client:
        client.set(key, value)


def test_a_forged_far_future_bucket_is_ignored_and_reported(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter]
) -> None:
    """Finding 5: one SET far ahead must not hold the fleet back: the wait is refused, the bucket
    reset, and a warning names the key."""
    limiter = RedisRateLimiter(redis_server.url, key, 10, burst=1)
    limiters.append(limiter)
    forge(redis_server, key, str(10**18))
    with capture_logs() as logs:
        waits = [limiter.reserve_s() for _ in range(3)]
    assert waits[0] == 0.0  # a reset bucket: a new one's first turn
    assert waits[1:] == pytest.approx([0.1, 0.2], abs=0.05)  # then the limit's own pace
    warnings = [e for e in logs if e["event"] == "fleet_rate_limit_implausible"]
    assert [(e["key"], e["count"]) for e in warnings] == [(key, 1)]


@pytest.mark.parametrize("garbage", ["banana", "nan", "inf", "-inf", "1e400"])
def test_a_garbage_bucket_is_ignored_with_a_warning(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter], garbage: str
) -> None:
    """A value that is no time at all is treated as an empty bucket, and said so."""
    limiter = RedisRateLimiter(redis_server.url, key, 10, burst=1)
    limiters.append(limiter)
    forge(redis_server, key, garbage)
    with capture_logs() as logs:
        assert limiter.reserve_s() == 0.0
    assert [e["event"] for e in logs] == ["fleet_rate_limit_implausible"]


def test_a_backlog_within_the_fleets_waiting_bound_is_honoured(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter]
) -> None:
    """Ten turns queued ahead at 10/s is a real fleet's backlog, not a forgery: about 1 s."""
    ahead = RedisRateLimiter(redis_server.url, key, 10, burst=1, max_waiting=10)
    behind = RedisRateLimiter(redis_server.url, key, 10, burst=1, max_waiting=10)
    limiters.extend([ahead, behind])
    with capture_logs() as logs:
        for _ in range(10):
            ahead.reserve_s()
        assert behind.reserve_s() > 0.8
    assert logs == []


def test_the_fleets_waiting_bound_is_a_setting_with_the_limiters_default(
    redis_server: RedisServer,
) -> None:
    """rate_limit.fleet_max_waiting reaches the limiter; its default is the limiter's own."""
    settings = load_settings(
        triggers={"url": redis_server.url},
        rate_limit={"max_messages_per_s": 10, "fleet": True, "fleet_max_waiting": 3},
    )
    limiter = open_rate_limiter(settings, CloudQueueLocation("orders"))
    assert isinstance(limiter, RedisRateLimiter)
    try:
        assert limiter.max_waiting == 3
    finally:
        limiter.close()
    assert CloudQueueSettings().rate_limit.fleet_max_waiting == DEFAULT_MAX_WAITING


def test_repeated_forgeries_warn_once_a_minute(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter]
) -> None:
    """Someone rewriting the key before every turn: every turn is taken, one warning a minute."""
    clock = ManualClock()
    limiter = RedisRateLimiter(redis_server.url, key, 10, burst=1, clock=clock, sleeper=clock)
    limiters.append(limiter)
    with capture_logs() as logs:
        for _ in range(5):
            forge(redis_server, key, str(10**18))
            assert limiter.reserve_s() == 0.0
        clock.advance(60)
        forge(redis_server, key, str(10**18))
        limiter.reserve_s()
    assert [e["count"] for e in logs if e["event"] == "fleet_rate_limit_implausible"] == [1, 5]


def test_a_listener_keeps_consuming_when_the_fleets_redis_is_down(
    redis_server: RedisServer, key: str, limiters: list[RedisRateLimiter], queue_name: str
) -> None:
    """No Redis at all: every message is still handled, under the local limit, with a warning."""
    redis_server.stop()
    limiter = RedisRateLimiter(redis_server.url, key, 1_000)
    limiters.append(limiter)
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    codec = MessageCodec(dict)
    for n in range(50):
        storage.put_message(queue_name, codec.encode({"n": n}))
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), dict, middleware=[RateLimit(limiter)]
    )
    listener.subscribe(lambda _: None)
    with capture_logs() as logs:
        listener.start_listener(2)
        try:
            eventually(lambda: listener.messages_processed == 50)
        finally:
            listener.stop(timeout_s=5)
    assert limiter.degraded
    assert [e["event"] for e in logs].count("fleet_rate_limit_unavailable") == 1


# -- two processes, one fleet limit --------------------------------------------------------------

WORKER = "tests.support.workers:RecordingWorker"
FLEET_LIMIT_PER_S = 400
MESSAGES = 2_000


def handled_times(log_path: Path) -> dict[int, list[datetime]]:
    """When each process (by pid) logged `handled`, from its JSON log lines."""
    times: dict[int, list[datetime]] = {}
    for event in log_events(log_path, "handled"):
        stamp = datetime.fromisoformat(event["timestamp"])
        times.setdefault(int(event["pid"]), []).append(stamp)
    return times


def test_two_processes_sharing_a_fleet_limit_hold_it_together(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """`cloudqueue run --processes 2` with a 400/s fleet limit: both work, together <= 440/s."""
    queue = f"work-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_TRIGGERS__URL": redis_server.url,
        "CLOUDQUEUE_RATE_LIMIT__MAX_MESSAGES_PER_S": str(FLEET_LIMIT_PER_S),
        "CLOUDQUEUE_RATE_LIMIT__FLEET": "true",
        "CLOUDQUEUE_LISTENER__DEQUEUE_BATCH_SIZE": "8",
        "TEST_QUEUE": queue,
    }
    items = "\n".join(json.dumps({"n": n}) for n in range(MESSAGES))
    ok("enqueue", queue, env=env, stdin=items)
    log_path = tmp_path / "run.log"
    process = start_cloudqueue(["run", WORKER, "--processes", "2"], env=env, log_path=log_path)
    try:
        eventually(
            lambda: sum(map(len, handled_times(log_path).values())) == MESSAGES, timeout_s=120
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    by_process = handled_times(log_path)
    assert len(by_process) == 2
    stamps = sorted(stamp for times in by_process.values() for stamp in times)
    rate_per_s = (len(stamps) - 1) / (stamps[-1] - stamps[0]).total_seconds()
    assert rate_per_s <= FLEET_LIMIT_PER_S * 1.10
