"""Partitioned queues: naming, routing, fairness, idle cost, poison and repartitioning.

Storage-level behaviour runs on in-memory stores standing for two accounts; each account is
metered, so "one get per call" is a count of real calls, not an estimate.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from cloudqueue.listener.errors import ConfigurationError, MessageNotFoundError
from cloudqueue.listener.poison.move import poison_message
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.poison.record import PoisonRecord
from cloudqueue.listener.poison.requeue import requeue_poisoned, requeue_poisoned_by_id
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.partition_names import (
    partition_for_key,
    partition_of_queue,
    partition_queue_names,
)
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.payload import open_message

QUEUE = "orders"


@dataclass
class Order:
    customer: str
    number: int


def accounts(count: int = 2) -> list[MeteredStorage]:
    return [MeteredStorage(InMemoryQueueStorage()) for _ in range(count)]


def partitioned(
    partitions: int = 3, *, draining: int | None = None, sticky_gets: int = 8
) -> tuple[PartitionedQueueStorage, list[MeteredStorage]]:
    metered = accounts()
    storage = PartitionedQueueStorage(
        metered,
        {QUEUE: partitions},
        draining={QUEUE: draining} if draining else None,
        sticky_gets=sticky_gets,
    )
    storage.create_queue(QUEUE)
    return storage, metered


def gets(metered: list[MeteredStorage]) -> int:
    return sum(account.counts().get("get_messages", 0) for account in metered)


def drain(storage: QueueStorage, queue: str = QUEUE, *, max_gets: int = 1000) -> list[str]:
    """Take and delete everything, one get at a time, as a dequeue thread would."""
    contents: list[str] = []
    empty_in_a_row = 0
    for _ in range(max_gets):
        batch = storage.get_messages(queue, max_messages=32, visibility_timeout_s=30)
        empty_in_a_row = 0 if batch else empty_in_a_row + 1
        if empty_in_a_row > 10:
            break
        for message in batch:
            assert storage.delete_message(queue, message.id, message.pop_receipt)
            contents.append(message.content)
    return contents


# Naming


def test_one_partition_is_the_queue_itself() -> None:
    """K = 1 names exactly the queue a worker without partitions uses."""
    assert partition_queue_names("orders", 1) == ["orders"]


def test_partitions_are_numbered_after_the_logical_name() -> None:
    """K partitions are <queue>-p0 ... <queue>-p{K-1}."""
    assert partition_queue_names("orders", 3) == ["orders-p0", "orders-p1", "orders-p2"]
    assert partition_of_queue("orders-p12") == ("orders", 12)
    assert partition_of_queue("orders-poison") is None


def test_a_name_too_long_for_its_partitions_is_a_clear_configuration_error() -> None:
    """A logical name whose last partition would pass 63 characters is refused, naming the limit."""
    name = "a" * 60
    partition_queue_names(name, 10)  # a-...-p9: 63 characters, allowed
    with pytest.raises(ConfigurationError, match=r"too long for 11 partitions.*3-63"):
        partition_queue_names(name, 11)


def test_every_name_a_worker_may_use_fits_the_most_partitions() -> None:
    """A worker's queue name leaves room for -poison (at most 56 characters), which is room
    for -p999 too: the length check matters for names used without a worker only."""
    partition_queue_names("a" * 56, 1000)


@pytest.mark.parametrize("partitions", [0, -1, 1001])
def test_a_partition_count_out_of_range_is_refused(partitions: int) -> None:
    """Partition counts must be 1..1000."""
    with pytest.raises(ConfigurationError, match="partitions must be"):
        partition_queue_names("orders", partitions)


# Gets: idle cost, stickiness and fairness


def test_an_idle_partitioned_queue_costs_one_get_per_get() -> None:
    """With every partition empty, each get asks one partition: idle cost does not grow with K."""
    storage, metered = partitioned(8)
    for _ in range(16):
        assert storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30) == []
    assert gets(metered) == 16


def test_idle_gets_visit_every_partition_in_turn() -> None:
    """K idle gets in a row ask K different partitions: a message anywhere is found within K."""
    storage, _ = partitioned(5)
    storage.put_message("orders-p3", "lonely")
    found = [
        storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30) for _ in range(5)
    ]
    assert [m.content for batch in found for m in batch] == ["lonely"]


def test_a_thread_keeps_draining_the_partition_that_gives_it_messages() -> None:
    """After a non-empty get the same thread asks the same partition again."""
    storage, _ = partitioned(3)
    for index in range(40):
        storage.put_message("orders-p1", f"m{index}")
    storage.put_message("orders-p0", "other")
    storage.put_message("orders-p2", "other")
    first = storage.get_messages(QUEUE, max_messages=5, visibility_timeout_s=30)
    while not first or not first[0].id.endswith("@orders-p1"):
        first = storage.get_messages(QUEUE, max_messages=5, visibility_timeout_s=30)
    following = [
        storage.get_messages(QUEUE, max_messages=5, visibility_timeout_s=30) for _ in range(3)
    ]
    assert all(m.id.endswith("@orders-p1") for batch in following for m in batch)


def test_a_busy_partition_does_not_starve_the_others() -> None:
    """A thread leaves a partition that keeps giving messages after sticky_gets gets, so the
    messages of a small partition are taken long before the busy one is empty."""
    storage, _ = partitioned(2, sticky_gets=4)
    for index in range(32 * 40):
        storage.put_message("orders-p0", f"busy{index}")
    for index in range(3):
        storage.put_message("orders-p1", f"small{index}")
    taken: list[str] = []
    while len([c for c in taken if c.startswith("small")]) < 3:
        batch = storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30)
        taken.extend(message.content for message in batch)
        assert len(taken) <= 32 * 10, "the small partition waited for the busy one"
    assert storage.approximate_message_count("orders-p0") > 32 * 30


def test_a_thread_whose_partition_runs_dry_tries_the_next_at_once() -> None:
    """A draining thread that empties its partition asks the next one in the same call."""
    storage, metered = partitioned(2)
    storage.put_message("orders-p0", "first")
    storage.put_message("orders-p1", "second")
    contents = [
        m.content
        for _ in range(2)
        for m in storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30)
    ]
    assert sorted(contents) == ["first", "second"]
    assert gets(metered) == 3


# Ids, counts, administration


def test_message_ids_route_delete_and_update_to_their_partition() -> None:
    """A got message's id names its partition; delete and update act on that physical queue."""
    storage, _ = partitioned(3)
    for index in range(3):
        storage.put_message(QUEUE, f"m{index}")
    taken = drain_without_delete(storage)
    assert {m.id.rpartition("@")[2] for m in taken} == {"orders-p0", "orders-p1", "orders-p2"}
    receipt = storage.update_visibility(QUEUE, taken[0].id, taken[0].pop_receipt, 60)
    assert storage.delete_message(QUEUE, taken[0].id, receipt)
    assert storage.approximate_message_count(QUEUE) == 2


