"""The storage contract: what every ``QueueStorage`` backend does, proven on each of them.

Every test runs on the in-memory store, the SQLite store and the Azure backend against Azurite, on
real time. Waiting for a visibility timeout or a TTL to pass is done by polling the store with a
deadline (``eventually``), never by sleeping a guessed duration. Timeouts that a test waits out are
1 s; timeouts it must not see expire are 30 s.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cloudqueue.listener.errors import (
    ConfigurationError,
    MessageNotFoundError,
    MessageTooLargeError,
    PopReceiptMismatchError,
    QueueNotFoundError,
    TransientStorageError,
)
from cloudqueue.listener.queue_limits import (
    DEFAULT_TIME_TO_LIVE_S,
    MAX_BATCH_SIZE,
    MAX_MESSAGE_BYTES,
    MAX_VISIBILITY_TIMEOUT_S,
    NEVER_EXPIRES,
)
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage
from tests.support.polling import eventually

SHORT_S = 1
"""A visibility timeout or TTL the test waits out."""

LONG_S = 30
"""A visibility timeout the test must never see expire."""

CLOCK_SLACK = timedelta(seconds=5)
"""Tolerance for comparing the backend's timestamps with ours (Azure's have whole seconds)."""


@pytest.fixture
def queue(storage: QueueStorage, queue_name: str) -> str:
    """A fresh, empty queue on the backend under test."""
    storage.create_queue(queue_name)
    return queue_name


def partition_count(storage: QueueStorage, queue: str) -> int:
    """How many physical queues stand behind ``queue`` (1 unless the storage partitions it)."""
    return storage.partition_count(queue) if isinstance(storage, PartitionedQueueStorage) else 1


def get_some(
    storage: QueueStorage, queue: str, *, max_messages: int, visibility_timeout_s: int = LONG_S
) -> list[QueueMessage]:
    """What gets find: one get on a plain queue; on a partitioned one, gets until one finds
    messages or every partition was asked once (each get asks one partition, in turn)."""
    for _ in range(partition_count(storage, queue)):
        messages = storage.get_messages(
            queue, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )
        if messages:
            return messages
    return []


def get_one(storage: QueueStorage, queue: str, visibility_timeout_s: int = LONG_S) -> QueueMessage:
    """Get exactly one message, failing the test if there is none."""
    messages = get_some(storage, queue, max_messages=1, visibility_timeout_s=visibility_timeout_s)
    assert len(messages) == 1, messages
    return messages[0]


def get_all(storage: QueueStorage, queue: str) -> list[QueueMessage]:
    """Get every message that is visible now (up to a batch per partition), hiding them for a
    long time."""
    taken: list[QueueMessage] = []
    empty_in_a_row = 0
    while empty_in_a_row < partition_count(storage, queue):
        page = storage.get_messages(queue, max_messages=MAX_BATCH_SIZE, visibility_timeout_s=LONG_S)
        taken.extend(page)
        empty_in_a_row = 0 if page else empty_in_a_row + 1
    return taken


def redelivered(storage: QueueStorage, queue: str) -> QueueMessage:
    """Poll until a message becomes visible again, and take it."""
    return eventually(lambda: get_all(storage, queue))[0]


def assert_close_to(actual: datetime, expected: datetime) -> None:
    assert actual.tzinfo is not None, f"{actual!r} is naive"
    assert abs(actual - expected) <= CLOCK_SLACK, (actual, expected)


# Queues


def test_create_queue_is_idempotent_and_keeps_messages(storage: QueueStorage, queue: str) -> None:
    """Creating an existing queue succeeds and leaves its messages alone."""
    storage.put_message(queue, "kept")
    storage.create_queue(queue)
    assert [m.content for m in get_all(storage, queue)] == ["kept"]


@pytest.mark.parametrize("name", ["Upper", "ab", "double--hyphen", "-leading", "under_score"])
def test_invalid_queue_name_is_a_configuration_error(storage: QueueStorage, name: str) -> None:
    """A name Azure would reject fails with ConfigurationError when the queue is created."""
    with pytest.raises(ConfigurationError):
        storage.create_queue(name)


def test_operations_on_a_missing_queue_raise_queue_not_found(
    storage: QueueStorage, queue_name: str
) -> None:
    """Get, put and count on a queue that was never created raise QueueNotFoundError."""
    with pytest.raises(QueueNotFoundError):
        storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=LONG_S)
    with pytest.raises(QueueNotFoundError):
        storage.put_message(queue_name, "nowhere")
    with pytest.raises(QueueNotFoundError):
        storage.approximate_message_count(queue_name)


# Put and get


@pytest.mark.parametrize(
    "content",
    ["hello", "héllo wörld, 日本語, emoji 🚀", "<xml attr=\"1\">&amp; 'quoted'</xml>", "{}"],
)
def test_text_round_trips_unchanged(storage: QueueStorage, queue: str, content: str) -> None:
    """A message's text comes back from a get exactly as it was put, non-ASCII included."""
    storage.put_message(queue, content)
    assert get_one(storage, queue).content == content


