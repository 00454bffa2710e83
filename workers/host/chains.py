"""A hosted worker's chain step (``then``): a publisher of the next worker's queue, effect-once in
the host's key ledger, and the group ledger that passes members on
(``cloudqueue.listener.workflows.chains``)."""

from __future__ import annotations

from typing import Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.push.triggers import TriggerChannel
from cloudqueue.listener.stores.key_ledger import key_ledger_for
from cloudqueue.listener.stores.key_records import KeyLedger
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.workflows.chains import ChainStep
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.api.sending import work_announcer, written_encoding
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.settings import CloudQueueSettings
from cloudqueue.workers.settings.layouts import command_layout, over_accounts

EFFECT_ONCE_S = 7 * 24 * 3600
"""How long a chained put is remembered: a week, a message's default life in its queue, so any
redelivery of the step finds its mark."""


def chain_step_for(
    worker_type: type[QueueWorker[Any]],
    storage: QueueStorage,
    settings: CloudQueueSettings,
    key_ledger: KeyLedger | None,
    triggers: TriggerChannel | None = None,
) -> ChainStep | None:
    """The chain step of a worker with ``then`` (None without), announcing what it puts on the
    host's ``triggers``; ConfigurationError when the store has no key ledger for its marks."""
    then = worker_type.then
    if then is None:
        return None
    ledger = key_ledger or key_ledger_for(storage)
    if ledger is None:
        raise ConfigurationError(
            f"{worker_type.__qualname__}: then needs the key ledger for its effect-once sends: "
            "add BlobEndpoint=... to the connection string"
        )
    reads = settings.for_worker(then.settings, source=f"settings of {then.__qualname__}")
    queue = then.location(reads.listener.visibility_timeout_s).queue_names[0]
    storage = _partitioned_as_recorded(storage, reads, queue, worker_type.__qualname__)
    storage.create_queue(queue)  # as the next worker would: a put must not wait for its start
    next_step: Publisher[Any] = Publisher(
        storage,
        queue,
        then.item_type,
        codec=MessageCodec(then.item_type, encoding=written_encoding(reads)),
        trace_envelope=True,
        ledger=ledger,
        effect_once_s=EFFECT_ONCE_S,
    )
    announcer = work_announcer(settings, triggers)
    return ChainStep(next_step, group_ledger_for(storage), announcer=announcer)


def _partitioned_as_recorded(
    storage: QueueStorage, reads: CloudQueueSettings, queue: str, step: str
) -> QueueStorage:
    """``storage``, spread over the next queue's partitions when they are recorded (or its
    settings ask for them) and the host does not read that queue itself."""
    if isinstance(storage, PartitionedQueueStorage) and storage.partition_count(queue) > 1:
        return storage  # the next worker runs in this host: its partitions are known
    layout = command_layout(storage, reads, queue, None)
    if layout.plain:
        return storage
    if reads.partition_accounts:
        raise ConfigurationError(
            f"{step}: then's queue {queue} is partitioned over several accounts: run its worker "
            "in the same cloudqueue run, whose storage spreads over them"
        )
    return over_accounts([storage], {queue: layout})


__all__ = ["EFFECT_ONCE_S", "chain_step_for"]
