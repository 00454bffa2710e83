"""Which of a listener's queues a get asks, as pure functions (no clock, no I/O, no lock).

A listener may read several queues in priority order (``("invoices-urgent", "invoices")``):

* **strict**: a get asks the queues from the highest down and takes the first that has work, so
  a lower queue is read only while every higher one is empty.
* **weighted**: gets are shared by weight (3:1 gives the first queue three gets in four while
  both have work), by a smooth weighted round-robin; a get whose turn finds its queue empty asks
  the others, highest first, so no queue with work waits for a turn, and none starves.

**Idle** (the thread's previous get found nothing anywhere): a get asks the highest queue and one
lower queue, in turn. The highest queue is asked on every get, so its worst-case pickup is a
single queue's (one idle back-off step); an idle get costs two transactions whatever the count
of queues, and a lower queue is asked every ``len(queues) - 1`` idle gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from cloudqueue.listener.errors import ConfigurationError

PriorityMode = Literal["strict", "weighted"]
MODES: tuple[str, ...] = get_args(PriorityMode)


@dataclass(frozen=True, slots=True)
class Priority:
    """How a listener on several queues shares its gets among them."""

    mode: PriorityMode = "strict"
    weights: tuple[int, ...] = ()
    """One positive whole number per queue, in the queues' order; only for ``weighted``."""

    def check(self, queue_names: Sequence[str]) -> None:
        """ConfigurationError (one line naming the setting) when it does not fit the queues."""
        if self.mode not in MODES:
            raise ConfigurationError(
                f"listener.priority must be one of {', '.join(MODES)}, got {self.mode!r}"
            )
        if self.mode == "strict":
            if self.weights:
                raise ConfigurationError(
                    "listener.weights applies only to listener.priority = 'weighted' "
                    "(strict reads the queues in their order)"
                )
            return
        if len(self.weights) != len(queue_names):
            raise ConfigurationError(
                f"listener.weights must give one weight per queue: {len(queue_names)} queue(s) "
                f"({', '.join(queue_names)}), {len(self.weights)} weight(s) {list(self.weights)}"
            )
        if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in self.weights):
            raise ConfigurationError(
                f"listener.weights must be whole numbers >= 1, got {list(self.weights)}"
            )


STRICT = Priority()


def check_queue_names(queue_names: Sequence[str]) -> None:
    """ConfigurationError when the queues of one listener are none or repeat a name."""
    if not queue_names:
        raise ConfigurationError("queue_name needs at least one queue")
    seen: set[str] = set()
    for name in queue_names:
        if name in seen:
            raise ConfigurationError(
                f"queue_name names {name!r} twice: each queue once, highest priority first"
            )
        seen.add(name)


def weighted_pick(credits: Sequence[int], weights: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """The smooth weighted round-robin's next turn: (queue index, the credits after it).

    Every queue earns its weight; the richest takes the turn and pays the total. Over
    ``sum(weights)`` turns each queue gets exactly its weight, spread out rather than in runs.
    """
    earned = [credit + weight for credit, weight in zip(credits, weights, strict=True)]
    chosen = max(range(len(earned)), key=lambda index: (earned[index], -index))
    earned[chosen] -= sum(weights)
    return chosen, tuple(earned)


def asking_order(count: int, *, idle: bool, lower_turn: int, first: int = 0) -> tuple[int, ...]:
    """The queues (indexes, highest priority 0) one get asks, in order, until one has work.

    ``first`` is the queue whose turn it is (0 under strict; the weighted pick otherwise);
    ``idle`` says the thread's previous get found nothing anywhere: then only the highest queue
    and the lower queue of ``lower_turn`` are asked.
    """
    if count == 1:
        return (0,)
    if idle:
        return (0, 1 + lower_turn % (count - 1))
    return (first, *(index for index in range(count) if index != first))


__all__ = [
    "MODES",
    "STRICT",
    "Priority",
    "PriorityMode",
    "asking_order",
    "check_queue_names",
    "weighted_pick",
]