def test_put_returns_the_envelope_a_get_later_sees(storage: QueueStorage, queue: str) -> None:
    """Put returns the message's id, insertion time and a 7-day default expiry; nothing dequeued."""
    before = datetime.now(UTC)
    put = storage.put_message(queue, "envelope")
    assert put.id
    assert put.content == "envelope"
    assert put.dequeue_count == 0
    assert_close_to(put.inserted_on, before)
    assert put.expires_on is not None
    assert_close_to(put.expires_on, put.inserted_on + timedelta(seconds=DEFAULT_TIME_TO_LIVE_S))
    assert_close_to(put.next_visible_on, put.inserted_on)

    got = get_one(storage, queue)
    assert got.id == put.id
    assert got.inserted_on == put.inserted_on
    assert got.expires_on == put.expires_on


def test_get_hides_the_message_and_counts_the_dequeue(storage: QueueStorage, queue: str) -> None:
    """A get hands out dequeue count 1, a pop receipt and a next-visible time a timeout away."""
    storage.put_message(queue, "first")
    before = datetime.now(UTC)
    got = get_one(storage, queue, visibility_timeout_s=LONG_S)
    assert got.dequeue_count == 1
    assert got.pop_receipt
    assert_close_to(got.next_visible_on, before + timedelta(seconds=LONG_S))


def test_a_got_message_is_invisible_to_a_second_get(storage: QueueStorage, queue: str) -> None:
    """While its visibility timeout runs, a taken message is not handed to anyone else."""
    storage.put_message(queue, "mine")
    get_one(storage, queue, visibility_timeout_s=LONG_S)
    assert get_all(storage, queue) == []


@pytest.mark.waits_out_a_timeout
def test_message_reappears_after_its_visibility_timeout(storage: QueueStorage, queue: str) -> None:
    """A message not deleted in time is delivered again, with dequeue count 2 and a new receipt."""
    put = storage.put_message(queue, "again")
    first = get_one(storage, queue, visibility_timeout_s=SHORT_S)
    second = redelivered(storage, queue)
    assert second.id == put.id == first.id
    assert second.dequeue_count == 2
    assert second.pop_receipt != first.pop_receipt
    assert second.content == "again"


@pytest.mark.waits_out_a_timeout
def test_a_message_put_with_a_delay_is_invisible_until_the_delay_passes(
    storage: QueueStorage, queue: str
) -> None:
    """A visibility delay on put hides the message from gets, though the count includes it."""
    put = storage.put_message(queue, "later", visibility_delay_s=SHORT_S)
    assert_close_to(put.next_visible_on, put.inserted_on + timedelta(seconds=SHORT_S))
    assert get_all(storage, queue) == []
    assert storage.approximate_message_count(queue) == 1
    later = redelivered(storage, queue)
    assert later.id == put.id
    assert later.dequeue_count == 1


@pytest.mark.one_physical_queue
def test_one_get_returns_at_most_32_messages(storage: QueueStorage, queue: str) -> None:
    """Of 40 visible messages one get of 32 takes 32 distinct ones; the next takes the other 8."""
    for index in range(40):
        storage.put_message(queue, f"m{index}")
    first, second = (
        storage.get_messages(queue, max_messages=MAX_BATCH_SIZE, visibility_timeout_s=LONG_S)
        for _ in range(2)
    )
    assert len(first) == MAX_BATCH_SIZE
    assert len(second) == 8
    assert {m.content for m in first + second} == {f"m{index}" for index in range(40)}


