"""What the Azurite benchmarks share: filling a queue, waiting with a deadline, a stopwatch."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from azure.storage.queue import QueueClient

from listener.messages.poison import poison_queue_name

FILL_THREADS = 8
FILL_TIMEOUT_S = 120.0
POLL_S = 0.001
"""How often the main thread checks, after the last delivery, for the last delete: neither
consumer is polled during a drain (a wake-up every few ms would cost GIL hand-offs)."""


class BenchmarkError(RuntimeError):
    """A run did not finish as it should (deadline passed, messages lost, a thread failed)."""


def wait_for(event: threading.Event, deadline: float, what: Callable[[], str]) -> None:
    """Return once the event is set; raise BenchmarkError when the monotonic deadline passes."""
    if not event.wait(max(0.0, deadline - time.monotonic())):
        raise BenchmarkError(f"{what()} did not finish before its deadline")


def wait_until(done: Callable[[], bool], deadline: float, what: Callable[[], str]) -> None:
    """Return once ``done()`` is true, checking every POLL_S; raise when the deadline passes."""
    while not done():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what()} did not finish before its deadline")
        time.sleep(POLL_S)


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used (Linux /proc), or None when unreadable."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stopwatch:
    """Wall time, this process's CPU and Azurite's CPU between ``start`` and ``stop``."""

    def __init__(self, azurite_pid: int | None = None) -> None:
        self.azurite_pid = azurite_pid
        self.seconds = self.cpu_s = 0.0
        self.azurite_cpu_s: float | None = None
        self._marks: tuple[float, float, float | None] = (0.0, 0.0, None)

    def start(self) -> None:
        self._marks = (time.perf_counter(), time.process_time(), process_cpu_s(self.azurite_pid))

    def stop(self) -> None:
        wall, cpu, azurite = self._marks
        self.seconds = time.perf_counter() - wall
        self.cpu_s = time.process_time() - cpu
        now = process_cpu_s(self.azurite_pid)
        self.azurite_cpu_s = None if now is None or azurite is None else now - azurite


def fill_queue(connection_string: str, queue: str, texts: Sequence[str]) -> int:
    """Create the queue and its poison queue, put every text (8 threads); return the depth.

    On a loaded machine a put can time out after it took place and be retried by the SDK: the
    queue then holds a few more messages than texts, and the drain is of what it holds.
    """
    deadline = time.monotonic() + FILL_TIMEOUT_S

    def put(chunk: Sequence[str]) -> None:
        with QueueClient.from_connection_string(connection_string, queue) as client:
            for text in chunk:
                if time.monotonic() > deadline:
                    raise BenchmarkError("filling the queue did not finish before its deadline")
                client.send_message(text)

    for name in (poison_queue_name(queue), queue):
        with QueueClient.from_connection_string(connection_string, name) as client:
            client.create_queue()
    with ThreadPoolExecutor(FILL_THREADS) as pool:
        list(pool.map(put, [texts[start::FILL_THREADS] for start in range(FILL_THREADS)]))
    depth = queue_depth(connection_string, queue)
    if depth < len(texts):
        raise BenchmarkError(f"queue holds {depth} messages after filling, expected {len(texts)}")
    return depth


def queue_depth(connection_string: str, queue: str) -> int:
    with QueueClient.from_connection_string(connection_string, queue) as client:
        return int(client.get_queue_properties().approximate_message_count or 0)
