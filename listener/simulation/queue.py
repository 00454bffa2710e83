"""A simulated queue with Azure's semantics, in virtual time, counting every billed call.

A get takes up to ``max_messages`` visible messages, oldest first, and hides them for the
visibility timeout with a fresh pop receipt; a message not deleted in time becomes visible again
with its dequeue count raised. A delete with a stale pop receipt fails (and is still billed). The
approximate count includes hidden messages, as Azure's does.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from dataclasses import dataclass


@dataclass(slots=True)
class SimulatedMessage:
    """One message: when it was put, how often it was delivered, its current pop receipt."""

    id: int
    enqueued_s: float
    dequeue_count: int = 0
    pop_receipt: int = 0
    visible_at_s: float = 0.0


class SimulatedQueue:
    """Messages visible now (FIFO) and hidden ones (by the time they reappear)."""

    def __init__(self) -> None:
        self._visible: deque[SimulatedMessage] = deque()
        self._hidden: list[tuple[float, int, SimulatedMessage]] = []
        self._live: dict[int, SimulatedMessage] = {}
        self._ids = itertools.count(1)
        self._receipts = itertools.count(1)
        self.transactions: Counter[str] = Counter()

    def put(self, now_s: float) -> None:
        """A producer's put: not billed here (it costs the same whichever policy consumes)."""
        message = SimulatedMessage(next(self._ids), now_s, visible_at_s=now_s)
        self._live[message.id] = message
        self._visible.append(message)

    def get(
        self, now_s: float, *, max_messages: int, visibility_timeout_s: float
    ) -> list[SimulatedMessage]:
        self.transactions["get_messages"] += 1
        self._reveal(now_s)
        taken: list[SimulatedMessage] = []
        while self._visible and len(taken) < max_messages:
            message = self._visible.popleft()
            message.dequeue_count += 1
            message.pop_receipt = next(self._receipts)
            message.visible_at_s = now_s + visibility_timeout_s
            heapq.heappush(self._hidden, (message.visible_at_s, message.pop_receipt, message))
            taken.append(message)
        return taken

    def delete(self, message: SimulatedMessage, pop_receipt: int) -> bool:
        """Delete if the receipt is current; False (a 400 PopReceiptMismatch) otherwise."""
        self.transactions["delete_message"] += 1
        if message.pop_receipt != pop_receipt or message.id not in self._live:
            return False
        del self._live[message.id]
        return True

    def update_visibility(
        self, message: SimulatedMessage, pop_receipt: int, now_s: float, visibility_s: float
    ) -> int | None:
        """Hide a held message for ``visibility_s`` more; its new receipt (None if stale)."""
        self.transactions["update_visibility"] += 1
        if message.pop_receipt != pop_receipt or message.id not in self._live:
            return None
        message.pop_receipt = next(self._receipts)
        message.visible_at_s = now_s + visibility_s
        heapq.heappush(self._hidden, (message.visible_at_s, message.pop_receipt, message))
        return message.pop_receipt

    def poison(self, message: SimulatedMessage, pop_receipt: int) -> bool:
        """Copy to the poison queue (a billed put), then delete."""
        self.transactions["put_message"] += 1
        return self.delete(message, pop_receipt)

    def approximate_count(self) -> int:
        self.transactions["approximate_message_count"] += 1
        return len(self._live)

    @property
    def billed(self) -> int:
        """Every transaction so far."""
        return sum(self.transactions.values())

    @property
    def depth(self) -> int:
        """Visible and hidden messages, for charts (not billed)."""
        return len(self._live)

    def idle_until_put(self) -> bool:
        """True when nothing is stored at all: only a put can change what a get returns."""
        return not self._live

    def _reveal(self, now_s: float) -> None:
        """Make messages whose visibility timeout ran out visible again (deleted ones vanish)."""
        while self._hidden and self._hidden[0][0] <= now_s:
            _, receipt, message = heapq.heappop(self._hidden)
            if message.id in self._live and message.pop_receipt == receipt:
                self._visible.append(message)
