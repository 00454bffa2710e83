"""The pipeline's two workers: processors price work items, the controller records the results.

Run them with the command line, as many processors as you like::

    cloudqueue run examples.billing_pipeline.workers:PricingWorker
    cloudqueue run examples.billing_pipeline.workers:ControllerWorker
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from cloudqueue import CloudQueueSettings, Publisher, QueueWorker, current_envelope
from cloudqueue.listener import CloudQueueListener, WorkAnnouncer
from examples.billing_pipeline.announcing import announcer_from
from examples.billing_pipeline.config import (
    RESULTS_QUEUE,
    WORK_QUEUE,
    ledger_path,
    pricing_delay_s,
)
from examples.billing_pipeline.ledger import BillingLedger
from examples.billing_pipeline.model import PricedItem, WorkItem, price

log = structlog.get_logger(__name__)


class PricingWorker(QueueWorker[WorkItem]):
    """Prices each work item and publishes the result to the controller's queue.

    Idempotent by construction: pricing is a pure function of the item, and the result carries the
    item's id as its deduplication key. A redelivered item (its processor crashed before the
    delete) is priced again and its result published again; the controller records it once.
    """

    queue_name = WORK_QUEUE

    def __init__(self) -> None:
        self._results: Publisher[PricedItem] | None = None
        self._announcer: WorkAnnouncer | None = None
        self._delay_s = pricing_delay_s()

    def on_start(self, listener: CloudQueueListener[Any]) -> None:
        # The results go to the store the work came from, through the same connection.
        listener.storage.create_queue(RESULTS_QUEUE)
        self._announcer = announcer_from(CloudQueueSettings())
        self._results = Publisher(
            listener.storage, RESULTS_QUEUE, PricedItem, announcer=self._announcer
        )

    def handle(self, item: WorkItem) -> None:
        assert self._results is not None, "on_start runs before the first item"
        if self._delay_s:
            time.sleep(self._delay_s)  # stands in for a real pricing engine's work
        result = price(item)
        self._results.publish(result)
        log.info(
            "item_priced",
            item_id=item.item_id,
            customer=item.customer,
            amount_cents=result.amount_cents,
            attempt=current_envelope().dequeue_count,
        )

    def on_stop(self) -> None:
        if self._announcer is not None:
            self._announcer.channel.close()


class ControllerWorker(QueueWorker[PricedItem]):
    """Records each result in the ledger once, and reports when a run is complete."""

    queue_name = RESULTS_QUEUE

    def __init__(self) -> None:
        self._ledger: BillingLedger | None = None

    def on_start(self, listener: CloudQueueListener[Any]) -> None:
        self._ledger = BillingLedger(ledger_path())

    def handle(self, item: PricedItem) -> None:
        assert self._ledger is not None, "on_start runs before the first item"
        if not self._ledger.record(item):
            log.info("duplicate_result_ignored", item_id=item.item_id)
            return
        progress = self._ledger.progress(item.run_id)
        # Said by the delivery that recorded the run's last row (duplicates returned above).
        if progress.complete and progress.recorded == progress.expected:
            log.info("run_complete", run_id=item.run_id, work_items=progress.expected)

    def on_stop(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
