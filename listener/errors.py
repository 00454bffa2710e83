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
    │   ├── LimitExceededError        it is over a decoding limit (``wire.limits``)
    │   └── ForeignPayloadError       its stored payload was written for another queue
    ├── PermanentFailure              raised by a handler: retrying is pointless, poison at once
    ├── BatchFailed                   raised by a batch handler: retry only these items
    ├── RetryLater                    raised by a handler: bring this message back in delay_s
    ├── MalformedTriggerError         a push trigger received from the channel is not a valid one
    ├── ConfigurationError            invalid settings or connection string (never retried)
    │   └── MissingExtraError         a feature's optional extra is not installed (pip install …)
    ├── UnreadableRecordError         a poison message is no valid record (forged, damaged)
    └── AmbiguousIdError              an id prefix names several poison messages

``TimeLimitExceeded`` stands apart: an interrupt raised *into* a handler that passed
``listener.time_limit_s``, a ``BaseException`` (as ``KeyboardInterrupt`` is) so that a handler's
``except Exception`` does not swallow it.

Messages never contain secrets: backends build them from queue names, ids and status codes only.
"""

from __future__ import annotations

import math

from cloudqueue.listener.queue_limits import MAX_VISIBILITY_TIMEOUT_S, is_hiding_delay


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


class LimitExceededError(DecodeError):
    """A message is over one of the listener's decoding limits: it is poisoned before its items
    are built. ``setting`` names the setting that raises the limit."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class ForeignPayloadError(DecodeError):
    """A message refers to a stored payload written for another queue (left alone, never read)."""


class PermanentFailure(CloudQueueError):  # noqa: N818 - named for what the handler declares
    """Raise from a handler when the item can never succeed: it goes to the poison queue at once."""


class BatchFailed(CloudQueueError):  # noqa: N818 - named for what the handler declares
    """Raise from ``handle_batch`` when some items failed: only those are retried, the others are
    done. ``failed`` are their positions in the batch (from 0). Raised ``from`` an exception
    (``raise BatchFailed([2]) from error``), that exception is what the failed items record (a
    worker's ``Retry`` policy judges it); otherwise the ``BatchFailed`` itself."""

    def __init__(self, failed: object, message: str = "") -> None:
        positions = _positions(failed)
        self.failed: tuple[int, ...] = positions
        self.message = message
        shown = ", ".join(str(position) for position in positions[:20])
        more = "" if len(positions) <= 20 else f" and {len(positions) - 20} more"
        super().__init__(
            f"items {shown}{more} of the batch failed" + (f": {message}" if message else "")
        )


class RetryLater(CloudQueueError):  # noqa: N818 - named for what the handler declares
    """Raise from a handler to have its message come back in ``delay_s`` seconds (rounded up to
    whole seconds: visibility takes whole seconds), e.g. when a service said "rate limited, try
    again in 30 s". Not named ``Retry``: that is the worker's retry policy.

    The delivery counts toward poisoning, as any failed one does (``poison.max_dequeue_count``,
    a worker's ``Retry(max_deliveries=...)``): the service counts every get, and a handler that
    says "later" forever must end in the poison queue, not loop unseen. From ``handle_batch`` it
    brings back every item of the call; ``raise BatchFailed([...]) from RetryLater(...)`` only
    those. ``delay_s`` is 0 to 7 days (the longest a message can be hidden); anything else raises
    ``ValueError`` here, naming the limit."""

    def __init__(self, delay_s: float, reason: str = "") -> None:
        if not is_hiding_delay(delay_s):
            raise ValueError(
                f"RetryLater(delay_s=...) takes seconds from 0 to {MAX_VISIBILITY_TIMEOUT_S} "
                f"(a message is hidden at most 7 days; for longer, send a new message with a "
                f"delay), got {delay_s!r}"
            )
        self.delay_s = float(delay_s)
        self.reason = reason
        super().__init__(f"retry in {delay_s:g} s" + (f": {reason}" if reason else ""))

    @property
    def visibility_s(self) -> int:
        """The whole seconds the message is hidden: ``delay_s`` rounded up, never cut short."""
        return math.ceil(self.delay_s)


def _positions(failed: object) -> tuple[int, ...]:
    """The positions ``BatchFailed`` was given, as sorted distinct ints (TypeError otherwise)."""
    if isinstance(failed, int | str | bytes) or not hasattr(failed, "__iter__"):
        raise TypeError(
            f"BatchFailed(failed=...) takes the failed items' positions, got {failed!r}"
        )
    positions = list(failed)
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in positions):
        raise TypeError(f"BatchFailed(failed=...) takes int positions, got {positions!r}")
    return tuple(sorted(set(positions)))


class TimeLimitExceeded(BaseException):
    """Raised into a handler that ran past ``listener.time_limit_s`` (where Python can interrupt
    it). Its message has already been released for a retry when this is raised."""


class MalformedTriggerError(CloudQueueError, ValueError):
    """A received push trigger broke a rule of its wire form; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ConfigurationError(CloudQueueError, ValueError):
    """Settings or a connection string are invalid; retrying will not help."""


class MissingExtraError(ConfigurationError):
    """A feature needs a package of an optional extra that is not installed."""


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
