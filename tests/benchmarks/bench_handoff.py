"""Slow and fast handlers on the dequeue loop, each next to a baseline measured in the same run.

Run ``.venv/bin/python -m tests.benchmarks.bench_handoff [--quick] [--json PATH]``.

Everything runs on ``InMemoryQueueStorage`` (no service in the way), on real time:

* **slow**: N messages (200) whose handler sleeps 0.25 s (simulated I/O), one listener with
  ``ElasticScaler(drain_time(5 s), max_threads=10)`` started with 1 thread, next to a *fixed* pool
  of 10 threads started at once (what the scaler should reach) and the ideal
  ``N x 0.25 s / 10``. The figure is the drain time, from start to the last delete.
* **fast**: M messages (20,000) with a no-op observer: the listener with T threads (1 and 4) next to
  a raw loop over the same store API with T threads (get 32, decode with the same codec, call a
  no-op, delete each). The figure is the listener's rate as a ratio of the raw loop's.

Variants of one cell alternate their order between repetitions; figures are medians. Compare the
ratios of one invocation, not invocations (the machine's cores are shared). To compare with an
older listener, run this file with ``PYTHONPATH`` pointing at that checkout.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.policies.scaling_rules import drain_time
from cloudqueue.listener.queue_limits import MAX_BATCH_SIZE
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.wire.codec import MessageCodec

QUEUE = "bench"
CODEC = MessageCodec(int)
SLOW_HANDLER_S = 0.25
SLOW_TARGET_DRAIN_S = 5.0
SLOW_MAX_THREADS = 10
DEADLINE_S = 300.0


class BenchmarkError(RuntimeError):
    """A run did not finish as it should."""


class Stopwatch:
    """Wall seconds and this process's CPU seconds (all threads) since it was made."""

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self._wall, time.process_time() - self._cpu


def filled(count: int) -> InMemoryQueueStorage:
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    storage.create_queue(poison_queue_name(QUEUE))
    for number in range(count):
        storage.put_message(QUEUE, CODEC.encode(number))
    return storage


def drain_listener(
    count: int, threads: int, handler: Callable[[int], None], scaling: ScalingPolicy | None
) -> tuple[float, float]:
    """Wall and CPU seconds until a listener has processed (handled and deleted) ``count``."""
    storage = filled(count)
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(QUEUE), int, dequeue_interval_s=0.05
    )
    if scaling is not None:
        ElasticScaler(listener.pool_control, scaling)
    listener.subscribe(handler)
    stopwatch = Stopwatch()
    try:
        listener.start_listener(threads)
        deadline = time.monotonic() + DEADLINE_S
        while listener.messages_processed < count:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{listener.messages_processed}/{count} after {DEADLINE_S} s")
            time.sleep(0.002)  # the benchmark's own polling, not a test waiting for a condition
        return stopwatch.read()
    finally:
        listener.stop(30)


def drain_raw(count: int, threads: int) -> tuple[float, float]:
    """Wall and CPU seconds for ``threads`` plain loops (get 32, decode, delete each) to drain."""
    storage = filled(count)

    def loop() -> None:
        while batch := storage.get_messages(
            QUEUE, max_messages=MAX_BATCH_SIZE, visibility_timeout_s=30
        ):
            for message in batch:
                CODEC.decode(message.content)
                storage.delete_message(QUEUE, message.id, message.pop_receipt)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    stopwatch = Stopwatch()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(DEADLINE_S)
    measured = stopwatch.read()
    if storage.approximate_message_count(QUEUE) != 0:
        raise BenchmarkError("the raw loop left messages behind")
    return measured


def slow_handler(_: int) -> None:
    time.sleep(SLOW_HANDLER_S)  # the handler's simulated I/O


def no_op(_: int) -> None:
    return None


def slow_runs(count: int, repetitions: int) -> dict[str, Any]:
    """Drain seconds: the scaled listener from 1 thread, and a fixed pool of max_threads."""
    variants: dict[str, Drain] = {
        "scaled_from_1": lambda: drain_listener(
            count,
            1,
            slow_handler,
            ScalingPolicy(
                rule=drain_time(SLOW_TARGET_DRAIN_S),
                rule_name="drain_time",
                max_threads=SLOW_MAX_THREADS,
                cpu_saturation_cores=100.0,  # sleeping handlers; other processes share the CPU
            ),
        ),
        "fixed_pool": lambda: drain_listener(count, SLOW_MAX_THREADS, slow_handler, None),
    }
    times, _ = alternate(variants, repetitions)
    median = {name: statistics.median(values) for name, values in times.items()}
    ideal_s = count * SLOW_HANDLER_S / SLOW_MAX_THREADS
    return {
        "messages": count,
        "seconds": times,
        "median_s": median,
        "ideal_s": ideal_s,
        "scaled_over_fixed": median["scaled_from_1"] / median["fixed_pool"],
        "scaled_over_ideal": median["scaled_from_1"] / ideal_s,
    }


