"""Delays beyond 7 days, on the listener's side: a message taken before it is due is hidden again.

A ``Publisher`` puts a message delayed longer than 7 days hidden for 7 days, with its due time in
its envelope (``cloudqueue.listener.wire.due``). When it shows up early, the listener does not
handle it: it puts a copy hidden for the rest of the delay (at most ``DeliveryPolicy.max_hop_s``, 7
days), its ``hops`` one higher and every other field kept, then deletes the one it took. The copy
keeps the original's expiry (``cloudqueue.listener.producer.republish``).

A re-put rather than a longer visibility timeout on the same message: a get raises a message's
dequeue count, and the processor poisons a message delivered more than ``max_dequeue_count``
times before anything else, so hops that kept the message would count toward poison. The copy
starts again at 0. That costs one more transaction per hop (put and delete, where moving the
visibility is one call) and, as every put-then-delete here, a crash in between leaves a
duplicate, never a loss. A hop that fails to put counts as a failed delivery: it is retried.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer import lease_calls
from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome
from cloudqueue.listener.consumer.settlement import Settlement
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.producer.republish import republish
from cloudqueue.listener.wire.due import next_hop
from cloudqueue.listener.wire.envelope import Envelope

log = structlog.get_logger(__name__)

NOT_DUE = Outcome("delayed", "not_due")
"""The outcome of a hop: hidden again, not handled."""


class DelayHops:
    """Hides the messages of one queue again that were taken before they were due."""

    def __init__(self, settlement: Settlement, *, clock: Clock, max_hop_s: int) -> None:
        self.settlement = settlement
        self.clock = clock
        self.max_hop_s = max_hop_s

    def not_due(self, due: datetime) -> bool:
        """True while ``due`` is ahead of the clock."""
        return due > self.clock.now()

    def hop(self, lease: Lease, context: MessageContext[Any], envelope: Envelope) -> None:
        """Put the message again hidden until it is due (or for one more hop), then delete the
        one taken: its handler is not called, its dequeue count starts again."""
        settlement, message = self.settlement, lease.message
        now, due = self.clock.now(), envelope.due
        assert due is not None  # the processor asked not_due first
        hidden_s = min(self.max_hop_s, math.ceil((due - now).total_seconds()))
        try:
            copy = republish(
                settlement.storage,
                settlement.queue_name,
                next_hop(envelope),
                original=message,
                delay_s=hidden_s,
                now=now,
            )
        except StorageError as failure:
            settlement.failed(lease, context, f"hiding a delayed message again failed: {failure}")
            return
        settlement.counters.add("delay_hops")
        log_hop(message.id, envelope, hidden_s, copy.id)
        # A delete that fails leaves the taken message to come back and hop again: a duplicate.
        lease_calls.delete(settlement.storage, settlement.queue_name, lease)
        context.outcome = NOT_DUE


def log_hop(message_id: str, envelope: Envelope, hidden_s: int, copy_id: str) -> None:
    """One line for a message hidden again until it is due (the event loop's hops too)."""
    log.info(
        "message_delayed",
        message_id=message_id,
        due=envelope.fields.get("due"),
        hops=envelope.hops + 1,
        hidden_s=hidden_s,
        copy_id=copy_id,
    )


__all__ = ["NOT_DUE", "DelayHops", "log_hop"]
