"""The storage a host's listeners and the commands use when a queue is partitioned.

With ``listener.partitions = 1`` everywhere, no ``drain_partitions``, no further accounts and no
recorded layout, the storage is used as it is: the queue is the very queue a host without
partitions reads. A queue's layout is recorded in the store
(``cloudqueue.listener.stores.layouts``): a worker checks its settings against the record at start
and records them; the commands find the layout there, so that nobody has to repeat ``--partitions``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.errors import ConfigurationError, QueueNotFoundError, StorageError
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.stores.layouts import QueueLayout, read_layout, record_layout
from cloudqueue.listener.stores.partitioned import Partition, PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.settings import CloudQueueSettings, ListenerSettings
from cloudqueue.workers.settings.connections import open_storage_from_settings
from cloudqueue.workers.settings.layouts import (
    LAYOUT_DOC,
    command_layout,
    listed_partitions,
    over_accounts,
)

if TYPE_CHECKING:  # commands that only put (enqueue, poison requeue) need not import the worker API
    from cloudqueue.workers.api.worker import QueueWorker

log = structlog.get_logger(__name__)


def partitioned_storage(
    storage: QueueStorage,
    settings: CloudQueueSettings,
    queues: Mapping[str, ListenerSettings],
) -> QueueStorage:
    """``storage`` itself, or a PartitionedQueueStorage over it (account 0) and the further
    accounts of ``settings.partition_accounts`` for the queues whose settings partition them."""
    layouts = {name: layout_of(options) for name, options in queues.items()}
    if not settings.partition_accounts and all(layout.plain for layout in layouts.values()):
        return storage
    accounts = [storage] + [
        open_storage(account.get_secret_value(), credential=settings.credential)
        for account in settings.partition_accounts
    ]
    return over_accounts(accounts, layouts)


def worker_queues(
    worker_type: type[QueueWorker[Any]], options: ListenerSettings
) -> dict[str, ListenerSettings]:
    """Each queue a worker reads (one, or several in priority order), with the listener settings
    that say how it is partitioned (alike for all of them). ConfigurationError when its
    ``queue_name`` or ``listener.priority``/``weights`` are not valid."""
    location = worker_type.location(options.visibility_timeout_s, options.priority_policy())
    return dict.fromkeys(location.queue_names, options)


def layout_of(options: ListenerSettings) -> QueueLayout:
    """The layout a worker's listener settings ask for."""
    return QueueLayout(options.partitions, options.drain_partitions)


@contextmanager
def partitioned_view(
    storage: QueueStorage,
    settings: CloudQueueSettings,
    queue_name: str,
    partitions: int | None = None,
) -> Iterator[QueueStorage]:
    """For one command: ``storage``, or a PartitionedQueueStorage that sees ``queue_name`` as
    its layout (``command_layout``) over ``storage`` and the further accounts."""
    layout = command_layout(storage, settings, queue_name, partitions)
    with viewed_as(storage, settings, queue_name, layout) as view:
        yield view


@contextmanager
def viewed_as(
    storage: QueueStorage, settings: CloudQueueSettings, queue_name: str, layout: QueueLayout
) -> Iterator[QueueStorage]:
    """``storage``, or a PartitionedQueueStorage spreading ``queue_name`` as ``layout`` over
    ``storage`` and the further accounts, which are opened here and closed afterwards
    (``storage`` is not)."""
    further = [
        open_storage(account.get_secret_value(), credential=settings.credential)
        for account in settings.partition_accounts
    ]
    try:
        if further or not layout.plain:
            yield over_accounts([storage, *further], {queue_name: layout})
        else:
            yield storage
    finally:
        for account in further:
            account.close()


