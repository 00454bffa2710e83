"""Several queues in priority order: the choice of queue, the storage that reads them as one,
and the settings that name them.

Storage-level behaviour runs on a metered in-memory store, so "asks two queues" is a count of
real calls, not an estimate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from threading import Thread

import pytest

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.priority import Priority, asking_order, weighted_pick
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.prioritized import PrioritizedQueueStorage, as_in_queue
from cloudqueue.listener.stores.storage import QueueMessage

URGENT, NORMAL, LOW, BULK = "urgent", "normal", "low", "bulk"


def prioritized(
    *queues: str, priority: Priority | None = None
) -> tuple[PrioritizedQueueStorage, MeteredStorage]:
    metered = MeteredStorage(InMemoryQueueStorage())
    for queue in queues:
        metered.create_queue(queue)
    return PrioritizedQueueStorage(metered, queues, priority or Priority()), metered


def fill(storage: MeteredStorage | PartitionedQueueStorage, queue: str, count: int) -> None:
    for number in range(count):
        storage.put_message(queue, f"{queue}-{number}")


def get(storage: PrioritizedQueueStorage, max_messages: int = 32) -> list[QueueMessage]:
    return storage.get_messages(storage.first, max_messages=max_messages, visibility_timeout_s=30)


def gets_by_queue(metered: MeteredStorage) -> Counter[str]:
    return Counter(
        {
            queue: count
            for (queue, operation), count in metered.counts_by_queue_and_operation().items()
            if operation == "get_messages"
        }
    )


def take_all(storage: PrioritizedQueueStorage, max_messages: int) -> Iterator[str]:
    """Get and delete until a get finds nothing; the queue each batch came from, per batch."""
    while batch := get(storage, max_messages):
        for message in batch:
            assert storage.delete_message(storage.first, message.id, message.pop_receipt)
        yield batch[0].content.rpartition("-")[0]


# -- the choice of queue -------------------------------------------------------------------------


def test_a_busy_get_asks_from_its_turn_then_the_others_highest_first() -> None:
    """Strict asks 0, 1, 2...; a weighted turn on queue 2 asks 2 first, then 0 and 1."""
    assert asking_order(3, idle=False, lower_turn=0) == (0, 1, 2)
    assert asking_order(3, idle=False, lower_turn=5, first=2) == (2, 0, 1)


def test_an_idle_get_asks_the_highest_queue_and_one_lower_queue_in_turn() -> None:
    """Idle: (0, 1), (0, 2), (0, 3), (0, 1)...; one queue alone is asked alone."""
    assert [asking_order(4, idle=True, lower_turn=turn) for turn in range(4)] == [
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 1),
    ]
    assert asking_order(1, idle=True, lower_turn=3) == (0,)


def test_weighted_turns_give_each_queue_its_weight_spread_out() -> None:
    """Over sum(weights) turns each queue gets exactly its weight, never two low turns in a row."""
    credits: tuple[int, ...] = (0, 0)
    turns = []
    for _ in range(40):
        chosen, credits = weighted_pick(credits, (3, 1))
        turns.append(chosen)
    assert Counter(turns) == {0: 30, 1: 10}
    assert turns[:4] == [0, 0, 1, 0]
    assert all(turns[i : i + 4].count(1) == 1 for i in range(0, 40, 4))


# -- reading several queues as one ---------------------------------------------------------------


def test_strict_takes_the_highest_queue_with_work_first() -> None:
    """Every urgent batch comes before any normal one; normal is read once urgent is empty."""
    storage, metered = prioritized(URGENT, NORMAL)
    fill(metered, NORMAL, 20)
    fill(metered, URGENT, 12)
    assert list(take_all(storage, 4)) == [URGENT] * 3 + [NORMAL] * 5
    assert storage.fetched() == {URGENT: 12, NORMAL: 20}


def test_strict_goes_back_to_the_higher_queue_as_soon_as_it_has_work() -> None:
    """A busy get asks the higher queue first every time: new urgent work is taken next."""
    storage, metered = prioritized(URGENT, NORMAL)
    fill(metered, NORMAL, 10)
    assert get(storage, 2)[0].content.startswith(NORMAL)
    fill(metered, URGENT, 1)
    assert [m.content for m in get(storage, 2)] == ["urgent-0"]


def test_weighted_shares_gets_by_weight_while_every_queue_has_work() -> None:
    """Weights 3:1 over 400 gets: exactly 300 and 100 batches, as long as both have work."""
    storage, metered = prioritized(URGENT, NORMAL, priority=Priority("weighted", (3, 1)))
    fill(metered, URGENT, 400)
    fill(metered, NORMAL, 400)
    batches = Counter(next(take_all(storage, 1)) for _ in range(400))
    assert batches == {URGENT: 300, NORMAL: 100}


def test_weighted_starves_no_queue_and_wastes_no_turn_on_an_empty_one() -> None:
    """A 100:1 lower queue still gets its turn; a turn whose queue is empty goes to the other."""
    storage, metered = prioritized(URGENT, NORMAL, priority=Priority("weighted", (100, 1)))
    fill(metered, URGENT, 1000)
    fill(metered, NORMAL, 3)
    taken = [next(take_all(storage, 1)) for _ in range(303)]
    assert taken.count(NORMAL) == 3
    # Normal is empty now: every get is served by urgent, none comes back empty.
    assert all(get(storage, 1) for _ in range(50))


def test_an_idle_get_costs_two_calls_and_asks_the_highest_queue_every_time() -> None:
    """K = 4, idle: each get asks urgent and one lower queue in turn (2 calls, not 4)."""
    storage, metered = prioritized(URGENT, NORMAL, LOW, BULK)
    assert get(storage) == []  # a new thread's first get asks all four
    assert sum(gets_by_queue(metered).values()) == 4
    for _ in range(30):
        assert get(storage) == []
    assert gets_by_queue(metered) == {URGENT: 1 + 30, NORMAL: 1 + 10, LOW: 1 + 10, BULK: 1 + 10}


def test_an_idle_thread_finds_lower_work_within_its_turns_and_is_busy_again() -> None:
    """Work in the lowest queue is found within K - 1 idle gets; the next get asks all again."""
    storage, metered = prioritized(URGENT, NORMAL, LOW)
    assert get(storage) == []
    fill(metered, LOW, 1)
    found = [bool(get(storage)) for _ in range(2)]
    assert found.count(True) == 1
    before = sum(gets_by_queue(metered).values())
    assert get(storage) == []  # busy: asks all three
    assert sum(gets_by_queue(metered).values()) - before == 3


def test_each_thread_keeps_its_own_idle_turn() -> None:
    """A new thread's first get asks every queue, whatever the others' state."""
    storage, metered = prioritized(URGENT, NORMAL, LOW)
    assert get(storage) == []
    assert get(storage) == []
    before = sum(gets_by_queue(metered).values())
    other: list[list[QueueMessage]] = []
    thread = Thread(target=lambda: other.append(get(storage)))
    thread.start()
    thread.join()
    assert sum(gets_by_queue(metered).values()) - before == 3


def test_ids_name_their_queue_and_settle_there() -> None:
    """A message from normal is deleted and hidden in normal, through the first queue's name."""
    storage, metered = prioritized(URGENT, NORMAL)
    fill(metered, NORMAL, 2)
    first, second = get(storage)
    assert first.id.endswith("@normal")
    receipt = storage.update_visibility(URGENT, first.id, first.pop_receipt, 60)
    assert storage.delete_message(URGENT, first.id, receipt)
    assert storage.delete_message(URGENT, second.id, second.pop_receipt)
    assert metered.approximate_message_count(NORMAL) == 0
    plain = as_in_queue(first, NORMAL)
    assert (plain.id, as_in_queue(first, URGENT).id) == (first.id[: -len("@normal")], first.id)


