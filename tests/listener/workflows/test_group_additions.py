"""Members added at run time, effect-once: an addition made while a member is handled is recorded
under a name derived from that member and what it adds, so its redelivery (a ``kill -9`` after
the add, before the delete) adds the same member ids, puts them again only when the earlier
delivery did not finish putting them, and the group completes once with the members it has. A
repeat is answered even once the group completed, an addition's as a chain step's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from cloudqueue.listener import InMemoryQueueStorage, Publisher
from cloudqueue.listener.consumer.current import set_current_message
from cloudqueue.listener.errors import TransientStorageError
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.membership import membership_of
from cloudqueue.listener.workflows.group_ledger import Addition, GroupError, GroupStatus
from tests.listener.workflows.test_group_ledger import LedgerMaker, azure_ledgers, clock, ledgers

__all__ = ["clock", "ledgers"]  # the fixtures, shared with the ledger's specification

R = TypeVar("R")

ADDED = [{"n": 10}, {"n": 11}]


def test_an_addition_repeated_by_name_gets_the_same_ids_and_adds_nothing(
    ledgers: LedgerMaker,
) -> None:
    """A named addition asked again (from another connection too) answers the same ids without
    growing the group, says whether they were put once marked, and still answers once the group
    completed; another name adds new members, and a repeat asking another count is refused."""
    ledger = ledgers()
    ledger.open("g7", total=1, on_complete="done")
    first = ledger.add_members("g7", 2, by="a")
    assert first == Addition(["1", "2"], put=False)
    assert ledgers().add_members("g7", 2, by="a") == first
    assert ledger.add_members("g7", 1, by="b").member_ids == ["3"]
    ledger.mark_added("g7", "a")
    assert ledger.add_members("g7", 2, by="a") == Addition(["1", "2"], put=True)
    with pytest.raises(GroupError, match="repeated"):
        ledger.add_members("g7", 3, by="a")
    for member in ("0", "1", "2"):
        assert ledger.settle("g7", member, "handled") is None
    last = ledger.settle("g7", "3", "handled")
    assert last is not None
    assert last.total == 4
    assert ledger.add_members("g7", 2, by="a").member_ids == ["1", "2"]


@pytest.fixture
def azure_only(azurite_with_tables: Any, clock: ManualClock) -> Iterator[LedgerMaker]:
    yield from azure_ledgers(azurite_with_tables.connection_string, clock)


def test_additions_racing_settlements_on_azure_count_every_member_once(
    azure_only: LedgerMaker,
) -> None:
    """On Azure an addition merges the shards' totals without If-Match (only the group row's
    must hold): four additions made while two threads settle 31 of the group's 32 first members
    leave exact counts, and of all the settlements exactly one was the last."""
    azure_only().open("race", total=32, on_complete="done")
    lasts: list[GroupStatus] = []
    added: list[str] = []
    start = threading.Barrier(3)

    def settle(members: range) -> None:
        mine = azure_only()
        start.wait()
        lasts.extend(last for n in members if (last := mine.settle("race", str(n), "handled")))

    def add() -> None:
        mine = azure_only()
        start.wait()
        for name in "abcd":
            added.extend(mine.add_members("race", 4, by=name).member_ids)

    threads = [threading.Thread(target=settle, args=(range(part, 32, 2),)) for part in (1, 2)]
    threads.append(threading.Thread(target=add))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ledger = azure_only()
    assert sorted(added, key=int) == [str(n) for n in range(32, 48)]
    for member in ["0", *added]:  # member 0 held the group open while the additions raced
        if last := ledger.settle("race", member, "handled"):
            lasts.append(last)
    assert [(last.total, last.handled, last.pending) for last in lasts] == [(48, 48, 0)]


class FailingPuts(ForwardingStorage):
    """Fails the next ``failures`` puts with a timeout, as a process killed before them."""

    def __init__(self, inner: QueueStorage) -> None:
        super().__init__(inner)
        self.failures = 0

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        if operation == "put_message" and self.failures:
            self.failures -= 1
            raise TransientStorageError("put timed out")
        return call()


@pytest.fixture
def storage() -> FailingPuts:
    storage = FailingPuts(InMemoryQueueStorage())
    for queue in ("work", "done"):
        storage.create_queue(queue)
    return storage


def member_ids_queued(storage: QueueStorage) -> list[str]:
    """The member ids of the visible messages (the one being handled is not)."""
    messages = storage.peek_messages("work", max_messages=32)
    members = [membership_of(parse_envelope(message.content)) for message in messages]
    return sorted(member.member_id for member in members if member is not None)


def delivered(storage: QueueStorage, message: QueueMessage, handler: Callable[[], Any]) -> Any:
    """``handler`` run as the delivery of ``message`` on the queue ``work``."""
    set_current_message("work", message)
    try:
        return handler()
    finally:
        set_current_message(None)


def test_a_redelivered_member_adds_the_same_members_and_puts_them_once(
    storage: FailingPuts,
) -> None:
    """Member 0 adds two items; delivered again (killed after the add, before its delete), it
    gets the same member ids: the group has 3 members, the queue 2 added messages, not 4."""
    publisher = Publisher(storage, "work", dict)
    group = publisher.send_group([{"n": 0}], on_complete="done")
    [member] = storage.get_messages("work", max_messages=1, visibility_timeout_s=30)

    def add() -> list[str]:
        return publisher.add_to_group(ADDED)

    assert delivered(storage, member, add) == ["1", "2"]
    assert delivered(storage, member, add) == ["1", "2"]
    assert group.status().total == 3
    assert member_ids_queued(storage) == ["1", "2"]


def test_a_crash_between_the_add_and_its_puts_is_repaired_by_the_redelivery(
    storage: FailingPuts,
) -> None:
    """The added members are counted but their puts fail (the process died): the member's
    redelivery puts those same members, so the group completes when they and it settle."""
    publisher = Publisher(storage, "work", dict)
    group = publisher.send_group([{"n": 0}], on_complete="done")
    [member] = storage.get_messages("work", max_messages=1, visibility_timeout_s=30)
    storage.failures = 1
    with pytest.raises(TransientStorageError):
        delivered(storage, member, lambda: publisher.add_to_group(ADDED))
    assert delivered(storage, member, lambda: publisher.add_to_group(ADDED)) == ["1", "2"]
    assert member_ids_queued(storage) == ["1", "2"]
    ledger = group.ledger
    for member_id in ("0", "1"):
        assert ledger.settle(group.id, member_id, "handled") is None
    last = ledger.settle(group.id, "2", "handled")
    assert last is not None
    assert (last.total, last.handled) == (3, 3)


def test_different_items_from_one_delivery_are_different_additions(
    storage: FailingPuts,
) -> None:
    """A handler adding twice with other items adds both; outside a delivery (with a group id)
    each call is an addition of its own."""
    publisher = Publisher(storage, "work", dict)
    group = publisher.send_group([{"n": 0}], on_complete="done")
    [member] = storage.get_messages("work", max_messages=1, visibility_timeout_s=30)

    def add_both() -> list[str]:
        return publisher.add_to_group(ADDED[:1]) + publisher.add_to_group(ADDED[1:])

    assert delivered(storage, member, add_both) == ["1", "2"]
    assert publisher.add_to_group(ADDED[:1], group_id=group.id) == ["3"]
    assert publisher.add_to_group(ADDED[:1], group_id=group.id) == ["4"]
    assert group.status().total == 5


@pytest.mark.parametrize("ledgers", ["memory", "sqlite"], indirect=True)
def test_a_chain_step_repeated_after_its_group_completed_gets_its_ids(
    ledgers: LedgerMaker,
) -> None:
    """A chain step redelivered after its chained member settled the group's last member (killed
    before its own delete) is answered the ids it was given, not refused as adding to a complete
    group: refused, the step would give its message up to the poison queue."""
    ledger = ledgers()
    ledger.open("g8", total=1, on_complete="done")
    assert ledger.pass_on("g8", "0", "split", 2) == ["0", "1"]
    assert ledger.settle("g8", "0", "handled") is None
    assert ledger.settle("g8", "1", "handled") is not None
    assert ledgers().pass_on("g8", "0", "split", 2) == ["0", "1"]
