"""One drain on a fresh Azurite, for a profiler to watch.

``tests.benchmarks.profile_client`` runs ``drain_once`` in its own process with cProfile around
the drain alone, or this module under ``py-spy record -f raw`` and turns the samples into the
docs' breakdown of the client's CPU.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import structlog

from tests.benchmarks.bench_drain import DRAINS, QUEUE, Cell, message_texts
from tests.benchmarks.drain_support import Stopwatch, fill_queue
from tests.support.azurite import REPO_ROOT, AzuriteProcess


def drain_once(
    consumer: str,
    threads: int,
    messages: int,
    around_drain: AbstractContextManager[object] | None = None,
) -> str:
    """Fill a fresh Azurite's queue, drain it (inside ``around_drain``); what the drain cost."""
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    texts = message_texts(messages)
    with AzuriteProcess(REPO_ROOT) as azurite:
        count = fill_queue(azurite.connection_string, QUEUE, texts)
        process = azurite.queue.process
        clock = Stopwatch(process.pid if process is not None else None)
        drain = DRAINS[consumer]
        with around_drain or nullcontext():
            requests = drain(
                azurite.connection_string, count, Cell(threads), time.monotonic() + 300, clock
            )
    return (
        f"{consumer} {threads} threads: {count / clock.seconds:.1f} msg/s, "
        f"{requests / count:.2f} requests/msg, {1000 * clock.cpu_s / count:.2f} "
        "client CPU ms/msg"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.profile_drain")
    parser.add_argument("--consumer", choices=sorted(DRAINS), default="cloudqueue")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--messages", "-n", type=int, default=2000)
    args = parser.parse_args(argv)
    print(drain_once(args.consumer, args.threads, args.messages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
