"""What each message costs the server: the single loop's requests, connections and Azurite time
next to the hand-written asyncio loop's (issue 41's drain rate with +10 ms per request).

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.profile_async_requests
[--messages N] [--repetitions R] [--wait-ms W] [--latency-ms L] [--variants single,loop]
[--pools 100/15] [--azurite-profile] [--write]``. Each drain is ``bench_async_path``'s (fresh
Azurite, a filled queue, the latency proxy; the order rotated each repetition). Every aiohttp
session opened during a drain is traced (``aiohttp.TraceConfig``) and the threaded clients'
urllib3 pool counted, so both variants are counted alike whoever builds the session: requests by
kind (an empty get told by its short body), connections opened and reused, requests that waited
for a free connection, the most gets on their way at once. ``--pools CONNECTIONS/KEEPALIVE_S``
adds single-loop variants with another connection pool (the SDK's own default is 100/15);
``--azurite-profile`` runs Azurite under V8's profiler (``azurite_samples``). Each drain prints a
JSON line; ``--write`` keeps the medians per variant for the docs table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import structlog
import urllib3.connectionpool

from cloudqueue.listener.stores import azure_aio_clients, azure_aio_storage
from tests.benchmarks import bench_async_path, profile_azurite
from tests.benchmarks.azurite_samples import drain_samples, profiled_azurite
from tests.benchmarks.bench_async_path import SHORT_NAMES, SINGLE_LOOP, measure, rotated
from tests.benchmarks.bench_io import Cell
from tests.benchmarks.results_file import header_line, report, run_header

BENCH = "profile_async_requests"
EMPTY_GET_BYTES = 200
"""A Get Messages answer with no message is ~80 bytes of XML; one with a message is far more."""
KINDS = ("delete", "get", "get (empty)", "update", "connections opened")
"""The per-message counts the docs table shows (every count is kept in the results)."""


class WireCounts:
    """Requests and connections of every traced session since the last ``reset``."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.gets: list[Any] = []
        self.gets_on_the_way = self.most_gets = 0

    def reset(self) -> None:
        self.counts.clear()
        self.gets = []
        self.gets_on_the_way = self.most_gets = 0

    def trace_config(self) -> aiohttp.TraceConfig:
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(self._request_start)
        trace.on_request_end.append(self._request_done)
        trace.on_request_exception.append(self._request_done)
        trace.on_response_chunk_received.append(self._chunk)
        trace.on_connection_create_end.append(self._counting("connections opened"))
        trace.on_connection_reuseconn.append(self._counting("connections reused"))
        trace.on_connection_queued_start.append(self._counting("waited for a connection"))
        return trace

    def _counting(self, name: str) -> Callable[..., Any]:
        async def count(*_: object) -> None:
            self.counts[name] += 1

        return count

    async def _request_start(self, _session: object, request: Any, params: Any) -> None:
        kind = request_kind(params.method, params.url.path)
        self.counts[kind] += 1
        if kind == "get":
            request.body_bytes = 0
            self.gets.append(request)
            self.gets_on_the_way += 1
            self.most_gets = max(self.most_gets, self.gets_on_the_way)

    async def _request_done(self, _session: object, _request: object, params: Any) -> None:
        if isinstance(params, aiohttp.TraceRequestExceptionParams):
            self.counts["failed"] += 1
        if request_kind(params.method, params.url.path) == "get":
            self.gets_on_the_way -= 1

    async def _chunk(self, _session: object, request: Any, params: Any) -> None:
        if hasattr(request, "body_bytes"):
            request.body_bytes += len(params.chunk)

    def per_message(self, messages: int) -> dict[str, float]:
        counted = Counter(self.counts)
        counted["get (empty)"] = sum(1 for get in self.gets if get.body_bytes < EMPTY_GET_BYTES)
        return {kind: round(n / messages, 4) for kind, n in sorted(counted.items())}


