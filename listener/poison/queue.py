"""The poison queue of a queue: its name, and reading it without changing what it holds.

A peek sees at most 32 messages. Reading further takes messages page by page, each hidden for
``SCAN_VISIBILITY_S`` so the next page holds new ones, and makes every one visible again at the
end. Ids are matched in full or by a unique prefix, as git takes commits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from cloudqueue.listener.errors import AmbiguousIdError, MessageNotFoundError
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.stores.storage import MAX_BATCH_SIZE, QueueMessage, QueueStorage

POISON_SUFFIX = "-poison"


def poison_queue_name(queue_name: str) -> str:
    """The queue that receives a queue's poison messages (named as Azure Functions names it)."""
    return f"{queue_name}{POISON_SUFFIX}"


SCAN_VISIBILITY_S = 60
"""How long a scan hides each poison message it reads: longer than a scan takes, so none is read
twice, and short enough that they reappear soon if the scanning process dies."""


def browse_poisoned(
    storage: QueueStorage, queue_name: str, *, limit: int | None
) -> list[QueueMessage]:
    """Up to ``limit`` (None: all) poison messages of the queue, left in place (their pop
    receipts are stale).

    Up to 32 are peeked, which changes nothing; more are read by a scan, which hides them for a
    moment: a requeue or a poison-queue listener running meanwhile may miss them.
    """
    source = poison_queue_name(queue_name)
    if limit is not None and limit <= MAX_BATCH_SIZE:
        return storage.peek_messages(source, max_messages=limit)
    taken: list[QueueMessage] = []

    def wanted() -> int:
        return MAX_BATCH_SIZE if limit is None else limit - len(taken)

    try:
        for page in take_pages(storage, source, wanted=wanted):
            taken.extend(page)
    finally:
        release(storage, source, taken)
    return list({message.id: message for message in taken}.values())


def find_poisoned(
    storage: QueueStorage, queue_name: str, wanted_id: str, *, min_prefix: int = 1
) -> QueueMessage | None:
    """The poison message for ``wanted_id``, left in place; None if there is none.

    ``wanted_id`` is the original message's id, or the poison message's own id (the only one an
    unwrapped message has), or a prefix of one that no other id starts with (as git takes
    commits) and is at least ``min_prefix`` long; AmbiguousIdError when several do. The first
    32 are peeked; a scan reads the rest only when needed.
    """
    peeked = storage.peek_messages(poison_queue_name(queue_name), max_messages=MAX_BATCH_SIZE)
    exact = next((message for message in peeked if _matches(message, wanted_id)), None)
    if exact is not None:
        return exact
    if len(peeked) == MAX_BATCH_SIZE:  # more may follow: a prefix is unique only among all
        peeked = browse_poisoned(storage, queue_name, limit=None)
        exact = next((message for message in peeked if _matches(message, wanted_id)), None)
        if exact is not None:
            return exact
    if len(wanted_id) < min_prefix:
        return None
    starting = [message for message in peeked if _starts(message, wanted_id)]
    if len(starting) > 1:
        raise AmbiguousIdError(wanted_id, [_shown_id(message) for message in starting])
    return starting[0] if starting else None


def take_poisoned(
    storage: QueueStorage,
    queue_name: str,
    wanted_id: str,
    *,
    visibility_timeout_s: int = SCAN_VISIBILITY_S,
) -> QueueMessage | None:
    """The poison message whose original id or own id is ``wanted_id`` (in full), hidden with a
    fresh pop receipt so the caller can delete it; None if there is none. The others read are
    released."""
    source = poison_queue_name(queue_name)
    passed: list[QueueMessage] = []
    try:
        for page in take_pages(storage, source, visibility_timeout_s=visibility_timeout_s):
            found = next((message for message in page if _matches(message, wanted_id)), None)
            passed.extend(message for message in page if message is not found)
            if found is not None:
                return found
    finally:
        release(storage, source, passed)
    return None


def _original_id(message: QueueMessage) -> str | None:
    record = read_record(message.content)
    return None if record is None else record.original_id


def _matches(message: QueueMessage, wanted_id: str) -> bool:
    return wanted_id in (message.id, _original_id(message))


def _starts(message: QueueMessage, prefix: str) -> bool:
    original = _original_id(message)
    return message.id.startswith(prefix) or (original is not None and original.startswith(prefix))


def _shown_id(message: QueueMessage) -> str:
    """The id ``list`` shows for a message: its original id, or its own when it has none."""
    return _original_id(message) or message.id


def take_pages(
    storage: QueueStorage,
    source: str,
    *,
    wanted: Callable[[], int] = lambda: MAX_BATCH_SIZE,
    visibility_timeout_s: int = SCAN_VISIBILITY_S,
) -> Iterator[list[QueueMessage]]:
    """Pages of visible messages, each hidden as it is taken; the caller releases them.

    Each page is at most ``wanted()`` long (at most 32). Ends when no visible message is left,
    none is wanted, or one comes round a second time (the scan outlasted the visibility timeout:
    everything has been seen).
    """
    seen: set[str] = set()
    while (size := min(wanted(), MAX_BATCH_SIZE)) > 0:
        page = storage.get_messages(
            source, max_messages=size, visibility_timeout_s=visibility_timeout_s
        )
        if not page:
            return
        repeated = any(message.id in seen for message in page)
        seen.update(message.id for message in page)
        yield page
        if repeated:
            return


def release(storage: QueueStorage, source: str, messages: list[QueueMessage]) -> None:
    """Make taken messages visible again; one re-taken since, or gone, is no longer ours."""
    for message in messages:
        with contextlib.suppress(MessageNotFoundError):
            storage.update_visibility(source, message.id, message.pop_receipt, 0)


__all__ = [
    "POISON_SUFFIX",
    "SCAN_VISIBILITY_S",
    "browse_poisoned",
    "find_poisoned",
    "poison_queue_name",
    "release",
    "take_pages",
    "take_poisoned",
]
