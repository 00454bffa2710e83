"""The queue storage protocol: the one seam between the listener and a queue service.

Three implementations share its semantics (Azure Storage Queues, an embedded SQLite file and an
in-memory store) and one contract test suite proves it. The semantics are Azure's:

* ``get_messages`` hides each returned message for ``visibility_timeout_s`` and hands out a fresh
  pop receipt; a message not deleted in time becomes visible again with a higher dequeue count.
* ``delete_message`` needs the newest pop receipt; a stale one means someone else owns the message.
* Messages expire after their time-to-live; the approximate count includes invisible messages.

Beside the message operations the listener uses, it carries the queue administration and
inspection that the command line and the poison tooling need: list, delete and clear queues, and
peek at messages without taking them; and, as Azure has it, a few name-value pairs of metadata
per queue (where a partitioned queue records its layout: ``cloudqueue.listener.stores.layouts``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.queue_limits import (
    DEFAULT_TIME_TO_LIVE_S,
    MAX_BATCH_SIZE,
    MAX_MESSAGE_BYTES,
    MAX_VISIBILITY_TIMEOUT_S,
    NEVER_EXPIRES,
)

_QUEUE_NAME = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(-[a-z0-9]+)*$")


def validate_queue_name(queue_name: str) -> str:
    """Return the name if Azure accepts it (3-63 lowercase letters, digits, single hyphens)."""
    if not _QUEUE_NAME.match(queue_name):
        raise ConfigurationError(
            f"invalid queue name {queue_name!r}: use 3-63 lowercase letters, digits and single "
            "hyphens, starting and ending with a letter or digit"
        )
    return queue_name


def check_put_times(time_to_live_s: int | None, visibility_delay_s: int) -> int | None:
    """Validate a put's delay and time-to-live (None: the 7-day default); return the effective
    time-to-live in seconds, None when it never expires. Raises ValueError naming the limit."""
    for name, value in (
        ("time_to_live_s", time_to_live_s),
        ("visibility_delay_s", visibility_delay_s),
    ):
        # Azure takes whole seconds only; a float would pass the range checks here and then be
        # refused by the service (or silently work on the embedded stores).
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be a whole number of seconds, got {value!r}")
    ttl_s = DEFAULT_TIME_TO_LIVE_S if time_to_live_s is None else time_to_live_s
    if ttl_s != NEVER_EXPIRES and ttl_s < 1:
        raise ValueError(f"time_to_live_s must be >= 1 or NEVER_EXPIRES (-1), got {ttl_s}")
    if not 0 <= visibility_delay_s <= MAX_VISIBILITY_TIMEOUT_S:
        raise ValueError(
            f"visibility_delay_s must be 0..{MAX_VISIBILITY_TIMEOUT_S} (7 days), "
            f"got {visibility_delay_s}"
        )
    # Azure rejects a delay that would let the message expire before anyone can see it.
    if ttl_s != NEVER_EXPIRES and visibility_delay_s >= ttl_s:
        raise ValueError(
            f"visibility_delay_s ({visibility_delay_s}) must be less than time_to_live_s ({ttl_s})"
        )
    return None if ttl_s == NEVER_EXPIRES else ttl_s


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """One message as storage returned it: its envelope and its raw text content."""

    id: str
    pop_receipt: str
    dequeue_count: int
    inserted_on: datetime
    expires_on: datetime | None
    next_visible_on: datetime
    content: str


@runtime_checkable
class QueueStorage(Protocol):
    """Operations on the queues of one storage account (or one embedded store)."""

    def create_queue(self, queue_name: str) -> None:
        """Create the queue if it does not exist yet; do nothing if it does."""

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        """Take up to ``max_messages`` (1..32) visible messages and hide them for the timeout."""

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        """Delete a message; False (never an exception) when it is gone or the receipt is stale."""

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        """Append a message, invisible for ``visibility_delay_s``; raises MessageTooLargeError."""

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        """Hide the message for ``visibility_timeout_s`` from now; return the new pop receipt.

        With ``content``, replace the message's text in the same call (Azure's update-message
        rewrites both in one request, one transaction): how a handler's progress and checkpoint
        travel (``cloudqueue.listener.consumer.reporting``). Raises MessageTooLargeError as a
        put does."""

    def approximate_message_count(self, queue_name: str) -> int:
        """The number of messages in the queue, visible or not (may lag a little on Azure)."""

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        """Up to ``max_messages`` (1..32) visible messages, left visible and their dequeue count
        unchanged; a peek hands out no pop receipt (``pop_receipt`` is ``""``).

        ``next_visible_on`` is a time not after the peek: Azure does not say when a visible message
        became visible, so its backend reports the insertion time.
        """

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        """The queue's metadata (``{}`` when it has none); QueueNotFoundError if there is no
        queue. Names are lowercase identifiers, as Azure requires of metadata names."""

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        """Replace the queue's metadata with ``metadata``; QueueNotFoundError if there is no
        queue. Deleting the queue deletes its metadata."""

    def list_queues(self, prefix: str = "") -> list[str]:
        """The names of the queues that start with ``prefix`` (all of them by default), sorted."""

    def clear_queue(self, queue_name: str) -> None:
        """Delete every message in the queue, visible or not; the queue itself stays."""

    def delete_queue(self, queue_name: str) -> None:
        """Delete the queue and its messages.

        Raises QueueNotFoundError if there is none, ConfigurationError for a name Azure rejects.

        Azure frees the name only after 40 s or more: creating the queue again meanwhile raises
        TransientStorageError (409 QueueBeingDeleted). The embedded stores free it at once.
        """

    def close(self) -> None:
        """Release connections; the storage is not used afterwards."""


__all__ = [
    "DEFAULT_TIME_TO_LIVE_S",  # the Queue service's limits (listener.queue_limits), for the stores
    "MAX_BATCH_SIZE",
    "MAX_MESSAGE_BYTES",
    "MAX_VISIBILITY_TIMEOUT_S",
    "NEVER_EXPIRES",
    "QueueMessage",
    "QueueStorage",
    "check_put_times",
    "validate_queue_name",
]
