"""One drain on a fresh Azurite, for a sampling profiler to watch.

``tests.benchmarks.profile_client`` runs it under ``py-spy record -f raw`` and turns the samples
into the docs' breakdown of the client's CPU.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

import structlog

from tests.benchmarks.bench_drain import DRAINS, QUEUE, Cell, message_texts
from tests.benchmarks.drain_support import Stopwatch, fill_queue
from tests.support.azurite import REPO_ROOT, AzuriteProcess


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.profile_drain")
    parser.add_argument("--consumer", choices=sorted(DRAINS), default="cloudqueue")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--messages", "-n", type=int, default=2000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    texts = message_texts(args.messages)
    with AzuriteProcess(REPO_ROOT) as azurite:
        count = fill_queue(azurite.connection_string, QUEUE, texts)
        clock = Stopwatch()
        drain = DRAINS[args.consumer]
        requests = drain(
            azurite.connection_string, count, Cell(args.threads), time.monotonic() + 300, clock
        )
    print(
        f"{args.consumer} {args.threads} threads: {count / clock.seconds:.1f} msg/s, "
        f"{requests / count:.2f} requests/msg, {1000 * clock.cpu_s / count:.2f} "
        "client CPU ms/msg"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