# Delete


def test_delete_with_the_current_receipt_removes_the_message(
    storage: QueueStorage, queue: str
) -> None:
    """Deleting with the receipt of the latest get returns True and the message is gone."""
    storage.put_message(queue, "done")
    got = get_one(storage, queue)
    assert storage.delete_message(queue, got.id, got.pop_receipt) is True
    assert storage.approximate_message_count(queue) == 0


def test_delete_with_the_receipt_from_put_works_until_a_get(
    storage: QueueStorage, queue: str
) -> None:
    """The receipt put returns deletes the message, as long as no get has taken it since."""
    put = storage.put_message(queue, "unwanted")
    assert storage.delete_message(queue, put.id, put.pop_receipt) is True
    assert storage.approximate_message_count(queue) == 0


@pytest.mark.waits_out_a_timeout
def test_delete_with_a_stale_receipt_returns_false_and_keeps_the_message(
    storage: QueueStorage, queue: str
) -> None:
    """After redelivery the first receipt is stale: deleting with it fails and the message stays."""
    storage.put_message(queue, "contested")
    first = get_one(storage, queue, visibility_timeout_s=SHORT_S)
    second = redelivered(storage, queue)
    assert storage.delete_message(queue, first.id, first.pop_receipt) is False
    assert storage.approximate_message_count(queue) == 1
    assert storage.delete_message(queue, second.id, second.pop_receipt) is True


def test_delete_of_a_deleted_message_returns_false(storage: QueueStorage, queue: str) -> None:
    """Deleting a message twice returns False the second time, without raising."""
    storage.put_message(queue, "once")
    got = get_one(storage, queue)
    assert storage.delete_message(queue, got.id, got.pop_receipt) is True
    assert storage.delete_message(queue, got.id, got.pop_receipt) is False


def test_delete_of_an_unknown_message_returns_false(storage: QueueStorage, queue: str) -> None:
    """Deleting an id the queue never held returns False, without raising."""
    put = storage.put_message(queue, "bystander")
    assert storage.delete_message(queue, str(uuid.uuid4()), put.pop_receipt) is False
    assert storage.approximate_message_count(queue) == 1


# Update visibility


def test_update_visibility_returns_a_receipt_that_replaces_the_old_one(
    storage: QueueStorage, queue: str
) -> None:
    """The new receipt deletes the message; the one it replaced no longer does."""
    storage.put_message(queue, "renewed")
    got = get_one(storage, queue)
    new_receipt = storage.update_visibility(queue, got.id, got.pop_receipt, LONG_S)
    assert new_receipt != got.pop_receipt
    assert storage.delete_message(queue, got.id, got.pop_receipt) is False
    assert storage.delete_message(queue, got.id, new_receipt) is True


def test_update_visibility_to_zero_releases_the_message(storage: QueueStorage, queue: str) -> None:
    """A visibility timeout of 0 makes a taken message visible at once, to be taken again."""
    storage.put_message(queue, "released")
    got = get_one(storage, queue, visibility_timeout_s=LONG_S)
    storage.update_visibility(queue, got.id, got.pop_receipt, 0)
    again = get_one(storage, queue)
    assert again.id == got.id
    assert again.dequeue_count == 2


def test_update_visibility_with_a_stale_receipt_raises_pop_receipt_mismatch(
    storage: QueueStorage, queue: str
) -> None:
    """Updating with a receipt that an update already replaced raises PopReceiptMismatchError."""
    storage.put_message(queue, "stale")
    got = get_one(storage, queue)
    storage.update_visibility(queue, got.id, got.pop_receipt, LONG_S)
    with pytest.raises(PopReceiptMismatchError):
        storage.update_visibility(queue, got.id, got.pop_receipt, LONG_S)


