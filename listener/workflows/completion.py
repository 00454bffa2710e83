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

Who publishes an owed completion, under a claim so that one party does while it lives, is
``cloudqueue.listener.workflows.completion_publisher``.

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
from cloudqueue.listener.wire.membership import Membership, membership_of
from cloudqueue.listener.workflows.completion_publisher import Announce, CompletionPublisher
from cloudqueue.listener.workflows.group_ledger import GroupLedger, Settled
from cloudqueue.listener.workflows.settle_batches import SettleBatches
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for

log = structlog.get_logger(__name__)

UNAVAILABLE_RETRY_S = 5.0
"""How soon a member is tried again when the group ledger could not be written."""

PassedOn = Callable[[str], bool]
"""Whether the member in the message of this id was passed on by a chain step."""


class GroupCompletion(Middleware):
    """Records group members as they settle; the last one's listener sends the ``GroupDone``.
    Place it first in the middleware list: it must see every other middleware's decision."""

    def blocks(self, context: MessageContext[Any]) -> bool:
        """A member's ledger writes may wait: on an event loop, its steps run on a worker
        thread; any other message costs no hop (``cloudqueue.listener.consumer.event_loop.stack``).
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
        self.publisher = CompletionPublisher(ledger, storage, delivery)
        self.passed_on = passed_on
        """Asked after the handling: True when a chain step passed the member on (its chained
        message settles it, ``cloudqueue.listener.workflows.chains``)."""

    @property
    def announce(self) -> Announce:
        """Called with the completion queue after each ``GroupDone`` is put (``Announce``)."""
        return self.publisher.announce

    @announce.setter
    def announce(self, announce: Announce) -> None:
        self.publisher.announce = announce

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
        """Publish the completions owed whose claims this call takes; how many it published."""
        return self.publisher.publish_owed()

    def _record(
        self, context: MessageContext[Any], member: Membership, settled: Settled, *, retry: bool
    ) -> None:
        """Record the member; publish the completion when it was the last (or is still owed on
        a redelivery). When the ledger fails, ``retry`` the message rather than settle it."""
        try:
            last = self.settlements.settle(member.group_id, member.member_id, settled)
            if last is None and context.deliveries > 1:
                last = self.publisher.claim_again(context, member, retry=retry)
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
            self.publisher.publish(last)

    def __repr__(self) -> str:
        return f"GroupCompletion({self.ledger!r})"


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
