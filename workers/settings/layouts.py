"""A queue's partition layout as a command or a producer sees it, and the storage spread over it.

The layout is recorded in the store (``cloudqueue.listener.stores.layouts``); without a record it
is what ``--partitions`` or the settings say, or (queues partitioned before layouts were recorded)
what the listed ``-pN`` queues show. The host (``cloudqueue.workers.host.partitioning``), the
commands and ``QueueWorker.send`` read it here, below all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout
from cloudqueue.listener.stores.partition_names import PARTITION_SEPARATOR, partition_of_queue
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.settings.model import CloudQueueSettings

LAYOUT_DOC = "docs/concepts/partition-layout.md"


def over_accounts(
    accounts: Sequence[QueueStorage], layouts: Mapping[str, QueueLayout]
) -> PartitionedQueueStorage:
    """A PartitionedQueueStorage spreading each queue as its layout says."""
    return PartitionedQueueStorage(
        accounts,
        {name: layout.partitions for name, layout in layouts.items()},
        draining={
            name: layout.draining for name, layout in layouts.items() if layout.draining is not None
        },
    )


def command_layout(
    storage: QueueStorage, settings: CloudQueueSettings, queue_name: str, partitions: int | None
) -> QueueLayout:
    """The layout a command sees ``queue_name`` with: the recorded one, which ``--partitions``
    (``partitions``) must agree with; without a record, ``--partitions`` or else the settings."""
    recorded = read_layout(storage, queue_name)
    if recorded is None:
        options = settings.listener
        if partitions is None and options.partitions == 1 and options.drain_partitions is None:
            return _listed_layout(storage, queue_name)
        return QueueLayout(partitions or options.partitions, options.drain_partitions)
    if partitions is not None and partitions != recorded.partitions:
        raise ConfigurationError(
            f"queue {queue_name} is recorded as {recorded}, not --partitions {partitions}: leave "
            f"--partitions out (the record is used), or repartition as {LAYOUT_DOC} says"
        )
    return recorded


def _listed_layout(storage: QueueStorage, queue_name: str) -> QueueLayout:
    """Partitions made before layouts were recorded: as many as the highest ``-pN`` listed on
    account 0 says (one List Queues); the plain queue when there are none."""
    return QueueLayout(listed_partitions([storage], queue_name) or 1)


def listed_partitions(accounts: Sequence[QueueStorage], queue_name: str) -> int:
    """How many partitions the queues listed on ``accounts`` say ``queue_name`` has (the
    highest ``-pN`` plus one; 0 when there is none): one List Queues per account."""
    indexes = [
        found[1]
        for account in accounts
        for name in account.list_queues(f"{queue_name}{PARTITION_SEPARATOR}")
        if (found := partition_of_queue(name)) is not None and found[0] == queue_name
    ]
    return max(indexes) + 1 if indexes else 0


__all__ = ["LAYOUT_DOC", "command_layout", "listed_partitions", "over_accounts"]
