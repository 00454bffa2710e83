"""Calibration: the simulator and the real listener agree on what a workload costs.

The same bursts run twice: simulated, and through the real ``CloudQueueListener`` with the real
``ElasticScaler`` on the in-memory store behind ``MeteredStorage``, in virtual time (handlers wait
their service time on the ``VirtualClock``). Their transaction counts must agree within 10 %.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.simulation import (
    ServiceModel,
    Workload,
    bursts,
    cloudqueue_defaults,
    simulate,
)
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.testing import VirtualClock
from tests.support.polling import eventually

SERVICE_S = 0.05
WORKLOAD = bursts(60, 100.0, 300.0)
COMPARED = ("get_messages", "delete_message", "approximate_message_count")


class _NoCpu:
    def cores_used(self) -> float:
        return 0.0


def _producer(
    storage: InMemoryQueueStorage, queue: str, clock: VirtualClock, workload: Workload
) -> Callable[[threading.Event], None]:
    """Puts each arrival at its virtual time (on the inner store: puts are not compared)."""

    def produce(stop: threading.Event) -> None:
        for number, arrival_s in enumerate(workload.arrivals_s):
            delay_s = arrival_s - (clock.monotonic() - 1_000.0)
            if delay_s > 0 and clock.wait(stop, delay_s):
                return
            storage.put_message(queue, f"message {number}")

    return produce


def run_for_real(queue: str) -> dict[str, int]:
    """The workload through the real listener and scaler; the counted transactions."""
    clock = VirtualClock()
    inner = InMemoryQueueStorage(clock=clock)
    inner.create_queue(queue)
    metered = MeteredStorage(inner)
    listener: CloudQueueListener[Any] = CloudQueueListener(
        metered, CloudQueueLocation(queue), str, clock=clock, sleeper=clock, create_queues=False
    )
    never = threading.Event()

    def handle(_: object) -> None:
        clock.wait(never, SERVICE_S)  # the handler's service time, in virtual time

    listener.subscribe(on_next=handle)
    ElasticScaler(
        listener.pool_control,
        ScalingPolicy(),
        rng=random.Random(1),
        clock=clock,
        cpu_meter=_NoCpu(),
    )
    stop = threading.Event()
    producer = threading.Thread(target=_producer(inner, queue, clock, WORKLOAD), args=(stop,))
    producer.start()
    listener.start_listener(1)
    try:
        eventually(lambda: clock.waiting >= 2)
        while clock.monotonic() - 1_000.0 < WORKLOAD.duration_s:
            clock.advance_when_all_waiting(
                lambda: listener.threads_alive + int(producer.is_alive()), timeout_s=1.0
            )
    finally:
        stop.set()
        listener.stop(timeout_s=10)
        producer.join(10)
    return metered.counts()


def test_simulated_and_real_transaction_counts_agree_within_ten_percent(queue_name: str) -> None:
    """Three bursts of 60 over 5 minutes: gets, deletes and depth checks within 10 % in total."""
    real = run_for_real(queue_name)
    (simulated,) = simulate(
        WORKLOAD, [cloudqueue_defaults()], service=ServiceModel(SERVICE_S, request_latency_s=0.0)
    )
    real_total = sum(real.get(operation, 0) for operation in COMPARED)
    assert real["delete_message"] == simulated.transactions["delete_message"] == 180
    assert simulated.total_transactions == pytest.approx(real_total, rel=0.10), (real, simulated)
