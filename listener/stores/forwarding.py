"""A QueueStorage that passes every call on to another: the base of the storage decorators.

Counting transactions (``MeteredStorage``) and watching health (the worker's ``ObservedStorage``)
each wrap a storage and do one thing around every call. The forwarding -- every operation of the
protocol, with its arguments -- is written once here; a decorator overrides ``_call``, which sees
the queue, the operation's name and the call itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

R = TypeVar("R")


class ForwardingStorage:
    """Passes each call to ``inner`` through ``_call`` (which, here, only makes it)."""

    def __init__(self, inner: QueueStorage) -> None:
        self.inner = inner

    def _call(self, queue_name: str, operation: str, call: Callable[[], R]) -> R:
        """Make ``call``, the ``operation`` on ``queue_name`` (``""`` for listing queues)."""
        return call()

    def create_queue(self, queue_name: str) -> None:
        self._call(queue_name, "create_queue", lambda: self.inner.create_queue(queue_name))

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        return self._call(
            queue_name,
            "get_messages",
            lambda: self.inner.get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            ),
        )

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        return self._call(
            queue_name,
            "delete_message",
            lambda: self.inner.delete_message(queue_name, message_id, pop_receipt),
        )

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        return self._call(
            queue_name,
            "put_message",
            lambda: self.inner.put_message(
                queue_name,
                content,
                time_to_live_s=time_to_live_s,
                visibility_delay_s=visibility_delay_s,
            ),
        )

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        return self._call(
            queue_name,
            "update_visibility",
            lambda: self.inner.update_visibility(
                queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
            ),
        )

    def approximate_message_count(self, queue_name: str) -> int:
        return self._call(
            queue_name,
            "approximate_message_count",
            lambda: self.inner.approximate_message_count(queue_name),
        )

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        return self._call(
            queue_name,
            "peek_messages",
            lambda: self.inner.peek_messages(queue_name, max_messages=max_messages),
        )

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        return self._call(
            queue_name, "get_queue_metadata", lambda: self.inner.get_queue_metadata(queue_name)
        )

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        self._call(
            queue_name,
            "set_queue_metadata",
            lambda: self.inner.set_queue_metadata(queue_name, metadata),
        )

    def list_queues(self, prefix: str = "") -> list[str]:
        return self._call("", "list_queues", lambda: self.inner.list_queues(prefix))

    def clear_queue(self, queue_name: str) -> None:
        self._call(queue_name, "clear_queue", lambda: self.inner.clear_queue(queue_name))

    def delete_queue(self, queue_name: str) -> None:
        self._call(queue_name, "delete_queue", lambda: self.inner.delete_queue(queue_name))

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