def test_update_visibility_of_a_deleted_message_raises_message_not_found(
    storage: QueueStorage, queue: str
) -> None:
    """Updating a message that is gone raises MessageNotFoundError (not a receipt mismatch)."""
    storage.put_message(queue, "gone")
    got = get_one(storage, queue)
    storage.delete_message(queue, got.id, got.pop_receipt)
    with pytest.raises(MessageNotFoundError) as raised:
        storage.update_visibility(queue, got.id, got.pop_receipt, LONG_S)
    assert not isinstance(raised.value, PopReceiptMismatchError)


def test_update_visibility_with_content_rewrites_the_text_in_the_same_call(
    storage: QueueStorage, queue: str
) -> None:
    """The next get of a message updated with new content sees that content (a handler's
    checkpoint travels so); an update without content keeps the text."""
    storage.put_message(queue, "first text")
    got = get_one(storage, queue)
    receipt = storage.update_visibility(queue, got.id, got.pop_receipt, 0, content="second text")
    assert receipt != got.pop_receipt
    again = get_one(storage, queue)
    assert (again.id, again.content) == (got.id, "second text")
    storage.update_visibility(queue, again.id, again.pop_receipt, 0)
    assert get_one(storage, queue).content == "second text"


def test_update_visibility_with_content_over_64_kib_is_rejected(
    storage: QueueStorage, queue: str
) -> None:
    """New content over the limit raises MessageTooLargeError, as a put does; the text stays."""
    storage.put_message(queue, "kept")
    got = get_one(storage, queue)
    with pytest.raises(MessageTooLargeError):
        storage.update_visibility(
            queue, got.id, got.pop_receipt, LONG_S, content="x" * (MAX_MESSAGE_BYTES + 1)
        )
    storage.update_visibility(queue, got.id, got.pop_receipt, 0)
    assert get_one(storage, queue).content == "kept"


# Time-to-live


@pytest.mark.waits_out_a_timeout
def test_a_message_expires_after_its_time_to_live(storage: QueueStorage, queue: str) -> None:
    """Once its TTL passes a message is never delivered again and drops out of the count."""
    put = storage.put_message(queue, "fleeting", time_to_live_s=SHORT_S)
    assert put.expires_on is not None
    assert_close_to(put.expires_on, put.inserted_on + timedelta(seconds=SHORT_S))
    assert storage.approximate_message_count(queue) == 1

    # Azurite purges expired messages only when a get touches the queue, so get before counting.
    # A get that still finds the message just hides it; it expires all the same.
    eventually(
        lambda: not get_all(storage, queue) and storage.approximate_message_count(queue) == 0
    )
    assert get_all(storage, queue) == []


@pytest.mark.waits_out_a_timeout
def test_a_delayed_message_expires_counting_from_its_put_not_from_its_delay(
    storage: QueueStorage, queue: str
) -> None:
    """Delay and TTL together: visible after the delay, expiring TTL seconds after the put."""
    put = storage.put_message(queue, "later", visibility_delay_s=SHORT_S, time_to_live_s=LONG_S)
    assert_close_to(put.next_visible_on, put.inserted_on + timedelta(seconds=SHORT_S))
    assert put.expires_on is not None
    assert_close_to(put.expires_on, put.inserted_on + timedelta(seconds=LONG_S))
    later = redelivered(storage, queue)
    assert later.id == put.id
    assert later.expires_on is not None
    assert_close_to(later.expires_on, put.expires_on)


def test_the_longest_delay_of_seven_days_is_accepted(storage: QueueStorage, queue: str) -> None:
    """7 days is Azure's limit for an initial delay; with a longer TTL the put succeeds."""
    put = storage.put_message(
        queue,
        "next week",
        visibility_delay_s=MAX_VISIBILITY_TIMEOUT_S,
        time_to_live_s=NEVER_EXPIRES,
    )
    assert_close_to(put.next_visible_on, put.inserted_on + timedelta(days=7))
    assert get_all(storage, queue) == []
    assert storage.approximate_message_count(queue) == 1


def test_a_message_put_to_never_expire_has_no_expiry(storage: QueueStorage, queue: str) -> None:
    """NEVER_EXPIRES gives a message without an expiry time, on put and on get."""
    put = storage.put_message(queue, "forever", time_to_live_s=NEVER_EXPIRES)
    assert put.expires_on is None
    assert get_one(storage, queue).expires_on is None


