"""Async handlers three ways: cloudqueue's dequeue threads, its event-loop consumer, and a
hand-written asyncio loop on the aio SDK (the baseline of issue 41).

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_async_path`` (``--write``
saves ``tests/benchmarks/results/bench_async_path.json``; ``--quick`` for a short smoke run).

The handler awaits 0 ms or 50 ms (``await asyncio.sleep``), standing for no work or an API call;
each wait runs straight to Azurite and with every request delayed 10 ms by a proxy process (the
shape of a real region; ``--latency-ms``). Each cell drains N pre-filled messages (2,000 by
default) three times per repetition:

* cloudqueue: a ``WorkerHost`` with default settings and ``async def handle``, as ``bench_io``
  runs it (dequeue threads; coroutines on the worker's event loop);
* cloudqueue single loop: a ``WorkerHost`` with ``listener.event_loop = "single"``, the
  event-loop consumer as ``cloudqueue run`` runs it, with the middleware every hosted worker
  gets (its transactions metered, its loop on a thread of its own);
* asyncio loop: ``bench_io``'s hand-written loop (4 tasks, each receiving 32 and gathering wait +
  delete);
* and, asked for with ``--variants consumer``, the bare event-loop consumer
  (``cloudqueue.listener.consumer.event_loop.consumer.AsyncConsumer`` with no host around it; it
  began as this benchmark's prototype, hence the ``prototype_*`` keys of the results). Any other
  choice of variants than the default prints the summary as JSON instead of the README's table,
  and is not for ``--write``.

Every drain gets a fresh Azurite and a queue filled before the clock starts; the order of the
three rotates from one repetition to the next, so drift hits all of them. A cell reports each
variant's median rate (min-max), the paired rate ratios of the same repetition, the client CPU
each used per message (this process, the drain's start and stop included; Azurite's and the
proxy's are kept in the results) and the event loop's median client CPU over the loop's. Figures
are wall-clock on a machine Azurite shares with the benchmark: compare the variants of one run,
not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
from cloudqueue.listener.stores.azure_aio_storage import AioAzureQueueStorage
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.workers import WorkerHost
from cloudqueue.workers.settings import CloudQueueSettings
from tests.benchmarks.bench_io import (
    ASYNCIO_LOOP,
    CLOUDQUEUE,
    POLL_S,
    QUEUE,
    AwaitingWorker,
    BenchmarkError,
    Cell,
    drain_asyncio_loop,
    drain_cloudqueue,
    timed_drain,
    timed_host,
)
from tests.benchmarks.drain_support import (
    cpu_ms_per_message,
    format_spread,
    spread,
)
from tests.benchmarks.results_file import header_line, run_header, write_results

BENCH = "bench_async_path"
PROTOTYPE = "event-loop consumer"
"""``AsyncConsumer``; the ratio keys keep the word prototype, which it was when they were named."""
SINGLE_LOOP = "cloudqueue single loop"
"""The event-loop consumer run by the host (``listener.event_loop = "single"``)."""
VARIANTS = (CLOUDQUEUE, SINGLE_LOOP, ASYNCIO_LOOP)
"""The variants of the committed results and the README's table: what ``cloudqueue run`` runs,
on threads and on one event loop, against the hand-written loop."""
RATIOS = {
    "prototype_to_cloudqueue": (PROTOTYPE, CLOUDQUEUE),
    "cloudqueue_to_loop": (CLOUDQUEUE, ASYNCIO_LOOP),
    "prototype_to_loop": (PROTOTYPE, ASYNCIO_LOOP),
    "single_loop_to_loop": (SINGLE_LOOP, ASYNCIO_LOOP),
    "single_loop_to_prototype": (SINGLE_LOOP, PROTOTYPE),
    "single_loop_to_cloudqueue": (SINGLE_LOOP, CLOUDQUEUE),
}


@dataclass(frozen=True, slots=True)
class Drain:
    variant: str
    wait_ms: int
    latency_ms: int
    repetition: int
    messages: int
    seconds: float
    client_cpu_s: float
    azurite_cpu_s: float | None
    proxy_cpu_s: float | None

    @property
    def rate_per_s(self) -> float:
        return self.messages / self.seconds


def drain_prototype(connection_string: str, cell: Cell, count: int, deadline: float) -> float:
    """Seconds for the asyncio-native prototype, on the default settings, to delete ``count``."""
    return asyncio.run(_drain_prototype(connection_string, cell, count, deadline))


async def _drain_prototype(
    connection_string: str, cell: Cell, count: int, deadline: float
) -> float:
    # model_validate reads no environment or config file: the defaults, on every machine.
    settings = CloudQueueSettings.model_validate({"connection_string": connection_string})
    AwaitingWorker.wait_s = cell.wait_s
    codec: MessageCodec[dict[str, Any]] = MessageCodec(dict, encoding=settings.listener.encoding)
    sync_storage = AzureQueueStorage.from_connection_string(connection_string)
    storage = AioAzureQueueStorage.beside(sync_storage)
    consumer = AsyncConsumer(
        storage,
        QUEUE,
        AwaitingWorker().handle,
        codec,
        scaling=settings.scaling_policy(),
        concurrency=settings.listener.concurrency,
        batch_size=settings.listener.dequeue_batch_size,
        visibility_timeout_s=settings.listener.visibility_timeout_s,
    )
    started = time.perf_counter()
    running = asyncio.create_task(consumer.run())
    try:
        while consumer.counters.processed < count:
            if time.monotonic() > deadline or running.done():
                done = consumer.counters.processed
                raise BenchmarkError(f"the prototype deleted {done}/{count}")
            await asyncio.sleep(POLL_S)
        seconds = time.perf_counter() - started
    finally:
        consumer.stop()
        await running
        await storage.aclose()
        sync_storage.close()
    if consumer.counters.failed:
        raise BenchmarkError(f"the prototype failed messages: {consumer!r}")
    return seconds


def drain_single_loop(connection_string: str, cell: Cell, count: int, deadline: float) -> float:
    """Seconds for a default-settings host with ``listener.event_loop = "single"`` to delete
    ``count``."""
    AwaitingWorker.wait_s = cell.wait_s
    settings = CloudQueueSettings.model_validate(
        {"connection_string": connection_string, "listener": {"event_loop": "single"}}
    )
    host = WorkerHost([AwaitingWorker], settings)
    return timed_host(host, lambda: host.looped[0].consumer.counters.processed, count, deadline)


DRAINS: dict[str, Callable[[str, Cell, int, float], float]] = {
    CLOUDQUEUE: drain_cloudqueue,
    PROTOTYPE: drain_prototype,
    ASYNCIO_LOOP: drain_asyncio_loop,
    SINGLE_LOOP: drain_single_loop,
}


SHORT_NAMES = {
    "threads": CLOUDQUEUE,
    "consumer": PROTOTYPE,
    "loop": ASYNCIO_LOOP,
    "single": SINGLE_LOOP,
}
"""What ``--variants`` calls each variant."""


def measure(variant: str, cell: Cell, repetition: int, count: int, timeout_s: float) -> Drain:
    """Fresh Azurite, fill (not timed), drain (timed, CPU metered), check the queue is empty."""
    seconds, clock = timed_drain(DRAINS[variant], variant, cell, count, timeout_s)
    return Drain(
        variant,
        cell.wait_ms,
        cell.latency_ms,
        repetition,
        count,
        seconds,
        clock.cpu_s,
        clock.azurite_cpu_s,
        clock.proxy_cpu_s,
    )


def rotated(variants: Sequence[str], repetition: int) -> list[str]:
    """The variants in the order this repetition runs them: each goes first in turn."""
    shift = repetition % len(variants)
    return [*variants[shift:], *variants[:shift]]


# -- summary -----------------------------------------------------------------------------------


def summarize(
    drains: Sequence[Drain], cells: Sequence[Cell], variants: Sequence[str] = VARIANTS
) -> list[dict[str, Any]]:
    """Per cell: each variant's rate and CPU per message, and the paired ratios of those run."""
    summary = []
    for cell in cells:
        runs = {variant: _runs(drains, cell, variant) for variant in variants}
        rates = {variant: [d.rate_per_s for d in runs[variant]] for variant in variants}
        ratios = {
            name: spread([a / b for a, b in zip(rates[mine], rates[theirs], strict=True)])
            for name, (mine, theirs) in RATIOS.items()
            if mine in variants and theirs in variants
        }
        summary.append(
            {
                "wait_ms": cell.wait_ms,
                "latency_ms": cell.latency_ms,
                "msg_per_s": {variant: spread(rates[variant]) for variant in variants},
                "client_cpu_ms_per_msg": {
                    variant: _ms_per_message(runs[variant], lambda d: d.client_cpu_s)
                    for variant in variants
                },
                "azurite_cpu_ms_per_msg": {
                    variant: _ms_per_message(runs[variant], lambda d: d.azurite_cpu_s)
                    for variant in variants
                },
                **ratios,
            }
        )
    return summary


