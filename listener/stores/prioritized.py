"""Several queues read as one by one listener, in priority order: the storage its gets go through.

A listener whose location names several queues (``CloudQueueLocation.queue_names``, highest
priority first) reads them through a ``PrioritizedQueueStorage`` over the process's storage. On
the first queue's name:

* **get** asks the queues in the order ``cloudqueue.listener.policies.priority`` gives (strict or
weighted,
  and only two of them while idle) and returns the first batch found. Each message's id names its
  queue (``<id>@<queue>``), as a partitioned queue's ids name their partition;
* **count** sums the queues, one count each, and remembers each one's (``depths``);
* **delete** and **update** go to the queue the id names.

Every other call, and every call on another name, is the physical queue's own: a put on the first
queue's name puts there, and each queue has its own ``-poison`` queue. Underneath may be a
``PartitionedQueueStorage``: a queue of the set may itself be partitioned.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cloudqueue.listener.policies.priority import Priority, asking_order, weighted_pick
from cloudqueue.listener.stores.forwarding import ForwardingStorage
from cloudqueue.listener.stores.partitioned import ID_SEPARATOR, split_message_id
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage


@dataclass(slots=True)
class PollerTurn:
    """One dequeue thread's place: whether its last get found nothing, and whose turn is next
    among the lower queues while idle."""

    idle: bool = False
    """False for a new thread: its first get asks every queue."""
    lower_turn: int = 0


class PriorityTurns:
    """Which queue of a set each get asks first, what each gave, and the queue a message id
    names: the choosing, shared by this storage and the event loop's
    (``cloudqueue.listener.stores.async_prioritized``), which only ask and await."""

    def __init__(self, queue_names: Sequence[str], priority: Priority) -> None:
        priority.check(queue_names)
        self.queue_names = tuple(queue_names)
        self.priority = priority
        self._lock = threading.Lock()
        self._credits = tuple(0 for _ in self.queue_names)
        self._fetched: Counter[str] = Counter()
        self.depths: dict[str, int] = {}
        """Each queue's count at the last count of the set (empty before one)."""

    @property
    def first(self) -> str:
        return self.queue_names[0]

    def fetched(self) -> dict[str, int]:
        """Messages each queue has given so far."""
        with self._lock:
            return {name: self._fetched[name] for name in self.queue_names}

    def asking(self, turn: PollerTurn) -> list[str]:
        """The queues one get of ``turn``'s poller asks, in order, until one gives messages."""
        first = 0 if turn.idle else self._whose_turn()
        order = asking_order(
            len(self.queue_names), idle=turn.idle, lower_turn=turn.lower_turn, first=first
        )
        return [self.queue_names[index] for index in order]

    def found(self, turn: PollerTurn, name: str, got: list[QueueMessage]) -> list[QueueMessage]:
        """``got`` from queue ``name``: counted, each id naming its queue."""
        turn.idle = False
        with self._lock:
            self._fetched[name] += len(got)
        return [_naming(message, name) for message in got]

    @staticmethod
    def missed(turn: PollerTurn) -> list[QueueMessage]:
        """No queue asked gave any: the poller is idle (and next time asks another lower one)."""
        if turn.idle:
            turn.lower_turn += 1
        turn.idle = True
        return []

    def home(self, queue_name: str, message_id: str) -> tuple[str, str]:
        """The physical queue and id of a message the set's get returned; others unchanged."""
        if queue_name != self.first:
            return queue_name, message_id
        own_id, named = split_message_id(message_id)
        if named is None or named not in self.queue_names:
            return queue_name, message_id
        return named, own_id

    def _whose_turn(self) -> int:
        """The queue a busy get asks first: the highest (strict), or the weighted turn's."""
        if self.priority.mode == "strict":
            return 0
        with self._lock:
            chosen, self._credits = weighted_pick(self._credits, self.priority.weights)
        return chosen


class PrioritizedQueueStorage(ForwardingStorage):
    """A QueueStorage on which the first of ``queue_names`` stands for them all (see above)."""

    def __init__(self, inner: QueueStorage, queue_names: Sequence[str], priority: Priority) -> None:
        super().__init__(inner)
        self.turns = PriorityTurns(queue_names, priority)
        self.queue_names = self.turns.queue_names
        self.priority = priority
        self._local = threading.local()

    @property
    def first(self) -> str:
        return self.turns.first

    def fetched(self) -> dict[str, int]:
        """Messages each queue has given so far."""
        return self.turns.fetched()

    def depths(self) -> dict[str, int]:
        """Each queue's count at the last count of the set (empty before one)."""
        return dict(self.turns.depths)

    # -- the calls that see the set ---------------------------------------------------------

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        if queue_name != self.first:
            return super().get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
        turn = self._turn()
        for name in self.turns.asking(turn):
            got = self.inner.get_messages(
                name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
            if got:
                return self.turns.found(turn, name, got)
        return self.turns.missed(turn)

    def approximate_message_count(self, queue_name: str) -> int:
        if queue_name != self.first:
            return super().approximate_message_count(queue_name)
        depths = {name: self.inner.approximate_message_count(name) for name in self.queue_names}
        self.turns.depths = depths
        return sum(depths.values())

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        queue_name, message_id = self.turns.home(queue_name, message_id)
        return self.inner.delete_message(queue_name, message_id, pop_receipt)

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        queue_name, message_id = self.turns.home(queue_name, message_id)
        return self.inner.update_visibility(
            queue_name, message_id, pop_receipt, visibility_timeout_s, content=content
        )

    def _turn(self) -> PollerTurn:
        turn: PollerTurn | None = getattr(self._local, "turn", None)
        if turn is None:
            turn = self._local.turn = PollerTurn()
        return turn

    def __repr__(self) -> str:
        return (
            f"PrioritizedQueueStorage({self.inner!r}, queues={list(self.queue_names)}, "
            f"priority={self.priority.mode})"
        )


def _naming(message: QueueMessage, queue_name: str) -> QueueMessage:
    return replace(message, id=f"{message.id}{ID_SEPARATOR}{queue_name}")


def as_in_queue(message: QueueMessage, queue_name: str) -> QueueMessage:
    """The message as ``queue_name`` itself knows it: without the ``@<queue>`` its id carried
    when read through a ``PrioritizedQueueStorage`` (unchanged otherwise)."""
    suffix = f"{ID_SEPARATOR}{queue_name}"
    if not message.id.endswith(suffix):
        return message
    return replace(message, id=message.id.removesuffix(suffix))


__all__ = ["PollerTurn", "PrioritizedQueueStorage", "PriorityTurns", "as_in_queue"]