# Counting


def test_approximate_count_includes_invisible_messages(storage: QueueStorage, queue: str) -> None:
    """Messages taken by a get still count until they are deleted."""
    for content in ("a", "b", "c"):
        storage.put_message(queue, content)
    taken = get_some(storage, queue, max_messages=1) + get_some(storage, queue, max_messages=1)
    assert len(taken) == 2
    assert storage.approximate_message_count(queue) == 3
    storage.delete_message(queue, taken[0].id, taken[0].pop_receipt)
    assert storage.approximate_message_count(queue) == 2


# Peek


def peek_all(storage: QueueStorage, queue: str) -> list[QueueMessage]:
    """Peek at every message that is visible now (up to a batch)."""
    return storage.peek_messages(queue, max_messages=MAX_BATCH_SIZE)


def test_peek_shows_visible_messages_without_taking_them(storage: QueueStorage, queue: str) -> None:
    """Peeked messages carry their content and dequeue count 0, no receipt, and stay visible."""
    puts = {storage.put_message(queue, content).id: content for content in ("a", "b")}
    peeked = peek_all(storage, queue)
    assert {m.id: m.content for m in peeked} == puts
    assert {(m.pop_receipt, m.dequeue_count) for m in peeked} == {("", 0)}
    assert {m.id for m in peek_all(storage, queue)} == set(puts)
    got = get_all(storage, queue)
    assert {m.id for m in got} == set(puts)
    assert {m.dequeue_count for m in got} == {1}


def test_peek_skips_messages_that_are_taken_or_delayed(storage: QueueStorage, queue: str) -> None:
    """Only visible messages are peeked: not one a get holds, nor one put with a delay."""
    storage.put_message(queue, "taken")
    get_one(storage, queue, visibility_timeout_s=LONG_S)
    storage.put_message(queue, "later", visibility_delay_s=LONG_S)
    storage.put_message(queue, "visible")
    assert [m.content for m in peek_all(storage, queue)] == ["visible"]
    assert storage.approximate_message_count(queue) == 3


@pytest.mark.waits_out_a_timeout
def test_peek_reports_a_redelivered_message_without_counting_a_dequeue(
    storage: QueueStorage, queue: str
) -> None:
    """A message back from its visibility timeout peeks with dequeue count 1; a get then says 2."""
    put = storage.put_message(queue, "again")
    get_one(storage, queue, visibility_timeout_s=SHORT_S)
    peeked = eventually(lambda: peek_all(storage, queue))
    assert [(m.id, m.dequeue_count) for m in peeked] == [(put.id, 1)]
    assert peeked[0].next_visible_on <= datetime.now(UTC) + CLOCK_SLACK
    assert get_one(storage, queue).dequeue_count == 2


def test_peek_returns_at_most_max_messages(storage: QueueStorage, queue: str) -> None:
    """Of 40 visible messages a peek of 32 shows 32 distinct ones, and a peek of 5 shows 5."""
    for index in range(40):
        storage.put_message(queue, f"m{index}")
    assert len({m.id for m in peek_all(storage, queue)}) == MAX_BATCH_SIZE
    assert len(storage.peek_messages(queue, max_messages=5)) == 5


@pytest.mark.waits_out_a_timeout
def test_an_expired_message_is_not_peeked(storage: QueueStorage, queue: str) -> None:
    """Once its TTL passes a message no longer shows up in a peek."""
    storage.put_message(queue, "fleeting", time_to_live_s=SHORT_S)
    storage.put_message(queue, "lasting")
    eventually(lambda: [m.content for m in peek_all(storage, queue)] == ["lasting"])


@pytest.mark.parametrize("max_messages", [0, MAX_BATCH_SIZE + 1])
def test_out_of_range_peek_size_raises_value_error(
    storage: QueueStorage, queue: str, max_messages: int
) -> None:
    """A peek size outside 1..32 is refused before any call."""
    with pytest.raises(ValueError, match="max_messages"):
        storage.peek_messages(queue, max_messages=max_messages)


# Queue administration