class LayoutViews:
    """For a long-running reader (the dashboard): each queue seen as its layout, read again
    every ``refresh_s`` (one metadata read a queue), over the further accounts opened once."""

    def __init__(
        self,
        storage: QueueStorage,
        settings: CloudQueueSettings,
        *,
        refresh_s: float = 60.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.storage = storage
        self.settings = settings
        self.refresh_s = refresh_s
        self._clock = clock
        self._further = [
            open_storage(account.get_secret_value(), credential=settings.credential)
            for account in settings.partition_accounts
        ]
        self._views: dict[str, tuple[float, QueueStorage]] = {}

    @property
    def accounts(self) -> list[QueueStorage]:
        """Account 0 (``storage``), then the further accounts of ``partition_accounts``."""
        return [self.storage, *self._further]

    def view(self, queue_name: str) -> QueueStorage:
        now = self._clock.monotonic()
        cached = self._views.get(queue_name)
        if cached is not None and now - cached[0] < self.refresh_s:
            return cached[1]
        layout = command_layout(self.storage, self.settings, queue_name, None)
        view: QueueStorage = self.storage
        if self._further or not layout.plain:
            view = over_accounts(self.accounts, {queue_name: layout})
        self._views[queue_name] = (now, view)
        return view

    def close(self) -> None:
        for account in self._further:
            account.close()


def plain_queue_depth(view: QueueStorage, queue_name: str) -> int | None:
    """Messages on the plain queue ``queue_name`` when ``view`` spreads that name over
    partitions that do not include it (nobody reads them there); None when it does not.
    One count on account 0 (0 when there is no such queue)."""
    if not isinstance(view, PartitionedQueueStorage):
        return None
    if queue_name in (partition.queue_name for partition in view.partitions_of(queue_name)):
        return None
    try:
        return view.accounts[0].approximate_message_count(queue_name)
    except QueueNotFoundError:
        return 0


def plain_queue_warning(queue_name: str, depth: int) -> str:
    """One line for people about messages waiting, unread, on a plain queue beside partitions."""
    return (
        f"  the plain queue {queue_name} beside the partitions holds {depth} message(s) that no "
        f"worker reads: move them with cloudqueue queues merge-plain {queue_name}"
    )


def settle_layout(
    accounts: Sequence[QueueStorage],
    queue_name: str,
    wanted: QueueLayout,
    *,
    create: bool,
    record: bool = True,
) -> None:
    """At a worker's start: check the layout it asks for against the recorded one, and record it.

    ConfigurationError when they disagree (a worker would read partitions nobody writes, or
    leave unread ones that others write), when the worker would stop reading old partitions
    that still hold messages, or when the store holds partitions of the queue that no layout
    records (made before producers recorded layouts) or that hold messages beyond every layout
    read (``_check_listed``). Storage errors are logged, not raised: the worker starts as it did
    before layouts were recorded. ``record=False`` only checks (a supervisor, before its
    children start).
    """
    try:
        recorded = read_layout(accounts[0], queue_name)
        _check_listed(accounts, queue_name, recorded, wanted)
        if recorded == wanted or (recorded is None and wanted.plain):
            return
        if recorded is not None:
            _check_follows(accounts, queue_name, recorded, wanted)
        if record and record_layout(accounts[0], queue_name, wanted, create=create):
            log.info("partition_layout_recorded", queue=queue_name, layout=str(wanted))
    except StorageError as error:
        log.warning(
            "partition_layout_not_recorded",
            queue=queue_name,
            error=str(error),
            fix=f"cloudqueue queues create {queue_name} --partitions {wanted.partitions}",
        )


def check_layouts(settings: CloudQueueSettings, queues: Mapping[str, ListenerSettings]) -> None:
    """Check every worker's layout against the recorded one, recording nothing: ``run
    --processes N`` fails once here rather than in every child, restarted again and again."""
    storage = open_storage_from_settings(settings)
    try:
        with closing(LayoutViews(storage, settings)) as views:
            for queue, options in queues.items():
                settle_layout(views.accounts, queue, layout_of(options), create=False, record=False)
    finally:
        storage.close()


def _check_follows(
    accounts: Sequence[QueueStorage], queue_name: str, recorded: QueueLayout, wanted: QueueLayout
) -> None:
    """Refuse a layout that neither is the recorded one nor drains it, or that stops reading
    recorded partitions that still hold messages."""
    if recorded.partitions not in (wanted.partitions, wanted.draining):
        drain = "" if recorded.draining is None else f" and drain_partitions = {recorded.draining}"
        raise ConfigurationError(
            f"queue {queue_name} is recorded as {recorded}, but this worker's listener settings "
            f"say {wanted}: set listener.partitions = {recorded.partitions}{drain}, or repartition "
            f"by setting listener.drain_partitions = {recorded.partitions} beside the new "
            f"listener.partitions ({LAYOUT_DOC})"
        )
    read = set(wanted.readable(queue_name))
    old = over_accounts(accounts, {queue_name: recorded}).partitions_of(queue_name)
    holding = {
        partition.queue_name: depth
        for partition in old
        if partition.queue_name not in read and (depth := _depth(partition))
    }
    if holding:
        raise ConfigurationError(
            f"queue {queue_name}'s old partitions {', '.join(holding)} still hold "
            f"{sum(holding.values())} message(s) that a worker with {wanted} would not read: "
            f"keep listener.drain_partitions = {recorded.draining or recorded.partitions} until "
            f"`cloudqueue status {queue_name}` shows them empty"
        )


def _check_listed(
    accounts: Sequence[QueueStorage],
    queue_name: str,
    recorded: QueueLayout | None,
    wanted: QueueLayout,
) -> None:
    """Refuse to start beside partitions whose messages no worker would read: partitions that
    no layout records and that this worker's settings do not name, or partitions beyond both
    the record and the settings that hold messages. The worker does not adopt them: its
    settings say what it reads, and the line names the setting that reads them."""
    try:
        listed = listed_partitions(accounts, queue_name)
    except StorageError as error:  # a least-privilege credential may not list: nothing to check
        log.debug("partition_listing_unavailable", queue=queue_name, error=str(error))
        return
    if recorded is None and listed > 1 and listed not in (wanted.partitions, wanted.draining):
        raise ConfigurationError(
            f"queue {queue_name} has {listed} partitions that no layout records "
            f"({queue_name}-p0 to -p{listed - 1}), but this worker's listener settings say "
            f"{wanted}: set listener.partitions = {listed} to read them, and the worker records "
            f"that layout ({LAYOUT_DOC})"
        )
    if recorded is None or recorded.partitions not in (wanted.partitions, wanted.draining):
        return  # a worker that does not follow the record: _check_follows says so
    # Partitions the record reads but this worker would not: _check_follows says so too.
    read = max(wanted.partitions, wanted.draining or 1, recorded.partitions, recorded.draining or 1)
    if listed <= read:
        return
    beyond = over_accounts(accounts, {queue_name: QueueLayout(listed)}).partitions_of(queue_name)
    depth = sum(_depth(partition) for partition in beyond[read:])
    if depth:
        raise ConfigurationError(
            f"queue {queue_name}'s partitions {queue_name}-p{read} to -p{listed - 1}, beyond its "
            f"recorded layout ({recorded}), hold {depth} message(s) that no worker reads: set "
            f"listener.partitions = {listed} and listener.drain_partitions = {wanted.partitions} "
            f"to read them ({LAYOUT_DOC})"
        )


def _depth(partition: Partition) -> int:
    try:
        return partition.storage.approximate_message_count(partition.queue_name)
    except QueueNotFoundError:
        return 0


PARTITIONS_HELP = (
    "Treat QUEUE as this many partitions QUEUE-p0... (default: the layout recorded in the "
    "store, else listener.partitions); must agree with the recorded layout"
)