def request_kind(method: str, path: str) -> str:
    """``get``, ``delete``, ``update``, ``put`` for message calls; the method for the rest."""
    if "/messages" in path:
        return {"GET": "get", "DELETE": "delete", "PUT": "update", "POST": "put"}[method]
    return method


def traced(counts: WireCounts) -> None:
    """Count every aiohttp session opened from now on, and every threaded client's request."""
    original = aiohttp.ClientSession.__init__

    def init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or []), counts.trace_config()]
        original(self, *args, **kwargs)

    aiohttp.ClientSession.__init__ = init  # type: ignore[method-assign]
    pool = urllib3.connectionpool.HTTPConnectionPool
    urlopen = pool.urlopen

    def counted_urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        counts.counts[f"threaded {request_kind(method, url.partition('?')[0])}"] += 1
        return urlopen(self, method, url, *args, **kwargs)

    pool.urlopen = counted_urlopen  # type: ignore[method-assign]


def counted_drains(counts: WireCounts, window: list[float]) -> None:
    """Reset ``counts`` as each drain starts (the fill before it is not counted) and note the
    drain's start and end in ``window``."""
    for variant, drain in list(bench_async_path.DRAINS.items()):

        def counted(*args: Any, drain: Callable[..., float] = drain) -> float:
            counts.reset()
            window[:] = [time.monotonic()]
            try:
                return drain(*args)
            finally:
                window.append(time.monotonic())

        bench_async_path.DRAINS[variant] = counted


def pooled_single_loop(pool: int, keepalive_s: float) -> str:
    """A variant: the single loop with ``pool`` connections, idle ones kept ``keepalive_s``."""
    variant = f"single loop, pool {pool}, keep-alive {keepalive_s:g} s"
    drain = bench_async_path.DRAINS[SINGLE_LOOP]
    opened = azure_aio_clients.aio_session

    def pooled(*args: Any) -> float:
        session = lambda **_: opened(keepalive_s=keepalive_s)  # noqa: E731
        with (
            _replaced(azure_aio_clients, "CONNECTION_POOL_SIZE", pool),
            _replaced(azure_aio_storage, "new_session", session),
        ):
            return drain(*args)

    bench_async_path.DRAINS[variant] = pooled
    return variant