def test_list_queues_returns_the_names_with_the_prefix_sorted(
    storage: QueueStorage, queue_name: str
) -> None:
    """Only queues whose names start with the prefix are listed, in name order."""
    other = f"z{queue_name}"
    for name in (f"{queue_name}-b", f"{queue_name}-a", other):
        storage.create_queue(name)
    assert storage.list_queues(queue_name) == [f"{queue_name}-a", f"{queue_name}-b"]
    assert storage.list_queues(f"{queue_name}-nothing") == []
    everything = storage.list_queues()
    assert everything == sorted(everything)
    assert {f"{queue_name}-a", f"{queue_name}-b", other} <= set(everything)


def test_clear_removes_every_message_and_keeps_the_queue(storage: QueueStorage, queue: str) -> None:
    """Visible, taken and delayed messages all go; the queue then takes new messages as before."""
    storage.put_message(queue, "visible")
    storage.put_message(queue, "taken")
    taken = get_one(storage, queue)
    storage.put_message(queue, "later", visibility_delay_s=LONG_S)
    storage.clear_queue(queue)
    assert storage.approximate_message_count(queue) == 0
    assert get_all(storage, queue) == []
    assert storage.delete_message(queue, taken.id, taken.pop_receipt) is False
    storage.put_message(queue, "fresh")
    assert [m.content for m in get_all(storage, queue)] == ["fresh"]


def test_clear_of_an_empty_queue_succeeds(storage: QueueStorage, queue: str) -> None:
    """Clearing a queue that holds nothing is not an error."""
    storage.clear_queue(queue)
    assert storage.approximate_message_count(queue) == 0


def test_delete_queue_removes_the_queue_and_its_messages(storage: QueueStorage, queue: str) -> None:
    """A deleted queue is no longer listed, and using it raises QueueNotFoundError."""
    storage.put_message(queue, "doomed")
    storage.delete_queue(queue)
    assert queue not in storage.list_queues(queue)
    with pytest.raises(QueueNotFoundError):
        storage.put_message(queue, "too late")
    with pytest.raises(QueueNotFoundError):
        storage.approximate_message_count(queue)


def test_a_deleted_queue_can_be_created_again_empty(storage: QueueStorage, queue: str) -> None:
    """The name is free again once the service lets go of it (Azure: 40 s or more), and the new
    queue starts empty."""
    storage.put_message(queue, "old")
    storage.delete_queue(queue)

    def recreated() -> bool:
        try:
            storage.create_queue(queue)
        except TransientStorageError:  # 409 QueueBeingDeleted: not yet
            return False
        return True

    eventually(recreated, timeout_s=120, interval_s=1)
    assert storage.approximate_message_count(queue) == 0
    assert peek_all(storage, queue) == []


def test_administration_of_a_missing_queue_raises_queue_not_found(
    storage: QueueStorage, queue_name: str
) -> None:
    """Peek, clear and delete on a queue that was never created raise QueueNotFoundError."""
    with pytest.raises(QueueNotFoundError):
        storage.peek_messages(queue_name, max_messages=1)
    with pytest.raises(QueueNotFoundError):
        storage.clear_queue(queue_name)
    with pytest.raises(QueueNotFoundError):
        storage.delete_queue(queue_name)


@pytest.mark.one_physical_queue
def test_metadata_is_replaced_whole_and_read_back(storage: QueueStorage, queue: str) -> None:
    """A new queue has no metadata; a set replaces all of it, and a get reads back what was set."""
    assert storage.get_queue_metadata(queue) == {}
    storage.set_queue_metadata(queue, {"cloudqueue_partitions": "4", "owner": "billing"})
    storage.set_queue_metadata(queue, {"cloudqueue_partitions": "5"})
    assert storage.get_queue_metadata(queue) == {"cloudqueue_partitions": "5"}


@pytest.mark.one_physical_queue
def test_metadata_goes_with_its_queue(storage: QueueStorage, queue_name: str) -> None:
    """Metadata of a missing queue raises QueueNotFoundError; deleting a queue deletes its
    metadata, and a name Azure would refuse is refused before any call."""
    with pytest.raises(QueueNotFoundError):
        storage.get_queue_metadata(queue_name)
    with pytest.raises(QueueNotFoundError):
        storage.set_queue_metadata(queue_name, {"a": "1"})
    storage.create_queue(queue_name)
    with pytest.raises(ValueError, match="lowercase identifier"):
        storage.set_queue_metadata(queue_name, {"not-an-identifier": "1"})
    storage.set_queue_metadata(queue_name, {"a": "1"})
    storage.delete_queue(queue_name)
    with pytest.raises(QueueNotFoundError):
        storage.get_queue_metadata(queue_name)


