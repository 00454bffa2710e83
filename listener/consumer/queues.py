"""Creating a listener's queues and their ``-poison`` queues, once, when it may."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from cloudqueue.listener.errors import StorageError
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.stores.storage import QueueStorage

log = structlog.get_logger(__name__)


class QueueCreator:
    """Makes sure each queue and its poison queue exist before the first get.

    ``create`` False: the queues exist already, and the credential (a SAS or a role without the
    create permission) may not create them, so it never tries.
    """

    def __init__(self, storage: QueueStorage, queue_names: Sequence[str], *, create: bool) -> None:
        self.storage = storage
        self.queue_names = tuple(queue_names)
        self.create = create
        self._ready = False

    def ensure(self) -> None:
        """Create the queues, unless done already; a failure is logged and tried again later."""
        if self._ready or not self.create:
            return
        for queue_name in self.queue_names:
            try:
                self.storage.create_queue(queue_name)
                self.storage.create_queue(poison_queue_name(queue_name))
            except StorageError as failure:
                log.warning("queue_creation_failed", queue=queue_name, error=str(failure))
                return
        self._ready = True

    def forget(self) -> None:
        """The queue was found missing (deleted, or an emulator restarted empty)."""
        self._ready = False


__all__ = ["QueueCreator"]
