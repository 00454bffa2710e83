"""kill -9 inside a chain, on SQLite and Azurite through ``cloudqueue run``: the process
handling ``Price`` is killed right after a line's chained send to ``Total`` and before that
line's delete; once restarted, the line is priced again and its send is skipped, so every total
is exact and each line reaches ``Total`` once.

``Total`` runs in a process of its own that is not killed: a kill landing while it handles a
line, before its handled mark, would hand that line to it again (at least once, as promised),
which is not what this test is about."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest

from cloudqueue.listener import Publisher
from cloudqueue.listener.errors import QueueNotFoundError
from cloudqueue.listener.stores.connection import open_storage
from tests.support.azurite import AzuriteProcess
from tests.support.chain_workers import (
    LINES,
    ORDERS,
    Order,
    Price,
    Split,
    Total,
    events,
    expected_keys,
    expected_totals,
    priced,
    totals,
)
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import run_environment, start_run
from tests.support.written_lines import log_events

STEPS = [f"tests.support.chain_workers:{worker.__name__}" for worker in (Split, Price)]
TOTALS = [f"tests.support.chain_workers:{Total.__name__}"]


@pytest.fixture(params=["sqlite", "azure"])
def connection_string(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queues.db'}"
    azurite: AzuriteProcess = request.getfixturevalue("azurite_with_blobs")  # the key ledger
    return azurite.connection_string


def test_a_step_killed_after_its_send_sends_nothing_twice(
    connection_string: str, tmp_path: Path, processes: list[RunningProcess]
) -> None:
    """The first run dies by SIGKILL after one chained send; the second finishes the chain: the
    killed line was priced twice, totalled once, and every order's total is exact."""
    record_path = tmp_path / "record.txt"
    env = {
        **run_environment(connection_string, tmp_path),
        "PYTHONUNBUFFERED": "1",
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "2",
        "TEST_RECORD_PATH": str(record_path),
    }
    storage = open_storage(connection_string)
    for queue in (Split.queue_name, Price.queue_name, Total.queue_name):
        with contextlib.suppress(QueueNotFoundError):  # from another run on the session's Azurite
            storage.delete_queue(queue)
    storage.create_queue(Split.queue_name)
    Publisher(storage, Split.queue_name, Order, key="order").publish_many(ORDERS)

    def start(name: str, workers: list[str] = STEPS, **extra: str) -> RunningProcess:
        return start_run(processes, workers, {**env, **extra}, tmp_path / f"{name}.log")

    totaller = start("totals", TOTALS)
    eventually(lambda: log_events(tmp_path / "totals.log", "host_started"), timeout_s=60)
    victim = start("victim", TEST_KILL_MARKER=str(tmp_path / "killed"))
    assert victim.wait(120) == -signal.SIGKILL
    [killed] = events(record_path, "killed")
    survivor = start("survivor")
    eventually(lambda: log_events(tmp_path / "survivor.log", "host_started"), timeout_s=60)
    eventually(
        lambda: (
            len(events(record_path, "priced")) >= LINES
            and all(
                storage.approximate_message_count(queue) == 0
                for queue in (Split.queue_name, Price.queue_name, Total.queue_name)
            )
        ),
        timeout_s=120,
    )
    for process in (survivor, totaller):
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    storage.close()

    assert len(events(record_path, "pricing")) > LINES  # the killed line was priced again
    skipped = log_events(tmp_path / "survivor.log", "publish_skipped")
    assert killed[0] in {event["key"] for event in skipped}  # and its send found its mark
    sent = priced(record_path)
    assert len(sent) == LINES  # each line handled by Total once
    assert {key for _, _, key in sent} == expected_keys()
    assert totals(record_path) == expected_totals()
