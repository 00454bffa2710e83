"""The pipeline's workers: processors price work items, the controller adds a run up when its
group completes, and the report step receives the run's totals.

Run them with the command line, as many of each as you like, on any machines that reach the
store::

    cloudqueue run examples.billing_pipeline.workers:PricingWorker
    cloudqueue run examples.billing_pipeline.workers:ControllerWorker
    cloudqueue run examples.billing_pipeline.workers:ReportWorker
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

import structlog

from cloudqueue import GroupDone, PermanentFailure, QueueWorker, current_envelope
from cloudqueue.listener import CloudQueueListener, GroupHandle, QueueStorage
from examples.billing_pipeline.config import (
    DONE_QUEUE,
    TOTALS_QUEUE,
    WORK_QUEUE,
    pricing_delay_s,
    totaling_delay_s,
)
from examples.billing_pipeline.model import PricedItem, RunTotals, WorkItem, price, run_totals

log = structlog.get_logger(__name__)

WEEK_S = 7 * 24 * 3600


class PricingWorker(QueueWorker[WorkItem]):
    """Prices each work item; the framework keeps the result under the item's id.

    Idempotent by construction: pricing is a pure function of the item. A redelivered item (its
    processor died before the delete) is priced again and its result stored again under the
    same key, replacing the first; the group counts each member once.
    """

    queue_name = WORK_QUEUE
    keep_results = True
    results_ttl_s = WEEK_S  # the controller reads them when the run completes

    def __init__(self) -> None:
        self._delay_s = pricing_delay_s()

    def handle(self, item: WorkItem) -> PricedItem:
        if self._delay_s:
            time.sleep(self._delay_s)  # stands in for a real pricing engine's work
        result = price(item)
        log.info(
            "item_priced",
            item_id=item.item_id,
            customer=item.customer,
            amount_cents=result.amount_cents,
            attempt=current_envelope().dequeue_count,
        )
        return result


IDEMPOTENT: Mapping[str, Mapping[str, Any]] = {"idempotency": {"window_s": WEEK_S}}
"""A second copy of a message of the same key (the run id), put after a crash, is dropped."""


class ReportWorker(QueueWorker[RunTotals]):
    """The last step: receives each run's totals once (a real pipeline writes the invoices)."""

    queue_name = TOTALS_QUEUE
    settings: ClassVar[Mapping[str, Mapping[str, Any]]] = IDEMPOTENT

    def handle(self, totals: RunTotals) -> None:
        log.info("run_reported", **totals.model_dump())


class ControllerWorker(QueueWorker[GroupDone]):
    """Adds up a run's priced items when its group completes, and sends the totals on.

    It holds no state: the run's results are read from the store, so any number of controllers
    may run, on any machines. A second copy of a ``GroupDone`` (a crash between its put and its
    mark) is dropped by idempotent handling; a controller killed while adding up leaves the
    ``GroupDone`` queued, and the next delivery adds the same results up again. The totals go
    to ``ReportWorker`` effect-once: a redelivery after they were sent sends nothing again.
    """

    queue_name = DONE_QUEUE
    settings: ClassVar[Mapping[str, Mapping[str, Any]]] = IDEMPOTENT
    then = ReportWorker

    def __init__(self) -> None:
        self._storage: QueueStorage | None = None
        self._delay_s = totaling_delay_s()

    def on_start(self, listener: CloudQueueListener[Any]) -> None:
        # The results are where the run's group is: the store this worker reads its queue from.
        self._storage = listener.storage

    def handle(self, done: GroupDone) -> RunTotals:
        assert self._storage is not None, "on_start runs before the first item"
        attempt = current_envelope().dequeue_count
        log.info("run_totaling", run_id=done.group_id, work_items=done.total, attempt=attempt)
        if self._delay_s:
            time.sleep(self._delay_s)  # stands in for a long aggregation (tests kill it here)
        results = GroupHandle.of(done.group_id, self._storage).results(PricedItem)
        totals = run_totals(done.group_id, results, poisoned=done.poisoned)
        if totals.work_items != done.handled:
            # Every handled member stored its result before it counted: fewer means they expired,
            # and a retry would find no more of them.
            raise PermanentFailure(
                f"run {done.group_id}: {totals.work_items} results for {done.handled} items"
            )
        log.info(
            "run_totaled",
            run_id=done.group_id,
            work_items=totals.work_items,
            poisoned=totals.poisoned,
            attempt=attempt,
        )
        return totals
