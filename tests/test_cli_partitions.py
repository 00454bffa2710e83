"""The command line on a partitioned queue, in process (click's runner) on a SQLite store, with
a second SQLite file standing for a second account."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from listener.messages.poison import poison_message, poison_queue_name
from listener.stores.partition_names import partition_for_key
from listener.stores.partitioned import PartitionedQueueStorage
from listener.stores.sqlite_storage import SqliteQueueStorage
from workers.cli import cli

QUEUE = "orders"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Two SQLite files as accounts 0 and 1, and orders partitioned 3 ways by setting."""
    return {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'a.db'}",
        "CLOUDQUEUE_PARTITION_ACCOUNTS": json.dumps([f"sqlite:///{tmp_path / 'b.db'}"]),
        "CLOUDQUEUE_LISTENER__PARTITIONS": "3",
    }


def run(env: dict[str, str], *args: str, stdin: str = "") -> Result:
    result = CliRunner().invoke(cli, list(args), env=env, input=stdin, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def accounts(tmp_path: Path) -> list[SqliteQueueStorage]:
    return [SqliteQueueStorage(tmp_path / "a.db"), SqliteQueueStorage(tmp_path / "b.db")]


def test_create_enqueue_by_key_and_list_act_on_the_partitions(
    env: dict[str, str], tmp_path: Path
) -> None:
    """create makes every partition on its account, --key routes by a JSON field, list totals."""
    run(env, "queues", "create", QUEUE)
    items = "".join(json.dumps({"customer": c, "n": n}) + "\n" for c in "abcd" for n in range(3))
    run(env, "enqueue", QUEUE, "--key", "customer", stdin=items)
    first, second = accounts(tmp_path)
    assert first.list_queues(QUEUE) == ["orders-p0", "orders-p2"]
    assert second.list_queues(QUEUE) == ["orders-p1"]
    storage = PartitionedQueueStorage([first, second], {QUEUE: 3})
    for customer in "abcd":
        home = f"orders-p{partition_for_key(customer, 3)}"
        assert storage.approximate_message_count(home) >= 3
    assert storage.approximate_message_count(QUEUE) == 12
    listed = json.loads(run(env, "queues", "list", "--json").stdout.splitlines()[-1])
    on_first = sum(first.approximate_message_count(name) for name in ("orders-p0", "orders-p2"))
    # `queues list` lists the configured account: there orders has p0 and p2.
    assert {"queue": QUEUE, "depth": on_first, "partitions": 2} in listed
    run(env, "queues", "clear", QUEUE, "--yes")
    assert storage.approximate_message_count(QUEUE) == 0
    run(env, "queues", "delete", QUEUE, "--yes")
    assert storage.list_queues(QUEUE) == []


def test_an_item_without_its_key_field_is_a_clear_error(env: dict[str, str]) -> None:
    """--key names a field the item lacks: exit code 2 naming it, no traceback."""
    result = CliRunner().invoke(cli, ["enqueue", QUEUE, "--key", "customer", '{"n": 1}'], env=env)
    assert result.exit_code == 2
    assert "--key customer" in result.output


def test_poison_requeue_returns_each_message_to_its_own_partition_and_account(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A message poisoned from orders-p1 (account 1) goes back to orders-p1 on account 1."""
    from datetime import UTC, datetime

    run(env, "queues", "create", QUEUE)
    storage = PartitionedQueueStorage(accounts(tmp_path), {QUEUE: 3})
    storage.create_queue(poison_queue_name(QUEUE))
    storage.put_message("orders-p1", "bad")
    taken = [
        m
        for _ in range(3)
        for m in storage.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)
    ]
    poison_message(storage, QUEUE, taken[0], reason="r", error="e", now=datetime.now(UTC))
    run(env, "poison", "requeue", QUEUE, "--yes")
    assert storage.approximate_message_count("orders-p1") == 1
    assert storage.approximate_message_count(QUEUE) == 1


def test_status_totals_a_partitioned_queue_and_shows_each_partition(
    env: dict[str, str], tmp_path: Path
) -> None:
    """status reads each partition once: the total, and one depth per partition on any account."""
    run(env, "queues", "create", QUEUE)
    items = "".join(json.dumps({"customer": c}) + "\n" for c in "abcdefg")
    run(env, "enqueue", QUEUE, stdin=items)  # round-robin: 3, 2, 2
    report = json.loads(run(env, "status", QUEUE, "--json").stdout)
    assert report["depth"] == 7
    assert report["partitions"] == [
        {"queue": "orders-p0", "depth": 3},
        {"queue": "orders-p1", "depth": 2},
        {"queue": "orders-p2", "depth": 2},
    ]
    shown = run(env, "status", QUEUE).stdout
    assert "orders: 7 message(s)" in shown
    assert "partitions: orders-p0 3 · orders-p1 2 · orders-p2 2" in shown


def test_status_of_a_plain_queue_lists_no_partitions(tmp_path: Path) -> None:
    """K = 1: status reads and shows the queue as before, without partition rows."""
    env = {"CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'a.db'}"}
    run(env, "queues", "create", QUEUE)
    run(env, "enqueue", QUEUE, stdin='{"n": 1}\n')
    report = json.loads(run(env, "status", QUEUE, "--json").stdout)
    assert report["depth"] == 1
    assert "partitions" not in report
