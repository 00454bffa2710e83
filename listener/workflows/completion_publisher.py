"""Publishing a group's ``GroupDone`` once its last member settled, by one party at a time.

The ledger's step that records the last member records the completion *owed* and *claimed* by its
caller for ``COMPLETION_LEASE_S`` (``group_ledger``), with no write of its own: that caller
publishes (``publish``). Anyone else publishes an owed completion only once it has taken the claim
(``GroupLedger.claim``: owed, and no claim running): the last member's redelivery
(``claim_again``), and every listener with groups when it starts (``publish_owed``: the
completions a process that died left owed). So a listener starting while another is between
recording a last member and marking its completion sent leaves it to that one: one
``GroupDone``.

A claimant killed before its put lets go when its lease ends. The message of the member whose
settlement completed the group (``GroupStatus.last_member``) is what keeps such a completion from
being lost: redelivered while the claim runs, it is retried when the claim ends
(``group_done_claimed``) rather than deleted, and on its last delivery, where a retry would
poison it, it publishes under the other's claim (``group_done_taken_over``). Any other member
redelivered then is settled as usual: the claim's holder, alive, is about to mark it sent. A put
that fails gives the claim back at once (``release``). A claimant killed between its put and
``mark_sent`` leaves the completion to be published again: the only copy, under the group id as
its message key, for idempotent handling to drop (``cloudqueue.listener.workflows.completion``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue.listener.consumer.middleware import MessageContext
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.policies.delivery import DeliveryPolicy, exhausted
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.membership import Membership
from cloudqueue.listener.wire.packing import single_message
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.listener.workflows.group_ledger import COMPLETION_LEASE_S, GroupLedger, GroupStatus

log = structlog.get_logger(__name__)

_CODEC = MessageCodec(GroupDone)

Announce = Callable[[str], None]
"""Called with the completion queue after each ``GroupDone`` is put: a host wakes its own
listeners of that queue and announces it on its trigger channel, so the completion is picked up
at once rather than after a poller's back-off (or, at zero threads, its watchdog)."""


class CompletionPublisher:
    """Puts groups' ``GroupDone`` messages under their claims, and marks them sent."""

    def __init__(self, ledger: GroupLedger, storage: QueueStorage, delivery: DeliveryPolicy):
        self.ledger = ledger
        self.storage = storage
        self.delivery = delivery
        self.announce: Announce = _nobody

    def publish_owed(self) -> int:
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
            if claimed is not None and self.publish(claimed):
                published += 1
        return published

    def claim_again(
        self, context: MessageContext[Any], member: Membership, *, retry: bool
    ) -> GroupStatus | None:
        """On a member's redelivery: the group's completion when it is still owed and this call
        took its claim (or, on the last delivery of the member that completed the group, when
        another holds it). Owed and held, that member is ``retry``-ed when the claim ends rather
        than deleted; any other member's message is settled as usual (it carries nothing)."""
        group_id = member.group_id
        status = self.ledger.status(group_id)  # a read: most groups redelivered to are pending
        if status is None or status.completion != "owed":
            return None
        claimed = self.ledger.claim(group_id)
        if claimed is not None or not retry:
            return claimed
        if status.last_member not in (None, member.member_id):
            return None  # the member that completed the group carries its completion
        if exhausted(context.deliveries, self.delivery):  # a retry would poison the member
            log.info("group_done_taken_over", message_id=context.message_id, group=group_id)
            return status  # published under the claim: a copy is dropped by its key
        log.info("group_done_claimed", message_id=context.message_id, group=group_id)
        context.retry("group_done_claimed", delay_s=COMPLETION_LEASE_S)
        return None

    def publish(self, status: GroupStatus) -> bool:
        """Put the group's ``GroupDone`` (keyed by the group id), then mark it sent."""
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
        """Release the claim of a put that failed (not released, it ends with its lease)."""
        try:
            self.ledger.release(group_id)
        except StorageError as failure:
            log.warning("group_ledger_unavailable", group=group_id, error=str(failure))

    def __repr__(self) -> str:
        return f"CompletionPublisher({self.ledger!r})"


def _nobody(queue: str) -> None:
    """No listener to wake (a completion sent outside a host)."""


__all__ = ["Announce", "CompletionPublisher"]