def test_the_count_sums_the_queues_and_remembers_each_one() -> None:
    """One count per queue; a put on the first queue's name goes to that queue alone."""
    storage, metered = prioritized(URGENT, NORMAL)
    fill(metered, NORMAL, 5)
    storage.put_message(URGENT, "urgent-0")
    assert storage.approximate_message_count(URGENT) == 6
    assert storage.depths() == {URGENT: 1, NORMAL: 5}
    assert storage.approximate_message_count(NORMAL) == 5


def test_a_queue_of_the_set_may_itself_be_partitioned() -> None:
    """Normal spread over 3 partitions: its messages are found, named by both, and deleted."""
    account = MeteredStorage(InMemoryQueueStorage())
    partitioned = PartitionedQueueStorage([account], {NORMAL: 3})
    partitioned.create_queue(NORMAL)
    partitioned.create_queue(URGENT)
    fill(partitioned, NORMAL, 9)
    storage = PrioritizedQueueStorage(partitioned, (URGENT, NORMAL), Priority())
    taken = []
    while batch := get(storage):
        for message in batch:
            assert message.id.endswith("@normal")
            assert "@normal-p" in message.id
            assert storage.delete_message(URGENT, message.id, message.pop_receipt)
            taken.append(message.content)
    assert len(taken) == 9
    assert partitioned.approximate_message_count(NORMAL) == 0


# -- naming the queues ---------------------------------------------------------------------------


def test_a_location_lists_its_queues_highest_first_and_tells_where_a_message_came_from() -> None:
    """``of`` takes one name or several; ``queue_of`` reads the queue a message id names."""
    location = CloudQueueLocation.of((URGENT, NORMAL, LOW), 60)
    assert location.queue_names == (URGENT, NORMAL, LOW)
    assert (location.queue_name, location.visibility_timeout_s) == (URGENT, 60)
    assert location.queue_of("abc@low") == LOW
    assert location.queue_of("abc@urgent-p1") == URGENT
    assert location.queue_of("abc") == URGENT
    assert CloudQueueLocation.of(URGENT).queue_names == (URGENT,)


@pytest.mark.parametrize(
    ("names", "priority", "says"),
    [
        ((URGENT, NORMAL, URGENT), Priority(), "names 'urgent' twice"),
        ((URGENT, "Not_Valid"), Priority(), "invalid queue name 'Not_Valid'"),
        ((URGENT, "x" * 60), Priority(), "no room for its poison queue"),
        ((), Priority(), "at least one queue"),
        ((URGENT, NORMAL), Priority("weighted", (3,)), "one weight per queue"),
        ((URGENT, NORMAL), Priority("weighted"), "one weight per queue"),
        ((URGENT, NORMAL), Priority("weighted", (3, 0)), "whole numbers >= 1"),
        ((URGENT, NORMAL), Priority("strict", (3, 1)), "only to listener.priority = 'weighted'"),
    ],
)
def test_bad_queues_or_weights_are_refused_with_one_line_saying_why(
    names: tuple[str, ...], priority: Priority, says: str
) -> None:
    """Duplicates, invalid names and weights that do not fit the queues raise ConfigurationError."""
    with pytest.raises(ConfigurationError, match=says) as raised:
        CloudQueueLocation.of(names, priority=priority)
    assert "\n" not in str(raised.value)