def drain_without_delete(storage: QueueStorage) -> list[QueueMessage]:
    return [
        m
        for _ in range(6)
        for m in storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30)
    ]


def test_an_id_of_another_queue_deletes_nothing() -> None:
    """An id naming no partition of the queue is refused as any unknown id is."""
    storage, _ = partitioned(3)
    put = storage.put_message(QUEUE, "kept")
    physical_id = put.id.rpartition("@")[0]
    assert storage.delete_message(QUEUE, f"{physical_id}@elsewhere-p0", put.pop_receipt) is False
    with pytest.raises(MessageNotFoundError):
        storage.update_visibility(QUEUE, physical_id, put.pop_receipt, 10)
    assert storage.approximate_message_count(QUEUE) == 1


def test_partitions_are_spread_over_the_accounts_round_robin() -> None:
    """Partition i lives on account i mod the number of accounts; counts sum over them."""
    storage, metered = partitioned(3)
    assert [p.storage for p in storage.partitions_of(QUEUE)] == [metered[0], metered[1], metered[0]]
    assert metered[0].list_queues() == ["orders-p0", "orders-p2"]
    assert metered[1].list_queues() == ["orders-p1"]
    for index in range(6):
        storage.put_message(QUEUE, f"m{index}")
    assert [metered[0].approximate_message_count(q) for q in ("orders-p0", "orders-p2")] == [2, 2]
    assert storage.approximate_message_count(QUEUE) == 6


