"""Push triggers end to end through the CLI: a worker at zero threads, `enqueue`, `trigger`."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.push.redis_triggers import DEFAULT_CHANNEL, RedisTriggerChannel
from cloudqueue.listener.push.triggers import account_of
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.redis_server import RedisServer
from tests.support.runs import Runs, run_environment, start_cloudqueue
from tests.support.written_lines import log_events

QUEUE = "pushed"


def test_a_worker_at_zero_threads_is_woken_by_enqueue_and_by_a_manual_trigger(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With triggers, the idle worker stops its last thread; enqueue (which announces the work)
    and `cloudqueue trigger` each wake it to handle what is waiting."""
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_TRIGGERS__URL": redis_server.url,
        "CLOUDQUEUE_SCALING__MIN_THREADS": "0",
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "TEST_QUEUE": QUEUE,
    }
    log_path = tmp_path / "worker.log"
    worker = start_cloudqueue(
        ["run", "tests.support.workers:RecordingWorker"], env=env, log_path=log_path
    )
    try:
        eventually(lambda: log_events(log_path, "dequeue_thread_stopped"), timeout_s=30)
        ok("enqueue", QUEUE, '{"n": 1}', env=env)
        eventually(lambda: [e["n"] for e in log_events(log_path, "handled")] == [1], timeout_s=30)
        # Enqueued with no trigger channel configured, then announced by hand.
        eventually(lambda: len(log_events(log_path, "dequeue_thread_stopped")) >= 2, timeout_s=30)
        quiet = {key: value for key, value in env.items() if key != "CLOUDQUEUE_TRIGGERS__URL"}
        quiet["CLOUDQUEUE_SCALING__MIN_THREADS"] = "1"
        ok("enqueue", QUEUE, '{"n": 2}', env=quiet)
        assert "trigger sent" in ok("trigger", QUEUE, env=env)
        eventually(
            lambda: [e["n"] for e in log_events(log_path, "handled")] == [1, 2], timeout_s=30
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def test_malformed_triggers_leave_a_worker_at_zero_threads_wakeable(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """After an infinite size, 20,000 brackets and invalid UTF-8 on the channel, the next five
    items wake the idle worker at once (not after the watchdog's 300 s), and nothing logs a
    traceback."""
    database = tmp_path / "q.db"
    env = {
        **run_environment(f"sqlite:///{database}", tmp_path),
        "CLOUDQUEUE_TRIGGERS__URL": redis_server.url,
        "CLOUDQUEUE_SCALING__MIN_THREADS": "0",
    }
    runs = Runs(tmp_path)
    run = runs.start(env)
    channel = RedisTriggerChannel(redis_server.url)
    storage = SqliteQueueStorage(database)
    try:
        eventually(lambda: run.events("dequeue_thread_stopped"), timeout_s=30)
        with redis_server.client() as hostile:
            for raw in (
                b'{"account": "a", "queue_name": "q", "payload_size": Infinity}',
                b"[" * 20_000,
                b'{"account": "\xff\xfe", "queue_name": "q"}',
            ):
                hostile.publish(DEFAULT_CHANNEL, raw)
        announcer = WorkAnnouncer(channel, account=account_of(env["CLOUDQUEUE_CONNECTION_STRING"]))
        publisher = Publisher(storage, env["TEST_QUEUE"], dict, announcer=announcer)
        sent_at = time.monotonic()
        publisher.publish_many([{"n": n} for n in range(5)])
        eventually(lambda: run.handled() == set(range(5)), timeout_s=10)
        print(f"5 of 5 items handled {time.monotonic() - sent_at:.1f} s after the bad triggers")
        assert "Traceback" not in run.log_path.read_text(errors="replace")
    finally:
        channel.close()
        storage.close()
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(30) == 0