def test_deleting_an_invalid_queue_name_is_a_configuration_error(storage: QueueStorage) -> None:
    """A name Azure would reject fails with ConfigurationError on delete, as on create."""
    with pytest.raises(ConfigurationError):
        storage.delete_queue("Not_A_Queue")


# Limits


def test_a_message_over_64_kib_is_rejected(storage: QueueStorage, queue: str) -> None:
    """Content over MAX_MESSAGE_BYTES raises MessageTooLargeError and nothing is stored."""
    with pytest.raises(MessageTooLargeError):
        storage.put_message(queue, "x" * (MAX_MESSAGE_BYTES + 1))
    assert storage.approximate_message_count(queue) == 0


def test_the_size_limit_counts_utf8_bytes_not_characters(storage: QueueStorage, queue: str) -> None:
    """Two-byte characters exceed the limit at half as many characters."""
    with pytest.raises(MessageTooLargeError):
        storage.put_message(queue, "é" * (MAX_MESSAGE_BYTES // 2 + 1))


def test_a_message_of_48_kib_is_accepted(storage: QueueStorage, queue: str) -> None:
    """A message comfortably under the limit is stored and read back whole."""
    content = "y" * (48 * 1024)
    storage.put_message(queue, content)
    assert get_one(storage, queue).content == content


@pytest.mark.parametrize(
    ("max_messages", "visibility_timeout_s"),
    [(0, LONG_S), (MAX_BATCH_SIZE + 1, LONG_S), (1, 0), (1, MAX_VISIBILITY_TIMEOUT_S + 1)],
)
def test_out_of_range_get_arguments_raise_value_error_before_any_call(
    storage: QueueStorage, queue: str, max_messages: int, visibility_timeout_s: int
) -> None:
    """A batch size outside 1..32 or a timeout outside 1 s..7 days is refused; nothing is taken."""
    storage.put_message(queue, "untouched")
    with pytest.raises(ValueError, match=r"max_messages|visibility_timeout_s"):
        storage.get_messages(
            queue, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
        )
    assert get_one(storage, queue).dequeue_count == 1


@pytest.mark.parametrize(
    ("time_to_live_s", "visibility_delay_s"),
    [
        (0, 0),
        (-2, 0),
        (None, -1),
        (None, MAX_VISIBILITY_TIMEOUT_S + 1),
        (5, 5),
        (None, 1.5),
        (2.5, 0),
    ],
)
def test_out_of_range_put_arguments_raise_value_error(
    storage: QueueStorage, queue: str, time_to_live_s: int | None, visibility_delay_s: int
) -> None:
    """A TTL below 1 s (other than NEVER_EXPIRES), a delay outside 0..7 days or not below the
    TTL, or either not a whole number of seconds, is refused and nothing is stored."""
    with pytest.raises(ValueError, match=r"time_to_live_s|visibility_delay_s"):
        storage.put_message(
            queue, "refused", time_to_live_s=time_to_live_s, visibility_delay_s=visibility_delay_s
        )
    assert storage.approximate_message_count(queue) == 0


@pytest.mark.parametrize("visibility_timeout_s", [-1, MAX_VISIBILITY_TIMEOUT_S + 1])
def test_out_of_range_update_visibility_raises_value_error(
    storage: QueueStorage, queue: str, visibility_timeout_s: int
) -> None:
    """An updated visibility timeout outside 0..7 days is refused; the receipt stays valid."""
    storage.put_message(queue, "held")
    got = get_one(storage, queue)
    with pytest.raises(ValueError, match="visibility_timeout_s"):
        storage.update_visibility(queue, got.id, got.pop_receipt, visibility_timeout_s)
    assert storage.delete_message(queue, got.id, got.pop_receipt) is True
