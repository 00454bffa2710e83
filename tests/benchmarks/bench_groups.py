"""What a group costs: transactions per member, and how soon its completion follows the work.

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_groups [--members N ...]
[--fan-in N] [--repetitions R] [--azure-repetitions R] [--stores sqlite,azure] [--write]``.

Both parts send the same items twice, interleaved: as plain messages (the baseline) and as the
members of one group whose ``GroupDone`` goes to a second worker. A ``WorkerHost`` in this process
drains them with the default settings, a no-op handler per item.

* **Cost** (Azurite with queues and tables): every request the SDK sends passes a counting proxy
  (``tests.support.counting_proxy``), from the first send to the end of the drain. The extra
  transactions of a group are its count less the plain run's, split by operation. Gets are
  reported apart: how many empty gets a drain makes depends on its timing, not on groups. With two
  group sizes the extra splits into a part per member and a part per group (a line through both).
* **Fan-in**: from the start of the drain (the queue filled before, not timed) to the last
  item handled (plain) or to the ``GroupDone`` handled (group), on SQLite and on Azurite, medians
  of the repetitions; the figure is the group's median over the plain median. Azurite holds its
  messages in one in-memory collection that each get and delete scans (about 7 µs per message
  held, per operation, on the project's VMs: 9 ms an operation at 200 held, 38 ms at 4,000), so
  a drain of N messages there grows as N²: 10,000 take about 12 minutes a run, in both variants
  alike. ``--azure-repetitions`` runs it fewer times than SQLite; the table says how many runs
  each figure is the median of.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import structlog
from pydantic import BaseModel

from cloudqueue import GroupDone
from cloudqueue.listener import Publisher
from cloudqueue.listener.errors import StorageError, TransientStorageError
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.benchmarks.results_file import header_line, load_results, report, run_header
from tests.support.azurite import ACCOUNT_KEY, ACCOUNT_NAME, AzuriteProcess
from tests.support.counting_proxy import CountingProxy
from tests.support.paths import REPO_ROOT

BENCH = "bench_groups"
DRAIN_TIMEOUT_S = 1800.0
SEND_TRIES = 3
VARIANTS = ("plain", "group")


class Line(BaseModel):
    n: int


@dataclass
class Drain:
    """What one drain counted: items handled, and the completion once it arrived."""

    items: int = 0
    done: threading.Event | None = None

    def __post_init__(self) -> None:
        self.done = threading.Event()
        self._lock = threading.Lock()

    def handled(self) -> None:
        with self._lock:
            self.items += 1


def workers_for(queue: str, drain: Drain) -> list[type[QueueWorker[Any]]]:
    """A no-op worker on ``queue`` and a completion worker on ``<queue>-done``."""

    class Price(QueueWorker[Line]):
        queue_name = queue

        def handle(self, item: Line) -> None:
            drain.handled()

    class Totals(QueueWorker[GroupDone]):
        queue_name = f"{queue}-done"

        def handle(self, item: GroupDone) -> None:
            assert drain.done is not None
            drain.done.set()

    return [Price, Totals]


def send(connection_string: str, queue: str, variant: str, count: int) -> None:
    storage = open_storage(connection_string)
    try:
        for name in (queue, f"{queue}-done"):
            storage.create_queue(name)
        publisher = Publisher(storage, queue, Line)
        items = [Line(n=n) for n in range(count)]
        if variant == "group":
            publisher.send_group(items, on_complete=f"{queue}-done")
        else:
            publisher.publish_many(items)
    finally:
        storage.close()


def sent(
    connection_string: str,
    prefix: str,
    variant: str,
    count: int,
    *,
    before_try: Sequence[Callable[[], None]] = (),
) -> str:
    """A new queue holding the items: sent again to another new queue when a put times out (a
    loaded machine's Azurite), so that no run starts from a half-sent group; ``before_try``
    runs before each try (counters reset: a failed try's requests are not the run's)."""
    for _ in range(SEND_TRIES - 1):
        queue = f"{prefix}-{uuid.uuid4().hex[:12]}"
        for reset in before_try:
            reset()
        try:
            send(connection_string, queue, variant, count)
        except TransientStorageError as error:
            print(f"{variant}: sending to {queue} failed ({error}): again", file=sys.stderr)
            dropped(connection_string, queue)
        else:
            return queue
    queue = f"{prefix}-{uuid.uuid4().hex[:12]}"
    for reset in before_try:
        reset()
    send(connection_string, queue, variant, count)
    return queue


def dropped(connection_string: str, queue: str) -> None:
    """Delete a half-sent queue: Azurite scans every message it holds at each get and delete,
    so one left behind would slow every later drain of the run."""
    storage = open_storage(connection_string)
    try:
        for name in (queue, f"{queue}-done"):
            try:
                storage.delete_queue(name)
            except StorageError as error:
                print(f"{name} not deleted ({error})", file=sys.stderr)
    finally:
        storage.close()


def drained_s(connection_string: str, queue: str, variant: str, count: int) -> float:
    """Seconds from the host's start to the end: every item handled (plain) or the completion
    handled (group)."""
    drain = Drain()
    settings = CloudQueueSettings.model_validate(
        {"connection_string": connection_string, "shutdown_grace_s": 5}
    )
    host = WorkerHost(workers_for(queue, drain), settings)
    started = time.monotonic()
    host.start()
    try:
        deadline = started + DRAIN_TIMEOUT_S
        while not finished(drain, variant, count):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant}: {drain.items}/{count} handled before the deadline")
            time.sleep(0.005)  # the end of a drain, polled alike in both variants
        return time.monotonic() - started
    finally:
        host.stop()


def finished(drain: Drain, variant: str, count: int) -> bool:
    assert drain.done is not None
    return drain.done.is_set() if variant == "group" else drain.items >= count


# -- Cost ------------------------------------------------------------------------------------------


@contextmanager
def counted_azurite(folder: Path) -> Iterator[tuple[str, CountingProxy, CountingProxy]]:
    """A fresh Azurite with queues and tables, each behind a counting proxy."""
    with AzuriteProcess(REPO_ROOT, table=True) as azurite:
        assert azurite.table is not None
        queues = CountingProxy(azurite.queue.port, service="queue").start()
        tables = CountingProxy(azurite.table.port, service="table").start()
        try:
            yield proxied(queues.port, tables.port), queues, tables
        finally:
            queues.stop()
            tables.stop()


def proxied(queue_port: int, table_port: int) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"QueueEndpoint=http://127.0.0.1:{queue_port}/{ACCOUNT_NAME};"
        f"TableEndpoint=http://127.0.0.1:{table_port}/{ACCOUNT_NAME};"
    )


def cost_run(
    connection_string: str, proxies: tuple[CountingProxy, ...], variant: str, count: int
) -> Counter[str]:
    queue = sent(connection_string, "cost", variant, count, before_try=[p.reset for p in proxies])
    drained_s(connection_string, queue, variant, count)
    counts: Counter[str] = Counter()
    for proxy in proxies:
        counts.update(proxy.counts())
    return counts


def cost(sizes: list[int], repetitions: int) -> dict[str, Any]:
    """Median transactions by operation per variant and size, and the extras of a group."""
    with TemporaryDirectory() as folder, counted_azurite(Path(folder)) as (conn, queues, tables):
        cost_run(conn, (queues, tables), "group", 5)  # tables and connections made, not counted
        runs: dict[tuple[str, int], list[Counter[str]]] = {}
        for repetition in range(repetitions):
            for size in sizes:
                order = VARIANTS if repetition % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    counts = cost_run(conn, (queues, tables), variant, size)
                    runs.setdefault((variant, size), []).append(counts)
    rows = []
    for size in sizes:
        plain, group = median_counts(runs[("plain", size)]), median_counts(runs[("group", size)])
        rows.append({"members": size, "plain": plain, "group": group, **extras(plain, group, size)})
    return {"rows": rows, "per_member_and_group": split(rows) if len(rows) > 1 else None}


def median_counts(counted: list[Counter[str]]) -> dict[str, float]:
    names = sorted({name for counts in counted for name in counts})
    return {name: statistics.median(counts[name] for counts in counted) for name in names}


def extras(plain: dict[str, float], group: dict[str, float], size: int) -> dict[str, Any]:
    """A group's transactions beyond the plain run's: in all, without gets, per member."""
    names = sorted(set(plain) | set(group))
    extra = {name: group.get(name, 0) - plain.get(name, 0) for name in names}
    without_gets = sum(value for name, value in extra.items() if name != "queue get")
    return {
        "extra_by_operation": extra,
        "extra_without_gets": without_gets,
        "extra_gets": extra.get("queue get", 0),
        "extra_without_gets_per_member": without_gets / size,
    }


def split(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Extra (gets aside) = per_group + per_member x members, through the smallest and largest."""
    first, last = rows[0], rows[-1]
    per_member = (last["extra_without_gets"] - first["extra_without_gets"]) / (
        last["members"] - first["members"]
    )
    return {
        "per_member": per_member,
        "per_group": first["extra_without_gets"] - per_member * first["members"],
    }


# -- Fan-in ----------------------------------------------------------------------------------------


def fan_in(stores: list[str], count: int, repetitions: dict[str, int]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with TemporaryDirectory() as folder:
        for store in stores:
            with connection_for(store, Path(folder)) as connection_string:
                times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
                for repetition in range(repetitions[store]):
                    order = VARIANTS if repetition % 2 == 0 else VARIANTS[::-1]
                    for variant in order:
                        queue = sent(connection_string, "fanin", variant, count)
                        times[variant].append(drained_s(connection_string, queue, variant, count))
                plain, group = (statistics.median(times[variant]) for variant in VARIANTS)
                figures[store] = {"plain_s": plain, "group_s": group, "ratio": group / plain}
                figures[store]["runs_s"] = times
    return figures


@contextmanager
def connection_for(store: str, folder: Path) -> Iterator[str]:
    if store == "sqlite":
        yield f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}"
        return
    with AzuriteProcess(REPO_ROOT, table=True) as azurite:
        yield azurite.connection_string


# -- Report ----------------------------------------------------------------------------------------


def render_markdown(results: dict[str, Any]) -> str:
    lines = []
    if results.get("cost"):
        lines += [
            "| members | plain run | group run | extra (gets aside) | per member | extra gets |",
            "|---|---|---|---|---|---|",
        ]
        for row in results["cost"]["rows"]:
            lines.append(
                f"| {row['members']:,} | {sum(row['plain'].values()):,.0f} "
                f"| {sum(row['group'].values()):,.0f} | {row['extra_without_gets']:,.0f} "
                f"| {row['extra_without_gets_per_member']:.2f} | {row['extra_gets']:+,.0f} |"
            )
        fit = results["cost"]["per_member_and_group"]
        if fit:
            lines += [
                "",
                f"Through both sizes: **{fit['per_member']:.2f} transactions per member** and "
                f"{fit['per_group']:.0f} per group, gets aside.",
            ]
        lines.append("")
    if results.get("fan_in"):
        lines += [
            f"| store | {results['fan_in_members']:,} plain items: median (range) "
            "| as one group: median (range) | ratio | runs |",
            "|---|---|---|---|---|",
        ]
        for store, figure in results["fan_in"].items():
            lines.append(
                f"| {store} | {figure['plain_s']:.1f} s{_spread(figure['runs_s']['plain'])} "
                f"| {figure['group_s']:.1f} s{_spread(figure['runs_s']['group'])} "
                f"| **{figure['ratio']:.2f}\u00d7** | {_runs(len(figure['runs_s']['plain']))} |"
            )
        lines.append("")
    lines.append(header_line(results))
    return "\n".join(lines)


def _spread(runs_s: list[float]) -> str:
    """The runs' range after their median, where there are several: Azurite's vary widely."""
    return "" if len(runs_s) < 2 else f" ({min(runs_s):.1f}\u2013{max(runs_s):.1f})"


def _runs(runs: int) -> str:
    return "1 (one run, no median)" if runs == 1 else f"median of {runs}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--fan-in", type=int, default=10_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--azure-repetitions", type=int, help="fan-in runs on Azurite (default: --repetitions)"
    )
    parser.add_argument("--stores", default="sqlite,azure")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--write", action="store_true")
    arguments = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    results = run_header(BENCH, sys.argv[1:])
    stores = arguments.stores.split(",")
    results["cost"] = (
        None
        if arguments.skip_cost or "azure" not in stores
        else cost(sorted(arguments.members), arguments.repetitions)
    )
    results["fan_in_members"] = arguments.fan_in
    repetitions = {"sqlite": arguments.repetitions, "azure": arguments.repetitions}
    if arguments.azure_repetitions is not None:
        repetitions["azure"] = arguments.azure_repetitions
    results["fan_in"] = fan_in(stores, arguments.fan_in, repetitions)
    report(BENCH, results, render_markdown, write=arguments.write)


__all__ = ["load_results", "render_markdown"]

if __name__ == "__main__":
    main()
