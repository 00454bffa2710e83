"""Counting a group's members as they settle, and sending its ``GroupDone`` once: a middleware.

For a message that is a group member (``cloudqueue.listener.workflows.membership``), outermost on
the seam, once the rest of the chain has run and *before* settlement deletes or poisons it:

1. **record** the member settled (``GroupLedger.settle``), as settlement is about to settle it:
   ``handled`` when its handler returned (or a middleware skipped it), ``poisoned`` when it is
   about to go to the poison queue (given up, a ``PermanentFailure``, its last delivery failed,
   or it was delivered too often). A message that will be retried, deferred or rerouted, or
   whose lease was lost, is not settled yet and records nothing;
2. if that was the last member, **publish** one ``GroupDone`` to the completion queue, with the
   group id as its message key, then mark the completion sent;
3. settlement deletes (or poisons) the message.

Who publishes: the ledger's step that records the last member records the completion *owed* and
*claimed* by its caller for ``COMPLETION_LEASE_S`` (``group_ledger``). Anyone else publishes an
owed completion only once it has taken the claim (``GroupLedger.claim``: owed, and no claim
running): the last member's redelivery, and every listener with groups when it starts
(``send_owed``: the completions a process that died left owed). So a listener starting while
another is between recording a last member and marking its completion sent leaves it to that
one: one ``GroupDone``.

Why this order -- what a ``kill -9`` between any two steps leaves:

* before 1: the member was not recorded and its message is still queued: it is redelivered and
  handled again (at-least-once, as any message), then recorded. Recording *after* the delete
  instead would lose the member for good, and its group would never complete.
* between 1 and 2: the completion is owed, claimed by the dead process until its lease ends. The
  member's message is still queued (not yet deleted): its redelivery finds the member settled (a
  duplicate changes nothing) and the completion owed, takes the claim and publishes it -- or,
  the claim still running, is retried when it ends (``group_done_claimed``), so the member's
  message is not deleted before its completion is out (on its last delivery, where a retry
  would poison it, it publishes anyway: ``group_done_taken_over``). A listener starting after
  the lease publishes it too, whichever comes first; the other then finds it claimed or sent.
  A publish that fails (the completion queue missing) gives the claim back at once.
* between 2 and its mark: the ``GroupDone`` was published, and is published again by the
  redelivery or a start once the lease ends -- the one source of a duplicate (with a put slower
  than the lease). Both copies carry the group id as key, and a hosted worker whose items are
  ``GroupDone`` handles them idempotently by key even when its settings turn no
  ``[idempotency] window_s`` on (``cloudqueue.workers.host.key_controls``): it handles one.
* after 3: done.

What cannot be told before settlement is recorded just after it (``after_settle``): a member
poisoned because it could not be opened (undecodable), or by its time limit while its handler
still ran. Only for these does a crash in the instant between the poison move and the record
leave the group one member short (``groups`` then shows it pending; the member is in the poison
queue with its reason).

A member a chain step passed on (``cloudqueue.listener.workflows.chains``: its handler's value went
to the next step's queue with the membership) is not settled by that step: the chained message
settles it, so the group completes after the chain's last step. A member is counted by its
*first* recorded settlement: a member recorded handled whose delete
then failed and whose redelivery is poisoned stays handled. Members added at run time
(``add_members``) are added by their adding member's handler, before that member is recorded, so
the group cannot complete between them. A ledger that cannot be reached leaves the member's
message to be retried (``group_ledger_unavailable``): it is never deleted unrecorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue.listener.consumer.events import ListenerStarted
from cloudqueue.listener.consumer.item_failures import is_permanent
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.policies.delivery import DeliveryPolicy, exhausted
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.membership import Membership, membership_of
from cloudqueue.listener.wire.packing import single_message
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.listener.workflows.group_ledger import (
    COMPLETION_LEASE_S,
    GroupLedger,
    GroupStatus,
    Settled,
)
from cloudqueue.listener.workflows.settle_batches import SettleBatches
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for

log = structlog.get_logger(__name__)

UNAVAILABLE_RETRY_S = 5.0
"""How soon a member is tried again when the group ledger could not be written."""

_CODEC = MessageCodec(GroupDone)

PassedOn = Callable[[str], bool]
"""Whether the member in the message of this id was passed on by a chain step."""


class GroupCompletion(Middleware):
    """Records group members as they settle; the last one's listener sends the ``GroupDone``.
    Place it first in the middleware list: it must see every other middleware's decision."""

    def blocks(self, context: MessageContext[Any]) -> bool:
        """A member's ledger writes may wait: on an event loop, its steps run on a worker
        thread; any other message costs no hop (``cloudqueue.listener.consumer.async_stack``).
        The rare writes of its other hooks (owed completions at a start, a member poisoned
        unopened) are made where they are called."""
        return membership_of(context.envelope) is not None

    def __init__(
        self,
        ledger: GroupLedger,
        storage: QueueStorage,
        *,
        delivery: DeliveryPolicy,
        passed_on: PassedOn | None = None,
    ) -> None:
        self.ledger = ledger
        self.storage = storage
        self.delivery = delivery
        self.settlements = SettleBatches(ledger)
        self.announce: Callable[[str], None] = _nobody
        """Called with the completion queue after each ``GroupDone`` is put: a host wakes its
        own listeners of that queue and announces it on its trigger channel, so the completion
        is picked up at once rather than after a poller's back-off (or, at zero threads, its
        watchdog)."""
        self.passed_on = passed_on
        """Asked after the handling: True when a chain step passed the member on (its chained
        message settles it, ``cloudqueue.listener.workflows.chains``)."""

    def on_start(self, event: ListenerStarted) -> None:
        """Publish the completions owed from before (a process that died after recording a
        group's last member and before publishing its ``GroupDone``)."""
        self.send_owed()

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        """A generator: ``yield`` for ``call_next()`` (``consumer.wrapping``)."""
        member = membership_of(context.envelope)
        if member is None:
            yield
            return
        if not context.deliverable:
            # Settled inside call_next: recorded first when it is surely poisoned (delivered too
            # often); anything else it becomes (lost, undecodable) is seen in after_settle.
            if overdue(context, self.delivery):
                self._record(context, member, "poisoned", retry=False)
            yield
            return
        yield
        if self.passed_on is not None and self.passed_on(context.message_id):
            return  # not settled yet: the chain's next message carries the membership on
        settled = settles_as(context, self.delivery)
        if settled is not None:
            self._record(context, member, settled, retry=True)

    def after_settle(self, context: MessageContext[Any]) -> None:
        """The safety net for what could not be told before settlement: a member that could
        not be opened, or whose handler ran past its time limit, poisoned (a duplicate of an
        earlier record changes nothing)."""
        outcome = context.outcome
        if outcome is None or outcome.kind != "poisoned":
            return
        member = membership_of(context.envelope)
        if member is not None:
            self._record(context, member, "poisoned", retry=False)

    def send_owed(self) -> int:
        """Publish every completion the ledger holds owed whose claim this call takes (none is
        running on it); how many were published."""
        try:
            owed = self.ledger.owed()
        except StorageError as failure:
            log.warning("group_ledger_unavailable", error=str(failure))
            return 0
        published = 0
        for status in owed:
            try:
                claimed = self.ledger.claim(status.group_id)
            except StorageError as failure:  # left owed: taken by the next to look
                log.warning("group_ledger_unavailable", group=status.group_id, error=str(failure))
                continue
            if claimed is not None and self._complete(claimed):
                published += 1
        return published

    def _record(
        self, context: MessageContext[Any], member: Membership, settled: Settled, *, retry: bool
    ) -> None:
        """Record the member; publish the completion when it was the last (or is still owed on
        a redelivery). When the ledger fails, ``retry`` the message rather than settle it."""
        try:
            last = self.settlements.settle(member.group_id, member.member_id, settled)
            if last is None and context.deliveries > 1:
                last = self._claim_again(context, member.group_id, retry=retry)
        except StorageError as failure:
            log.warning(
                "group_ledger_unavailable", message_id=context.message_id, error=str(failure)
            )
            if retry:
                context.retry(
                    "group_ledger_unavailable", delay_s=UNAVAILABLE_RETRY_S, error=str(failure)
                )
            return
        if last is not None:
            self._complete(last)

    def _claim_again(
        self, context: MessageContext[Any], group_id: str, *, retry: bool
    ) -> GroupStatus | None:
        """On a redelivery: the group's completion when it is still owed and this call took its
        claim. Owed but claimed by another (the dead settler, until its lease ends), the member
        is ``retry``-ed when the claim ends rather than deleted: its message is what keeps the
        completion from being lost."""
        claimed = self.ledger.claim(group_id)
        if claimed is not None or not retry:
            return claimed
        status = self.ledger.status(group_id)
        if status is None or status.completion != "owed":
            return None
        if exhausted(context.deliveries, self.delivery):  # a retry would poison the member
            log.info("group_done_taken_over", message_id=context.message_id, group=group_id)
            return status  # published under the claim: a copy is dropped by its key
        log.info("group_done_claimed", message_id=context.message_id, group=group_id)
        context.retry("group_done_claimed", delay_s=COMPLETION_LEASE_S)
        return None

    def _complete(self, status: GroupStatus) -> bool:
        """Publish the group's ``GroupDone`` (keyed by the group id), then mark it sent."""
        done = GroupDone.of(status)
        content = single_message(_CODEC.encode(done), key=status.group_id)
        try:
            self.storage.put_message(status.on_complete, str(content))
        except StorageError as failure:  # still owed: sent on a redelivery or at a start
            log.warning("group_done_not_sent", group=status.group_id, error=str(failure))
            self._give_back(status.group_id)
            return False
        try:
            self.announce(status.on_complete)
        except Exception:  # a wake-up is an optimization: the pollers find the message anyway
            log.exception("group_done_not_announced", group=status.group_id)
        try:
            self.ledger.mark_sent(status.group_id)
        except StorageError as failure:  # sent again later: the copy is dropped by its key
            log.warning("group_done_not_marked", group=status.group_id, error=str(failure))
        log.info(
            "group_done",
            group=status.group_id,
            queue=status.on_complete,
            handled=status.handled,
            poisoned=status.poisoned,
        )
        return True

    def _give_back(self, group_id: str) -> None:
        """Release the claim of a publish that failed (not released, it ends with its lease)."""
        try:
            self.ledger.release(group_id)
        except StorageError as failure:
            log.warning("group_ledger_unavailable", group=group_id, error=str(failure))

    def __repr__(self) -> str:
        return f"GroupCompletion({self.ledger!r})"