def test_clear_and_delete_act_on_every_partition() -> None:
    """Clearing or deleting the logical queue clears or deletes all its physical queues."""
    storage, _ = partitioned(3)
    for index in range(6):
        storage.put_message(QUEUE, f"m{index}")
    storage.clear_queue(QUEUE)
    assert storage.approximate_message_count(QUEUE) == 0
    storage.delete_queue(QUEUE)
    assert storage.list_queues(QUEUE) == []


# Publishing


def test_round_robin_publishing_spreads_messages_evenly() -> None:
    """Without a key, a publisher's messages go to the partitions in turn."""
    storage, _ = partitioned(3)
    publisher = Publisher(storage, QUEUE, Order)
    publisher.publish_many(Order("c", n) for n in range(9))
    assert [storage.approximate_message_count(f"orders-p{i}") for i in range(3)] == [3, 3, 3]


def test_a_partition_key_sends_one_key_to_one_partition() -> None:
    """Items with the same key (a field name or a callable) always land on the same partition."""
    storage, _ = partitioned(4)
    by_field = Publisher(storage, QUEUE, Order, partition_key="customer")
    by_callable = Publisher(storage, QUEUE, Order, partition_key=lambda order: order.customer)
    for number in range(5):
        by_field.publish(Order("alice", number))
        by_callable.publish(Order("alice", number))
    home = f"orders-p{partition_for_key('alice', 4)}"
    assert storage.approximate_message_count(home) == 10
    assert storage.approximate_message_count(QUEUE) == 10


def test_an_item_without_the_key_field_is_refused_before_anything_is_sent() -> None:
    """A missing key field is a ValueError naming it, and nothing is put."""
    storage, _ = partitioned(3)
    publisher = Publisher(storage, QUEUE, dict, partition_key="customer")
    with pytest.raises(ValueError, match="customer"):
        publisher.publish({"number": 1})
    assert storage.approximate_message_count(QUEUE) == 0


def test_batched_publishing_packs_per_partition() -> None:
    """In batch mode each message holds items of one key's partition only."""
    storage, _ = partitioned(3)
    publisher = Publisher(storage, QUEUE, Order, batch=True, partition_key="customer")
    customers = ["alice", "bob", "carol", "dave"]
    publisher.publish_many(Order(customer, n) for n in range(20) for customer in customers)
    codec = MessageCodec(Order)
    for index in range(3):
        physical = f"orders-p{index}"
        expected = {c for c in customers if partition_for_key(c, 3) == index}
        for message in storage.peek_messages(physical, max_messages=32):
            customers_in = {order.customer for order in decode_batch(codec, message.content)}
            assert customers_in <= expected


def decode_batch(codec: MessageCodec[Order], content: str) -> list[Order]:
    return [codec.decode(text) for text in open_message(content, None).texts]


def test_a_publisher_on_a_plain_storage_writes_the_physical_partitions() -> None:
    """``partitions=`` on a single-account storage puts straight on <queue>-p0 ... ."""
    storage = InMemoryQueueStorage()
    for name in partition_queue_names(QUEUE, 2):
        storage.create_queue(name)
    Publisher(storage, QUEUE, Order, partitions=2).publish_many(Order("c", n) for n in range(4))
    assert [storage.approximate_message_count(f"orders-p{i}") for i in range(2)] == [2, 2]


