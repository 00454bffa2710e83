"""Where a partitioned queue's layout is recorded, so that every command and worker finds it.

A logical queue's layout is how many partitions its puts go to and, while it is repartitioned,
the count it had before (its old partitions are still read until they are empty). It is kept
in the metadata of the queue's partition 0, ``<queue>-p0``, on account 0:

* every layout with more than one partition, old or new, has that queue, whatever K is;
* a plain queue has none, so no record means "plain", as before layouts were recorded;
* deleting the partitions deletes the record with them.

Reading it is one Get Queue Metadata transaction (a 404 when the queue is plain).
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudqueue.listener.errors import ConfigurationError, QueueNotFoundError
from cloudqueue.listener.stores.partition_names import (
    check_partitions,
    partition_queue_name,
    partition_queue_names,
)
from cloudqueue.listener.stores.storage import QueueStorage

PARTITIONS_KEY = "cloudqueue_partitions"
DRAINING_KEY = "cloudqueue_draining"


@dataclass(frozen=True, slots=True)
class QueueLayout:
    """How a logical queue is spread: ``partitions`` written (and read), ``draining`` read only."""

    partitions: int
    draining: int | None = None
    """The partition count before a repartitioning, whose old partitions are still read."""

    @property
    def plain(self) -> bool:
        """Whether the layout is the queue itself and nothing else."""
        return self.partitions == 1 and self.draining in (None, 1)

    def readable(self, queue_name: str) -> list[str]:
        """The physical queues read: the partitions, then the old ones not among them."""
        new = partition_queue_names(queue_name, self.partitions)
        old = [] if self.draining is None else partition_queue_names(queue_name, self.draining)
        return new + [name for name in old if name not in new]

    def reads_plain_queue(self, queue_name: str) -> bool:
        """Whether the queue of the logical name itself is one of the queues read."""
        return queue_name in self.readable(queue_name)

    def __str__(self) -> str:
        counted = (
            "1 partition (the queue itself)"
            if self.partitions == 1
            else (f"{self.partitions} partitions")
        )
        return counted if self.draining is None else f"{counted}, draining {self.draining}"


def layout_home(queue_name: str) -> str:
    """The queue whose metadata holds the layout: partition 0 of any K > 1 (``orders-p0``)."""
    return partition_queue_name(queue_name, 0, 2)


def read_layout(storage: QueueStorage, queue_name: str) -> QueueLayout | None:
    """The layout recorded for ``queue_name`` on ``storage`` (account 0); None when none is.

    A record that is not one (edited by hand) is a ConfigurationError naming the queue.
    """
    try:
        metadata = storage.get_queue_metadata(layout_home(queue_name))
    except QueueNotFoundError:
        return None
    partitions = metadata.get(PARTITIONS_KEY)
    if partitions is None:
        return None
    draining = metadata.get(DRAINING_KEY)
    try:
        return QueueLayout(
            check_partitions(int(partitions)),
            None if draining is None else check_partitions(int(draining)),
        )
    except (ValueError, ConfigurationError):
        raise ConfigurationError(
            f"the layout recorded on queue {layout_home(queue_name)} is not one: "
            f"{PARTITIONS_KEY}={partitions!r}, {DRAINING_KEY}={draining!r}"
        ) from None


def record_layout(
    storage: QueueStorage, queue_name: str, layout: QueueLayout, *, create: bool = True
) -> bool:
    """Record ``layout`` on ``storage`` (account 0); False when it has no queue to hold it.

    With more than one partition the home queue is one of them and is created if need be (and
    ``create`` allows it); a layout of one partition that drains others is recorded only while
    ``<queue>-p0`` is there (once the old partitions are deleted, no record is the same as the
    plain queue). Other metadata on the home queue is kept.
    """
    home = layout_home(queue_name)
    if create and layout.partitions > 1:
        storage.create_queue(home)
    try:
        metadata = storage.get_queue_metadata(home)
    except QueueNotFoundError:
        return False
    metadata = {k: v for k, v in metadata.items() if k not in (PARTITIONS_KEY, DRAINING_KEY)}
    metadata[PARTITIONS_KEY] = str(layout.partitions)
    if layout.draining is not None:
        metadata[DRAINING_KEY] = str(layout.draining)
    storage.set_queue_metadata(home, metadata)
    return True
