"""Chains: what a handler returns is sent on to the next step's queue before its message is
deleted (a worker's ``then = NextWorker``), effect-once, carrying its key, trace and membership.

``ChainStep`` is a middleware, innermost on the seam, and its ``returning`` wraps the handler so
that each item's return value is set aside for its delivery (``returned_values``: a plain or an
``async def`` handler, on threads or on the single event loop, where the step's code runs on a
worker thread: it waits for storage). Once the handler returned, for each item it did not fail
on, its value -- one item of the next step's type, a list of them, or None for nothing -- is sent
to the next queue:

* **key**: the message's key (else its message id, which redeliveries keep), with ``/p`` for the
  item's position in a message of several items and ``/i`` for the value's place in a list
  (``run-7/0``, ``run-7/1``); the next step's idempotent handling and partitions use it;
* **effect-once**: the next queue's publisher marks each put in the key ledger
  (``cloudqueue.listener.producer.effect_once``): a redelivered step is handled again, returns
  the same, and its puts are skipped. A crash between a put and its mark sends that item again
  under the same key, which idempotent handling drops;
* **trace**: the puts run in a producer span, the envelope carries its context;
* **group**: a group member's membership travels on, and the member is *not* settled by this
  step: its chained message settles it (``GroupCompletion`` asks ``passed_on``), so the group
  completes when the chain's last step settles. A list of n items passes the member on as n
  members (``GroupLedger.pass_on``: its own id and n - 1 added, the same ids on a redelivery).

A value that is no item of the next step's type gives the message up (``chain_item_invalid``:
it would fail on every delivery); a put or ledger write that fails leaves the message failed, so
it is retried and its items handled again. Either way nothing is deleted before its items went on.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from cloudqueue.listener import tracing
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.queue_limits import NEVER_EXPIRES
from cloudqueue.listener.wire.keys import MAX_KEY_CHARS
from cloudqueue.listener.wire.membership import Membership, membership_of
from cloudqueue.listener.workflows.group_ledger import GroupLedger
from cloudqueue.listener.workflows.membership import member_message
from cloudqueue.listener.workflows.returned_values import FAILED, ReturnedValues

log = structlog.get_logger(__name__)


class ChainStep(Middleware):
    """Sends what a step's handler returned to the next step's queue (see the module)."""

    blocking = True  # its puts and ledger marks wait for storage: off the event loop

    def __init__(
        self,
        next_step: Publisher[Any],
        groups: GroupLedger | None = None,
        *,
        announcer: WorkAnnouncer | None = None,
    ) -> None:
        if next_step.once is None:
            raise ValueError("a chain step's publisher needs effect_once_s")
        self.next_step = next_step
        self.groups = groups
        self.announcer = announcer
        """Announces the items put on the trigger channel, one trigger per handled message."""
        self._passed: set[str] = set()
        self._lock = threading.Lock()
        self._returned = ReturnedValues()

    def returning(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handler`` (plain or ``async def``), its values set aside for this step."""
        return self._returned.wrap(handler)

    def passed_on(self, message_id: str) -> bool:
        """True (once) when this step passed the group member of ``message_id`` on: its chained
        message settles it, not this one."""
        with self._lock:
            if message_id not in self._passed:
                return False
            self._passed.discard(message_id)
            return True

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        """A generator: ``yield`` for ``call_next()`` (``consumer.wrapping``)."""
        self._returned.expect(context.message)
        try:
            yield
        finally:
            values = self._returned.take(context.message)
        if not context.handled:
            return
        failed = {failure.position for failure in context.failures}
        outgoing = [
            (position, value)
            for position, value in enumerate(values)
            if position not in failed and value is not FAILED and value is not None
        ]
        if outgoing:
            self._send_on(context, outgoing)

    def _send_on(self, context: MessageContext[Any], outgoing: list[tuple[int, object]]) -> None:
        """Send the values on; a failure leaves the message failed (retried), an invalid value
        gives it up, never deleted before its items went on."""
        then = self.next_step.queue_name
        try:
            sent = self._send(context, outgoing)
        except StorageError as failure:
            log.warning("chain_send_failed", next_queue=then, error=str(failure))
            context.middleware_error = failure
            return
        except (ValueError, TypeError) as invalid:  # pydantic's ValidationError, a GroupError
            log.warning("chain_item_invalid", next_queue=then, error=str(invalid))
            if context.failures:  # a give-up now would concern the failed items only
                context.middleware_error = invalid
            else:
                context.give_up("chain_item_invalid", f"{type(invalid).__name__}: {invalid}")
            return
        log.debug("chain_sent", next_queue=then, items=sent)

    def _send(self, context: MessageContext[Any], outgoing: list[tuple[int, object]]) -> int:
        """Send every value on; how many items that was. A member's membership goes with them."""
        base = context.key or context.message_id
        several = len(context.items) > 1
        planned: list[tuple[str, Any]] = []
        for position, value in outgoing:
            key = f"{base}/{position}" if several else base
            planned += self._keyed(key, value)
        if not planned:  # empty lists: nothing goes on, and a member settles here
            return 0
        member = membership_of(context.envelope) if self.groups is not None else None
        memberships = self._memberships(context, member, len(planned))
        before, members_put = self.next_step.messages_sent, 0
        with tracing.producer_span(self.next_step.queue_name) as traced:
            for (key, item), membership in zip(planned, memberships, strict=True):
                members_put += self._put(key, item, membership)
            traced(len(planned))
        # None when all were found marked; another thread's puts may count too: then one trigger
        # too many, never one too few.
        put = self.next_step.messages_sent - before + members_put
        if self.announcer is not None:
            self.announcer.batch_done(self.next_step.queue_name, messages=put, size=0)
        if member is not None:
            with self._lock:
                self._passed.add(context.message_id)
        return len(planned)

    def _keyed(self, key: str, value: object) -> list[tuple[str, Any]]:
        """The value's items, each checked against the next step's type, with its key."""
        if isinstance(value, list | tuple):
            return [
                (derived_key(f"{key}/{index}"), self.next_step.validated(item))
                for index, item in enumerate(value)
            ]
        return [(derived_key(key), self.next_step.validated(value))]

    def _memberships(
        self, context: MessageContext[Any], member: Membership | None, count: int
    ) -> Sequence[Membership | None]:
        if member is None or self.groups is None:
            return [None] * count
        step = context.queue_name
        ids = self.groups.pass_on(member.group_id, member.member_id, step, count)
        return [Membership(member.group_id, member_id) for member_id in ids]

    def _put(self, key: str, item: Any, membership: Membership | None) -> int:
        """Put one item (a plain one as the publisher publishes it); the members put: 1, or 0
        for a plain item or one found marked."""
        publisher = self.next_step
        if membership is None:
            publisher.publish(item, key=key)
            return 0
        once = publisher.once
        assert once is not None  # checked in __init__
        text = publisher.codec.encode(item)
        content = member_message(text, membership, key=key)
        target = publisher.router.queue_for_key(key)

        def put() -> None:  # a member never expires: it would hold its group open for good
            publisher.storage.put_message(
                target, tracing.stamp(content), time_to_live_s=NEVER_EXPIRES
            )

        return once.put_once(key, [text], put)

    def __repr__(self) -> str:
        return f"ChainStep(then={self.next_step.queue_name!r})"


def derived_key(key: str) -> str:
    """``key``, or its hash when deriving made it longer than a key may be."""
    if len(key) <= MAX_KEY_CHARS:
        return key
    return "chain-" + hashlib.sha256(key.encode("utf-8")).hexdigest()


__all__ = ["ChainStep", "derived_key"]
