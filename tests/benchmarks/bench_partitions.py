"""Partitioned queues on two Azurite instances standing for two storage accounts.

Run ``.venv/bin/python -m tests.benchmarks.bench_partitions [--quick] [-r R] [--write]``;
``--write`` saves the results that ``docs/concepts/partitions.md`` shows.

Part 1, drain throughput: N pre-filled messages spread over K = 1, 2, 4 partitions (partition i on
account i mod 2; K = 1 is one queue on one account), drained by one ``CloudQueueListener`` with
the same T threads and a no-op observer. Each run gets two fresh Azurites (their garbage
collection slows them after thousands of deletes); the clock starts after filling. Quoted as
messages per second and as a ratio to K = 1 of the same repetition; R repetitions rotate the
order of K, and the table gives medians.

Part 2, idle cost: an empty logical queue with K = 1 and K = 8 partitions, one listener with the
host's default elastic scaler (one idle thread, back-off up to 1.5 s), for D seconds; every
storage call on both accounts is counted and scaled to transactions per hour. The goal: K = 8
costs at most 1.2 times K = 1 (one get per back-off step, whatever K is).

Wall-clock figures depend on the machine (Azurite and this process share its cores): compare the
variants of one invocation only.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import structlog

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.stores.partitioned import PartitionedQueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import REPO_ROOT, AzuriteProcess

QUEUE = "bench"
DRAIN_PARTITIONS = (1, 2, 4)
IDLE_PARTITIONS = (1, 8)
IDLE_RATIO_GOAL = 1.2
DEADLINE_S = 300.0


@contextmanager
def two_accounts() -> Iterator[list[MeteredStorage]]:
    """Two fresh Azurite instances, each behind a metered AzureQueueStorage."""
    with ExitStack() as stack:
        accounts = []
        for _ in range(2):
            process = stack.enter_context(AzuriteProcess(REPO_ROOT))
            storage = AzureQueueStorage.from_connection_string(process.connection_string)
            stack.callback(storage.close)
            accounts.append(MeteredStorage(storage))
        yield accounts


def partitioned(accounts: list[MeteredStorage], partitions: int) -> PartitionedQueueStorage:
    storage = PartitionedQueueStorage(accounts, {QUEUE: partitions})
    storage.create_queue(QUEUE)
    storage.create_queue(f"{QUEUE}-poison")
    return storage


def drain_run(partitions: int, messages: int, threads: int) -> dict[str, Any]:
    """Seconds for one listener with ``threads`` threads to handle every message."""
    with two_accounts() as accounts:
        storage = partitioned(accounts, partitions)
        Publisher(storage, QUEUE, int).publish_many(range(messages))
        done = threading.Event()
        handled = [0]
        lock = threading.Lock()

        def handle(_: int) -> None:
            with lock:
                handled[0] += 1
                if handled[0] == messages:
                    done.set()

        listener: CloudQueueListener[int] = CloudQueueListener(
            storage, CloudQueueLocation(QUEUE), int, dequeue_interval_s=0.1
        )
        listener.subscribe(handle)
        started = time.perf_counter()
        listener.start_listener(threads)
        if not done.wait(DEADLINE_S):
            raise RuntimeError(f"K={partitions}: {handled[0]} of {messages} handled in time")
        seconds = time.perf_counter() - started
        listener.stop(timeout_s=30)
        left = storage.approximate_message_count(QUEUE)
    return {
        "partitions": partitions,
        "messages": messages,
        "threads": threads,
        "seconds": round(seconds, 2),
        "messages_per_s": round(messages / seconds, 1),
        "left_in_queue": left,
    }


def idle_run(partitions: int, duration_s: float) -> dict[str, Any]:
    """Storage transactions per hour of one idle listener with the default scaler."""
    with two_accounts() as accounts:
        storage = partitioned(accounts, partitions)
        listener: CloudQueueListener[int] = CloudQueueListener(
            storage, CloudQueueLocation(QUEUE), int, codec=MessageCodec(int)
        )
        ElasticScaler(listener.pool_control, ScalingPolicy())
        listener.subscribe(lambda _: None)
        listener.start_listener(1)
        time.sleep(5.0)  # the back-off reaches its ceiling: measure the steady idle state
        before = sum(account.transactions for account in accounts)
        time.sleep(duration_s)
        calls = sum(account.transactions for account in accounts) - before
        listener.stop(timeout_s=10)
    return {
        "partitions": partitions,
        "seconds": duration_s,
        "transactions": calls,
        "transactions_per_hour": round(calls * 3600 / duration_s),
    }


def drains_by_partitions(messages: int, threads: int, repetitions: int) -> list[dict[str, Any]]:
    """Every K's median rate over the repetitions, and its median ratio to K = 1 of the same
    repetition (the order of K rotates, so no K always runs first)."""
    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in DRAIN_PARTITIONS}
    for repetition in range(repetitions):
        shift = repetition % len(DRAIN_PARTITIONS)
        for k in DRAIN_PARTITIONS[shift:] + DRAIN_PARTITIONS[:shift]:
            run = drain_run(k, messages, threads)
            print(f"  repetition {repetition + 1} K={k}: {run['messages_per_s']} msg/s", flush=True)
            runs[k].append(run)
    rows = []
    for k, mine in runs.items():
        rates = [run["messages_per_s"] for run in mine]
        paired = zip(mine, runs[1], strict=True)
        ratios = [run["messages_per_s"] / base["messages_per_s"] for run, base in paired]
        rows.append(
            {
                "partitions": k,
                "messages": messages,
                "threads": threads,
                "repetitions": repetitions,
                "messages_per_s": statistics.median(rates),
                "messages_per_s_min": min(rates),
                "messages_per_s_max": max(rates),
                "ratio_to_k1": statistics.median(ratios),
                "left_in_queue": max(run["left_in_queue"] for run in mine),
            }
        )
    return rows


def render_markdown(results: dict[str, Any]) -> str:
    """The docs block: drain rates by K, and the idle cost of K = 1 against K = 8."""
    drains, idles = results["drain"], results["idle"]
    first = drains[0]
    lines = [
        f"**Partitions on two Azurites as two accounts** — drain: {first['messages']:,} messages, "
        f"one listener with {first['threads']} threads and a no-op observer, median of "
        f"{first['repetitions']} repetitions (ratio paired with K = 1 of the same repetition); "
        "idle: an empty queue, one listener with the default scaler, storage calls of both "
        "accounts counted.",
        "",
        "| partitions K | drain msg/s, median (min-max) | ratio to K = 1 | left in queue |",
        "|---|---|---|---|",
    ]
    for row in drains:
        lines.append(
            f"| {row['partitions']} | {row['messages_per_s']:.1f} "
            f"({row['messages_per_s_min']:.1f}-{row['messages_per_s_max']:.1f}) "
            f"| {row['ratio_to_k1']:.2f} | {row['left_in_queue']} |"
        )
    lines += ["", "| partitions K | idle transactions/hour | measured over |", "|---|---|---|"]
    for row in idles:
        lines.append(
            f"| {row['partitions']} | {row['transactions_per_hour']:,} "
            f"| {row['seconds']:.0f} s ({row['transactions']} calls) |"
        )
    met = "met" if results["idle_goal_met"] else "**not met**"
    lines += [
        "",
        f"Idle cost K = 8 / K = 1: **{results['idle_ratio_k8_to_k1']:.2f}** "
        f"(goal ≤ {IDLE_RATIO_GOAL}: {met}).",
        "",
        header_line(results),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages, shorter idle runs")
    parser.add_argument("--repetitions", "-r", type=int, default=3, help="drain runs per K")
    parser.add_argument("--write", action="store_true", help="save the results for the docs")
    args = parser.parse_args(arguments)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    messages, threads, idle_s = (300, 4, 20.0) if args.quick else (1000, 4, 60.0)
    results = run_header("bench_partitions", arguments)
    results["drain"] = drains_by_partitions(messages, threads, args.repetitions)
    idles = [idle_run(k, idle_s) for k in IDLE_PARTITIONS]
    idle_ratio = idles[1]["transactions_per_hour"] / max(1, idles[0]["transactions_per_hour"])
    results["idle"] = idles
    results["idle_ratio_k8_to_k1"] = idle_ratio
    results["idle_goal_met"] = idle_ratio <= IDLE_RATIO_GOAL
    report("bench_partitions", results, render_markdown, write=args.write)
    return 0 if results["idle_goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
