"""MeteredStorage counts every storage call by operation."""

from __future__ import annotations

from listener import InMemoryQueueStorage, MeteredStorage, QueueStorage


def test_every_call_is_counted_by_operation(queue_name: str) -> None:
    """One call of each kind, empty gets included, is one transaction."""
    storage = MeteredStorage(InMemoryQueueStorage())
    assert isinstance(storage, QueueStorage)
    storage.create_queue(queue_name)
    put = storage.put_message(queue_name, "x")
    storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)
    storage.get_messages(queue_name, max_messages=32, visibility_timeout_s=30)  # empty: billed too
    storage.approximate_message_count(queue_name)
    storage.delete_message(queue_name, put.id, put.pop_receipt)
    assert storage.counts() == {
        "create_queue": 1,
        "put_message": 1,
        "get_messages": 2,
        "approximate_message_count": 1,
        "delete_message": 1,
    }
    assert storage.transactions == 6
