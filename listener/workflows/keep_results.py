"""Keeping what handlers return: the ``KeepResults`` middleware of a worker with ``keep_results``.

The worker's handler is wrapped (``capturing``: a plain or an ``async def`` one) so that its
return value is set aside for the delivery being handled (``returned_values``); around the
handling, once the handler returned and *before* settlement deletes the message, the middleware
stores that value in the result store under the message's key for the worker's time to live,
then announces it on the trigger channel (when there is one).

Why before the delete -- what a ``kill -9`` leaves: before the store, the message is still queued
and is handled again; between the store and the delete, it is handled again and stores its value
again under the same key, which replaces the first (one result per key). A store that cannot be
reached retries the message (``result_store_unavailable``); it is never deleted with its result
unkept. A value that cannot be kept (not JSON, over ``MAX_RESULT_BYTES``) poisons the message with
the reason ``result_not_json`` or ``result_too_large``: handled again, it would return the same.

The key is the message's (``context.key``: carried, or the worker's ``key(item)``); a group member
without one is kept under its group and member ids (``member_key``), so that its group's results
are all found. A message with neither has nowhere to keep its result: logged, deleted as usual. A
message of several items (a publisher batched them) keeps the list of their values.

Its code around the handling is a generator (``consumer.wrapping``) that says it ``blocking``: on
the single event loop it runs on a worker thread, as the store's write may wait.

Place it inside groups (its result is stored before the member counts as settled, so the group's
completion finds every result) and inside idempotent handling (stored before the key is marked
done, so a crash between them cannot leave a done key without its result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.wire.membership import Membership, membership_of
from cloudqueue.listener.workflows.result_signals import ResultSignals
from cloudqueue.listener.workflows.result_store import ResultStore
from cloudqueue.listener.workflows.result_values import ResultError, encode_result
from cloudqueue.listener.workflows.returned_values import FAILED, ReturnedValues

log = structlog.get_logger(__name__)

UNAVAILABLE_RETRY_S = 5.0
"""How soon a message is tried again when its result could not be stored."""


class KeepResults(Middleware):
    """Stores each handled message's return value under its key, before it is deleted."""

    blocking = True  # its store's writes wait: off the event loop

    def __init__(self, store: ResultStore, *, ttl_s: float) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.signals: ResultSignals | None = None
        """Set when the worker's host has a trigger channel: stored results are announced."""
        self._returned = ReturnedValues()

    def capturing(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handler`` (plain or ``async def``), with what it returns set aside for the message
        being handled."""
        return self._returned.wrap(handler)

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        """A generator: ``yield`` for ``call_next()`` (``consumer.wrapping``)."""
        self._returned.expect(context.message)
        try:
            yield
        finally:
            returned = self._returned.take(context.message)
        failed = context.failures or context.middleware_error is not None
        failed = failed or any(value is FAILED for value in returned)
        if not (context.handled and returned) or failed or context.decision is not None:
            return  # not handled (yet): nothing returned to keep
        key = result_key(context)
        if key is None:
            log.info("result_not_kept", message_id=context.message_id, reason="no_key")
            return
        self._keep(context, key, returned[0] if len(returned) == 1 else returned)

    def _keep(self, context: MessageContext[Any], key: str, value: object) -> None:
        member = membership_of(context.envelope)
        try:
            text = encode_result(value)
            self.store.put(
                key, text, ttl_s=self.ttl_s, group_id=None if member is None else member.group_id
            )
        except ResultError as refused:
            log.warning("result_refused", message_id=context.message_id, error=str(refused))
            context.give_up(refused.reason, str(refused))
            return
        except StorageError as failure:
            log.warning(
                "result_store_unavailable", message_id=context.message_id, error=str(failure)
            )
            context.retry(
                "result_store_unavailable", delay_s=UNAVAILABLE_RETRY_S, error=str(failure)
            )
            return
        if self.signals is not None:
            self.signals.announce(key)

    def __repr__(self) -> str:
        return f"KeepResults({self.store!r}, ttl_s={self.ttl_s:g})"


def result_key(context: MessageContext[Any]) -> str | None:
    """The key a message's result is kept under: its own, else its group membership's."""
    if context.key is not None:
        return context.key
    member = membership_of(context.envelope)
    return None if member is None else member_key(member)


def member_key(member: Membership) -> str:
    """The key of a group member's result when the member's message has no key of its own."""
    return f"{member.group_id}-{member.member_id}"


__all__ = ["UNAVAILABLE_RETRY_S", "KeepResults", "member_key", "result_key"]
