"""``Publisher.send_group``: members in messages of their own carrying their membership, a handle
whose ``wait`` polls with a back-off from 0.1 s to 5 s, and one clear error for bad input."""

from __future__ import annotations

import threading

import pytest

from cloudqueue.listener import (
    InMemoryQueueStorage,
    InProcessTriggerChannel,
    Publisher,
    WorkAnnouncer,
    WorkDetected,
)
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.membership import membership_of
from cloudqueue.listener.workflows.group_ledger import GroupError
from cloudqueue.listener.workflows.sending import GroupHandle


def publisher_on(storage: InMemoryQueueStorage) -> Publisher[dict[str, int]]:
    for queue in ("work", "done"):
        storage.create_queue(queue)
    return Publisher(storage, "work", dict)


class Finisher:
    """A completion worker class as ``on_complete`` sees it: anything with a ``queue_name``."""

    queue_name = "done"


def test_each_member_travels_alone_with_its_group_and_member_id() -> None:
    """Five items make five messages, members 0..4 of the handle's group, which is open with
    five pending."""
    storage = InMemoryQueueStorage()
    group = publisher_on(storage).send_group([{"n": n} for n in range(5)], on_complete=Finisher)
    messages = storage.get_messages("work", max_messages=32, visibility_timeout_s=30)
    memberships = [membership_of(parse_envelope(m.content)) for m in messages]
    assert sorted(m.member_id for m in memberships if m) == ["0", "1", "2", "3", "4"]
    assert {m.group_id for m in memberships if m} == {group.id}
    status = group.status()
    assert (status.total, status.pending, status.on_complete) == (5, 5, "done")


def test_a_publishers_key_rides_with_each_member() -> None:
    """With ``key="n"``, each member's envelope carries its item's key beside its membership."""
    storage = InMemoryQueueStorage()
    publisher_on(storage)
    keyed = Publisher(storage, "work", dict, key="n")
    keyed.send_group([{"n": 7}], on_complete="done")
    [message] = storage.get_messages("work", max_messages=1, visibility_timeout_s=30)
    envelope = parse_envelope(message.content)
    assert envelope is not None
    assert (envelope.key, membership_of(envelope) is not None) == ("7", True)


@pytest.mark.parametrize(
    ("items", "on_complete", "error"),
    [
        ([], "done", "at least one member"),
        ([{"n": 1}], object(), "a worker class or a queue name"),
        ([{"n": 1}], "Not A Queue", "invalid queue name"),
    ],
    ids=["empty", "not-a-worker", "bad-queue-name"],
)
def test_bad_input_is_one_clear_error_and_sends_nothing(
    items: list[dict[str, int]], on_complete: object, error: str
) -> None:
    """An empty group, or an ``on_complete`` that is no worker or queue, raises GroupError and
    puts no message."""
    storage = InMemoryQueueStorage()
    with pytest.raises(GroupError, match=error):
        publisher_on(storage).send_group(items, on_complete=on_complete)
    assert storage.approximate_message_count("work") == 0


@pytest.mark.parametrize("group_id", ["", "a/b", "x" * 65, "run\x1b[2J", "run#1"])
def test_a_group_id_that_could_not_travel_or_name_a_row_is_refused(group_id: str) -> None:
    """A chosen group id too long for a member's envelope, or with a character Azure's Table
    keys refuse, raises GroupError before the group is opened or a member sent (a member whose
    membership could not be read would never settle, and its group never complete)."""
    storage = InMemoryQueueStorage()
    with pytest.raises(GroupError, match="group_id must be"):
        publisher_on(storage).send_group([{"n": 1}], on_complete="done", group_id=group_id)
    assert storage.approximate_message_count("work") == 0
    publisher_on(storage).send_group([{"n": 1}], on_complete="done", group_id="run-2026.11:a_1")


def test_adding_members_outside_a_members_handler_needs_a_group_id() -> None:
    """``add_to_group`` with no message being handled and no ``group_id`` says what it needs."""
    with pytest.raises(GroupError, match="needs a group_id"):
        publisher_on(InMemoryQueueStorage()).add_to_group([{"n": 1}])


def test_wait_backs_off_from_a_tenth_of_a_second_to_five_seconds() -> None:
    """Waiting on a group that never completes polls after 0.1, 0.2, 0.4 ... s, never more than
    5 s apart, and raises TimeoutError at its deadline."""
    clock = ManualClock()
    storage = InMemoryQueueStorage(clock=clock)
    sent = publisher_on(storage).send_group([{"n": 1}], on_complete="done")
    group = GroupHandle(sent.id, sent.ledger, clock=clock, sleeper=clock)
    with pytest.raises(TimeoutError, match="1 of 1 members pending"):
        group.wait(timeout_s=30)
    assert clock.waits[:7] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert max(clock.waits) == 5.0
    assert sum(clock.waits) == pytest.approx(30)


def test_wait_returns_the_final_status_once_the_last_member_settled() -> None:
    """A member settled during the third poll's pause: ``wait`` returns its counts then."""
    clock = ManualClock()
    storage = InMemoryQueueStorage(clock=clock)
    sent = publisher_on(storage).send_group([{"n": 1}], on_complete="done")

    class SettlingSleeper:
        def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
            clock.wait(stop_event, delay_s)
            if len(clock.waits) == 3:
                sent.ledger.settle(sent.id, "0", "poisoned")
            return False

    group = GroupHandle(sent.id, sent.ledger, clock=clock, sleeper=SettlingSleeper())
    status = group.wait(timeout_s=60)
    assert (status.poisoned, status.done, len(clock.waits)) == (1, True, 3)


def test_a_group_and_an_addition_are_each_announced_once_on_the_trigger_channel() -> None:
    """A publisher with a trigger channel announces a group of five members once, naming five
    messages (``per_batch``), and an addition of two once more; it counts the seven sent."""
    storage = InMemoryQueueStorage()
    publisher_on(storage)
    channel = InProcessTriggerChannel()
    heard: list[WorkDetected] = []
    channel.events.subscribe(heard.append)
    announcer = WorkAnnouncer(channel, account="memory")
    publisher = Publisher(storage, "work", dict, announcer=announcer)
    group = publisher.send_group([{"n": n} for n in range(5)], on_complete=Finisher)
    publisher.add_to_group([{"n": 5}, {"n": 6}], group_id=group.id)
    announced = [(event.queue_name, event.message_count) for event in heard]
    assert announced == [("work", 5), ("work", 2)]
    assert (publisher.messages_sent, storage.approximate_message_count("work")) == (7, 7)
