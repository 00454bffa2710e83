"""The initiator: splits a billing run into work items and sends them as one group."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import structlog

from cloudqueue import Publisher
from cloudqueue.listener import GroupHandle, QueueStorage
from examples.billing_pipeline.config import DONE_QUEUE, TOTALS_QUEUE, WORK_QUEUE
from examples.billing_pipeline.model import Transaction, WorkItem, split
from examples.billing_pipeline.workers import ControllerWorker

log = structlog.get_logger(__name__)


def prepare_queues(storage: QueueStorage) -> None:
    """Create the pipeline's queues if they are missing."""
    for name in (WORK_QUEUE, DONE_QUEUE, TOTALS_QUEUE):
        storage.create_queue(name)


def start_run(
    storage: QueueStorage,
    transactions: Sequence[Transaction],
    *,
    transactions_per_item: int = 20,
) -> GroupHandle:
    """Send the run's work items as the members of one group, named by the run id; the
    controller gets the group's one ``GroupDone`` when every item is priced.

    Each item's id is its message key, so the processors keep each result under the item's id:
    a result stored again after a crash replaces the first, and the run counts it once.
    """
    run_id = uuid.uuid4().hex[:8]
    items = list(split(run_id, transactions, per_item=transactions_per_item))
    publisher = Publisher(storage, WORK_QUEUE, WorkItem, key="item_id")
    group = publisher.send_group(items, on_complete=ControllerWorker, group_id=run_id)
    log.info("run_sent", run_id=run_id, transactions=len(transactions), work_items=len(items))
    return group