def _nobody(queue: str) -> None:
    """No listener to wake (a completion sent outside a host)."""


def group_completion_for(
    storage: QueueStorage, delivery: DeliveryPolicy, *, passed_on: PassedOn | None = None
) -> list[Middleware]:
    """The groups middleware for a listener on ``storage``: none where no group ledger goes
    with it (a storage not opened by ``open_storage``)."""
    ledger = group_ledger_for(storage)
    if ledger is None:
        return []
    return [GroupCompletion(ledger, storage, delivery=delivery, passed_on=passed_on)]


def overdue(context: MessageContext[Any], delivery: DeliveryPolicy) -> bool:
    """A message delivered more often than allowed: settlement poisons it unhandled."""
    limit = delivery.max_dequeue_count
    return context.message.dequeue_count > limit or context.deliveries > limit


def settles_as(context: MessageContext[Any], delivery: DeliveryPolicy) -> Settled | None:
    """How settlement is about to settle a handled message (``cloudqueue.listener.consumer
    .settlement``): handled, poisoned, or None when it stays unsettled (retried, deferred,
    rerouted: it comes back, or settles on the queue it goes to)."""
    decision = context.decision
    failed = context.failures or context.middleware_error is not None
    if decision is not None and decision.kind in ("defer", "reroute"):
        return None
    if decision is not None and decision.kind == "skip":
        return "handled"
    if decision is None and not failed:
        return "handled"
    given_up = decision is not None and decision.kind == "give_up"
    if given_up or is_permanent(context.failures) or exhausted(context.deliveries, delivery):
        return "poisoned"
    return None


__all__ = [
    "UNAVAILABLE_RETRY_S",
    "GroupCompletion",
    "PassedOn",
    "group_completion_for",
    "overdue",
    "settles_as",
]
