"""I/O-bound handlers: cloudqueue with default settings next to what a user would write instead.

Run ``.venv/bin/python -m tests.benchmarks.bench_io`` (writes
``tests/benchmarks/results/bench_io.json``; ``--quick`` for a short smoke run).

The handler only waits, standing for an API or database call: 50 ms or 200 ms, *awaited*
(``await asyncio.sleep``) or *blocking* (``time.sleep``). Each cell drains N pre-filled messages
(2,000 by default) twice per repetition:

* cloudqueue: a ``WorkerHost`` with default settings (scaler, ``listener.concurrency``) and a
  ``QueueWorker`` whose ``handle`` waits -- ``async def`` for awaited, plain for blocking;
* the baseline: for awaited waits, a hand-written asyncio loop on the aio SDK (4 consumer tasks,
  each receiving 32 and ``asyncio.gather``-ing wait + delete over the batch); for blocking ones,
  16 plain threads, each with its own client, receiving 32 and waiting + deleting one by one.

Every drain gets a fresh Azurite (it slows down after thousands of deletes) and a queue filled
before the clock starts; the two variants alternate which goes first, repetition by repetition, so
drift hits both. A cell reports the median of the paired ratios cloudqueue / baseline with their
min and max. Figures are wall-clock on a machine Azurite shares with the benchmark: compare the
variants of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import structlog
from azure.storage.queue import QueueClient
from azure.storage.queue.aio import QueueClient as AsyncQueueClient

from cloudqueue.listener.poison.queue import poison_queue_name
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.workers.api.worker import QueueWorker
from cloudqueue.workers.host.host import WorkerHost
from cloudqueue.workers.settings import CloudQueueSettings
from tests.benchmarks.drain_support import (
    Stopwatch,
    cpu_ms_per_message,
    drain_endpoint,
    format_spread,
    spread,
)
from tests.support.azurite import REPO_ROOT, AzuriteProcess

QUEUE = "bench-io"
RESULTS_PATH = Path(__file__).parent / "results" / "bench_io.json"
COMMAND = "python -m tests.benchmarks.bench_io"
ASYNC_CONSUMERS = 4
PLAIN_THREADS = 16
BATCH = 32
VISIBILITY_TIMEOUT_S = 30
EMPTY_WAIT_S = 0.1
"""The baselines wait this long after an empty get."""
FILL_CONCURRENCY = 64
POLL_S = 0.01
"""How often the main thread looks at cloudqueue's count of settled messages."""
CLOUDQUEUE = "cloudqueue"
ASYNCIO_LOOP = f"asyncio loop ({ASYNC_CONSUMERS} tasks x {BATCH}, aio SDK)"
PLAIN_LOOP = f"{PLAIN_THREADS} plain threads (sync SDK)"
MARKER = "bench_io"


class BenchmarkError(RuntimeError):
    """A drain did not finish as it should (deadline passed, messages left behind)."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One handler: how it waits and for how long."""

    kind: str
    """``awaited`` (``await asyncio.sleep``) or ``blocking`` (``time.sleep``)."""
    wait_ms: int
    latency_ms: int = 0
    """Every request delayed this much by a proxy (0: straight to Azurite)."""

    @property
    def wait_s(self) -> float:
        return self.wait_ms / 1000

    @property
    def baseline(self) -> str:
        return ASYNCIO_LOOP if self.kind == "awaited" else PLAIN_LOOP

    @property
    def label(self) -> str:
        call = "await asyncio.sleep" if self.kind == "awaited" else "time.sleep"
        latency = f" +{self.latency_ms} ms" if self.latency_ms else ""
        return f"`{call}({self.wait_s:g})`{latency}"


CELLS = (Cell("awaited", 50), Cell("awaited", 200), Cell("blocking", 50), Cell("blocking", 200))


@dataclass(frozen=True, slots=True)
class Drain:
    variant: str
    cell: Cell
    repetition: int
    messages: int
    seconds: float
    client_cpu_s: float
    azurite_cpu_s: float | None
    proxy_cpu_s: float | None

    @property
    def rate_per_s(self) -> float:
        return self.messages / self.seconds


# -- the handlers ------------------------------------------------------------------------------


class AwaitingWorker(QueueWorker[dict[str, Any]]):
    """``async def handle`` that awaits ``wait_s``."""

    queue_name = QUEUE
    wait_s: ClassVar[float] = 0.05

    async def handle(self, item: dict[str, Any]) -> None:
        await asyncio.sleep(self.wait_s)


class BlockingWorker(QueueWorker[dict[str, Any]]):
    """A plain ``handle`` that blocks its thread for ``wait_s``."""

    queue_name = QUEUE
    wait_s: ClassVar[float] = 0.05

    def handle(self, item: dict[str, Any]) -> None:
        time.sleep(self.wait_s)  # the I/O call a real handler would block on


