"""One worker process of ``bench_idle_burst``: a host with one ``async def handle`` worker, idle
until a burst arrives, reporting what it saw as JSON lines on stdout.

Run by the benchmark, not by hand: ``python -m tests.benchmarks.idle_burst_child --path single
--queue Q --messages N [--triggers URL]``, the connection string in ``IDLE_BURST_CONNECTION``.
It prints ``{"event": "started"}`` once the host runs, then, when N items were handled (or the
deadline passed), ``{"event": "done", ...}``: when the first handler started and the last ended
(``time.monotonic``, one clock for every process of the machine), how many were handled, and
every warning or error logged meanwhile, by structlog or the standard library (the SDK, aiohttp,
asyncio), with the host's stop included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
from collections.abc import MutableMapping
from typing import Any, ClassVar

import structlog

from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost

CONNECTION_VARIABLE = "IDLE_BURST_CONNECTION"
LOUD = ("warning", "error", "critical", "exception")


class Burst:
    """What the handlers saw: first start, last end, how many (any thread, any loop)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.handled = 0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def started(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self.first_start is None:
                self.first_start = now

    def ended(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.last_end, self.handled = now, self.handled + 1
            if self.handled >= self.expected:
                self.done.set()


def worker_for(queue: str, path: str, burst: Burst) -> type[QueueWorker[dict[str, Any]]]:
    class Noted(QueueWorker[dict[str, Any]]):
        queue_name = queue
        settings: ClassVar[dict[str, Any]] = {"listener": {"event_loop": path}}

        async def handle(self, item: dict[str, Any]) -> None:
            burst.started()
            await asyncio.sleep(0)
            burst.ended()

    return Noted


class Heard:
    """Every warning and error, from structlog and from the standard library's loggers."""

    def __init__(self) -> None:
        self.events: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def note(self, level: str, event: str, source: str, detail: str = "") -> None:
        with self._lock:
            self.events.append({"level": level, "event": event, "source": source, "detail": detail})

    def processor(
        self, _logger: object, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if method in LOUD:
            detail = event_dict.get("error") or event_dict.get("exc_info") or ""
            self.note(method, str(event_dict.get("event")), "structlog", str(detail)[:300])
        return event_dict

    def handler(self) -> logging.Handler:
        heard = self

        class Noting(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                detail = record.exc_text or (str(record.exc_info[1]) if record.exc_info else "")
                message = record.getMessage()[:300]
                heard.note(record.levelname.lower(), message, record.name, detail[:300])

        return Noting(level=logging.WARNING)


def listen(heard: Heard) -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().addHandler(heard.handler())
    structlog.configure(
        processors=[
            heard.processor,
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("threads", "single"), required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--triggers", default=None, help="Redis URL: min_threads 0 + triggers")
    parser.add_argument("--timeout-s", type=float, default=1200.0)
    args = parser.parse_args()
    heard = Heard()
    listen(heard)
    options: dict[str, Any] = {
        "connection_string": os.environ[CONNECTION_VARIABLE],
        "shutdown_grace_s": 5,
    }
    if args.triggers:
        options |= {"triggers": {"url": args.triggers}, "scaling": {"min_threads": 0}}
    burst = Burst(args.messages)
    host = WorkerHost(
        [worker_for(args.queue, args.path, burst)], CloudQueueSettings.model_validate(options)
    )
    host.start()
    say(event="started")
    finished = burst.done.wait(args.timeout_s)
    drained = host.stop()
    say(
        event="done",
        finished=finished,
        drained=drained,
        handled=burst.handled,
        first_start=burst.first_start,
        last_end=burst.last_end,
        heard=heard.events,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
