"""Elastic scaling against Azurite: idle poller -> burst -> scale up -> drain -> one poller."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from structlog.testing import capture_logs

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    MessageCodec,
    QueueEmptyDecision,
)
from cloudqueue.listener.policies.scaling_rules import proportional
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.polling import eventually

BURST = 320


def test_a_burst_into_an_idle_queue_scales_up_drains_and_settles_to_one_poller(
    azurite_connection_string: str, queue_name: str
) -> None:
    """One idle poller grows to the rule's target (8) on a burst, drains it, and shrinks to 1."""
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(queue_name), int
    )
    policy = ScalingPolicy(
        rule=proportional(32),
        min_threads=1,
        max_threads=8,
        max_idle_s=0.3,
        scale_in_delay_s=1.0,
        cpu_saturation_cores=100.0,
    )
    went_idle = threading.Event()

    class WatchedScaler(ElasticScaler):
        def on_queue_empty(self, idle_count: int) -> QueueEmptyDecision:
            went_idle.set()
            return super().on_queue_empty(idle_count)

    WatchedScaler(listener.pool_control, policy)
    handled: list[int] = []
    lock = threading.Lock()

    def handle(number: int) -> None:
        with lock:
            handled.append(number)

    listener.subscribe(handle)
    try:
        with capture_logs() as logs:
            listener.start_listener(1)
            assert went_idle.wait(30)
            codec = MessageCodec(int)
            # Every message hidden until one moment, so that the whole burst becomes visible at
            # once even when the puts are slow (a loaded machine): Azure's delays are whole seconds.
            # Put 8 at a time: one by one, a loaded machine took longer than the delay, part of
            # the burst showed early and the rule, reading that depth, grew the pool to 7.
            visible_at = time.monotonic() + 6

            def put(number: int) -> None:
                delay_s = max(1, math.ceil(visible_at - time.monotonic()))
                storage.put_message(queue_name, codec.encode(number), visibility_delay_s=delay_s)

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(put, range(BURST)))
            eventually(lambda: len(handled) >= BURST, timeout_s=90)
            eventually(lambda: listener.active_dequeue_tasks == 1, timeout_s=30)
        assert sorted(set(handled)) == list(range(BURST))
        assert listener.query_state().total_dequeue_tasks == 8
        grown = [e for e in logs if e["event"] == "scaled_up"]
        assert grown
        assert (grown[0]["target"], grown[0]["rule"]) == (8, "proportional")
        assert any(e["event"] == "scaled_down" for e in logs)
    finally:
        assert listener.stop(30)
        storage.close()