# -- the drains --------------------------------------------------------------------------------


def drain_cloudqueue(connection_string: str, cell: Cell, count: int, deadline: float) -> float:
    """Seconds for a default-settings host to settle ``count`` messages."""
    worker = AwaitingWorker if cell.kind == "awaited" else BlockingWorker
    worker.wait_s = cell.wait_s
    # model_validate reads no environment or config file: the defaults, on every machine.
    settings = CloudQueueSettings.model_validate({"connection_string": connection_string})
    host = WorkerHost([worker], settings)
    return timed_host(host, lambda: host.listeners[0].messages_processed, count, deadline)


def timed_host(host: WorkerHost, settled: Callable[[], int], count: int, deadline: float) -> float:
    """Seconds from ``host.start()`` until ``settled()`` reaches ``count``; the host stopped."""
    started = time.perf_counter()
    host.start()
    try:
        while settled() < count:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"cloudqueue settled {settled()}/{count}")
            time.sleep(POLL_S)
        return time.perf_counter() - started
    finally:
        host.stop()


def drain_asyncio_loop(connection_string: str, cell: Cell, count: int, deadline: float) -> float:
    """Seconds for the hand-written asyncio loop to delete ``count`` messages."""
    return asyncio.run(_asyncio_loop(connection_string, cell.wait_s, count, deadline))


async def _asyncio_loop(
    connection_string: str, wait_s: float, count: int, deadline: float
) -> float:
    deleted = 0
    async with AsyncQueueClient.from_connection_string(connection_string, QUEUE) as queue:

        async def handle(message: Any) -> None:
            await asyncio.sleep(wait_s)
            await queue.delete_message(message)

        async def consume() -> None:
            nonlocal deleted
            while deleted < count and time.monotonic() < deadline:
                batch = [
                    message
                    async for message in queue.receive_messages(
                        messages_per_page=BATCH,
                        max_messages=BATCH,
                        visibility_timeout=VISIBILITY_TIMEOUT_S,
                    )
                ]
                if not batch:
                    await asyncio.sleep(EMPTY_WAIT_S)
                    continue
                await asyncio.gather(*(handle(message) for message in batch))
                deleted += len(batch)

        started = time.perf_counter()
        await asyncio.gather(*(consume() for _ in range(ASYNC_CONSUMERS)))
        seconds = time.perf_counter() - started
    if deleted < count:
        raise BenchmarkError(f"the asyncio loop deleted {deleted}/{count}")
    return seconds


