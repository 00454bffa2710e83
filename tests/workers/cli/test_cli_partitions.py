"""The command line on a partitioned queue, in process (click's runner) on a SQLite store, with
a second SQLite file standing for a second account."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.poison.move import poison_message
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout
from cloudqueue.listener.stores.partition_names import partition_for_key
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers.cli import cli
from cloudqueue.workers.host.partitioning import settle_layout

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


def poison_one_from_p1(storage: PartitionedQueueStorage) -> None:
    """Put a message on orders-p1, take it, and poison it (its record names orders-p1)."""
    storage.create_queue(poison_queue_name(QUEUE))
    storage.put_message("orders-p1", "bad")
    taken = [
        m
        for _ in range(3)
        for m in storage.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)
    ]
    poison_message(storage, QUEUE, taken[0], reason="r", error="e", now=datetime.now(UTC))


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
    run(env, "queues", "create", QUEUE)
    storage = PartitionedQueueStorage(accounts(tmp_path), {QUEUE: 3})
    poison_one_from_p1(storage)
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


# The layout recorded in the store: found by every command without --partitions.


@pytest.fixture
def unset(tmp_path: Path) -> dict[str, str]:
    """One SQLite file, no partition setting anywhere: only the record says how orders is spread."""
    return {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'a.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }


def store(tmp_path: Path) -> SqliteQueueStorage:
    return SqliteQueueStorage(tmp_path / "a.db")


def test_queues_create_records_the_layout_and_enqueue_routes_by_it(
    unset: dict[str, str], tmp_path: Path
) -> None:
    """create --partitions 4 records 4; enqueue without --partitions then puts on the
    partitions, never on a plain queue that no partitioned worker reads."""
    assert (
        "created orders as 4 partitions"
        in run(unset, "queues", "create", QUEUE, "--partitions", "4").stdout
    )
    run(unset, "enqueue", QUEUE, '{"n": 1}', '{"n": 2}')
    storage = store(tmp_path)
    assert read_layout(storage, QUEUE) == QueueLayout(4)
    assert QUEUE not in storage.list_queues()
    depths = [storage.approximate_message_count(f"orders-p{i}") for i in range(4)]
    assert depths == [1, 1, 0, 0]


def test_a_partitions_option_that_disagrees_with_the_record_is_one_clear_error(
    unset: dict[str, str],
) -> None:
    """--partitions 3 on a queue recorded as 4: exit 2, one line naming both; nothing sent."""
    run(unset, "queues", "create", QUEUE, "--partitions", "4")
    for args in (
        ("enqueue", QUEUE, "x", "--partitions", "3"),
        ("status", QUEUE, "--partitions", "3"),
    ):
        result = CliRunner().invoke(cli, list(args), env=unset)
        assert result.exit_code == 2, result.output
        assert "queue orders is recorded as 4 partitions, not --partitions 3" in result.output
        assert len(result.output.strip().splitlines()) == 1
    run(unset, "enqueue", QUEUE, "x", "--partitions", "4")  # agreeing is fine


def test_status_of_a_recorded_partitioned_queue_shows_its_partitions(
    unset: dict[str, str],
) -> None:
    """status shipments on a partitioned queue shows its total and partitions, not 'does not
    exist' (p2 not created yet counts as empty)."""
    run(unset, "queues", "create", "shipments", "--partitions", "2")
    run(unset, "enqueue", "shipments", "a", "b", "c")
    shown = run(unset, "status", "shipments").stdout
    assert "does not exist" not in shown
    assert "shipments: 3 message(s)" in shown
    assert "partitions: shipments-p0 2 · shipments-p1 1" in shown


def test_a_plain_queue_beside_the_partitions_is_reported_listed_and_merged(
    unset: dict[str, str], tmp_path: Path
) -> None:
    """A message put on the plain queue by a producer unaware of the partitions: status warns
    with the count, queues list shows the plain row and the total row, merge-plain moves it."""
    run(unset, "queues", "create", QUEUE, "--partitions", "4")
    run(unset, "enqueue", QUEUE, "routed")
    storage = store(tmp_path)
    storage.create_queue(QUEUE)
    storage.put_message(QUEUE, "stranded")
    report = json.loads(run(unset, "status", QUEUE, "--json").stdout)
    assert (report["depth"], report["plain_queue_depth"]) == (1, 1)
    shown = run(unset, "status", QUEUE).stdout
    assert "the plain queue orders beside the partitions holds 1 message(s)" in shown
    assert "cloudqueue queues merge-plain orders" in shown
    listed = json.loads(run(unset, "queues", "list", "--json").stdout)
    assert {"queue": QUEUE, "depth": 1, "beside_partitions": True} in listed
    assert {"queue": QUEUE, "depth": 1, "partitions": 4} in listed
    assert "(total of 4 partitions)" in run(unset, "queues", "list").stdout
    moved = run(unset, "queues", "merge-plain", QUEUE, "--yes").stdout
    assert "moved 1 message(s) from the plain queue orders" in moved
    assert storage.approximate_message_count(QUEUE) == 0
    report = json.loads(run(unset, "status", QUEUE, "--json").stdout)
    assert (report["depth"], report["plain_queue_depth"]) == (2, 0)


