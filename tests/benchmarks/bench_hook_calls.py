"""What a middleware costs on the event-loop consumer, by how its hooks are called there
(``cloudqueue.listener.consumer.event_loop.stack``): the figures behind its choices.

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_hook_calls`` (``--write``
saves ``tests/benchmarks/results/bench_hook_calls.json``; ``--quick`` for a short smoke run).

Each variant drains N in-memory messages (2,000 by default) through an ``AsyncConsumer`` whose
``async def`` handler does nothing, so the seam's own cost is most of what is measured; the
variants of one repetition run in turn, their order rotating. Reported: the process CPU per
message, median over the repetitions, and its ratio to the consumer without middleware measured
in the same run:

* ``none``: no middleware but the failure logs and tracing every consumer has (tracing is a
  no-op without a tracer provider);
* ``sync_hook``: a sync ``after_settle`` counting, called on the loop;
* ``thread_hook``: the same hook on a ``blocking`` middleware, so on a worker thread;
* ``generator_around``: a generator ``around_handle`` timing each message, stepped on the loop;
* ``plain_around``: the same as a plain ``around_handle``, on a worker thread with ``call_next``
  handed back to the loop;
* ``async_around``: the same as an ``async def around_handle``, awaited on the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.async_storage import DirectAsyncStorage
from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from tests.benchmarks.results_file import header_line, report, run_header

BENCH = "bench_hook_calls"
QUEUE = "hooks"
CODEC = MessageCodec(int)
SCALING = ScalingPolicy(max_threads=4, max_idle_s=0.05, delta_backoff_s=0.01)


class SyncCount(Middleware):
    def __init__(self) -> None:
        self.settled = 0

    def after_settle(self, context: MessageContext[Any]) -> None:
        self.settled += 1


class ThreadCount(SyncCount):
    blocking = True


class GeneratorTiming(Middleware):
    def __init__(self) -> None:
        self.seconds = 0.0

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        started = time.perf_counter()
        yield
        self.seconds += time.perf_counter() - started


class PlainTiming(GeneratorTiming):
    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:  # type: ignore[override]
        started = time.perf_counter()
        call_next()
        self.seconds += time.perf_counter() - started


class AsyncTiming(GeneratorTiming):
    async def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:  # type: ignore[override]
        started = time.perf_counter()
        await call_next()
        self.seconds += time.perf_counter() - started


VARIANTS: dict[str, Callable[[], list[Middleware]]] = {
    "none": list,
    "sync_hook": lambda: [SyncCount()],
    "thread_hook": lambda: [ThreadCount()],
    "generator_around": lambda: [GeneratorTiming()],
    "plain_around": lambda: [PlainTiming()],
    "async_around": lambda: [AsyncTiming()],
}


async def _nothing(item: int) -> None:
    return None


async def cpu_per_message_us(middleware: list[Middleware], messages: int) -> float:
    """Drain ``messages`` through a consumer with ``middleware``; its CPU per message, in µs."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    for n in range(messages):
        storage.put_message(QUEUE, CODEC.encode(n))
    consumer = AsyncConsumer(
        DirectAsyncStorage(storage), QUEUE, _nothing, CODEC, scaling=SCALING, middleware=middleware
    )
    started = time.process_time()
    running = asyncio.create_task(consumer.run())
    while consumer.counters.processed < messages:
        await asyncio.sleep(0.005)
    consumer.stop()
    await running
    return (time.process_time() - started) / messages * 1e6


def measure(messages: int, repetitions: int) -> dict[str, Any]:
    names = list(VARIANTS)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for repetition in range(repetitions):
        order = names[repetition % len(names) :] + names[: repetition % len(names)]
        for name in order:
            runs[name].append(asyncio.run(cpu_per_message_us(VARIANTS[name](), messages)))
    base = statistics.median(runs["none"])
    return {
        "messages": messages,
        "repetitions": repetitions,
        "cpu_us_per_message": {name: statistics.median(values) for name, values in runs.items()},
        "ratio_to_none": {name: statistics.median(values) / base for name, values in runs.items()},
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The Performance page's table for these results."""
    rows = [
        f"| {name} | {us:.0f} | {results['ratio_to_none'][name]:.2f}x |"
        for name, us in results["cpu_us_per_message"].items()
    ]
    intro = (
        f"{results['messages']:,} messages per drain, {results['repetitions']} repetitions "
        "(order rotated); process CPU per message, median."
    )
    head = ["| variant | CPU µs / message | vs none |", "|---|---|---|"]
    return "\n".join([header_line(results), "", intro, "", *head, *rows])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    options = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    messages, repetitions = (200, 1) if options.quick else (options.messages, options.repetitions)
    header = run_header(BENCH, argv)
    header["machine"]["load_average_at_start"] = list(os.getloadavg())
    results = {**header, **measure(messages, repetitions)}
    report(BENCH, results, render_markdown, write=options.write)


if __name__ == "__main__":
    main(sys.argv[1:])
