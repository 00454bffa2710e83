"""What the Azurite benchmarks share: filling a queue, waiting with a deadline, a stopwatch."""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from azure.storage.queue import QueueClient

from cloudqueue.listener.poison.queue import poison_queue_name
from tests.support.azurite import AzuriteProcess
from tests.support.latency_proxy import latency_proxy_process

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
    """User + system CPU seconds of a process, its reaped children included (Linux /proc)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    # utime, stime, cutime, cstime: every thread, and children that have exited and been waited.
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(
    pid: int | None,
    exclude: Collection[int | None] = (),
    children: dict[int, list[int]] | None = None,
) -> float | None:
    """CPU seconds of a process and its living descendants, skipping the subtrees in ``exclude``.

    None when ``pid`` itself is unreadable. A descendant that exits between two readings drops
    out of the sum (its CPU moves to its parent's reaped figures once waited for): read a tree
    whose members live across the window. ``children`` is a ``children_by_parent()`` reading.
    """
    if process_cpu_s(pid) is None:
        return None
    children = children_by_parent() if children is None else children
    skipped = set(exclude)
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        if current is None or current in skipped:
            continue
        total += process_cpu_s(current) or 0.0
        pending.extend(children.get(current, ()))
    return total


def _stat_fields(pid: int | None) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    if pid is None:
        return None
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


class Stopwatch:
    """Wall time and the CPU of the client, Azurite and the latency proxy between start and stop.

    The client is this process with every thread and child, except the Azurite and proxy trees
    (children of this process too), which are metered on their own.
    """

    def __init__(self, azurite_pid: int | None = None, proxy_pid: int | None = None) -> None:
        self.azurite_pid = azurite_pid
        self.proxy_pid = proxy_pid
        self.seconds = self.cpu_s = 0.0
        self.azurite_cpu_s: float | None = None
        self.proxy_cpu_s: float | None = None
        self._marks: tuple[float, tuple[float | None, ...]] = (0.0, ())

    def start(self) -> None:
        cpu = self._cpu()  # read first: the wall clock starts after the /proc scan
        self._marks = (time.perf_counter(), cpu)

    def stop(self) -> None:
        wall, before = self._marks
        self.seconds = time.perf_counter() - wall
        client, self.azurite_cpu_s, self.proxy_cpu_s = (
            None if now is None or then is None else now - then
            for now, then in zip(self._cpu(), before, strict=True)
        )
        self.cpu_s = client or 0.0

    def _cpu(self) -> tuple[float | None, ...]:
        """CPU seconds so far of the client, Azurite and the proxy, in that order."""
        children = children_by_parent()
        return (
            tree_cpu_s(os.getpid(), (self.azurite_pid, self.proxy_pid), children),
            tree_cpu_s(self.azurite_pid, children=children),
            tree_cpu_s(self.proxy_pid, children=children),
        )


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


@contextlib.contextmanager
def drain_endpoint(azurite: AzuriteProcess, latency_ms: int) -> Iterator[tuple[str, int | None]]:
    """The connection string a drain uses, and the latency proxy's pid (None without one).

    With ``latency_ms`` > 0 the drain talks to Azurite through a ``LatencyProxy`` process that
    delays every request by that much, the shape of a real region; fill the queue before, direct.
    """
    if latency_ms <= 0:
        yield azurite.connection_string, None
        return
    with latency_proxy_process(azurite.queue.port, latency_ms / 1000) as proxy:
        proxied = azurite.connection_string.replace(f":{azurite.queue.port}/", f":{proxy.port}/")
        yield proxied, proxy.pid


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max, rounded for the results file."""
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def format_spread(summary: dict[str, float] | None, digits: int) -> str:
    """``median (min-max)`` of a ``spread`` summary; ``?`` when there is none."""
    if summary is None:
        return "?"

    def number(value: float) -> str:
        return f"{value:.{digits}f}"

    return f"{number(summary['median'])} ({number(summary['min'])}-{number(summary['max'])})"


def cpu_ms_per_message(
    cpu_s: Sequence[float | None], messages: Sequence[int]
) -> dict[str, float] | None:
    """The ``spread`` of CPU milliseconds per message over runs; None when a reading is missing."""
    if not cpu_s or any(seconds is None for seconds in cpu_s):
        return None
    return spread([1000 * (s or 0.0) / n for s, n in zip(cpu_s, messages, strict=True)])
