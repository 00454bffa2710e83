"""Announcing enqueued work on a trigger channel, on the publisher's side.

Three policies, a trade between trigger traffic and wake-up latency:

* ``per_put``: one trigger after every message put -- the quickest wake-up, the most traffic;
* ``per_batch``: one trigger after each ``publish``/``publish_many`` call, naming how many
  messages and bytes it put (the default);
* ``when_empty``: one depth check (a storage transaction) before the batch and a trigger after
  it only if the queue was empty -- a busy queue's listeners are awake anyway.

Announcing never fails a put: a channel that is down is logged by the channel, and the
listeners' watchdog finds the work.
"""

from __future__ import annotations

from typing import Literal

from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.push.triggers import TriggerChannel, WorkDetected
from cloudqueue.listener.stores.storage import QueueStorage

AnnounceMode = Literal["per_put", "per_batch", "when_empty"]


class WorkAnnouncer:
    """Publishes WorkDetected events for one queue according to a policy."""

    def __init__(
        self, channel: TriggerChannel, *, account: str, mode: AnnounceMode = "per_batch"
    ) -> None:
        self.channel = channel
        self.account = account
        self.mode = mode
        self.sent = 0
        self._was_empty = True

    def batch_starting(self, storage: QueueStorage, queue_name: str) -> None:
        """Before a batch: remember whether the queue was empty (when_empty only)."""
        if self.mode != "when_empty":
            return
        try:
            self._was_empty = storage.approximate_message_count(queue_name) == 0
        except StorageError:
            self._was_empty = True  # unknown: announce rather than risk a silent queue

    def message_put(self, queue_name: str, size: int) -> None:
        if self.mode == "per_put":
            self._announce(queue_name, messages=1, size=size)

    def batch_done(self, queue_name: str, *, messages: int, size: int) -> None:
        if messages == 0:
            return
        if self.mode == "per_batch" or (self.mode == "when_empty" and self._was_empty):
            self._announce(queue_name, messages=messages, size=size)

    def _announce(self, queue_name: str, *, messages: int, size: int) -> None:
        event = WorkDetected(self.account, queue_name, payload_size=size, message_count=messages)
        if self.channel.publish(event):
            self.sent += 1