@contextlib.contextmanager
def _replaced(module: ModuleType, name: str, value: object) -> Iterator[None]:
    """``module.name`` is ``value`` inside the block."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def ms_per_message(cpu_s: float | None, messages: int) -> float | None:
    return None if cpu_s is None else round(1000 * cpu_s / messages, 2)


def summarize(rows: Sequence[dict[str, Any]], variants: Sequence[str]) -> list[dict[str, Any]]:
    """Per variant, the median of each figure over its drains."""

    def median(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return round(statistics.median(known), 4) if known else None

    summary = []
    for variant in variants:
        mine = [row for row in rows if row["variant"] == variant]
        kinds = sorted({kind for row in mine for kind in row["per_message"]})
        idle = [
            row["azurite"]["pct"].get(profile_azurite.IDLE, 0.0) for row in mine if "azurite" in row
        ]
        summary.append(
            {
                "variant": variant,
                "rate_per_s": median([row["rate_per_s"] for row in mine]),
                "cpu_ms_per_msg": {
                    who: median([row["cpu_ms_per_msg"][who] for row in mine])
                    for who in ("azurite", "client", "proxy")
                },
                "per_message": {
                    kind: median([row["per_message"].get(kind, 0.0) for row in mine])
                    for kind in kinds
                },
                "most_gets_at_once": max(row["most_gets_at_once"] for row in mine),
                "azurite_idle_pct": median(list(idle)),
            }
        )
    return summary


def render_markdown(results: dict[str, Any]) -> str:
    """The docs table: per variant, the medians of its drains."""
    lines = [
        f"{results['messages']} messages per drain, {results['repetitions']} repetitions "
        f"(order rotated), fresh Azurite per drain, handlers awaiting {results['wait_ms']} ms, "
        f"+{results['latency_ms']} ms per request. Medians per variant; requests and connections "
        "per message, counted on the client.",
        "",
        "| variant | msg/s | Azurite CPU ms/msg | Azurite idle | client CPU ms/msg "
        + "".join(f"| {kind} " for kind in KINDS)
        + "|",
        "|---|---|---|---|---|" + "---|" * len(KINDS),
    ]
    for row in results["summary"]:
        cpu, idle = row["cpu_ms_per_msg"], row["azurite_idle_pct"]
        lines.append(
            f"| {row['variant']} | {row['rate_per_s']:.0f} | {_number(cpu['azurite'], 2)} "
            f"| {'?' if idle is None else f'{idle:.0f} %'} | {_number(cpu['client'], 2)} "
            + "".join(f"| {_number(row['per_message'].get(kind, 0.0), 3)} " for kind in KINDS)
            + "|"
        )
    return "\n".join([*lines, "", header_line(results)]) + "\n"


def _number(value: float | None, digits: int) -> str:
    return "?" if value is None else f"{value:.{digits}f}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m tests.benchmarks.{BENCH}")
    parser.add_argument("--messages", "-n", type=int, default=2000)
    parser.add_argument("--repetitions", "-r", type=int, default=3)
    parser.add_argument("--wait-ms", type=int, default=50)
    parser.add_argument("--latency-ms", type=int, default=10)
    parser.add_argument("--variants", default="single,loop", help="of: single, loop, threads")
    parser.add_argument("--pools", default="", help="more single loops: CONNECTIONS/KEEPALIVE_S,…")
    parser.add_argument("--azurite-profile", action="store_true", help="node --cpu-prof Azurite")
    parser.add_argument("--drain-timeout-s", type=float, default=120.0)
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, variants: Sequence[str]) -> list[dict[str, Any]]:
    """Every drain's figures, one JSON line printed per drain."""
    counts = WireCounts()
    window: list[float] = []
    traced(counts)
    counted_drains(counts, window)
    with tempfile.TemporaryDirectory(prefix="azurite-profile-") as folder:
        if args.azurite_profile:
            profiled_azurite(Path(folder))
        return _drains(args, variants, counts, window, Path(folder))


def _drains(
    args: argparse.Namespace,
    variants: Sequence[str],
    counts: WireCounts,
    window: list[float],
    profile_dir: Path,
) -> list[dict[str, Any]]:
    cell = Cell("awaited", args.wait_ms, args.latency_ms)
    rows = []
    for repetition in range(args.repetitions):
        for variant in rotated(variants, repetition):
            drain = measure(variant, cell, repetition, args.messages, args.drain_timeout_s)
            row = {
                "variant": variant,
                "repetition": repetition,
                "rate_per_s": round(drain.rate_per_s, 1),
                "cpu_ms_per_msg": {
                    "azurite": ms_per_message(drain.azurite_cpu_s, drain.messages),
                    "client": ms_per_message(drain.client_cpu_s, drain.messages),
                    "proxy": ms_per_message(drain.proxy_cpu_s, drain.messages),
                },
                "per_message": counts.per_message(drain.messages),
                "most_gets_at_once": counts.most_gets,
            }
            if args.azurite_profile:
                row["azurite"] = drain_samples(profile_dir, window)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(arguments)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    variants = [SHORT_NAMES[name] for name in args.variants.split(",") if name]
    for pool in filter(None, args.pools.split(",")):
        connections, keepalive_s = pool.split("/")
        variants.append(pooled_single_loop(int(connections), float(keepalive_s)))
    results = run_header(BENCH, arguments)
    rows = run(args, variants)
    results.update(
        messages=args.messages,
        repetitions=args.repetitions,
        wait_ms=args.wait_ms,
        latency_ms=args.latency_ms,
        summary=summarize(rows, variants),
        drains=rows,
    )
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