def test_merge_plain_on_a_queue_that_is_not_partitioned_is_refused(unset: dict[str, str]) -> None:
    """Nothing to merge when the workers read the plain queue itself: exit 2, one line."""
    run(unset, "queues", "create", QUEUE)
    result = CliRunner().invoke(cli, ["queues", "merge-plain", QUEUE, "--yes"], env=unset)
    assert result.exit_code == 2
    assert "queue orders is not partitioned" in result.output


def test_poison_requeue_finds_the_partitions_from_the_record(
    unset: dict[str, str], tmp_path: Path
) -> None:
    """Without any setting, a message poisoned from orders-p1 goes back to orders-p1."""
    run(unset, "queues", "create", QUEUE, "--partitions", "3")
    storage = PartitionedQueueStorage([store(tmp_path)], {QUEUE: 3})
    poison_one_from_p1(storage)
    run(unset, "poison", "requeue", QUEUE, "--yes")
    assert storage.approximate_message_count("orders-p1") == 1
    assert QUEUE not in store(tmp_path).list_queues()


def test_the_dashboard_samples_a_partitioned_queue_by_its_record(
    unset: dict[str, str], tmp_path: Path
) -> None:
    """The dashboard's sampler reads a recorded partitioned queue's total, not 'does not exist'."""
    from cloudqueue.listener.scaling.scaler import ScalingPolicy
    from cloudqueue.workers.host.partitioning import LayoutViews
    from cloudqueue.workers.settings import CloudQueueSettings
    from cloudqueue.workers.views.sampler import Sampler

    run(unset, "queues", "create", QUEUE, "--partitions", "3")
    run(unset, "enqueue", QUEUE, "a", "b")
    storage = store(tmp_path)
    views = LayoutViews(storage, CloudQueueSettings())
    sampler = Sampler(
        storage,
        queues=[QUEUE],
        state_dir=tmp_path / "run",
        where="here",
        policy=ScalingPolicy(),
        view_of=views.view,
    )
    sampler.sample()
    (state,) = sampler.state()["queues"]
    assert "error" not in state, state
    assert state["depth"] == 2


# Whoever creates a queue's partitions first records the layout.


def test_enqueue_with_listener_partitions_on_a_new_queue_records_the_layout(
    unset: dict[str, str], tmp_path: Path
) -> None:
    """listener.partitions = 4 (no --partitions) on a queue without a record: the partitions
    are created and recorded, so that every worker and command finds them."""
    run({**unset, "CLOUDQUEUE_LISTENER__PARTITIONS": "4"}, "enqueue", QUEUE, "x")
    assert read_layout(store(tmp_path), QUEUE) == QueueLayout(4)


def test_creating_a_partitioned_queue_records_its_layout_once(tmp_path: Path) -> None:
    """The rule lives where partitioned queues are created (PartitionedQueueStorage), so a
    Publisher's or a worker's create records too; a layout recorded already is left alone."""
    plain = store(tmp_path)
    PartitionedQueueStorage([plain], {QUEUE: 3}).create_queue(QUEUE)
    assert read_layout(plain, QUEUE) == QueueLayout(3)
    PartitionedQueueStorage([plain], {QUEUE: 5}).create_queue(QUEUE)
    assert read_layout(plain, QUEUE) == QueueLayout(3)
    PartitionedQueueStorage([plain], {"plain": 1}).create_queue("plain")
    assert read_layout(plain, "plain") is None


def test_partitions_beyond_the_record_that_hold_messages_stop_a_worker(tmp_path: Path) -> None:
    """Recorded as 2 but orders-p2 and -p3 exist with a message: a worker with 2 partitions
    is refused with one line naming the settings that read them; empty ones are no reason."""
    plain = store(tmp_path)
    PartitionedQueueStorage([plain], {QUEUE: 2}).create_queue(QUEUE)
    PartitionedQueueStorage([plain], {QUEUE: 4}).create_queue(QUEUE)  # p2, p3: not recorded
    settle_layout([plain], QUEUE, QueueLayout(2), create=False)  # empty: nothing stranded
    plain.put_message("orders-p3", "stranded")
    with pytest.raises(ConfigurationError) as raised:
        settle_layout([plain], QUEUE, QueueLayout(2), create=False)
    assert str(raised.value) == (
        "queue orders's partitions orders-p2 to -p3, beyond its recorded layout (2 partitions), "
        "hold 1 message(s) that no worker reads: set listener.partitions = 4 and "
        "listener.drain_partitions = 2 to read them (docs/concepts/partition-layout.md)"
    )
    settle_layout([plain], QUEUE, QueueLayout(4, draining=2), create=False)
    assert read_layout(plain, QUEUE) == QueueLayout(4, draining=2)
