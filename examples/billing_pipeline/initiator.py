"""The initiator: splits a billing run into work items and publishes them, many per message."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import structlog

from cloudqueue import Publisher
from cloudqueue.listener import QueueStorage, WorkAnnouncer
from examples.billing_pipeline.config import RESULTS_QUEUE, WORK_QUEUE
from examples.billing_pipeline.ledger import BillingLedger
from examples.billing_pipeline.model import Transaction, WorkItem, split

log = structlog.get_logger(__name__)


def prepare_queues(storage: QueueStorage) -> None:
    """Create the pipeline's queues if they are missing."""
    for name in (WORK_QUEUE, RESULTS_QUEUE):
        storage.create_queue(name)


def start_run(
    storage: QueueStorage,
    ledger: BillingLedger,
    transactions: Sequence[Transaction],
    *,
    transactions_per_item: int = 20,
    items_per_message: int = 10,
    announcer: WorkAnnouncer | None = None,
) -> str:
    """Record the run's size in the ledger, publish its work items and return the run id.

    ``items_per_message`` items go into one message (one put, one get, one delete for all of
    them); smaller messages spread a run over more processors, larger ones cost fewer
    transactions. With an ``announcer`` each publish also sends a push trigger.
    """
    run_id = uuid.uuid4().hex[:8]
    items = list(split(run_id, transactions, per_item=transactions_per_item))
    # Recorded first: the controller can only call a run complete once it knows its size.
    ledger.start_run(run_id, len(items))
    publisher = Publisher(storage, WORK_QUEUE, WorkItem, batch=True, announcer=announcer)
    for start in range(0, len(items), items_per_message):
        publisher.publish_many(items[start : start + items_per_message])
    log.info(
        "run_published",
        run_id=run_id,
        transactions=len(transactions),
        work_items=len(items),
        messages=publisher.messages_sent,
    )
    return run_id
