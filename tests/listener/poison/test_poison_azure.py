"""Each kind of bad input ends in the poison queue with its reason (Azurite); requeue undoes it."""

from __future__ import annotations

import base64
import threading

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    PoisonRecord,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.poison.requeue import requeue_poisoned
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.polling import eventually

ALWAYS_FAILS, GIVES_UP = 13, 14
BAD_CONTENT = {
    "malformed base64": "%%% not base64 %%%",
    "malformed JSON": base64.b64encode(b"{").decode(),
    "schema-invalid item": base64.b64encode(b'"not a number"').decode(),
    "empty message": "",
}


def test_bad_input_is_poisoned_with_its_reason_while_good_messages_flow(
    azurite_connection_string: str, queue_name: str
) -> None:
    """Failing, hopeless, malformed and empty messages are poisoned; ten good ones are handled."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    storage.create_queue(queue_name)
    codec = MessageCodec(int)
    for number in [*range(10), ALWAYS_FAILS, GIVES_UP]:
        storage.put_message(queue_name, codec.encode(number))
    for content in BAD_CONTENT.values():
        storage.put_message(queue_name, content)
    good: list[int] = []
    lock = threading.Lock()

    def handle(number: int) -> None:
        if number == ALWAYS_FAILS:
            raise RuntimeError("downstream keeps failing")
        if number == GIVES_UP:
            raise PermanentFailure("invoice references a deleted customer")
        with lock:
            good.append(number)

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage,
        CloudQueueLocation(queue_name),
        int,
        dequeue_interval_s=0.1,
        delivery=DeliveryPolicy(max_dequeue_count=3, retry_delay_s=0.0),
    )
    listener.subscribe(handle)
    listener.start_listener(2)
    try:
        eventually(lambda: listener.messages_poisoned == 6, timeout_s=60)
    finally:
        listener.stop(10)
    assert sorted(good) == list(range(10))
    assert storage.approximate_message_count(queue_name) == 0
    poison = storage.get_messages(
        poison_queue_name(queue_name), max_messages=32, visibility_timeout_s=1
    )
    records = {
        record.content: record
        for record in map(PoisonRecord.from_json, (m.content for m in poison))
    }
    assert records[codec.encode(ALWAYS_FAILS)].reason == "max_dequeue_count_exceeded"
    assert records[codec.encode(ALWAYS_FAILS)].dequeue_count == 3
    assert records[codec.encode(GIVES_UP)].reason == "permanent_failure"
    for content in BAD_CONTENT.values():
        assert records[content].reason == "undecodable"
        assert records[content].error
    requeued: list[int] = []

    def requeue_all() -> bool:
        # The records read above stay hidden for a second, so this may take a few rounds.
        requeued.append(requeue_poisoned(storage, queue_name))
        return sum(requeued) == 6

    eventually(requeue_all)
    assert storage.approximate_message_count(queue_name) == 6
    storage.close()


def test_a_poison_queue_deleted_while_the_listener_runs_is_created_again(
    azurite_connection_string: str, queue_name: str
) -> None:
    """Azure answers 404 for the put: the listener creates the poison queue and the record keeps
    the handler's reason (a 409 QueueBeingDeleted meanwhile only delays the move)."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    poison = poison_queue_name(queue_name)
    storage.create_queue(queue_name)
    storage.create_queue(poison)
    storage.put_message(queue_name, MessageCodec(int).encode(GIVES_UP))

    def handle(_: int) -> None:
        storage.delete_queue(poison)
        raise PermanentFailure("invoice references a deleted customer")

    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name, visibility_timeout_s=1), int, dequeue_interval_s=0.1
    )
    listener.subscribe(handle)
    listener.start_listener(1)
    try:
        eventually(lambda: listener.messages_poisoned == 1, timeout_s=30)
    finally:
        listener.stop(10)
    (record,) = storage.peek_messages(poison, max_messages=32)
    assert PoisonRecord.from_json(record.content).reason == "permanent_failure"
    assert storage.approximate_message_count(queue_name) == 0
    storage.close()
