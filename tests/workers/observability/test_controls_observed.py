"""What an operator sees of the handler controls: the stuck threads (a gauge, a status line,
readiness, a recycled child of ``cloudqueue run --processes``) and each control's decisions
counted in ``cloudqueue_control_decisions``."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudqueue import BatchFailed, CloudQueueSettings, QueueWorker
from cloudqueue.listener import InMemoryQueueStorage, Retry
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import WorkerHost
from cloudqueue.workers.cli.status_text import worker_line
from cloudqueue.workers.host.child_slot import CHILD_SLOT_VARIABLE, RECYCLE_EXIT_CODE
from cloudqueue.workers.host.live_state import LiveState, QueueLiveState, utc_now
from cloudqueue.workers.observability.health import (
    Heartbeats,
    ProcessProbes,
    Reachability,
    WatchedPool,
)
from cloudqueue.workers.views.fleet import WorkerView
from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.runs import Runs, run_environment

QUEUE = "controls"
RELEASE = threading.Event()


class Mixed(QueueWorker[dict[str, Any]]):
    """Hangs on ``hang`` (until RELEASE), gives up on ``bad``, handles the rest."""

    queue_name: ClassVar[str] = QUEUE
    retry = Retry(give_up_on=(ValueError,))

    def handle(self, item: dict[str, Any]) -> None:
        if item.get("hang"):
            RELEASE.wait()
        if item.get("bad"):
            raise ValueError("bad item")


def settings(state_dir: Path, **listener: Any) -> CloudQueueSettings:
    return CloudQueueSettings.model_validate(
        {
            "shutdown_grace_s": 5,
            "state_dir": str(state_dir),
            "observability": {"metrics_port": 0},
            "listener": {"time_limit_s": 0.3, "max_stuck_threads": 1, **listener},
            "poison": {"max_dequeue_count": 20},
        }
    )


@pytest.fixture
def storage() -> Iterator[InMemoryQueueStorage]:
    RELEASE.clear()
    made = InMemoryQueueStorage()
    made.create_queue(QUEUE)
    yield made
    RELEASE.set()


def put(storage: InMemoryQueueStorage, *items: dict[str, Any]) -> None:
    for item in items:
        storage.put_message(QUEUE, json.dumps(item))


def test_stuck_threads_are_a_gauge_and_fail_readiness_past_the_bound(
    storage: InMemoryQueueStorage, tmp_path: Path
) -> None:
    """Two handlers stuck past a 0.3 s limit with max_stuck_threads = 1: the gauge shows them,
    /readyz names them, /healthz stays green; the decisions are counted by kind."""
    host = WorkerHost([Mixed], settings(tmp_path / "run"), storage=storage)
    assert host.observability is not None
    observability, metrics = host.observability, host.observability.metrics.registry
    host.start()
    try:
        put(storage, {"hang": True}, {"hang": True}, {"bad": True}, {})
        (listener,) = host.listeners
        eventually(lambda: listener.stuck_threads >= 2, timeout_s=20)
        eventually(lambda: listener.messages_poisoned == 1)
        observability.sample()
        readiness = observability.probes.readiness()
        assert not readiness.ok
        assert any("stuck threads: controls has" in reason for reason in readiness.reasons)
        assert observability.probes.liveness().ok
        assert (metrics.get_sample_value("cloudqueue_stuck_threads", {"queue": QUEUE}) or 0) >= 2

        def decisions(kind: str) -> float:
            labels = {"queue": QUEUE, "decision": kind}
            return metrics.get_sample_value("cloudqueue_control_decisions_total", labels) or 0

        # Counted as each settlement ends, a moment after the counts above move.
        eventually(lambda: decisions("time_limit") >= 2 and decisions("give_up") == 1)
        assert decisions("batch_partial") == 0
        state = QueueLiveState.of(listener)
        assert state.stuck_threads >= 2
    finally:
        RELEASE.set()
        assert host.stop()


def test_a_supervisors_child_past_the_bound_drains_and_asks_to_be_recycled(
    storage: InMemoryQueueStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a supervisor (CLOUDQUEUE_CHILD set), a host with more stuck threads than the bound
    stops and returns the exit code that has it replaced at once."""
    monkeypatch.setenv(CHILD_SLOT_VARIABLE, "0")
    host = WorkerHost([Mixed], settings(tmp_path / "run"), storage=storage)
    put(storage, {"hang": True}, {"hang": True})
    assert host.run() == RECYCLE_EXIT_CODE
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_the_status_line_says_how_many_threads_are_stuck() -> None:
    """A worker with stuck threads says so on its line of `cloudqueue status`; others do not."""
    stuck = QueueLiveState(QUEUE, 1, 1, 5, 2, 0, 0, 2, 3.0, stuck_threads=3)
    state = LiveState(1, "host", "app:Mixed", None, utc_now(), (stuck,))
    assert "3 thread(s) stuck past the time limit" in worker_line(
        WorkerView(state, stuck), rates=False
    )
    calm = QueueLiveState(QUEUE, 1, 1, 5, 2, 0, 0, 2, 3.0)
    assert "stuck" not in worker_line(WorkerView(state, calm), rates=False)