def _runs(drains: Sequence[Drain], cell: Cell, variant: str) -> list[Drain]:
    chosen = [
        d
        for d in drains
        if (d.wait_ms, d.latency_ms) == (cell.wait_ms, cell.latency_ms) and d.variant == variant
    ]
    return sorted(chosen, key=lambda drain: drain.repetition)


def _ms_per_message(
    runs: Sequence[Drain], cpu_s: Callable[[Drain], float | None]
) -> dict[str, float] | None:
    """CPU milliseconds per message of each run, summarized; None when a figure is missing."""
    return cpu_ms_per_message([cpu_s(run) for run in runs], [run.messages for run in runs])


def render_markdown(results: dict[str, Any]) -> str:
    """The README's table for these results (the README generator calls this)."""
    lines = [
        header_line(results),
        "",
        f"{results['messages']} messages per drain, {results['repetitions']} repetitions "
        "(order rotated), fresh Azurite per drain; `async def handle` awaiting the wait. "
        "Median (min-max); ratios paired within a repetition.",
        "",
        "| handler | cloudqueue threads msg/s | cloudqueue single loop msg/s | asyncio loop msg/s "
        "| single loop / threads | single loop / loop "
        "| client CPU ms/msg (threads, single loop, loop) | single loop / loop client CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in results["cells"]:
        rates = cell["msg_per_s"]
        client_ms = _medians(cell["client_cpu_ms_per_msg"])
        latency = f" +{cell['latency_ms']} ms" if cell.get("latency_ms") else ""
        lines.append(
            f"| `await asyncio.sleep({cell['wait_ms'] / 1000:g})`{latency} "
            + "".join(f"| {format_spread(rates[variant], 0)} " for variant in VARIANTS)
            + f"| {format_spread(cell['single_loop_to_cloudqueue'], 2)} "
            f"| **{format_spread(cell['single_loop_to_loop'], 2)}** "
            f"| {client_ms} | **{_cpu_ratio(cell['client_cpu_ms_per_msg'])}** |"
        )
    return "\n".join(lines) + "\n"


def _cpu_ratio(per_variant: dict[str, dict[str, float] | None]) -> str:
    """The event loop's median client CPU per message over the hand-written loop's."""
    mine, theirs = per_variant[SINGLE_LOOP], per_variant[ASYNCIO_LOOP]
    return "?" if mine is None or theirs is None else f"{mine['median'] / theirs['median']:.2f}"


def _medians(per_variant: dict[str, dict[str, float] | None]) -> str:
    """The variants' medians in VARIANTS order; ``?`` where a figure is missing."""

    def median(summary: dict[str, float] | None) -> str:
        return "?" if summary is None else f"{summary['median']:.2f}"

    return ", ".join(median(per_variant[variant]) for variant in VARIANTS)


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m tests.benchmarks.{BENCH}",
        description=(__doc__ or "").split("\n", maxsplit=1)[0],
    )
    parser.add_argument("--messages", "-n", type=int, default=2000, help="N per drain")
    parser.add_argument("--repetitions", "-r", type=int, default=5, help="drains per variant")
    parser.add_argument("--waits-ms", default="0,50", help="comma-separated handler waits")
    parser.add_argument(
        "--latency-ms", default="0,10", help="comma-separated delays added to every request"
    )
    parser.add_argument("--drain-timeout-s", type=float, default=120.0, help="per-drain deadline")
    parser.add_argument(
        "--variants",
        default="threads,single,loop",
        help=f"comma-separated, of: {', '.join(SHORT_NAMES)} (another choice than the default "
        "prints JSON, not the table, and cannot --write)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 300 messages, 1 rep")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    if unknown := set(names) - set(SHORT_NAMES):
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    args.variants = tuple(SHORT_NAMES[name] for name in names)
    if args.write and args.variants != VARIANTS:
        parser.error("--write saves the default variants only (the README's table)")
    if args.quick:
        args.messages, args.repetitions = 300, 1
    return args


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    cells = [
        Cell("awaited", int(wait_ms), int(latency_ms))
        for latency_ms in args.latency_ms.split(",")
        for wait_ms in args.waits_ms.split(",")
    ]
    results = run_header(BENCH, argv)
    started = time.monotonic()
    drains: list[Drain] = []
    for repetition in range(args.repetitions):
        for cell in cells:
            for variant in rotated(args.variants, repetition):
                drain = measure(variant, cell, repetition, args.messages, args.drain_timeout_s)
                drains.append(drain)
                print(
                    f"rep {repetition} {cell.label} {variant}: {drain.rate_per_s:.0f} msg/s "
                    f"({drain.seconds:.2f} s, client CPU {drain.client_cpu_s:.2f} s)",
                    flush=True,
                )
    return {
        **results,
        "messages": args.messages,
        "repetitions": args.repetitions,
        "duration_s": round(time.monotonic() - started, 1),
        "cells": summarize(drains, cells, args.variants),
        "drains": [{**asdict(drain), "rate_per_s": round(drain.rate_per_s, 1)} for drain in drains],
    }


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(arguments)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    results = run(args, arguments)
    if args.variants != VARIANTS:
        print(json.dumps(results["cells"], indent=1))
        return 0
    print(render_markdown(results))
    if args.write:
        print(f"wrote {write_results(BENCH, results)} in {results['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
