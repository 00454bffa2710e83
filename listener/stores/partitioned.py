"""One logical queue over several physical queues, spread over one or more storage accounts.

``PartitionedQueueStorage`` implements the ``QueueStorage`` protocol, so the listener, the
publisher and the command line use a partitioned queue by its logical name (``orders``) exactly
as they use a plain one; the physical queues are ``orders-p0`` ... (see ``partition_names``).
Partition ``i`` lives on account ``i % len(accounts)``.

* **get** asks ONE partition per call, so while every partition is empty a poller costs one get
  per back-off step whatever K is. Each thread keeps draining the partition that last gave it
  messages ("sticky"), for at most ``sticky_gets`` gets in a row: then it moves on, so a busy
  partition cannot starve the others. A thread whose partition just ran dry tries the next one
  at once rather than backing off while work waits elsewhere.
* **message ids** carry their partition: ``<physical id>@<physical queue>``, so delete and
  update reach the right queue, and a poison record names the partition its message came from.
* **put** on the logical name goes round-robin over the partitions; a put on a partition's own
  name (``orders-p2``) goes to that partition (keyed publishing and poison requeue use this).
* **create** makes the writable partitions and, when the store records no layout for the queue
  yet, records this one (``layouts``): whoever creates the partitions first records them.
* **count** sums the partitions: one Get Queue Properties transaction per partition.
* **repartitioning**: ``draining`` names the partition count a logical queue had before; its old
  partitions that are not new ones are read (and counted) but never written, until they are empty
  and the setting is removed.
* Any other queue name (``orders-poison``) goes to the first account unchanged.
* **metadata** belongs to physical queues: it is read and written on the queue of that very name
  on the account that holds it (the logical name is the plain queue of that name, on account 0).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from cloudqueue.listener.errors import ConfigurationError, MessageNotFoundError, QueueNotFoundError
from cloudqueue.listener.stores._embedded import check_max_messages
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout, record_layout
from cloudqueue.listener.stores.partition_names import check_partitions, partition_queue_names
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage

R = TypeVar("R")

ID_SEPARATOR = "@"
"""Between a physical message id and its physical queue in a partitioned message's id."""

STICKY_GETS = 8
"""How many gets in a row a thread takes from one partition before giving the next its turn."""


@dataclass(frozen=True, slots=True)
class Partition:
    """One physical queue of a logical queue, and the account that holds it."""

    index: int
    queue_name: str
    storage: QueueStorage
    writable: bool
    """False for an old partition being drained after repartitioning."""


def split_message_id(message_id: str) -> tuple[str, str | None]:
    """A partitioned message id's physical id and physical queue; (id, None) for a plain id."""
    physical_id, separator, queue_name = message_id.rpartition(ID_SEPARATOR)
    if not separator:
        return message_id, None
    return physical_id, queue_name


class PartitionLayout:
    """The partitions of one logical queue, and the rotation its gets and puts follow."""

    def __init__(self, partitions: list[Partition]) -> None:
        self.readable = partitions
        self.writable = [partition for partition in partitions if partition.writable]
        self.by_name = {partition.queue_name: partition for partition in partitions}
        self._next_read = itertools.count()
        self._next_write = itertools.count()
        self._lock = threading.Lock()

    def next_readable(self) -> Partition:
        with self._lock:
            return self.readable[next(self._next_read) % len(self.readable)]

    def next_writable(self) -> Partition:
        with self._lock:
            return self.writable[next(self._next_write) % len(self.writable)]


