"""One drain of ``bench_keys``, in a process of its own: fill an in-memory queue with N messages
(keyed or not), drain them through a ``WorkerHost`` with the given settings sections, print this
process's CPU microseconds per message.

Run ``python tests/benchmarks/keys_drain.py N keyed|plain '{"cancel": {"check": false}}'``. It
imports only ``cloudqueue.listener`` and ``cloudqueue.workers``, so with ``PYTHONPATH=<another
checkout>`` it measures that tree (the baseline before the key controls).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import structlog

from cloudqueue.listener import InMemoryQueueStorage, Publisher
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost

QUEUE = "bench-keys"
DRAIN_TIMEOUT_S = 300.0


class NoOp(QueueWorker[dict[str, Any]]):
    queue_name = QUEUE

    def handle(self, item: dict[str, Any]) -> None:
        pass


def cpu_us_per_message(count: int, keyed: bool, sections: dict[str, Any]) -> float:
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    options: dict[str, Any] = {"key": "k"} if keyed else {}
    Publisher(storage, QUEUE, dict, **options).publish_many(
        {"k": f"key-{n}", "n": n} for n in range(count)
    )
    # One thread handling inline: the fewest threads whose scheduling would blur the figure.
    settings = CloudQueueSettings.model_validate(
        {
            "shutdown_grace_s": 5,
            "scaling": {"max_threads": 1},
            "listener": {"concurrency": 1},
            **sections,
        }
    )
    host = WorkerHost([NoOp], settings, storage=storage)
    listener = host.listeners[0]
    cpu_started = time.process_time()
    host.start()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while listener.messages_processed < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"drained {listener.messages_processed}/{count}")
        time.sleep(0.01)  # polling the end of the drain; every variant alike
    cpu_s = time.process_time() - cpu_started
    host.stop()
    return cpu_s / count * 1e6


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    count, kind, sections = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    print(f"{cpu_us_per_message(count, kind == 'keyed', sections):.3f}")
