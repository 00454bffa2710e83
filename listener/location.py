"""Where a listener listens: the queue and how long a fetched message stays hidden."""

from __future__ import annotations

from dataclasses import dataclass

from listener.errors import ConfigurationError
from listener.poison.queue import poison_queue_name
from listener.stores.storage import MAX_VISIBILITY_TIMEOUT_S, validate_queue_name


@dataclass(frozen=True, slots=True)
class CloudQueueLocation:
    """A queue name (valid for Azure, with room for its poison queue) and a visibility timeout."""

    queue_name: str
    visibility_timeout_s: int = 30

    def __post_init__(self) -> None:
        validate_queue_name(self.queue_name)
        try:
            validate_queue_name(poison_queue_name(self.queue_name))
        except ConfigurationError as error:
            raise ConfigurationError(
                f"queue name {self.queue_name!r} leaves no room for its poison queue "
                f"(at most 56 characters)"
            ) from error
        if not 1 <= self.visibility_timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
            raise ConfigurationError(
                f"visibility_timeout_s must be 1..{MAX_VISIBILITY_TIMEOUT_S}, "
                f"got {self.visibility_timeout_s}"
            )
