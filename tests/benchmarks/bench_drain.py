"""How fast the listener drains a queue, next to the plainest loop that does the same work.

Run ``.venv/bin/python -m tests.benchmarks.bench_drain [--quick] [--json PATH]``.

Part 1, Azurite: for each thread count T, N pre-filled messages are drained (a) by a plain
azure-storage-queue loop (T threads: get 32, delete each) and (b) by ``CloudQueueListener`` with T
threads and a no-op observer on ``AzureQueueStorage``. Every measured run gets a fresh Azurite (its
garbage collection slows it down after thousands of deletes), the queue is filled before the clock
starts, and the order of the variants alternates between repetitions. Azurite slows as a queue
deepens, so the depth (N at the start, 0 at the end) is part of every figure.

Part 2, in memory: one thread, no-op observer, M messages on ``InMemoryQueueStorage``: the listener
next to a raw loop over the same API (get 32, decode with the same codec, delete each). The
difference is the listener's own cost per message.

The figures are wall-clock on a machine whose cores Azurite, this process and anything else running
share: compare the variants of one invocation, not invocations on different days or machines.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pydantic
import structlog
from azure.storage.queue import QueueClient, QueueServiceClient

from listener.listener import CloudQueueListener
from listener.location import CloudQueueLocation
from listener.messages.codec import MessageCodec
from listener.messages.poison import poison_queue_name
from listener.stores.azure_storage import AzureQueueStorage, client_options
from listener.stores.memory_storage import InMemoryQueueStorage
from listener.stores.storage import MAX_BATCH_SIZE, QueueStorage
from tests.support.azurite import REPO_ROOT, AzuriteProcess

QUEUE = "bench"
VISIBILITY_TIMEOUT_S = 30
EMPTY_WAIT_S = 0.1
"""Both variants wait this long after an empty get (the listener's ``dequeue_interval_s``)."""
POLL_S = 0.001
"""How often the main thread checks, after the listener's last delivery, for its last delete.

Neither variant is polled during the drain: both end on an event (a wake-up every few ms would
cost the worker threads GIL hand-offs)."""
FILL_THREADS = 8
FILL_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
MAX_AZURE_MESSAGES = 5000
TARGET_RATIO = 0.9
TARGET_LISTENER_US = 40.0
PLAIN, LISTENER = "plain", "listener"


class BenchmarkError(RuntimeError):
    """A run did not finish as it should (deadline passed, messages lost, a thread failed)."""


class Order(pydantic.BaseModel):
    """The item every message carries: small JSON, base64-wrapped by the standard codec."""

    order_id: int
    sku: str
    quantity: int


CODEC = MessageCodec(Order)


def message_texts(count: int) -> list[str]:
    """The same ``count`` message contents for every variant (about 64 characters each)."""
    return [
        CODEC.encode(Order(order_id=i, sku=f"SKU-{i % 97:05d}", quantity=1 + i % 5))
        for i in range(count)
    ]


class Counter:
    """A thread-safe count; callable, so it can be the SDK's ``raw_request_hook`` too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, amount: int = 1) -> int:
        with self._lock:
            self.value += amount
            return self.value

    def __call__(self, _request: object) -> None:
        self.add()


def wait_for(event: threading.Event, deadline: float, what: Callable[[], str]) -> None:
    """Return once the event is set; raise BenchmarkError when the monotonic deadline passes."""
    if not event.wait(max(0.0, deadline - time.monotonic())):
        raise BenchmarkError(f"{what()} did not finish before its deadline")


def wait_until(done: Callable[[], bool], deadline: float, what: Callable[[], str]) -> None:
    """Return once ``done()`` is true, checking every POLL_S; raise when the deadline passes."""
    while not done():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what()} did not finish before its deadline")
        time.sleep(POLL_S)


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used (Linux /proc), or None when unreadable."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stopwatch:
    """Wall time, this process's CPU and Azurite's CPU between ``start`` and ``stop``."""

    def __init__(self, azurite_pid: int | None = None) -> None:
        self.azurite_pid = azurite_pid
        self.seconds = self.cpu_s = 0.0
        self.azurite_cpu_s: float | None = None
        self._marks: tuple[float, float, float | None] = (0.0, 0.0, None)

    def start(self) -> None:
        self._marks = (time.perf_counter(), time.process_time(), process_cpu_s(self.azurite_pid))

    def stop(self) -> None:
        wall, cpu, azurite = self._marks
        self.seconds = time.perf_counter() - wall
        self.cpu_s = time.process_time() - cpu
        now = process_cpu_s(self.azurite_pid)
        self.azurite_cpu_s = None if now is None or azurite is None else now - azurite


# -- part 1: Azurite ---------------------------------------------------------------------------


@contextmanager
def queue_client(
    connection_string: str, queue: str = QUEUE, **overrides: Any
) -> Iterator[QueueClient]:
    """An SDK client built exactly as AzureQueueStorage builds its own, for a fair comparison.

    ``client_options()`` gives both variants the same HTTP set-up: the FastRetry policy, 5 s
    connect / 20 s read timeouts, and one requests session with a 32-connection pool; the queue
    client comes from a service client, as in AzureQueueStorage. Both variants also pass the same
    ``raw_request_hook`` (a request counter) through these options.
    """
    options = client_options(**overrides)
    with QueueServiceClient.from_connection_string(connection_string, **options) as service:
        yield service.get_queue_client(queue)


def fill_queue(connection_string: str, texts: Sequence[str], deadline: float) -> None:
    """Create the queue (and the poison queue the listener would create) and put every text."""

    def put(chunk: Sequence[str]) -> None:
        for text in chunk:
            if time.monotonic() > deadline:
                raise BenchmarkError("filling the queue did not finish before its deadline")
            client.send_message(text)

    with queue_client(connection_string, poison_queue_name(QUEUE)) as poison:
        poison.create_queue()
    with queue_client(connection_string) as client, ThreadPoolExecutor(FILL_THREADS) as pool:
        client.create_queue()
        chunks = [texts[start::FILL_THREADS] for start in range(FILL_THREADS)]
        list(pool.map(put, chunks))  # re-raises the first failure
        depth = client.get_queue_properties().approximate_message_count
    if depth != len(texts):
        raise BenchmarkError(f"queue holds {depth} messages after filling, expected {len(texts)}")


def queue_depth(connection_string: str) -> int:
    with queue_client(connection_string) as client:
        return int(client.get_queue_properties().approximate_message_count or 0)


def drain_plain(
    connection_string: str, count: int, threads: int, deadline: float, clock: Stopwatch
) -> int:
    """T threads: get 32 (visibility 30 s), delete each, until ``count`` are deleted.

    Returns the number of HTTP requests made. Iterating the pages' items is the plain SDK idiom:
    a short page makes the SDK ask again for the rest, which only happens at the tail.
    """
    requests = Counter()
    deleted = Counter()
    finished = threading.Event()

    def work() -> None:
        try:
            while not finished.is_set() and time.monotonic() < deadline:
                got = 0
                for message in client.receive_messages(
                    messages_per_page=MAX_BATCH_SIZE,
                    max_messages=MAX_BATCH_SIZE,
                    visibility_timeout=VISIBILITY_TIMEOUT_S,
                ):
                    client.delete_message(message.id, message.pop_receipt)
                    got += 1
                    if deleted.add() >= count:
                        finished.set()
                if got == 0:
                    finished.wait(EMPTY_WAIT_S)
        finally:
            finished.set()  # a worker that fails (or runs out of time) ends the run at once

    with (
        queue_client(connection_string, raw_request_hook=requests) as client,
        ThreadPoolExecutor(threads, thread_name_prefix="plain") as pool,
    ):
        clock.start()
        workers = [pool.submit(work) for _ in range(threads)]
        try:
            wait_for(finished, deadline, lambda: f"plain drain ({deleted.value}/{count} deleted)")
        finally:
            clock.stop()
            finished.set()
        for worker in workers:
            worker.result(timeout=STOP_TIMEOUT_S)  # re-raises a worker's failure
    if deleted.value < count:
        raise BenchmarkError(f"plain drain stopped after {deleted.value}/{count} deletes")
    return requests.value


def run_listener(
    storage: QueueStorage,
    count: int,
    threads: int,
    deadline: float,
    clock: Stopwatch,
) -> None:
    """Drain ``count`` messages with a listener of ``threads`` threads and a no-op observer.

    The observer sets an event on the last delivery; the main thread then polls only until the
    listener has counted the last delete.
    """
    listener = CloudQueueListener(
        storage,
        CloudQueueLocation(QUEUE, visibility_timeout_s=VISIBILITY_TIMEOUT_S),
        Order,
        dequeue_batch_size=MAX_BATCH_SIZE,
        dequeue_interval_s=EMPTY_WAIT_S,
    )
    deliveries = itertools.count(1)
    all_delivered = threading.Event()

    def observe(_order: Order) -> None:
        if next(deliveries) >= count:
            all_delivered.set()

    def describe() -> str:
        return f"listener drain ({listener.messages_processed}/{count} processed)"

    listener.subscribe(observe)
    try:
        clock.start()
        listener.start_listener(threads)
        try:
            wait_for(all_delivered, deadline, describe)
            wait_until(lambda: listener.messages_processed >= count, deadline, describe)
        finally:
            clock.stop()
    finally:
        stopped = listener.stop(timeout_s=STOP_TIMEOUT_S)
    if not stopped:
        raise BenchmarkError(f"listener threads still running {STOP_TIMEOUT_S} s after stop")


def drain_listener(
    connection_string: str, count: int, threads: int, deadline: float, clock: Stopwatch
) -> int:
    """The listener on AzureQueueStorage; returns the number of HTTP requests made."""
    requests = Counter()
    storage = AzureQueueStorage.from_connection_string(connection_string, raw_request_hook=requests)
    try:
        run_listener(storage, count, threads, deadline, clock)
    finally:
        storage.close()
    return requests.value


Drain = Callable[[str, int, int, float, Stopwatch], int]
DRAINS: dict[str, Drain] = {PLAIN: drain_plain, LISTENER: drain_listener}


@dataclass(frozen=True)
class DrainRun:
    """One measured drain against a fresh Azurite."""

    variant: str
    threads: int
    repetition: int
    messages: int
    seconds: float
    requests: int
    client_cpu_s: float
    azurite_cpu_s: float | None
    remaining: int

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds


def measure_drain(
    variant: str, threads: int, repetition: int, texts: Sequence[str], timeout_s: float
) -> DrainRun:
    """Start a fresh Azurite, fill the queue (not timed), drain it (timed), stop Azurite."""
    with AzuriteProcess(REPO_ROOT) as azurite:
        connection_string = azurite.connection_string
        fill_queue(connection_string, texts, time.monotonic() + FILL_TIMEOUT_S)
        process = azurite.queue.process
        clock = Stopwatch(process.pid if process is not None else None)
        deadline = time.monotonic() + timeout_s
        requests = DRAINS[variant](connection_string, len(texts), threads, deadline, clock)
        remaining = queue_depth(connection_string)
    if remaining != 0:
        raise BenchmarkError(f"{variant} drain left {remaining} messages in the queue")
    return DrainRun(
        variant=variant,
        threads=threads,
        repetition=repetition,
        messages=len(texts),
        seconds=clock.seconds,
        requests=requests,
        client_cpu_s=clock.cpu_s,
        azurite_cpu_s=clock.azurite_cpu_s,
        remaining=remaining,
    )


def run_azure(config: Config) -> list[DrainRun]:
    """Every (repetition, thread count, variant), variants in alternating order."""
    texts = message_texts(config.messages)
    plan = [
        (repetition, threads, variant)
        for repetition in range(config.repetitions)
        for threads in config.threads
        for variant in ((PLAIN, LISTENER) if repetition % 2 == 0 else (LISTENER, PLAIN))
    ]
    runs: list[DrainRun] = []
    for number, (repetition, threads, variant) in enumerate(plan, start=1):
        drain = measure_drain(variant, threads, repetition, texts, config.drain_timeout_s)
        progress(
            f"[{number}/{len(plan)}] {variant:<8} threads={threads} rep={repetition}: "
            f"{drain.msgs_per_s:7.1f} msgs/s, {drain.requests / drain.messages:.2f} requests/msg"
        )
        runs.append(drain)
    return runs


def summarize_azure(runs: Sequence[DrainRun], thread_counts: Sequence[int]) -> list[dict[str, Any]]:
    """Per thread count: each variant's median msgs/s, requests and CPU per message; the ratio."""
    rows: list[dict[str, Any]] = []
    for threads in thread_counts:
        row: dict[str, Any] = {"threads": threads}
        for variant in DRAINS:
            mine = [r for r in runs if r.threads == threads and r.variant == variant]
            rates = [r.msgs_per_s for r in mine]
            row[variant] = {
                "msgs_per_s_median": statistics.median(rates),
                "msgs_per_s_min": min(rates),
                "msgs_per_s_max": max(rates),
                "requests_per_msg": statistics.median(r.requests / r.messages for r in mine),
                "client_cpu_ms_per_msg": statistics.median(
                    1000 * r.client_cpu_s / r.messages for r in mine
                ),
                "azurite_cpu_ms_per_msg": _median_or_none(
                    None if r.azurite_cpu_s is None else 1000 * r.azurite_cpu_s / r.messages
                    for r in mine
                ),
            }
        row["ratio"] = row[LISTENER]["msgs_per_s_median"] / row[PLAIN]["msgs_per_s_median"]
        row["paired_ratios"] = paired_ratios(runs, threads)
        row["paired_ratio_median"] = statistics.median(row["paired_ratios"])
        rows.append(row)
    return rows


def paired_ratios(runs: Sequence[DrainRun], threads: int) -> list[float]:
    """listener/plain for each repetition: the two runs were back to back, under similar load."""
    rates = {(r.variant, r.repetition): r.msgs_per_s for r in runs if r.threads == threads}
    repetitions = sorted({repetition for _, repetition in rates})
    return [rates[LISTENER, rep] / rates[PLAIN, rep] for rep in repetitions]


def _median_or_none(values: Iterator[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


# -- part 2: in memory -------------------------------------------------------------------------


def filled_memory_storage(texts: Sequence[str]) -> InMemoryQueueStorage:
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    storage.create_queue(poison_queue_name(QUEUE))
    for text in texts:
        storage.put_message(QUEUE, text)
    return storage


def memory_raw(texts: Sequence[str], *, decode: bool = True) -> float:
    """Seconds for one thread to get 32, decode, call a no-op handler and delete each, to empty."""
    storage = filled_memory_storage(texts)
    handled = itertools.count(1)
    done = 0
    started = time.perf_counter()
    while batch := storage.get_messages(
        QUEUE, max_messages=MAX_BATCH_SIZE, visibility_timeout_s=VISIBILITY_TIMEOUT_S
    ):
        for message in batch:
            if decode:
                CODEC.decode(message.content)
                next(handled)  # what the listener's no-op observer does
            storage.delete_message(QUEUE, message.id, message.pop_receipt)
            done += 1
    elapsed = time.perf_counter() - started
    if done != len(texts):
        raise BenchmarkError(f"raw in-memory loop handled {done}/{len(texts)} messages")
    return elapsed


def memory_listener(texts: Sequence[str], timeout_s: float) -> float:
    """Seconds for a one-thread listener with a no-op observer to process every message."""
    storage = filled_memory_storage(texts)
    clock = Stopwatch()
    deadline = time.monotonic() + timeout_s
    run_listener(storage, len(texts), 1, deadline, clock)
    return clock.seconds


def run_memory(config: Config) -> dict[str, Any]:
    """Best-of-R µs/message for the raw loop, the listener and the store alone, interleaved."""
    texts = message_texts(config.memory_messages)
    times: dict[str, list[float]] = {"raw": [], "listener": [], "store_only": []}
    for repetition in range(config.memory_repetitions):
        order = ["raw", "listener"] if repetition % 2 == 0 else ["listener", "raw"]
        for name in [*order, "store_only"]:
            if name == "listener":
                seconds = memory_listener(texts, config.drain_timeout_s)
            else:
                seconds = memory_raw(texts, decode=name == "raw")
            times[name].append(seconds)
    count = len(texts)
    best_us = {name: 1e6 * min(values) / count for name, values in times.items()}
    return {
        "messages": count,
        "repetitions": config.memory_repetitions,
        "best_us_per_msg": best_us,
        "median_us_per_msg": {
            name: 1e6 * statistics.median(values) / count for name, values in times.items()
        },
        "listener_overhead_us_per_msg": best_us["listener"] - best_us["raw"],
    }


# -- configuration, report ---------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    messages: int
    threads: tuple[int, ...]
    repetitions: int
    memory_messages: int
    memory_repetitions: int
    drain_timeout_s: float
    azure: bool
    memory: bool
    json_path: Path | None


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.bench_drain", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--messages", "-n", type=int, help="N per Azurite run (default 1000)")
    parser.add_argument("--threads", help="comma-separated thread counts (default 1,4)")
    parser.add_argument("--repetitions", "-r", type=int, help="Azurite runs per cell (default 3)")
    parser.add_argument("--memory-messages", type=int, help="M in memory (default 20000)")
    parser.add_argument("--memory-repetitions", type=int, help="in-memory runs (default 5)")
    parser.add_argument("--drain-timeout-s", type=float, default=180.0, help="per-drain deadline")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (small N and M)")
    parser.add_argument("--skip-azure", action="store_true", help="only the in-memory part")
    parser.add_argument("--skip-memory", action="store_true", help="only the Azurite part")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this path")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    config = Config(
        messages=args.messages or (200 if quick else 1000),
        threads=_thread_counts(parser, args.threads or "1,4"),
        repetitions=args.repetitions or (1 if quick else 3),
        memory_messages=args.memory_messages or (2000 if quick else 20_000),
        memory_repetitions=args.memory_repetitions or (2 if quick else 5),
        drain_timeout_s=args.drain_timeout_s,
        azure=not args.skip_azure,
        memory=not args.skip_memory,
        json_path=args.json,
    )
    if not 1 <= config.messages <= MAX_AZURE_MESSAGES:
        parser.error(f"--messages must be 1..{MAX_AZURE_MESSAGES} (Azurite's GC stalls beyond)")
    if min(config.threads) < 1 or config.repetitions < 1 or config.memory_repetitions < 1:
        parser.error("thread counts and repetitions must be positive")
    if config.memory_messages < 1 or config.drain_timeout_s <= 0:
        parser.error("--memory-messages and --drain-timeout-s must be positive")
    return config


def _thread_counts(parser: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        parser.error(f"--threads takes comma-separated integers, got {text!r}")


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def azure_table(config: Config, rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        f"Azurite: N={config.messages} messages per run (queue depth {config.messages} at the "
        f"start, drained to 0), batch {MAX_BATCH_SIZE}, {config.repetitions} repetition(s), "
        "fresh Azurite per run",
        "threads variant    msgs/s median [min-max]   req/msg  client ms/msg  azurite ms/msg",
    ]
    for row in rows:
        for variant in DRAINS:
            cell = row[variant]
            span = f"[{cell['msgs_per_s_min']:.1f}-{cell['msgs_per_s_max']:.1f}]"
            lines.append(
                f"{row['threads']:>7} {variant:<9} {cell['msgs_per_s_median']:8.1f} {span:<17}"
                f"{cell['requests_per_msg']:7.2f} {cell['client_cpu_ms_per_msg']:13.2f} "
                f"{_fmt(cell['azurite_cpu_ms_per_msg'], '15.2f')}"
            )
        verdict = "ok" if row["ratio"] >= TARGET_RATIO else "BELOW TARGET"
        pairs = ", ".join(f"{ratio:.2f}" for ratio in row["paired_ratios"])
        lines.append(
            f"{'':>7} ratio listener/plain = {row['ratio']:.2f} (target >= {TARGET_RATIO}: "
            f"{verdict}); per repetition {pairs}, median {row['paired_ratio_median']:.2f}"
        )
    return lines


def memory_table(result: dict[str, Any]) -> list[str]:
    best = result["best_us_per_msg"]
    median = result["median_us_per_msg"]
    verdict = "ok" if best["listener"] <= TARGET_LISTENER_US else "ABOVE TARGET"
    labels = {
        "raw": "raw loop (get 32, decode, delete)",
        "listener": "listener (1 thread, no-op observer)",
        "store_only": "store alone (get 32, delete)",
    }
    lines = [
        f"In memory: M={result['messages']} messages (depth M at the start), 1 thread, "
        f"best of {result['repetitions']} (median in brackets)",
    ]
    lines += [
        f"  {label:<37} {best[name]:6.1f} us/msg  ({median[name]:.1f})"
        for name, label in labels.items()
    ]
    lines.append(
        f"  {'listener overhead (listener - raw)':<37} "
        f"{result['listener_overhead_us_per_msg']:6.1f} us/msg"
    )
    lines.append(f"  listener total target <= {TARGET_LISTENER_US:.0f} us/msg: {verdict}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        report, lines = run(config)
    except BenchmarkError as failure:
        progress(f"benchmark failed: {failure}")
        return 1
    print("\n".join(lines))
    if config.json_path is not None:
        config.json_path.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def run(config: Config) -> tuple[dict[str, Any], list[str]]:
    """Both parts as configured: the JSON report and the lines of the results table."""
    report: dict[str, Any] = {
        "config": {**asdict(config), "json_path": str(config.json_path or "")},
        "environment": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
    }
    lines: list[str] = []
    if config.azure:
        runs = run_azure(config)
        rows = summarize_azure(runs, config.threads)
        report["azure"] = {
            "runs": [{**asdict(r), "msgs_per_s": r.msgs_per_s} for r in runs],
            "summary": rows,
        }
        lines += azure_table(config, rows)
    if config.memory:
        report["memory"] = run_memory(config)
        lines += memory_table(report["memory"])
    report["environment"]["load_average_at_end"] = os.getloadavg()
    load = report["environment"]
    lines.append(
        f"{load['cpus']} CPUs; load average {load['load_average_at_start'][0]:.1f} at the start, "
        f"{load['load_average_at_end'][0]:.1f} at the end (figures are noisy under load)"
    )
    return report, lines


if __name__ == "__main__":
    sys.exit(main())
