"""The live cost meter: each queue's transactions per hour and projected monthly cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from cloudqueue.listener import CloudQueueListener, CloudQueueLocation, InMemoryQueueStorage
from cloudqueue.listener.stores.metered import MeteredPayloadStore, MeteredStorage, blob_counts
from cloudqueue.listener.stores.payload_store import InMemoryPayloadStore
from cloudqueue.listener.testing import ManualClock
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from cloudqueue.workers.host.cost_meter import WINDOW_S, CostMeter
from cloudqueue.workers.host.live_state import LiveState, LiveStatePublisher

PAYLOAD = "invoices/" + "0" * 32


@pytest.fixture
def storage() -> MeteredStorage:
    store = MeteredStorage(InMemoryQueueStorage())
    store.create_queue("invoices")
    store.create_queue("invoices-poison")
    store.create_queue("other")
    return store


def test_a_queues_rate_counts_its_poison_queue_and_blob_calls(storage: MeteredStorage) -> None:
    """10 s with 4 queue, 1 poison and 2 blob calls for invoices: 2,520 an hour; others apart."""
    clock = ManualClock()
    payloads = MeteredPayloadStore(InMemoryPayloadStore())
    meter = CostMeter(
        storage, blob_counts(payloads, None), price_per_10k_usd=0.01, clock=clock, window_s=10
    )
    meter.sample()
    for _ in range(4):
        storage.get_messages("invoices", max_messages=32, visibility_timeout_s=30)
    storage.approximate_message_count("invoices-poison")
    payloads.put(PAYLOAD, b"x")
    payloads.get(PAYLOAD)
    storage.get_messages("other", max_messages=32, visibility_timeout_s=30)
    clock.advance(10)
    meter.sample()
    cost = meter.cost_of("invoices")
    assert cost.storage_transactions_per_hour == pytest.approx(7 * 360)
    assert cost.projected_cost_per_month_usd == pytest.approx(7 * 360 * 720 / 10_000 * 0.01)
    assert meter.cost_of("other").storage_transactions_per_hour == pytest.approx(360)


def test_an_idle_workers_cost_is_null_until_its_window_is_full(storage: MeteredStorage) -> None:
    """A start's fast polls are no monthly bill: null at 6 s and 70 s, right once full."""
    clock = ManualClock()
    meter = CostMeter(storage, clock=clock)
    meter.sample()
    assert meter.cost_of("invoices").storage_transactions_per_hour is None
    for _ in range(9):  # threads backing off from 0.1 s: 6,480 an hour if projected now
        storage.get_messages("invoices", max_messages=32, visibility_timeout_s=30)
    seen: dict[float, float | None] = {}
    elapsed_s = 0.0
    while elapsed_s < WINDOW_S:
        clock.advance(1.5)  # then one idle get every 1.5 s, as the back-off settles
        elapsed_s += 1.5
        storage.get_messages("invoices", max_messages=32, visibility_timeout_s=30)
        meter.sample()
        seen[elapsed_s] = meter.cost_of("invoices").projected_cost_per_month_usd
    assert seen[6.0] is None
    assert seen[70.5] is None
    assert all(cost is None for at, cost in seen.items() if at < WINDOW_S)
    per_hour = meter.cost_of("invoices").storage_transactions_per_hour
    assert per_hour == pytest.approx((9 + WINDOW_S / 1.5) / WINDOW_S * 3_600)


def test_the_rate_follows_the_recent_window(storage: MeteredStorage) -> None:
    """A busy start is forgotten once it leaves the window: the rate shows the quiet now."""
    clock = ManualClock()
    meter = CostMeter(storage, clock=clock, window_s=60)
    meter.sample()
    for _ in range(100):
        storage.approximate_message_count("invoices")
    for _ in range(10):
        clock.advance(30)
        storage.approximate_message_count("invoices")
        meter.sample()
    assert meter.cost_of("invoices").storage_transactions_per_hour == pytest.approx(120)


def test_the_published_live_state_carries_the_meter(
    storage: MeteredStorage, tmp_path: Path
) -> None:
    """Each queue's live state has its transactions per hour and monthly cost, read back too."""
    clock = ManualClock()
    meter = CostMeter(storage, clock=clock, price_per_10k_usd=0.02, window_s=36)
    listener: CloudQueueListener[str] = CloudQueueListener(
        storage, CloudQueueLocation("invoices"), str
    )
    publisher = LiveStatePublisher(tmp_path, worker="w")
    publisher.publish([listener], meter=meter)
    assert (
        json.loads(publisher.path.read_text())["queues"][0]["projected_cost_per_month_usd"] is None
    )
    storage.approximate_message_count("invoices")
    clock.advance(36)
    publisher.publish([listener], meter=meter)
    (queue,) = LiveState.from_json(json.loads(publisher.path.read_text())).queues
    assert queue.storage_transactions_per_hour == pytest.approx(100)
    assert queue.projected_cost_per_month_usd == pytest.approx(100 * 720 / 10_000 * 0.02)


class Plain(QueueWorker[str]):
    queue_name: ClassVar[str] = "invoices"
    item_type = str

    def handle(self, item: str) -> None:
        pass


def test_the_host_meters_the_payload_store_its_listeners_use(storage: MeteredStorage) -> None:
    """Blob calls of large payloads go through the host's meter, so the live cost counts them."""
    given = InMemoryPayloadStore()
    host = WorkerHost([Plain], CloudQueueSettings(), storage=storage, payload_store=given)
    assert host.payloads is not None
    assert host.payloads.inner is given
    assert host.listeners[0].payload_store is host.payloads


def test_the_price_setting_defaults_to_the_seeds() -> None:
    """cost.price_per_10k_transactions_usd is $0.01 unless configured."""
    assert CloudQueueSettings().cost.price_per_10k_transactions_usd == 0.01
    custom = CloudQueueSettings.model_validate({"cost": {"price_per_10k_transactions_usd": 0.004}})
    assert custom.cost.price_per_10k_transactions_usd == 0.004


def test_until_its_window_is_full_the_meter_says_how_long_it_has_counted(
    storage: MeteredStorage,
) -> None:
    """Three minutes in, the cost is unknown and 180 s counted: status turns it into "in about
    7 min"; once full, the figure is known."""
    clock = ManualClock()
    meter = CostMeter(storage, clock=clock)
    meter.sample()
    clock.advance(180)
    meter.sample()
    assert meter.cost_of("invoices").counted_s == pytest.approx(180)
    clock.advance(WINDOW_S)
    meter.sample()
    assert meter.cost_of("invoices").storage_transactions_per_hour is not None