def drain_plain_threads(connection_string: str, cell: Cell, count: int, deadline: float) -> float:
    """Seconds for 16 plain threads (own client each) to delete ``count`` messages."""
    deleted = [0]
    lock = threading.Lock()
    done = threading.Event()
    failures: list[BaseException] = []

    def consume() -> None:
        try:
            with QueueClient.from_connection_string(connection_string, QUEUE) as queue:
                _consume(queue)
        except BaseException as failure:
            failures.append(failure)
            done.set()

    def _consume(queue: QueueClient) -> None:
        while not done.is_set() and time.monotonic() < deadline:
            batch = list(
                queue.receive_messages(
                    messages_per_page=BATCH,
                    max_messages=BATCH,
                    visibility_timeout=VISIBILITY_TIMEOUT_S,
                )
            )
            if not batch:
                done.wait(EMPTY_WAIT_S)
            for message in batch:
                time.sleep(cell.wait_s)  # the blocking call
                queue.delete_message(message)
                with lock:
                    deleted[0] += 1
                    if deleted[0] >= count:
                        done.set()

    threads = [threading.Thread(target=consume) for _ in range(PLAIN_THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    done.wait(max(0.0, deadline - time.monotonic()))
    seconds = time.perf_counter() - started
    done.set()
    for thread in threads:
        thread.join()
    if failures:
        raise BenchmarkError(f"a plain thread failed: {failures[0]!r}")
    if deleted[0] < count:
        raise BenchmarkError(f"the plain threads deleted {deleted[0]}/{count}")
    return seconds


DRAINS: dict[str, Callable[[str, Cell, int, float], float]] = {
    CLOUDQUEUE: drain_cloudqueue,
    ASYNCIO_LOOP: drain_asyncio_loop,
    PLAIN_LOOP: drain_plain_threads,
}


# -- one measured run --------------------------------------------------------------------------


def fill_queue(connection_string: str, count: int) -> None:
    """Create the queue and its poison queue, and put ``count`` base64 JSON messages."""
    asyncio.run(_fill(connection_string, count))


async def _fill(connection_string: str, count: int) -> None:
    codec: MessageCodec[dict[str, Any]] = MessageCodec(dict)
    texts = [codec.encode({"order_id": n, "sku": f"SKU-{n % 97:05d}"}) for n in range(count)]
    async with AsyncQueueClient.from_connection_string(
        connection_string, poison_queue_name(QUEUE)
    ) as poison:
        await poison.create_queue()
    async with AsyncQueueClient.from_connection_string(connection_string, QUEUE) as queue:
        await queue.create_queue()
        limit = asyncio.Semaphore(FILL_CONCURRENCY)

        async def put(text: str) -> None:
            async with limit:
                await queue.send_message(text)

        await asyncio.gather(*(put(text) for text in texts))
        depth = (await queue.get_queue_properties()).approximate_message_count
    if depth != count:
        raise BenchmarkError(f"queue holds {depth} messages after filling, expected {count}")


def queue_depth(connection_string: str) -> int:
    with QueueClient.from_connection_string(connection_string, QUEUE) as queue:
        return int(queue.get_queue_properties().approximate_message_count or 0)


def timed_drain(
    drain: Callable[[str, Cell, int, float], float],
    variant: str,
    cell: Cell,
    count: int,
    timeout_s: float,
) -> tuple[float, Stopwatch]:
    """Fresh Azurite, fill (not timed), ``drain`` (timed, CPU metered; through the latency
    proxy when the cell has one), check the queue is empty: the seconds and the meters."""
    with AzuriteProcess(REPO_ROOT) as azurite:
        fill_queue(azurite.connection_string, count)
        process = azurite.queue.process
        with drain_endpoint(azurite, cell.latency_ms) as (connection_string, proxy_pid):
            clock = Stopwatch(process.pid if process is not None else None, proxy_pid)
            clock.start()
            seconds = drain(connection_string, cell, count, time.monotonic() + timeout_s)
            clock.stop()
        remaining = queue_depth(azurite.connection_string)
    if remaining != 0:
        raise BenchmarkError(f"{variant} left {remaining} messages in the queue")
    return seconds, clock


def measure(variant: str, cell: Cell, repetition: int, count: int, timeout_s: float) -> Drain:
    """Fresh Azurite, fill (not timed), drain (timed, CPU metered), check the queue is empty.

    The CPU window is the whole drain call (a host's start and stop, the loop's client opening
    and closing included); with a latency the drain goes through the proxy.
    """
    seconds, clock = timed_drain(DRAINS[variant], variant, cell, count, timeout_s)
    return Drain(
        variant,
        cell,
        repetition,
        count,
        seconds,
        clock.cpu_s,
        clock.azurite_cpu_s,
        clock.proxy_cpu_s,
    )


# -- summary -----------------------------------------------------------------------------------


def summarize(drains: Sequence[Drain], cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Per cell: both variants' rates and the paired ratios' median, min and max."""
    summary = []
    for cell in cells:
        ours, theirs = _runs(drains, cell, CLOUDQUEUE), _runs(drains, cell, cell.baseline)
        ratios = [
            mine.rate_per_s / base.rate_per_s for mine, base in zip(ours, theirs, strict=True)
        ]
        cpu_ratios = [
            (mine.client_cpu_s / mine.messages) / (base.client_cpu_s / base.messages)
            for mine, base in zip(ours, theirs, strict=True)
        ]
        summary.append(
            {
                "handler": cell.kind,
                "wait_ms": cell.wait_ms,
                "latency_ms": cell.latency_ms,
                "baseline": cell.baseline,
                "cloudqueue_msg_per_s": spread([d.rate_per_s for d in ours]),
                "baseline_msg_per_s": spread([d.rate_per_s for d in theirs]),
                "ratio": spread(ratios),
                "ratios": [round(ratio, 3) for ratio in ratios],
                **{
                    f"{figure}_cpu_ms_per_msg": {
                        "cloudqueue": _cpu(ours, figure),
                        "baseline": _cpu(theirs, figure),
                    }
                    for figure in ("client", "azurite", "proxy")
                },
                "client_cpu_ratio": spread(cpu_ratios),
            }
        )
    return summary


def _runs(drains: Sequence[Drain], cell: Cell, variant: str) -> list[Drain]:
    chosen = [drain for drain in drains if drain.cell == cell and drain.variant == variant]
    return sorted(chosen, key=lambda drain: drain.repetition)


def _cpu(runs: Sequence[Drain], figure: str) -> dict[str, float] | None:
    """CPU ms per message of one process (``client``, ``azurite``, ``proxy``) over the runs."""
    seconds = [getattr(run, f"{figure}_cpu_s") for run in runs]
    return cpu_ms_per_message(seconds, [run.messages for run in runs])


def render_markdown(results: dict[str, Any]) -> str:
    """The docs' table for these results (the docs build calls this)."""
    lines = [
        f"`{results['command']}`: {results['messages']} messages per drain, "
        f"{results['repetitions']} interleaved repetitions, fresh Azurite per drain, "
        f"{results['machine']['cpus']} CPUs (1-minute load average "
        f"{results['machine']['load_average_at_start']} at the start); cloudqueue with default "
        "settings. *+10 ms*: every request through a proxy process that delays it 10 ms. "
        "Ratio = cloudqueue / baseline of the same repetition: median (min-max). Client CPU: "
        "user + system of the consumer's process over the drain call (start and stop included), "
        "per message.",
        "",
        "| handler | baseline | baseline msg/s | cloudqueue msg/s | ratio "
        "| client CPU ms/msg baseline | client CPU ms/msg cloudqueue | client CPU cq / baseline "
        "| Azurite CPU ms/msg baseline · cq |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in results["cells"]:
        call = "await asyncio.sleep" if cell["handler"] == "awaited" else "time.sleep"
        latency = f" +{cell['latency_ms']} ms" if cell.get("latency_ms") else ""
        client, azurite = cell.get("client_cpu_ms_per_msg"), cell.get("azurite_cpu_ms_per_msg")
        lines.append(
            f"| `{call}({cell['wait_ms'] / 1000:g})`{latency} | {cell['baseline']} "
            f"| {format_spread(cell['baseline_msg_per_s'], 0)} "
            f"| {format_spread(cell['cloudqueue_msg_per_s'], 0)} "
            f"| **{format_spread(cell['ratio'], 2)}** "
            f"| {format_spread(client and client['baseline'], 2)} "
            f"| {format_spread(client and client['cloudqueue'], 2)} "
            f"| **{format_spread(cell.get('client_cpu_ratio'), 2)}** "
            f"| {_median(azurite, 'baseline')} · {_median(azurite, 'cloudqueue')} |"
        )
    return "\n".join(lines) + "\n"


def _median(per_variant: dict[str, dict[str, float] | None] | None, variant: str) -> str:
    summary = None if per_variant is None else per_variant[variant]
    return "?" if summary is None else f"{summary['median']:.2f}"


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description=(__doc__ or "").split("\n", maxsplit=1)[0]
    )
    parser.add_argument("--messages", "-n", type=int, default=2000, help="N per drain")
    parser.add_argument("--repetitions", "-r", type=int, default=5, help="drains per variant")
    parser.add_argument(
        "--cells", default="awaited:50,awaited:200,blocking:50,blocking:200", help="kind:wait_ms"
    )
    parser.add_argument(
        "--latency-ms",
        default="0",
        help="comma-separated delays per request, each a set of cells (0: straight to Azurite)",
    )
    parser.add_argument("--drain-timeout-s", type=float, default=120.0, help="per-drain deadline")
    parser.add_argument("--quick", action="store_true", help="smoke run: 300 messages, 1 rep")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where to write results")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.repetitions = 300, 1
    return args


def _cells(text: str, latencies: str) -> list[Cell]:
    """Every ``kind:wait_ms`` of ``text`` at every latency of ``latencies`` (both comma lists)."""
    cells = []
    for latency_ms in latencies.split(","):
        for part in text.split(","):
            kind, wait_ms = part.split(":")
            cells.append(Cell(kind, int(wait_ms), int(latency_ms)))
    return cells


def run(args: argparse.Namespace) -> dict[str, Any]:
    cells = _cells(args.cells, args.latency_ms)
    drains: list[Drain] = []
    started = time.monotonic()
    load_at_start = os.getloadavg()[0]
    for repetition in range(args.repetitions):
        for cell in cells:
            order = [CLOUDQUEUE, cell.baseline]
            if repetition % 2:
                order.reverse()
            for variant in order:
                drain = measure(variant, cell, repetition, args.messages, args.drain_timeout_s)
                drains.append(drain)
                print(
                    f"rep {repetition} {cell.label} {variant}: "
                    f"{drain.rate_per_s:.0f} msg/s ({drain.seconds:.2f} s), client CPU "
                    f"{1000 * drain.client_cpu_s / drain.messages:.2f} ms/msg",
                    flush=True,
                )
    return {
        "command": COMMAND,
        "messages": args.messages,
        "repetitions": args.repetitions,
        "duration_s": round(time.monotonic() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # Other work on the machine slows both variants, the client's more (see README).
            "load_average_at_start": round(load_at_start, 2),
        },
        "cells": summarize(drains, cells),
        "drains": [
            {**asdict(drain), "cell": asdict(drain.cell), "rate_per_s": round(drain.rate_per_s, 1)}
            for drain in drains
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    results = run(args)
    # The command as run (options included), so a smaller run never passes for the full one.
    results["command"] = " ".join([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(render_markdown(results))
    print(f"wrote {args.json} in {results['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
