"""Delays beyond 7 days on the event loop: a message taken before it is due is hidden again.

The event-loop consumer's counterpart of ``hops`` (which says why a copy, not a longer
visibility): a message whose envelope's due time is still ahead is not handled; a copy is put
hidden for the rest of the delay (at most ``DeliveryPolicy.max_hop_s``), its ``hops`` one higher,
keeping the original's expiry, then the one taken is deleted. Its outcome is ``delayed``
(``not_due``). A put that fails is a failed delivery (retried); a delete that fails leaves the
taken message to come back and hop again: a duplicate, never a loss.
"""

from __future__ import annotations

import math
from typing import Any

import structlog

from cloudqueue.listener.consumer.event_loop.leases import HeldMessage
from cloudqueue.listener.consumer.event_loop.settling import AsyncSettler
from cloudqueue.listener.consumer.hops import NOT_DUE, log_hop
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.producer.republish import republished_timing
from cloudqueue.listener.wire.due import next_hop

log = structlog.get_logger(__name__)


class AsyncDelayHops:
    """Hides the messages of one queue again that were taken before they were due."""

    def __init__(self, settler: AsyncSettler) -> None:
        self.settler = settler

    def not_due(self, context: MessageContext[Any]) -> bool:
        """True when the message's due time (a delay beyond 7 days) is still ahead."""
        due = context.due
        return due is not None and due > self.settler.clock.now()

    async def hop(self, held: HeldMessage, context: MessageContext[Any]) -> Outcome:
        """Put the message again hidden until it is due (or for one more hop), then delete the
        one taken; call it holding ``held.settling``."""
        settler, message, envelope = self.settler, held.message, context.envelope
        due = context.due
        assert envelope is not None  # not_due said so
        assert due is not None
        now = settler.clock.now()
        hidden_s = min(settler.delivery.max_hop_s, math.ceil((due - now).total_seconds()))
        time_to_live_s, delay_s = republished_timing(message, hidden_s, now)
        queue = context.queue_name  # the message's own (of several, or a logical partitioned one)
        try:
            copy = await settler.storage.put_message(
                queue,
                next_hop(envelope),
                time_to_live_s=time_to_live_s,
                visibility_delay_s=delay_s,
            )
        except StorageError as failure:
            return await settler.failed(
                held, failure, error=f"hiding a delayed message again failed: {failure}"
            )
        settler.counters.delay_hops += 1
        log_hop(message.id, envelope, hidden_s, copy.id)
        try:
            await settler.storage.delete_message(settler.queue_name, message.id, held.pop_receipt)
        except StorageError as failure:
            log.warning("delayed_message_not_deleted", message_id=message.id, error=str(failure))
        return NOT_DUE


__all__ = ["AsyncDelayHops"]