KEYS_SCRIPT = (
    "from cloudqueue.listener.stores.partition_names import partition_for_key as p; "
    "print([p(f'customer-{i}', 7) for i in range(50)])"
)


def test_key_routing_is_the_same_in_every_process_whatever_the_hash_seed() -> None:
    """Two interpreters with different PYTHONHASHSEED put every key on the same partition."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", KEYS_SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "4242")
    ]
    runs = [process.communicate(timeout=60)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0]
    assert runs[0] == runs[1]
    assert runs[0].strip() == str([partition_for_key(f"customer-{i}", 7) for i in range(50)])
    assert len(set(eval(runs[0]))) == 7  # the keys spread over every partition


# Poison


def test_a_poison_record_names_its_partition_and_requeue_puts_it_back_there() -> None:
    """Poison goes to <queue>-poison with the partition; a requeue returns it to that partition."""
    storage, _ = partitioned(3)
    storage.create_queue(poison_queue_name(QUEUE))
    storage.put_message("orders-p2", "bad")
    message = next(
        m
        for _ in range(3)
        for m in storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30)
    )
    assert poison_message(storage, QUEUE, message, reason="r", error="e", now=datetime.now(UTC))
    [poisoned] = storage.peek_messages(poison_queue_name(QUEUE), max_messages=32)
    assert PoisonRecord.from_json(poisoned.content).partition == "orders-p2"
    assert requeue_poisoned(storage, QUEUE) == 1
    assert storage.approximate_message_count("orders-p2") == 1
    assert storage.approximate_message_count(QUEUE) == 1


def test_requeue_by_id_puts_the_message_back_on_its_partition() -> None:
    """``poison requeue ID`` finds the record by the original id and returns it to its partition."""
    storage, _ = partitioned(3)
    storage.create_queue(poison_queue_name(QUEUE))
    storage.put_message("orders-p1", "bad")
    message = next(
        m
        for _ in range(3)
        for m in storage.get_messages(QUEUE, max_messages=32, visibility_timeout_s=30)
    )
    poison_message(storage, QUEUE, message, reason="r", error="e", now=datetime.now(UTC))
    assert requeue_poisoned_by_id(storage, QUEUE, message.id)
    assert storage.approximate_message_count("orders-p1") == 1


def test_a_plain_queues_poison_record_is_unchanged() -> None:
    """K = 1 writes no partition field: the record is the same JSON as before partitions."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    storage.create_queue(poison_queue_name(QUEUE))
    storage.put_message(QUEUE, "bad")
    [message] = storage.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)
    poison_message(storage, QUEUE, message, reason="r", error="e", now=datetime.now(UTC))
    [poisoned] = storage.peek_messages(poison_queue_name(QUEUE), max_messages=1)
    assert '"partition"' not in poisoned.content


# Repartitioning


@pytest.mark.parametrize(("old", "new"), [(1, 3), (3, 5), (5, 2), (3, 1)])
def test_repartitioning_loses_nothing(old: int, new: int) -> None:
    """Messages waiting on the old partitions are read while new ones are written, until empty."""
    metered = accounts()
    before = PartitionedQueueStorage(metered, {QUEUE: old})
    before.create_queue(QUEUE)
    for index in range(30):
        before.put_message(QUEUE, f"old{index}")
    after = PartitionedQueueStorage(metered, {QUEUE: new}, draining={QUEUE: old})
    after.create_queue(QUEUE)
    for index in range(10):
        after.put_message(QUEUE, f"new{index}")
    writable = set(partition_queue_names(QUEUE, new))
    new_homes = {p.queue_name for p in after.partitions_of(QUEUE) if p.writable}
    assert new_homes == writable
    assert after.approximate_message_count(QUEUE) == 40
    contents = drain(after)
    assert sorted(contents) == sorted(
        [f"old{i}" for i in range(30)] + [f"new{i}" for i in range(10)]
    )
    for name in set(partition_queue_names(QUEUE, old)) - writable:
        assert after.approximate_message_count(name) == 0
