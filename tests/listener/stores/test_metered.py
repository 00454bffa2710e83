"""MeteredStorage counts every storage call by operation."""

from __future__ import annotations

from cloudqueue.listener import InMemoryQueueStorage, MeteredStorage, QueueStorage


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


def test_administration_calls_are_counted_too(queue_name: str) -> None:
    """Peek, list, clear and delete each count as one transaction, like the message calls."""
    storage = MeteredStorage(InMemoryQueueStorage())
    storage.create_queue(queue_name)
    storage.put_message(queue_name, "x")
    assert [m.content for m in storage.peek_messages(queue_name, max_messages=1)] == ["x"]
    assert storage.list_queues(queue_name) == [queue_name]
    storage.clear_queue(queue_name)
    storage.delete_queue(queue_name)
    assert storage.list_queues() == []
    assert storage.counts() == {
        "create_queue": 1,
        "put_message": 1,
        "peek_messages": 1,
        "list_queues": 2,
        "clear_queue": 1,
        "delete_queue": 1,
    }