class PartBatches(QueueWorker[int]):
    queue_name: ClassVar[str] = QUEUE
    settings: ClassVar[dict[str, dict[str, Any]]] = {"batch": {"max_items": 4, "max_wait_s": 0.1}}
    failed: ClassVar[set[int]] = set()

    def handle_batch(self, items: list[int]) -> None:
        first = [p for p, item in enumerate(items) if item == 0 and item not in self.failed]
        if first:
            self.failed.add(0)
            raise BatchFailed(first)


def test_a_partial_batch_is_counted_per_message_it_retried(
    storage: InMemoryQueueStorage, tmp_path: Path
) -> None:
    """BatchFailed naming one item counts one batch_partial decision."""
    host = WorkerHost([PartBatches], settings(tmp_path / "run", time_limit_s=0), storage=storage)
    assert host.observability is not None
    metrics = host.observability.metrics.registry
    for n in range(4):
        storage.put_message(QUEUE, str(n))
    host.start()
    try:
        eventually(lambda: storage.approximate_message_count(QUEUE) == 0, timeout_s=20)
    finally:
        assert host.stop()
    labels = {"queue": QUEUE, "decision": "batch_partial"}
    assert metrics.get_sample_value("cloudqueue_control_decisions_total", labels) == 1


def test_cloudqueue_run_recycles_a_child_with_too_many_stuck_threads(tmp_path: Path) -> None:
    """--processes 2, handlers blocked in time.sleep past a 0.5 s limit, max_stuck_threads = 1:
    a child drains and exits to be replaced, and the supervisor starts a new one at once."""
    env = run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)
    items = "\n".join(json.dumps({"n": n, "delay_s": 3600}) for n in range(4))
    ok("enqueue", env["TEST_QUEUE"], env=env, stdin=items)
    runs = Runs(tmp_path)
    run = runs.start(
        env,
        "--processes",
        "2",
        "--set",
        "listener.time_limit_s=0.5",
        "--set",
        "listener.max_stuck_threads=1",
        "--set",
        "listener.retry_delay_s=0",
        "--set",
        "poison.max_dequeue_count=50",
    )
    try:
        eventually(lambda: run.events("child_recycled"), timeout_s=60)
        assert run.events("stuck_threads_recycling")
        eventually(lambda: len(run.events("child_started")) >= 3, timeout_s=30)
        run.process.send_signal(signal.SIGTERM)
        run.process.wait(60)
    finally:
        runs.kill_all()


def test_a_thread_stuck_past_its_time_limit_is_not_wedged() -> None:
    """Liveness leaves a handler thread the time limit gave up on to readiness: silent past
    stall_after_s, it is named wedged only while it is not counted as stuck."""
    clock = ManualClock()
    heartbeats, release, beaten = Heartbeats(clock), threading.Event(), threading.Event()

    def enter_then_hang() -> None:
        heartbeats.enter()  # its handler call starts, and never ends
        beaten.set()
        release.wait()

    thread = threading.Thread(target=enter_then_hang, name=f"cloudqueue:{QUEUE}:handler:1")
    thread.start()
    try:
        beaten.wait(10)
        stuck: set[int] = set()
        pool = WatchedPool(QUEUE, lambda: 1, 1, stuck_thread_ids=lambda: frozenset(stuck))
        probes = ProcessProbes(10, heartbeats, Reachability(), [pool])
        clock.advance(11)
        assert probes.liveness().reasons == (f"wedged: cloudqueue:{QUEUE}:handler:1",)
        assert thread.ident is not None
        stuck.add(thread.ident)
        assert probes.liveness().ok
    finally:
        release.set()
        thread.join()
