"""Where a listener listens: its queue (or queues, in priority order) and how long a fetched
message stays hidden."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.policies.priority import STRICT, Priority, check_queue_names
from cloudqueue.listener.stores.partitioned import split_message_id
from cloudqueue.listener.stores.storage import MAX_VISIBILITY_TIMEOUT_S, validate_queue_name


@dataclass(frozen=True, slots=True)
class CloudQueueLocation:
    """A queue name (valid for Azure, with room for its poison queue) and a visibility timeout.

    ``lower_queues`` are further queues the same listener reads, in falling priority after
    ``queue_name``, shared among its gets as ``priority`` says
    (``cloudqueue.listener.policies.priority``); each keeps its own ``-poison`` queue.
    ``CloudQueueLocation.of(("urgent", "normal"))`` builds one from the queues in priority order.
    """

    queue_name: str
    visibility_timeout_s: int = 30
    lower_queues: tuple[str, ...] = ()
    priority: Priority = STRICT

    def __post_init__(self) -> None:
        check_queue_names(self.queue_names)
        for name in self.queue_names:
            _check_name(name)
        self.priority.check(self.queue_names)
        if not 1 <= self.visibility_timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
            raise ConfigurationError(
                f"visibility_timeout_s must be 1..{MAX_VISIBILITY_TIMEOUT_S}, "
                f"got {self.visibility_timeout_s}"
            )

    @classmethod
    def of(
        cls,
        queue_names: str | Sequence[str],
        visibility_timeout_s: int = 30,
        *,
        priority: Priority = STRICT,
    ) -> CloudQueueLocation:
        """One queue by its name, or several in priority order (highest first)."""
        names = (queue_names,) if isinstance(queue_names, str) else tuple(queue_names)
        check_queue_names(names)
        return cls(names[0], visibility_timeout_s, names[1:], priority)

    @property
    def queue_names(self) -> tuple[str, ...]:
        """Every queue the listener reads, highest priority first."""
        return (self.queue_name, *self.lower_queues)

    def queue_of(self, message_id: str) -> str:
        """The queue a fetched message came from: the one its id names (a listener on several
        queues reads them through ``cloudqueue.listener.stores.prioritized``), else
        ``queue_name``."""
        if not self.lower_queues:
            return self.queue_name
        named = split_message_id(message_id)[1]
        if named is not None and named in self.lower_queues:
            return named
        return self.queue_name


def _check_name(name: str) -> None:
    if not isinstance(name, str):
        raise ConfigurationError(f"invalid queue name {name!r}: a queue name is a string")
    validate_queue_name(name)
    try:
        validate_queue_name(poison_queue_name(name))
    except ConfigurationError as error:
        raise ConfigurationError(
            f"queue name {name!r} leaves no room for its poison queue (at most 56 characters)"
        ) from error