@dataclass(slots=True)
class StickyTurn:
    """The partition a thread is draining, and how many gets in a row it has taken from it."""

    partition: Partition | None = None
    gets: int = 0
    _taken: int = 0
    """Gets in a row from the partition ``take`` gave, before this one."""

    def take(self, layout: PartitionLayout) -> Partition:
        """The partition this poller's next get asks: the one it drains, else the next in
        turn. Released until ``got``: an empty get or an error sends the next one elsewhere."""
        sticking = self.partition
        partition = sticking or layout.next_readable()
        self._taken = self.gets if partition is sticking else 0
        self.partition, self.gets = None, 0
        return partition

    def got(
        self, partition: Partition, got: list[QueueMessage], sticky_gets: int
    ) -> list[QueueMessage]:
        """``got`` from ``partition``, tagged; the poller keeps draining it while it gives and
        ``sticky_gets`` in a row are not reached."""
        if got and self._taken + 1 < sticky_gets:
            self.partition, self.gets = partition, self._taken + 1
        return [_tagged(message, partition) for message in got]


class PartitionedQueueStorage:
    """A QueueStorage whose listed logical queues are each spread over several physical queues."""

    def __init__(
        self,
        accounts: Sequence[QueueStorage],
        partitions: Mapping[str, int],
        *,
        draining: Mapping[str, int] | None = None,
        sticky_gets: int = STICKY_GETS,
    ) -> None:
        if not accounts:
            raise ConfigurationError("a partitioned queue needs at least one storage account")
        if sticky_gets < 1:
            raise ValueError(f"sticky_gets must be >= 1, got {sticky_gets}")
        self.accounts = list(accounts)
        self.sticky_gets = sticky_gets
        draining = draining or {}
        self._spread = {
            name: QueueLayout(count, draining.get(name)) for name, count in partitions.items()
        }
        self._layouts = {
            name: PartitionLayout(self._partitions(name, count, draining.get(name, count)))
            for name, count in partitions.items()
        }
        self._physical = {
            partition.queue_name: partition
            for layout in self._layouts.values()
            for partition in layout.readable
        }
        self._local = threading.local()

    def _partitions(self, queue_name: str, count: int, old_count: int) -> list[Partition]:
        new = partition_queue_names(queue_name, count)
        old = partition_queue_names(queue_name, check_partitions(old_count))
        names = new + [name for name in old if name not in new]
        return [
            Partition(
                index=index,
                queue_name=name,
                storage=self.accounts[index % len(self.accounts)]
                if name in new
                else self._account_of(name, old),
                writable=name in new,
            )
            for index, name in enumerate(names)
        ]

    def _account_of(self, name: str, names: list[str]) -> QueueStorage:
        """An old partition lives where the old layout put it: by its index among the old ones."""
        return self.accounts[names.index(name) % len(self.accounts)]

    # -- what the command line and status read ---------------------------------------------

    def partitions_of(self, queue_name: str) -> list[Partition]:
        """A logical queue's partitions (new ones first, then any being drained); a plain queue
        is its own single partition on the first account."""
        layout = self._layouts.get(queue_name)
        if layout is None:
            return [Partition(0, queue_name, self.accounts[0], writable=True)]
        return list(layout.readable)

    def partition_count(self, queue_name: str) -> int:
        """How many partitions a put on the logical queue may go to (1 for a plain queue)."""
        layout = self._layouts.get(queue_name)
        return 1 if layout is None else len(layout.writable)

    # -- the storage protocol ---------------------------------------------------------------

    def create_queue(self, queue_name: str) -> None:
        """Create the queue's partitions. Whoever creates a partitioned queue first -- a worker,
        ``cloudqueue enqueue --partitions``, a Publisher -- records its layout on account 0, so
        that every worker and command finds it (a recorded layout is left as it is)."""
        for partition in self._targets(queue_name, writable_only=True):
            partition.storage.create_queue(partition.queue_name)
        layout = self._spread.get(queue_name)
        if layout is None or layout.plain or read_layout(self.accounts[0], queue_name) is not None:
            return
        record_layout(self.accounts[0], queue_name, layout, create=False)

    def get_messages(
        self, queue_name: str, *, max_messages: int, visibility_timeout_s: int
    ) -> list[QueueMessage]:
        layout = self._layouts.get(queue_name)
        if layout is None:
            return self._plain(queue_name).get_messages(
                queue_name, max_messages=max_messages, visibility_timeout_s=visibility_timeout_s
            )
        sticky = self._sticky(queue_name)
        was_draining = sticky.partition is not None
        messages = self._get_turn(layout, sticky, max_messages, visibility_timeout_s)
        if not messages and was_draining:
            # Its partition ran dry: the next one may hold work, and this thread was busy a
            # moment ago, so one more get now costs nothing an idle poller would pay.
            messages = self._get_turn(layout, sticky, max_messages, visibility_timeout_s)
        return messages

    def _get_turn(
        self,
        layout: PartitionLayout,
        sticky: StickyTurn,
        max_messages: int,
        visibility_timeout_s: int,
    ) -> list[QueueMessage]:
        partition = sticky.take(layout)
        got = partition.storage.get_messages(
            partition.queue_name,
            max_messages=max_messages,
            visibility_timeout_s=visibility_timeout_s,
        )
        return sticky.got(partition, got, self.sticky_gets)

    def delete_message(self, queue_name: str, message_id: str, pop_receipt: str) -> bool:
        found = self._message_home(queue_name, message_id)
        if found is None:
            return False
        partition, physical_id = found
        return partition.storage.delete_message(partition.queue_name, physical_id, pop_receipt)

    def put_message(
        self,
        queue_name: str,
        content: str,
        *,
        time_to_live_s: int | None = None,
        visibility_delay_s: int = 0,
    ) -> QueueMessage:
        partition = self._write_target(queue_name)
        put = partition.storage.put_message(
            partition.queue_name,
            content,
            time_to_live_s=time_to_live_s,
            visibility_delay_s=visibility_delay_s,
        )
        return as_put(queue_name, partition, put)

    def update_visibility(
        self,
        queue_name: str,
        message_id: str,
        pop_receipt: str,
        visibility_timeout_s: int,
        *,
        content: str | None = None,
    ) -> str:
        found = self._message_home(queue_name, message_id)
        if found is None:
            raise MessageNotFoundError(f"message {message_id} is not in queue {queue_name}")
        partition, physical_id = found
        return partition.storage.update_visibility(
            partition.queue_name, physical_id, pop_receipt, visibility_timeout_s, content=content
        )

    def approximate_message_count(self, queue_name: str) -> int:
        return sum(
            self._each(queue_name, lambda p: p.storage.approximate_message_count(p.queue_name))
        )

    def peek_messages(self, queue_name: str, *, max_messages: int) -> list[QueueMessage]:
        check_max_messages(max_messages)  # refused before any call, as on a plain queue
        peeked: list[QueueMessage] = []
        missing: list[QueueNotFoundError] = []
        targets = self._targets(queue_name)
        for partition in targets:
            if len(peeked) == max_messages:
                break
            try:
                page = partition.storage.peek_messages(
                    partition.queue_name, max_messages=max_messages - len(peeked)
                )
            except QueueNotFoundError as error:  # not created yet (as in _each): holds nothing
                missing.append(error)
                continue
            peeked.extend(self._as_read(queue_name, message, partition) for message in page)
        if len(missing) == len(targets):
            raise missing[0]
        return peeked

    def get_queue_metadata(self, queue_name: str) -> dict[str, str]:
        return self._plain(queue_name).get_queue_metadata(queue_name)

    def set_queue_metadata(self, queue_name: str, metadata: Mapping[str, str]) -> None:
        self._plain(queue_name).set_queue_metadata(queue_name, metadata)

    def list_queues(self, prefix: str = "") -> list[str]:
        names: set[str] = set()
        for account in self.accounts:
            names.update(account.list_queues(prefix))
        return sorted(names)

    def clear_queue(self, queue_name: str) -> None:
        self._each(queue_name, lambda p: p.storage.clear_queue(p.queue_name))

    def delete_queue(self, queue_name: str) -> None:
        self._each(queue_name, lambda p: p.storage.delete_queue(p.queue_name))

    def close(self) -> None:
        for account in self.accounts:
            account.close()

    # -- routing ------------------------------------------------------------------------------

    def _plain(self, queue_name: str) -> QueueStorage:
        partition = self._physical.get(queue_name)
        return self.accounts[0] if partition is None else partition.storage

    def _targets(self, queue_name: str, *, writable_only: bool = False) -> list[Partition]:
        """The physical queues an operation on ``queue_name`` acts on."""
        layout = self._layouts.get(queue_name)
        if layout is not None:
            return layout.writable if writable_only else layout.readable
        partition = self._physical.get(queue_name)
        if partition is not None:
            return [partition]
        return [Partition(0, queue_name, self.accounts[0], writable=True)]

    def _each(self, queue_name: str, operation: Callable[[Partition], R]) -> list[R]:
        """Apply ``operation`` to every partition; QueueNotFoundError only if all are missing
        (a partition not created yet, e.g. after growing K, holds nothing)."""
        results: list[R] = []
        missing: QueueNotFoundError | None = None
        for partition in self._targets(queue_name):
            try:
                results.append(operation(partition))
            except QueueNotFoundError as error:
                missing = error
        if missing is not None and not results:
            raise missing
        return results

    def _write_target(self, queue_name: str) -> Partition:
        layout = self._layouts.get(queue_name)
        if layout is not None:
            return layout.next_writable()
        return self._targets(queue_name)[0]

    def _message_home(self, queue_name: str, message_id: str) -> tuple[Partition, str] | None:
        """The partition a message id belongs to and its physical id; None if it names none of
        ``queue_name``'s partitions."""
        if queue_name not in self._layouts:
            return self._targets(queue_name)[0], message_id
        physical_id, physical_queue = split_message_id(message_id)
        partition = self._layouts[queue_name].by_name.get(physical_queue or "")
        return None if partition is None else (partition, physical_id)

    def _as_read(
        self, queue_name: str, message: QueueMessage, partition: Partition
    ) -> QueueMessage:
        return _tagged(message, partition) if queue_name in self._layouts else message

    def _sticky(self, queue_name: str) -> StickyTurn:
        per_queue: dict[str, StickyTurn] = self._local.__dict__.setdefault("sticky", {})
        return per_queue.setdefault(queue_name, StickyTurn())

    # -- what the event loop's side routes by (``async_partitioned``) -------------------------

    def layout(self, queue_name: str) -> PartitionLayout | None:
        """The partitions of a logical queue; None for a plain one."""
        return self._layouts.get(queue_name)

    def message_home(self, queue_name: str, message_id: str) -> tuple[Partition, str] | None:
        """The partition a message id read through ``queue_name`` belongs to, and its own id."""
        return self._message_home(queue_name, message_id)

    def targets(self, queue_name: str, *, writable_only: bool = False) -> list[Partition]:
        """The physical queues an operation on ``queue_name`` acts on."""
        return self._targets(queue_name, writable_only=writable_only)

    def write_target(self, queue_name: str) -> Partition:
        """Where a put on ``queue_name`` goes (round-robin over a logical queue's partitions)."""
        return self._write_target(queue_name)

    def __repr__(self) -> str:
        layout = {name: len(layout.writable) for name, layout in self._layouts.items()}
        return f"PartitionedQueueStorage(accounts={len(self.accounts)}, partitions={layout})"


def as_put(queue_name: str, partition: Partition, put: QueueMessage) -> QueueMessage:
    """A message put on ``queue_name`` as it reads back: tagged when put on one of the
    partitions of a logical queue."""
    return put if queue_name == partition.queue_name else _tagged(put, partition)


def _tagged(message: QueueMessage, partition: Partition) -> QueueMessage:
    """The message with its partition written into its id."""
    return replace(message, id=f"{message.id}{ID_SEPARATOR}{partition.queue_name}")
