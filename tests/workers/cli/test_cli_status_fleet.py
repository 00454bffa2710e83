"""`cloudqueue status`: the queue-level facts a fleet operator asks first, on the embedded store.

Visible and in-flight depth, the oldest waiting message's age (one peek), and each worker's own
estimates of its storage transactions and cost from the live state.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers.cli import cli
from cloudqueue.workers.cli.status_text import describe_age
from cloudqueue.workers.host.live_state import LiveState, QueueLiveState

QUEUE = "invoices"
IDLE = QueueLiveState(QUEUE, 1, 1, 0, 0, 0, 0, 0, None)


def store(tmp_path: Path, seconds_from_now: float = 0) -> SqliteQueueStorage:
    """The test's queue database, as seen from a moment ``seconds_from_now`` away."""
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=seconds_from_now))
    return SqliteQueueStorage(tmp_path / "queues.db", clock=clock)


def publish_state(state_dir: Path, listener: QueueLiveState, *, pid: int | None = None) -> None:
    """Write the live-state file a running worker on this host would."""
    state = LiveState(
        pid or os.getpid(),
        socket.gethostname(),
        "app:Billing",
        None,
        datetime.now(UTC),
        (listener,),
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / f"{state.host}-{state.pid}.json").write_text(json.dumps(state.to_json()))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    with closing(store(tmp_path)) as queues:
        queues.create_queue(QUEUE)
    return {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }


def status(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, ["status", QUEUE, *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_depth_is_split_into_visible_and_in_flight_with_the_oldest_waiting_age(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Three messages put 90 s ago, one of them held by a consumer: 2 visible (exact), 1 in
    flight, the oldest waiting for about 90 s."""
    with closing(store(tmp_path, -90)) as queues:
        for number in range(3):
            queues.put_message(QUEUE, str(number))
    with closing(store(tmp_path)) as queues:
        queues.get_messages(QUEUE, max_messages=1, visibility_timeout_s=300)
    report = json.loads(status(env, "--json"))
    assert (report["depth"], report["visible"], report["in_flight"]) == (3, 2, 1)
    assert report["visible_exact"] is True
    assert 89 <= report["oldest_age_s"] < 200
    assert "  2 visible, 1 in flight or delayed; oldest waiting 9" in status(env)


def test_a_message_delayed_beyond_7_days_seen_between_hops_is_not_due_and_not_waiting(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Put 7 days ago with a 30-day delay, visible until a worker hides it again: counted as not
    due yet, and the oldest waiting age is the other message's, 90 s."""
    week_ago = ManualClock(datetime.now(UTC) - timedelta(days=7, seconds=1))
    with closing(SqliteQueueStorage(tmp_path / "queues.db", clock=week_ago)) as queues:
        Publisher(queues, QUEUE, str, clock=week_ago).publish("renew", delay=timedelta(days=30))
    with closing(store(tmp_path, -90)) as queues:
        queues.put_message(QUEUE, "now")
    report = json.loads(status(env, "--json"))
    assert (report["visible"], report["delayed"], report["in_flight"]) == (2, 1, 0)
    assert 89 <= report["oldest_age_s"] < 200
    assert "  2 visible (1 not due yet), 0 in flight or delayed; oldest waiting 9" in status(env)


def test_an_empty_queue_has_no_oldest_message(env: dict[str, str]) -> None:
    """Nothing visible: no age, and the line says none is waiting."""
    report = json.loads(status(env, "--json"))
    assert (report["visible"], report["in_flight"], report["oldest_age_s"]) == (0, 0, None)
    assert "  0 visible, 0 in flight or delayed; none waiting" in status(env)


def test_past_one_peek_the_visible_count_is_the_depth_less_what_workers_hold(
    env: dict[str, str], tmp_path: Path
) -> None:
    """40 messages, 4 held by a worker that says so: ~36 visible (an estimate), 4 in flight."""
    with closing(store(tmp_path)) as queues:
        for number in range(40):
            queues.put_message(QUEUE, str(number))
        queues.get_messages(QUEUE, max_messages=4, visibility_timeout_s=300)
    publish_state(tmp_path / "run", replace(IDLE, in_flight=4))
    report = json.loads(status(env, "--json"))
    assert (report["visible"], report["visible_exact"], report["in_flight"]) == (36, False, 4)
    assert "  ~36 visible, 4 in flight or delayed" in status(env)


def test_each_workers_own_transaction_and_cost_estimates_are_shown_and_totalled(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Live-state estimates appear on the worker's line and, summed, in the JSON totals."""
    estimated = replace(
        IDLE, storage_transactions_per_hour=2400.0, projected_cost_per_month_usd=0.5
    )
    publish_state(tmp_path / "run", estimated)
    text = status(env)
    assert "; 2,400 transactions/h (its estimate); $0.50/month projected" in text
    report = json.loads(status(env, "--json"))
    assert report["totals"] == {
        "threads": 1,
        "storage_transactions_per_hour": 2400.0,
        "projected_cost_per_month_usd": 0.5,
    }
    assert report["workers"][0]["storage_transactions_per_hour"] == 2400.0


def test_a_worker_without_estimates_leaves_the_totals_unknown(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A process that publishes no estimate (an older version's file) reads as None: the
    totals are unknown rather than too low, and its line shows no estimate."""
    publish_state(tmp_path / "run", IDLE)
    older = json.loads(next((tmp_path / "run").glob("*.json")).read_text())
    for queue in older["queues"]:
        del queue["storage_transactions_per_hour"], queue["projected_cost_per_month_usd"]
    next((tmp_path / "run").glob("*.json")).write_text(json.dumps(older))
    report = json.loads(status(env, "--json"))
    assert report["totals"]["storage_transactions_per_hour"] is None
    assert report["workers"][0]["projected_cost_per_month_usd"] is None
    assert "transactions/h" not in status(env)


def test_a_batched_workers_line_counts_items_beside_messages_and_its_unknown_cost_as_a_dash(
    env: dict[str, str], tmp_path: Path
) -> None:
    """200 items in one batched message read "processed 200 items (1 message)"; no cost yet: —."""
    publish_state(tmp_path / "run", replace(IDLE, processed=1, items_processed=200))
    text = status(env)
    assert "processed 200 items (1 message)," in text
    assert "; cost estimated once it has counted its calls for 10 min" in text
    assert json.loads(status(env, "--json"))["workers"][0]["items_processed"] == 200


@pytest.mark.parametrize(
    ("processed", "shown"),
    [(2, "rate shown after 20 messages (2 so far)"), (20, "106.9 msg/s per thread")],
)
def test_a_workers_rate_is_shown_once_it_has_handled_enough_messages(
    env: dict[str, str], tmp_path: Path, processed: int, shown: str
) -> None:
    """After two messages the measured rate means nothing yet: the line says when it will show."""
    publish_state(tmp_path / "run", replace(IDLE, processed=processed, per_thread_rate_per_s=106.9))
    assert f"; {shown};" in status(env)


def test_a_workers_line_says_when_its_cost_estimate_will_appear(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Three minutes into its ten-minute count, the cost is said to come in about 7 minutes."""
    publish_state(tmp_path / "run", replace(IDLE, cost_counted_s=180.0))
    assert "; cost estimated in about 7 min (once it has counted its calls for 10 min)" in status(
        env
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(45, "45 s"), (600, "10 min"), (5 * 3600, "5 h"), (3 * 86400, "3 d")]
)
def test_ages_read_at_a_persons_precision(seconds: float, text: str) -> None:
    """Seconds up to two minutes, then minutes, hours, days."""
    assert describe_age(seconds) == text
