"""cloudqueue's own error types.

Storage backends translate their native exceptions (the Azure SDK's, sqlite3's) into these at one
boundary, inside the backend, so nothing above the storage protocol knows which backend it runs on::

    CloudQueueError
    ├── StorageError                  a storage call failed
    │   ├── TransientStorageError     timeout, 500/503, connection reset: back off and retry
    │   ├── QueueNotFoundError        the queue does not exist
    │   ├── MessageNotFoundError      the message is gone: deleted, expired, or unknown id
    │   │   └── PopReceiptMismatchError  the message exists but another get re-took it
    │   ├── MessageTooLargeError      the encoded message exceeds the queue's size limit
    │   └── PayloadNotFoundError      a large payload's blob is gone (deleted, or never written)
    ├── DecodeError                   a message's text cannot become an item of the listener's type
    ├── PermanentFailure              raised by a handler: retrying is pointless, poison at once
    ├── ConfigurationError            invalid settings or connection string (never retried)
    ├── UnreadableRecordError         a poison message is no valid record (forged, damaged)
    └── AmbiguousIdError              an id prefix names several poison messages

Messages never contain secrets: backends build them from queue names, ids and status codes only.
"""

from __future__ import annotations


class CloudQueueError(Exception):
    """Base class of every error cloudqueue raises on purpose."""


class StorageError(CloudQueueError):
    """A storage operation failed."""


class TransientStorageError(StorageError):
    """A storage operation failed for a reason that may pass: retry it after a back-off."""


class QueueNotFoundError(StorageError):
    """The queue does not exist (create it first)."""


class MessageNotFoundError(StorageError):
    """The message is no longer in the queue, or not where the caller thought."""


class PopReceiptMismatchError(MessageNotFoundError):
    """The pop receipt is stale: the message became visible again and another get took it."""


class MessageTooLargeError(StorageError):
    """The message exceeds the queue's limit (64 KiB as stored)."""


class PayloadNotFoundError(StorageError):
    """A message refers to a stored payload (a blob) that does not exist."""


class DecodeError(CloudQueueError):
    """A message's content cannot be decoded into an item of the listener's type."""


class PermanentFailure(CloudQueueError):  # noqa: N818 - named for what the handler declares
    """Raise from a handler when the item can never succeed: it goes to the poison queue at once."""


class ConfigurationError(CloudQueueError, ValueError):
    """Settings or a connection string are invalid; retrying will not help."""


class UnreadableRecordError(CloudQueueError, ValueError):
    """A poison-queue message is not a valid poison record: anyone who may add messages to
    ``<queue>-poison`` can write anything there."""

    def __init__(self, problem: str, *, claims_record: bool) -> None:
        super().__init__(problem)
        self.problem = problem
        self.claims_record = claims_record
        """True when it looks like a record (a JSON object with an ``original_id``) but is not
        one; False when it is other text (e.g. an original message kept unwrapped)."""


class AmbiguousIdError(CloudQueueError, LookupError):
    """An id prefix starts the ids of several poison messages; ``candidates`` are their ids."""

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        super().__init__(f"id {prefix} is ambiguous: {len(candidates)} ids start with it")
        self.prefix = prefix
        self.candidates = candidates
