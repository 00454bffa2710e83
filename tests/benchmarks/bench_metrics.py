"""What metrics and probes cost: the same drain through ``WorkerHost`` with them off and on.

Run ``.venv/bin/python -m tests.benchmarks.bench_metrics [--messages N] [--repetitions R]
[--azurite | --write]``. ``--write`` measures both (in memory, then on Azurite, each at its
default size) and saves the results that ``docs/how-to/observability.md`` shows.

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
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import REPO_ROOT, AzuriteProcess

QUEUE = "bench-metrics"
TARGET_RATIO = 0.95
"""Metrics on must keep at least 95 % of the drain throughput with metrics off."""
SAMPLE_INTERVAL_S = 1.0
DRAIN_TIMEOUT_S = 300.0
OFF, ON = "off", "on"
MEMORY, AZURITE = "memory", "azurite"
DEFAULT_MESSAGES = {MEMORY: 20_000, AZURITE: 400}


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
    with AzuriteProcess(REPO_ROOT) as azurite:
        yield lambda: AzureQueueStorage.from_connection_string(azurite.connection_string)


def summary(count: int, drains: dict[str, list[Drain]]) -> dict[str, Any]:
    """Medians of both variants, and the CPU-bound throughput ratio the target is judged on.

    On a shared machine wall-clock rates swing with other load; the process's own CPU per
    message does not, and a CPU-bound drain's throughput is its inverse.
    """

    def median(variant: str, of: Callable[[Drain], float]) -> float:
        return statistics.median(of(d) for d in drains[variant])

    cpu_off, cpu_on = (median(v, lambda d: d.cpu_us_per_message) for v in (OFF, ON))
    return {
        "messages": count,
        "repetitions": len(drains[OFF]),
        "rate_per_s_median": {v: median(v, lambda d: d.rate_per_s) for v in (OFF, ON)},
        "cpu_us_per_message_median": {OFF: cpu_off, ON: cpu_on},
        "throughput_ratio": cpu_off / cpu_on,
        "target_ratio": TARGET_RATIO,
    }


def summary_line(where: str, part: dict[str, Any]) -> str:
    rate, cpu = part["rate_per_s_median"], part["cpu_us_per_message_median"]
    ratio = part["throughput_ratio"]
    verdict = "ok" if ratio >= part["target_ratio"] else "OVER BUDGET"
    return (
        f"{where}: median wall rate off {rate[OFF]:.1f} / on {rate[ON]:.1f} msg/s; CPU per message "
        f"off {cpu[OFF]:.1f} / on {cpu[ON]:.1f} us (+{cpu[ON] - cpu[OFF]:.1f} us): throughput "
        f"on/off {ratio:.3f} (target >= {part['target_ratio']}): {verdict}"
    )


def render_markdown(results: dict[str, Any]) -> str:
    """The docs block: both stores' CPU per message with metrics off and on."""
    rows = [
        "| drain (one thread, no-op handler, `WorkerHost`) | CPU µs/message, metrics off | on "
        "| added by metrics | throughput on/off (from CPU) | target | wall msg/s off · on |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {MEMORY: "in memory", AZURITE: "Azurite, fresh per round"}
    for where in (MEMORY, AZURITE):
        part = results.get(where)
        if part is None:
            continue
        cpu, rate = part["cpu_us_per_message_median"], part["rate_per_s_median"]
        ratio = part["throughput_ratio"]
        met = "met" if ratio >= part["target_ratio"] else "**not met**"
        rows.append(
            f"| {names[where]}, {part['messages']:,} messages, {part['repetitions']} rounds "
            f"| {cpu[OFF]:,.1f} | {cpu[ON]:,.1f} | {cpu[ON] - cpu[OFF]:+,.1f} | **{ratio:.3f}** "
            f"| ≥ {part['target_ratio']}: {met} | {rate[OFF]:,.1f} · {rate[ON]:,.1f} |"
        )
    return "\n".join(
        [
            "**What metrics cost** — medians of alternating off/on drains; the throughput ratio is "
            "CPU off / CPU on, since the process's own CPU per message does not swing with other "
            "load the way wall-clock rates do.",
            "",
            *rows,
            "",
            header_line(results),
        ]
    )


def measure(where: str, count: int, rounds: int) -> dict[str, Any]:
    print(f"{where}, {count} messages", flush=True)
    storage_for = on_azurite if where == AZURITE else in_memory
    part = summary(count, repetitions(count, rounds, storage_for))
    print(summary_line(where, part), flush=True)
    return part


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", "-n", type=int, default=None)
    parser.add_argument("--repetitions", "-r", type=int, default=6)
    parser.add_argument("--azurite", action="store_true", help="drain Azurite, not memory")
    parser.add_argument(
        "--write", action="store_true", help="both stores; save the results for the docs"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    places = [MEMORY, AZURITE] if args.write else [AZURITE if args.azurite else MEMORY]
    results = run_header("bench_metrics", list(sys.argv[1:] if argv is None else argv))
    for where in places:
        results[where] = measure(where, args.messages or DEFAULT_MESSAGES[where], args.repetitions)
    if args.write:
        report("bench_metrics", results, render_markdown, write=True)
    return 0 if all(results[w]["throughput_ratio"] >= TARGET_RATIO for w in places) else 1


if __name__ == "__main__":
    raise SystemExit(main())
