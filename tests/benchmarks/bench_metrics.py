"""What metrics and probes cost: the same drain through ``WorkerHost`` with them off and on.

Run ``.venv/bin/python -m tests.benchmarks.bench_metrics [--messages N] [--repetitions R]
[--azurite]``.

Each repetition fills a queue with N messages (before the clock starts), then drains it through a
``WorkerHost`` -- the way ``cloudqueue run`` hosts a worker, scaler included -- once with
``observability.metrics_port`` unset (nothing wrapped) and once set (storage, pool control and
handler wrapped, the endpoint serving, and, as the host's loop does, a sample every second, plus
a scrape of /metrics every second, more often than Prometheus would). The two variants alternate
their order between repetitions. The handler does nothing, so the per-message cost of the metrics
is as large a share of the drain as it can be.

In memory (default) the storage costs microseconds, the worst case for the metrics' share. With
``--azurite`` each repetition gets a fresh Azurite (its garbage collection slows it after
thousands of deletes) and N should stay in the hundreds. Compare the ratio, not the absolute
figures: cores are shared with anything else running.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from listener.stores.azure_storage import AzureQueueStorage
from listener.stores.memory_storage import InMemoryQueueStorage
from listener.stores.storage import QueueStorage
from listener.wire.codec import MessageCodec
from tests.support.azurite import REPO_ROOT, AzuriteProcess
from workers import CloudQueueSettings, QueueWorker, WorkerHost

QUEUE = "bench-metrics"
TARGET_RATIO = 0.95
"""Metrics on must keep at least 95 % of the drain throughput with metrics off."""
SAMPLE_INTERVAL_S = 1.0
DRAIN_TIMEOUT_S = 300.0
OFF, ON = "off", "on"


class NoOp(QueueWorker[dict[str, int]]):
    queue_name = QUEUE

    def handle(self, item: dict[str, int]) -> None:
        pass


def fill(storage: QueueStorage, count: int) -> None:
    storage.create_queue(QUEUE)
    codec = MessageCodec(dict)
    for n in range(count):
        storage.put_message(QUEUE, codec.encode({"n": n}))


def settings(variant: str) -> CloudQueueSettings:
    port = 0 if variant == ON else None  # 0: any free port
    return CloudQueueSettings.model_validate(
        {
            "shutdown_grace_s": 5,
            # One thread: the scaler's choice of a thread count would vary more than metrics do.
            "scaling": {"max_threads": 1},
            "observability": {"metrics_port": port},
        }
    )


@contextmanager
def sampling(host: WorkerHost) -> Iterator[None]:
    """What the host's run loop and a Prometheus scrape do every second while metrics are on."""
    observability = host.observability
    if observability is None or observability.server is None:
        yield
        return
    stop = threading.Event()
    url = f"http://127.0.0.1:{observability.server.port}/metrics"

    def loop() -> None:
        while not stop.wait(SAMPLE_INTERVAL_S):
            observability.sample()
            with urllib.request.urlopen(url, timeout=10) as response:
                response.read()

    thread = threading.Thread(target=loop, name="bench-sampler", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@dataclass(frozen=True)
class Drain:
    """One drain: wall-clock messages a second, and this process's CPU per message."""

    rate_per_s: float
    cpu_us_per_message: float


def drain(storage: QueueStorage, count: int, variant: str) -> Drain:
    """Drain ``count`` pre-filled messages through a host with metrics ``variant``."""
    fill(storage, count)
    host = WorkerHost([NoOp], settings(variant), storage=storage)
    listener = host.listeners[0]
    if host.observability is not None:
        host.observability.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    with sampling(host):
        host.start()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while listener.messages_processed < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant}: drained {listener.messages_processed}/{count}")
            time.sleep(0.01)  # polling the end of the drain; both variants alike
        seconds = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started
    host.stop()
    return Drain(count / seconds, cpu_s / count * 1e6)


Opener = Callable[[], QueueStorage]
"""Opens a storage client for one drain (the host closes its storage when it stops)."""


def repetitions(
    count: int, rounds: int, storage_for: Callable[[], Iterator[Opener]]
) -> dict[str, list[Drain]]:
    drains: dict[str, list[Drain]] = {OFF: [], ON: []}
    for round_number in range(rounds):
        order = (OFF, ON) if round_number % 2 == 0 else (ON, OFF)
        for open_storage in storage_for():
            for variant in order:
                result = drain(open_storage(), count, variant)
                drains[variant].append(result)
                print(
                    f"  round {round_number + 1} {variant:>3}: {result.rate_per_s:8.1f} msg/s, "
                    f"{result.cpu_us_per_message:6.1f} CPU us/message",
                    flush=True,
                )
    return drains


def in_memory() -> Iterator[Opener]:
    yield InMemoryQueueStorage


def on_azurite() -> Iterator[Opener]:
    with AzuriteProcess(REPO_ROOT / ".azurite") as azurite:
        yield lambda: AzureQueueStorage.from_connection_string(azurite.connection_string)


def report(where: str, drains: dict[str, list[Drain]]) -> bool:
    """Wall-clock rates, and the CPU-bound throughput ratio the target is judged on.

    On a shared machine wall-clock rates swing with other load; the process's own CPU per
    message does not, and a CPU-bound drain's throughput is its inverse.
    """

    def median(variant: str, of: Callable[[Drain], float]) -> float:
        return statistics.median(of(d) for d in drains[variant])

    rate_off, rate_on = (median(v, lambda d: d.rate_per_s) for v in (OFF, ON))
    cpu_off, cpu_on = (median(v, lambda d: d.cpu_us_per_message) for v in (OFF, ON))
    ratio = cpu_off / cpu_on
    verdict = "ok" if ratio >= TARGET_RATIO else "OVER BUDGET"
    print(
        f"{where}: median wall rate off {rate_off:.1f} / on {rate_on:.1f} msg/s "
        f"(on/off {rate_on / rate_off:.3f}); CPU per message off {cpu_off:.1f} / on "
        f"{cpu_on:.1f} us (+{cpu_on - cpu_off:.1f} us): throughput on/off {ratio:.3f} "
        f"(target >= {TARGET_RATIO}): {verdict}"
    )
    return ratio >= TARGET_RATIO


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", "-n", type=int, default=None)
    parser.add_argument("--repetitions", "-r", type=int, default=6)
    parser.add_argument("--azurite", action="store_true", help="drain Azurite, not memory")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.azurite:
        count = args.messages or 400
        print(f"Azurite, {count} messages from depth {count}, fresh Azurite per round")
        return 0 if report("azurite", repetitions(count, args.repetitions, on_azurite)) else 1
    count = args.messages or 20_000
    print(f"in memory, {count} messages")
    return 0 if report("in memory", repetitions(count, args.repetitions, in_memory)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
