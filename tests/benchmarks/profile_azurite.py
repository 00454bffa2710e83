"""Where Azurite's CPU goes while a consumer drains it: the server side of the drain benchmark.

Run ``.venv/bin/python -m tests.benchmarks.profile_azurite [--consumer loop|cloudqueue]
[--threads T] [--write]`` (about half a minute). It starts Azurite's queue service under
``node --cpu-prof`` with the options the test fixture uses, fills 2,000 messages, drains them with
``bench_drain``'s plain loop (or cloudqueue) and stops Azurite, which writes a V8 CPU profile.
The samples are then counted by what they ran under: the delete handler, the get handler, the
rest of request handling, and idle.

Why it exists: at 4 and 8 threads both consumers of ``bench_drain`` reach the same rate, and the
question is whether the client or the server is the limit. On two cores the server is: Azurite's
queue service runs on one node thread, and this shows how busy that thread is and on what.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_drain import CLOUDQUEUE, DRAINS, LOOP, QUEUE, Cell, message_texts
from tests.benchmarks.drain_support import BenchmarkError, Stopwatch, fill_queue
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import (
    ACCOUNT_KEY,
    ACCOUNT_NAME,
    HOST,
    REPO_ROOT,
    ensure_installed,
    free_port,
    port_accepts,
)

BENCH = "profile_azurite"
MESSAGES = 2000
START_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0

IDLE = "idle (nothing to run on the JavaScript thread)"
DELETE_EXPIRED = "delete: clearing expired messages first (LokiJS index rebuild)"
DELETE_REST = "delete: the rest of the delete"
GET = "get (dequeue 32)"
OTHER = "everything else (HTTP, routing, auth, serialization, GC)"
FRAMES = (
    # (category, function name, file name) -- the first frame found up the stack decides.
    (DELETE_EXPIRED, "clearExpiredMessages", "LokiQueueMetadataStore.js"),
    (DELETE_REST, "deleteMessage", "LokiQueueMetadataStore.js"),
    (GET, "getMessages", "LokiQueueMetadataStore.js"),
)


def azurite_command(profile_dir: Path, port: int) -> list[str]:
    """Azurite's queue service under node's CPU profiler, as the test fixture starts it."""
    node = shutil.which("node")
    if node is None:
        raise BenchmarkError("node is needed to run Azurite")
    main_js = (ensure_installed(REPO_ROOT) / "azurite-queue").resolve()
    return [
        node,
        "--cpu-prof",
        f"--cpu-prof-dir={profile_dir}",
        str(main_js),
        "--queueHost",
        HOST,
        "--queuePort",
        str(port),
        "--inMemoryPersistence",
        "--skipApiVersionCheck",
        "--disableTelemetry",
        "--silent",
    ]


def connection_string(port: int) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"QueueEndpoint=http://{HOST}:{port}/{ACCOUNT_NAME};"
    )


def profile_drain(consumer: str, threads: int, profile_dir: Path) -> dict[str, Any]:
    """Drain under the profiler; the drain's figures (the profile lands in ``profile_dir``)."""
    port = free_port()
    azurite = subprocess.Popen(
        azurite_command(profile_dir, port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_accepts(port):
            if azurite.poll() is not None or time.monotonic() > deadline:
                raise BenchmarkError("Azurite did not start under the profiler")
            time.sleep(0.1)  # polled with a deadline: Azurite gives no readiness signal
        connection = connection_string(port)
        count = fill_queue(connection, QUEUE, message_texts(MESSAGES))
        clock = Stopwatch(azurite.pid)
        drain = DRAINS[consumer]
        drain(connection, count, Cell(threads, False), time.monotonic() + DRAIN_TIMEOUT_S, clock)
    finally:
        azurite.send_signal(signal.SIGINT)  # a clean exit writes the profile
        azurite.wait(STOP_TIMEOUT_S)
    azurite_cpu_s = clock.azurite_cpu_s or 0.0
    return {
        "messages": count,
        "msgs_per_s": count / clock.seconds,
        "azurite_cpu_ms_per_msg": 1000 * azurite_cpu_s / count,
        "azurite_cores_busy": azurite_cpu_s / clock.seconds,
        "client_cpu_ms_per_msg": 1000 * clock.cpu_s / count,
    }


def categorize(profile: dict[str, Any]) -> dict[str, int]:
    """Samples per category: the innermost known frame on each sample's stack decides."""
    nodes = {node["id"]: node for node in profile["nodes"]}
    parents = {child: node["id"] for node in profile["nodes"] for child in node.get("children", [])}
    counts: collections.Counter[str] = collections.Counter()
    for node_id, samples in collections.Counter(profile["samples"]).items():
        counts[_category(_stack(node_id, nodes, parents))] += samples
    return dict(counts)


def _stack(
    node_id: int, nodes: dict[int, dict[str, Any]], parents: dict[int, int]
) -> Iterable[tuple[str, str]]:
    current: int | None = node_id
    while current is not None:
        frame = nodes[current]["callFrame"]
        yield frame["functionName"], frame["url"].rsplit("/", 1)[-1]
        current = parents.get(current)


def _category(stack: Iterable[tuple[str, str]]) -> str:
    for function, file in stack:
        if function == "(idle)":
            return IDLE
        for category, known_function, known_file in FRAMES:
            if function == known_function and file == known_file:
                return category
    return OTHER


def render_markdown(results: dict[str, Any]) -> str:
    """The README block: the drain's rate, how busy Azurite's thread was, and on what."""
    counts: dict[str, int] = results["samples"]
    total = sum(counts.values()) or 1
    drain = results["drain"]
    lines = [
        f"**Where Azurite's CPU goes** — the server side of one `{results['consumer']}` drain "
        f"({results['threads']} threads, {drain['messages']:,} messages): "
        f"{drain['msgs_per_s']:.0f} msg/s, Azurite {drain['azurite_cpu_ms_per_msg']:.2f} ms of "
        f"CPU per message; the node process used {drain['azurite_cores_busy']:.2f} cores (CPU "
        f"time over wall time, all its threads; client {drain['client_cpu_ms_per_msg']:.2f} ms "
        "per message). Samples of its JavaScript thread (V8 profiler):",
        "",
        "| Azurite was running | share of samples |",
        "|---|---|",
    ]
    for category in (DELETE_EXPIRED, DELETE_REST, GET, OTHER, IDLE):
        lines.append(f"| {category} | {100 * counts.get(category, 0) / total:.0f} % |")
    lines += ["", header_line(results)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.profile_azurite")
    parser.add_argument("--consumer", choices=(LOOP, CLOUDQUEUE), default=LOOP)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        profile_dir = Path(folder)
        drain = profile_drain(args.consumer, args.threads, profile_dir)
        profiles = sorted(profile_dir.glob("*.cpuprofile"))
        if not profiles:
            raise BenchmarkError("Azurite wrote no CPU profile (did it exit cleanly?)")
        counts = categorize(json.loads(profiles[0].read_text()))
    argv_used = ["--consumer", args.consumer, "--threads", str(args.threads)]
    results = run_header(BENCH, [*argv_used, *(["--write"] if args.write else [])])
    results.update(consumer=args.consumer, threads=args.threads, drain=drain, samples=counts)
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
