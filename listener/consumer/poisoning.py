"""Moving a leased message to the poison queue, and what happens when that move fails.

The copy to ``<queue>-poison`` can fail: the poison queue was deleted while the worker runs (it is
re-created when the listener may create queues), or the store refuses the put. The message then
stays in its queue -- nothing is lost -- and comes back after its visibility timeout. It must go to
the poison queue then with the reason it was given up for: not be handled again, nor be poisoned
later as "delivered too often". So the decision is remembered by message id until a move
succeeds. While moves fail, each failure is counted (``poison_failures``), logged at most once a
``log_every_s`` (with how many were not logged), and ``failing`` is true: a worker's readiness
turns red until a move succeeds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import structlog

from cloudqueue.listener.clock import Clock
from cloudqueue.listener.consumer.leases import Lease
from cloudqueue.listener.consumer.stats import ListenerCounters
from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.poison.move import poison_message
from cloudqueue.listener.stores.prioritized import as_in_queue
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

log = structlog.get_logger(__name__)

REMEMBERED_DECISIONS = 10_000
"""Poison decisions kept for messages whose move failed (oldest forgotten first: such a message
is then handled afresh when it comes back, and poisoned again if it still fails)."""


@dataclass(frozen=True, slots=True)
class PoisonDecision:
    """Why a message goes to the poison queue, and what its record holds."""

    reason: str
    error: str
    first_error: str | None
    recorded: QueueMessage
    """The message as the record keeps it (its failed items only, or all its deliveries)."""
    fetched_dequeue_count: int
    """The dequeue count of the delivery that decided it."""

    def again(self, message: QueueMessage) -> PoisonDecision:
        """The decision for a later delivery of the same message: its deliveries counted on."""
        later = message.dequeue_count - self.fetched_dequeue_count
        counted = replace(self.recorded, dequeue_count=self.recorded.dequeue_count + later)
        return replace(self, recorded=counted, fetched_dequeue_count=message.dequeue_count)


class PoisonMover:
    """Moves one queue's leased messages to its poison queue, remembering moves that failed."""

    def __init__(
        self,
        storage: QueueStorage,
        queue_name: str,
        *,
        clock: Clock,
        counters: ListenerCounters,
        create_queue: bool,
        log_every_s: float = 60.0,
    ) -> None:
        self.storage = storage
        self.queue_name = queue_name
        self.clock = clock
        self.counters = counters
        self.create_queue = create_queue
        self.log_every_s = log_every_s
        self._pending: OrderedDict[str, PoisonDecision] = OrderedDict()
        self._lock = threading.Lock()
        self._failing = False
        self._last_logged: float | None = None
        self._unlogged = 0

    @property
    def failing(self) -> bool:
        """True from a failed move until the next move that succeeds."""
        return self._failing

    def pending(self, message: QueueMessage) -> PoisonDecision | None:
        """The decision of an earlier delivery whose move failed, for this delivery; else None."""
        if not self._pending:  # asked once per message: no lock while no move has failed
            return None
        with self._lock:
            decision = self._pending.get(message.id)
        return None if decision is None else decision.again(message)

    def move(self, lease: Lease, decision: PoisonDecision, queue_name: str | None = None) -> bool:
        """Copy the message to the poison queue of ``queue_name`` (the queue it came from, when
        the listener reads several; by default its own) and delete it (settling the lease); if
        the copy fails it stays in its queue and the decision is kept for its next delivery. True
        when this call moved it."""
        deleted: list[bool] = []
        queue = queue_name or self.queue_name
        recorded = as_in_queue(decision.recorded, queue)

        def move(pop_receipt: str) -> None:
            try:
                deleted.append(
                    poison_message(
                        self.storage,
                        queue,
                        recorded,
                        reason=decision.reason,
                        error=decision.error,
                        now=self.clock.now(),
                        first_error=decision.first_error,
                        pop_receipt=pop_receipt,
                        create_queue=self.create_queue,
                    )
                )
            except StorageError as failure:
                self._failed(lease.message.id, decision, failure)

        lease.settle(move)
        if deleted:
            self._moved(lease.message.id)
            if deleted[0]:
                self.counters.add("poisoned")
        return bool(deleted and deleted[0])

    def _failed(self, message_id: str, decision: PoisonDecision, failure: StorageError) -> None:
        self.counters.add("poison_failures")
        now = self.clock.monotonic()
        with self._lock:
            self._pending[message_id] = decision
            self._pending.move_to_end(message_id)
            while len(self._pending) > REMEMBERED_DECISIONS:
                self._pending.popitem(last=False)
            self._failing = True
            due = self._last_logged is None or now - self._last_logged >= self.log_every_s
            if not due:
                self._unlogged += 1
                return
            self._last_logged, unlogged, self._unlogged = now, self._unlogged, 0
        log.error(
            "poison_failed",
            reason=decision.reason,
            error=str(failure),
            kind=type(failure).__name__,
            not_logged_since=unlogged,
            next="the message stays in its queue and is moved when it comes back",
        )

    def _moved(self, message_id: str) -> None:
        with self._lock:
            self._pending.pop(message_id, None)
            recovered = self._failing
            self._failing = False
            self._last_logged, self._unlogged = None, 0
        if recovered:
            log.info("poison_recovered", queue=self.queue_name)


__all__ = ["PoisonDecision", "PoisonMover"]
