"""Several queues, one worker: idle cost and worst-case pickup per queue, and the order of a drain.

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_priorities [--quick]
[--write]`` (about 6 minutes; ``--write`` saves tests/benchmarks/results/bench_priorities.json,
which the docs' table is rendered from).

* **Idle, simulated**: ``cloudqueue.listener.simulation.idle_queues.idle_cost`` -- the real listener
over K
  = 1, 2, 4 empty queues (a ``PrioritizedQueueStorage``, strict), its ``ElasticScaler`` with the
  default policy and, with push triggers, ``min_threads = 0`` and the ``Watchdog`` (300 s), on
  the in-memory store in virtual time: one idle hour after a minute's warm-up.
* **Idle, real**: the same on Azurite in real time, ``--idle-s`` (60 s) per K after 10 s of
  warm-up, extrapolated to an hour; push with a 10 s watchdog, to see its checks within the run.
* **Drains on Azurite**: strict -- 200 normal and 20 urgent messages waiting before a listener
  with the default scaler and concurrency starts on (urgent, normal): where the last urgent one
  was handled; weighted 3:1 -- 600 and 200 waiting, one thread, one message at a time, batches of
  4: the share of the first 600 handled (while both queues have work).

Worst-case pickup is the longest span between two looks at a queue (gets; with push, the
watchdog's counts, for a message whose trigger was lost).
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
import uuid
from dataclasses import asdict
from typing import Any

import structlog

from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.priority import Priority
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
from cloudqueue.listener.simulation.idle_queues import idle_cost
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.prioritized import PrioritizedQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import REPO_ROOT, AzuriteProcess

QUEUE_COUNTS = (1, 2, 4)
REAL_WATCHDOG_S = 10.0
DEADLINE_S = 300.0


def simulated() -> list[dict[str, Any]]:
    return [asdict(idle_cost(k, push=push)) for k in QUEUE_COUNTS for push in (False, True)]


def real_idle(storage: QueueStorage, idle_s: float) -> list[dict[str, Any]]:
    runs = []
    for k in QUEUE_COUNTS:
        for push in (False, True):
            run = idle_cost(
                k,
                seconds=idle_s,
                warm_up_s=10.0,
                push=push,
                watchdog_interval_s=REAL_WATCHDOG_S,
                storage=storage,
                prefix=f"idle{uuid.uuid4().hex[:8]}",
            )
            runs.append(asdict(run))
    return runs


def drained_order(
    storage: QueueStorage,
    queues: dict[str, int],
    *,
    priority: Priority,
    threads: int,
    concurrency: int,
    batch_size: int,
    policy: ScalingPolicy | None,
) -> tuple[list[str], dict[str, int]]:
    """Fill the queues, then drain them with one listener; the queues in handled order."""
    names = {role: f"{role}-{uuid.uuid4().hex[:8]}" for role in queues}
    for role, count in queues.items():
        storage.create_queue(names[role])
        Publisher(storage, names[role], str).publish_many([role] * count)
    handled: list[str] = []
    lock, done, total = threading.Lock(), threading.Event(), sum(queues.values())

    def handle(role: str) -> None:
        with lock:
            handled.append(role)
            if len(handled) == total:
                done.set()

    listener: CloudQueueListener[str] = CloudQueueListener(
        storage,
        CloudQueueLocation.of(list(names.values()), priority=priority),
        str,
        codec=MessageCodec(str),
        concurrency=concurrency,
        dequeue_batch_size=batch_size,
    )
    if policy is not None:
        ElasticScaler(listener.pool_control, policy)
    listener.subscribe(handle)
    listener.start_listener(threads)
    if not done.wait(DEADLINE_S):
        raise RuntimeError(f"{len(handled)} of {total} handled in time")
    listener.stop(30)
    assert isinstance(listener.storage, PrioritizedQueueStorage)
    fetched = listener.storage.fetched()
    return handled, {role: fetched[name] for role, name in names.items()}


def strict_drain(storage: QueueStorage) -> dict[str, Any]:
    order, _ = drained_order(
        storage,
        {"urgent": 20, "normal": 200},
        priority=Priority(),
        threads=1,
        concurrency=8,
        batch_size=32,
        policy=ScalingPolicy(),
    )
    positions = [at + 1 for at, role in enumerate(order) if role == "urgent"]
    return {"urgent": 20, "normal": 200, "last_urgent_at": max(positions), "goal": 50}


def weighted_drain(storage: QueueStorage) -> dict[str, Any]:
    order, fetched = drained_order(
        storage,
        {"high": 600, "low": 200},
        priority=Priority("weighted", (3, 1)),
        threads=1,
        concurrency=1,
        batch_size=4,
        policy=None,
    )
    first = order[:600]
    highs = first.count("high")
    return {
        "high": 600,
        "low": 200,
        "weights": [3, 1],
        "first": len(first),
        "high_in_first": highs,
        "low_in_first": len(first) - highs,
        "ratio": round(highs / (len(first) - highs), 3),
        "fetched": fetched,
    }


def run(quick: bool) -> dict[str, Any]:
    idle_s = 20.0 if quick else 60.0
    results: dict[str, Any] = {
        "config": {"real_idle_s": idle_s, "watchdog_real_s": REAL_WATCHDOG_S}
    }
    results["simulated"] = simulated()
    with AzuriteProcess(REPO_ROOT) as azurite:
        storage = AzureQueueStorage.from_connection_string(azurite.connection_string)
        try:
            results["real"] = real_idle(storage, idle_s)
            results["strict"] = strict_drain(storage)
            results["weighted"] = weighted_drain(storage)
        finally:
            storage.close()
    return results


def render_markdown(results: dict[str, Any]) -> str:
    """The docs block: the idle table per K and queue, then the two drains."""
    real = {(row["queues"], row["push"]): row for row in results["real"]}
    lines = [
        "| K | queue | transactions per idle hour, simulated / real | worst-case pickup, "
        "simulated / real | with push triggers: transactions per idle hour, worst-case pickup "
        "of a lost trigger (simulated) |",
        "|---|---|---|---|---|",
    ]
    for sim in (row for row in results["simulated"] if not row["push"]):
        k = sim["queues"]
        push = next(r for r in results["simulated"] if r["push"] and r["queues"] == k)
        for index, queue in enumerate(sim["per_queue"]):
            got = real[k, False]["per_queue"][index]
            pushed = push["per_queue"][index]
            lines.append(
                f"| {k if index == 0 else ''} | {index + 1} of {k} "
                f"| {queue['transactions_per_hour']:,.0f} / {got['transactions_per_hour']:,.0f} "
                f"| {queue['worst_pickup_s']:.1f} s / {got['worst_pickup_s']:.1f} s "
                f"| {pushed['transactions_per_hour']:,.0f}, {pushed['worst_pickup_s']:.0f} s |"
            )
        lines.append(
            f"| | all {k} | {sim['transactions_per_hour']:,.0f} / "
            f"{real[k, False]['transactions_per_hour']:,.0f} | | "
            f"{push['transactions_per_hour']:,.0f} |"
        )
    strict, weighted = results["strict"], results["weighted"]
    watchdog = results["config"]["watchdog_real_s"]
    pushed_real = ", ".join(
        f"K = {k}: {real[k, True]['transactions_per_hour']:,.0f}" for k in QUEUE_COUNTS
    )
    push_gets = sum(real[k, True]["calls"].get("get_messages", 0) for k in QUEUE_COUNTS)
    counts_only = "the watchdog's counts alone, no get" if push_gets == 0 else f"{push_gets} gets"
    lines += [
        "",
        f"Real runs: {results['config']['real_idle_s']:g} s of idle time per K on Azurite, "
        f"extrapolated to an hour; with push triggers and the watchdog every {watchdog:g} s "
        f"(not 300 s, to see its checks within the run) the real runs cost {pushed_real} "
        f"transactions an hour: {counts_only}.",
        "",
        f"Strict, on Azurite: {strict['normal']} normal and {strict['urgent']} urgent messages "
        f"waiting before the worker starts; the last urgent one was handled "
        f"{strict['last_urgent_at']}th (goal: among the first {strict['goal']}). "
        f"Weighted {weighted['weights'][0]}:{weighted['weights'][1]}, on Azurite: of the first "
        f"{weighted['first']} handled, {weighted['high_in_first']} high and "
        f"{weighted['low_in_first']} low, {weighted['ratio']:.2f} to 1.",
        "",
        header_line(results),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 s idle runs instead of 60 s")
    parser.add_argument("--write", action="store_true", help="save the results for the docs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = time.perf_counter()
    results = {**run_header("bench_priorities", argv or sys.argv[1:]), **run(args.quick)}
    results["seconds"] = round(time.perf_counter() - started, 1)
    report("bench_priorities", results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
