"""The storage a host's listeners use when some of its workers' queues are partitioned.

With ``listener.partitions = 1`` everywhere, no ``drain_partitions`` and no further accounts, the
host's storage is used as it is: the queue is the very queue a host without partitions reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from listener.stores.connection import open_storage
from listener.stores.partitioned import PartitionedQueueStorage
from listener.stores.storage import QueueStorage
from workers.settings import CloudQueueSettings, ListenerSettings


def partitioned_storage(
    storage: QueueStorage,
    settings: CloudQueueSettings,
    queues: Mapping[str, ListenerSettings],
) -> QueueStorage:
    """``storage`` itself, or a PartitionedQueueStorage over it (account 0) and the further
    accounts of ``settings.partition_accounts`` for the queues whose settings partition them."""
    partitions = {name: options.partitions for name, options in queues.items()}
    draining = {
        name: options.drain_partitions
        for name, options in queues.items()
        if options.drain_partitions is not None
    }
    if not settings.partition_accounts and not draining and set(partitions.values()) <= {1}:
        return storage
    accounts = [storage] + [
        open_storage(account.get_secret_value(), credential=settings.credential)
        for account in settings.partition_accounts
    ]
    return PartitionedQueueStorage(accounts, partitions, draining=draining)


@contextmanager
def partitioned_view(
    storage: QueueStorage,
    settings: CloudQueueSettings,
    queue_name: str,
    partitions: int | None = None,
) -> Iterator[QueueStorage]:
    """For one command: ``storage``, or a PartitionedQueueStorage that treats ``queue_name`` as
    ``partitions`` partitions (default: the ``listener.partitions`` setting) over ``storage`` and
    the further accounts, which are opened here and closed afterwards (``storage`` is not)."""
    options = settings.listener.model_copy(
        update={"partitions": partitions or settings.listener.partitions}
    )
    further = [
        open_storage(account.get_secret_value(), credential=settings.credential)
        for account in settings.partition_accounts
    ]
    try:
        if further or options.partitions > 1 or options.drain_partitions is not None:
            draining = (
                {} if options.drain_partitions is None else {queue_name: options.drain_partitions}
            )
            yield PartitionedQueueStorage(
                [storage, *further], {queue_name: options.partitions}, draining=draining
            )
        else:
            yield storage
    finally:
        for account in further:
            account.close()


PARTITIONS_HELP = "Treat QUEUE as this many partitions QUEUE-p0... [listener.partitions]"
