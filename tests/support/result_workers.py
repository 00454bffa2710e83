"""Workers that keep results, for tests that run them in a host or with ``cloudqueue run``; and
a sleeper that tells how a result's waits ended."""

from __future__ import annotations

import threading

from pydantic import BaseModel

from cloudqueue.workers import QueueWorker


class Price(BaseModel):
    sku: str
    cents: int


class Priced(BaseModel):
    sku: str
    total: int


class Pricer(QueueWorker[Price]):
    """Prices an item, and keeps the price for an hour."""

    queue_name = "prices"
    keep_results = True
    results_ttl_s = 3600.0

    def handle(self, item: Price) -> Priced:
        return Priced(sku=item.sku, total=item.cents * 2)


class NeverExpiring(Pricer):
    """A time to live that is no finite number of seconds: refused at load."""

    results_ttl_s = float("inf")


class BatchPricer(QueueWorker[Price]):
    """Results of a batch handler: refused at load."""

    queue_name = "prices"
    keep_results = True

    def handle_batch(self, items: list[Price]) -> None:
        return None


class WakeUps:
    """A real sleeper (on events) that notes how each wait ended: True when woken."""

    def __init__(self) -> None:
        self.ended: list[bool] = []

    def wait(self, stop_event: threading.Event, delay_s: float) -> bool:
        woken = stop_event.wait(delay_s)
        self.ended.append(woken)
        return woken