def fast_runs(count: int, thread_counts: Sequence[int], repetitions: int) -> list[dict[str, Any]]:
    """Per thread count: listener and raw loop seconds, and listener rate / raw rate."""
    rows = []
    for threads in thread_counts:
        variants: dict[str, Drain] = {
            "listener": partial(drain_listener, count, threads, no_op, None),
            "raw": partial(drain_raw, count, threads),
        }
        times, cpu = alternate(variants, repetitions)
        median = {name: statistics.median(values) for name, values in times.items()}
        median_cpu = {name: statistics.median(values) for name, values in cpu.items()}
        rows.append(
            {
                "threads": threads,
                "seconds": times,
                "cpu_seconds": cpu,
                "median_s": median,
                "median_cpu_s": median_cpu,
                "listener_rate_over_raw": median["raw"] / median["listener"],
                "raw_cpu_over_listener_cpu": median_cpu["raw"] / median_cpu["listener"],
            }
        )
    return rows


Drain = Callable[[], tuple[float, float]]
Seconds = dict[str, list[float]]


def alternate(variants: dict[str, Drain], repetitions: int) -> tuple[Seconds, Seconds]:
    """Wall and CPU seconds of each variant, the order of the variants reversed every run."""
    names = list(variants)
    wall: Seconds = {name: [] for name in names}
    cpu: Seconds = {name: [] for name in names}
    for repetition in range(repetitions):
        for name in names if repetition % 2 == 0 else reversed(names):
            wall_s, cpu_s = variants[name]()
            wall[name].append(wall_s)
            cpu[name].append(cpu_s)
    return wall, cpu


@dataclass(frozen=True)
class Config:
    slow_messages: int
    fast_messages: int
    threads: tuple[int, ...]
    repetitions: int
    slow: bool
    fast: bool
    json_path: Path | None


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_handoff")
    parser.add_argument("--quick", action="store_true", help="small counts, one repetition")
    parser.add_argument("--repetitions", "-r", type=int, help="runs per variant (default 3)")
    parser.add_argument("--skip-slow", action="store_true", help="only the fast handler")
    parser.add_argument("--skip-fast", action="store_true", help="only the slow handler")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this path")
    args = parser.parse_args(argv)
    return Config(
        slow_messages=100 if args.quick else 200,
        fast_messages=4000 if args.quick else 20_000,
        threads=(1, 4),
        repetitions=args.repetitions or (1 if args.quick else 3),
        slow=not args.skip_slow,
        fast=not args.skip_fast,
        json_path=args.json,
    )


def report_lines(slow: dict[str, Any] | None, fast: list[dict[str, Any]]) -> list[str]:
    lines = [] if slow is None else slow_lines(slow)
    for row in fast:
        lines.append(
            f"fast: no-op, {row['threads']} thread(s): "
            f"listener {row['median_s']['listener']:.3f} s, "
            f"raw {row['median_s']['raw']:.3f} s, listener rate / raw rate = "
            f"{row['listener_rate_over_raw']:.2f} (CPU: raw / listener = "
            f"{row['raw_cpu_over_listener_cpu']:.2f})"
        )
    return lines


def slow_lines(slow: dict[str, Any]) -> list[str]:
    median = slow["median_s"]
    return [
        f"slow: {slow['messages']} x {SLOW_HANDLER_S} s, drain_time({SLOW_TARGET_DRAIN_S} s), "
        f"max {SLOW_MAX_THREADS} threads (median drain seconds)",
        f"  scaled from 1 thread {median['scaled_from_1']:6.2f} s",
        f"  fixed pool of {SLOW_MAX_THREADS:<6} {median['fixed_pool']:6.2f} s",
        f"  ideal                {slow['ideal_s']:6.2f} s",
        f"  scaled / fixed = {slow['scaled_over_fixed']:.2f}, "
        f"scaled / ideal = {slow['scaled_over_ideal']:.2f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        slow = slow_runs(config.slow_messages, config.repetitions) if config.slow else None
        fast = (
            fast_runs(config.fast_messages, config.threads, config.repetitions)
            if config.fast
            else []
        )
    except BenchmarkError as failure:
        print(f"benchmark failed: {failure}", file=sys.stderr)
        return 1
    print("\n".join(report_lines(slow, fast)))
    if config.json_path is not None:
        config.json_path.write_text(json.dumps({"slow": slow, "fast": fast}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
