"""CPU-bound handlers: ``cloudqueue run --processes 2`` against one process, on Azurite.

Run ``.venv/bin/python -m tests.benchmarks.bench_processes [--write]`` (about 3 minutes on
2 cores; ``--write`` saves tests/benchmarks/results/bench_processes.json for the README).

Each run starts a fresh Azurite, fills N messages, then starts ``cloudqueue run`` (the command a
user runs, as a subprocess) with ``CpuWorker``, whose handler spends ``--work-ms`` of pure Python
per message, and 4 fixed dequeue threads per process. The rate is measured from the first delete
to the last (the queue's depth, polled every 0.2 s), so process start-up is left out. Runs of 1
and 2 processes alternate; each repetition gives a paired ratio. Azurite and the clients share
the cores: 2x is the ceiling on 2 cores, less Azurite's share.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tests.benchmarks.bench_drain import QUEUE, message_texts
from tests.benchmarks.drain_support import BenchmarkError, fill_queue, queue_depth
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import REPO_ROOT, AzuriteProcess

BENCH = "bench_processes"
WORKER = "tests.benchmarks.cpu_worker:CpuWorker"
THREADS_PER_PROCESS = 4
DEPTH_POLL_S = 0.2
DRAIN_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ProcessRun:
    processes: int
    repetition: int
    messages: int
    seconds: float

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds


def worker_command(processes: int, state_dir: str) -> list[str]:
    settings = {
        "listener.threads": THREADS_PER_PROCESS,
        "scaling.min_threads": THREADS_PER_PROCESS,
        "scaling.max_threads": THREADS_PER_PROCESS,
        "listener.encoding": "base64",
        "logging.level": "WARNING",
        "state_dir": state_dir,
    }
    assignments = [item for key, value in settings.items() for item in ("--set", f"{key}={value}")]
    return [
        sys.executable,
        "-m",
        "cloudqueue.workers",
        "run",
        WORKER,
        "--processes",
        str(processes),
        *assignments,
    ]


def timed_drain(connection_string: str, filled: int) -> tuple[int, float]:
    """Messages drained and seconds from the first delete seen to an empty queue."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    started: tuple[int, float] | None = None
    while time.monotonic() < deadline:
        depth = queue_depth(connection_string, QUEUE)
        now = time.perf_counter()
        if started is None and depth < filled:
            started = (depth, now)
        if depth == 0 and started is not None:
            return started[0], now - started[1]
        time.sleep(DEPTH_POLL_S)
    raise BenchmarkError("the workers did not drain the queue before the deadline")


def measure(processes: int, repetition: int, texts: Sequence[str], work_ms: float) -> ProcessRun:
    with AzuriteProcess(REPO_ROOT) as azurite, tempfile.TemporaryDirectory() as state_dir:
        connection_string = azurite.connection_string
        filled = fill_queue(connection_string, QUEUE, texts)
        environment = {
            **os.environ,
            "CLOUDQUEUE_CONNECTION_STRING": connection_string,
            "CPU_WORKER_MS": str(work_ms),
        }
        worker = subprocess.Popen(
            worker_command(processes, state_dir),
            cwd=REPO_ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
        )
        try:
            messages, seconds = timed_drain(connection_string, filled)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    return ProcessRun(processes, repetition, messages, seconds)


def run(messages: int, repetitions: int, work_ms: float) -> list[ProcessRun]:
    texts = message_texts(messages)
    runs: list[ProcessRun] = []
    for repetition in range(repetitions):
        for processes in (1, 2) if repetition % 2 == 0 else (2, 1):
            measured = measure(processes, repetition, texts, work_ms)
            print(
                f"processes={processes} rep={repetition}: {measured.msgs_per_s:.1f} msg/s",
                file=sys.stderr,
                flush=True,
            )
            runs.append(measured)
    return runs


def summarize(runs: Sequence[ProcessRun]) -> dict[str, Any]:
    rates = {(r.processes, r.repetition): r.msgs_per_s for r in runs}
    repetitions = sorted({r.repetition for r in runs})
    ratios = [rates[2, rep] / rates[1, rep] for rep in repetitions]
    return {
        "msgs_per_s_median": {
            str(p): statistics.median(r.msgs_per_s for r in runs if r.processes == p)
            for p in (1, 2)
        },
        "paired_ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The README block for these results."""
    summary = results["summary"]
    rates = summary["msgs_per_s_median"]
    lines = [
        f"**Processes for CPU-bound handlers** — a handler spending {results['work_ms']:g} ms of "
        f"pure Python per message, {results['messages']:,} messages on Azurite, "
        f"{THREADS_PER_PROCESS} dequeue threads per process, `cloudqueue run --processes P`, "
        f"{results['repetitions']} paired repetitions, rate from the first delete to the last:",
        "",
        "| processes | msg/s, median | 2 processes / 1, median of paired runs (min-max) |",
        "|---|---|---|",
        f"| 1 | {rates['1']:.0f} | |",
        f"| 2 | {rates['2']:.0f} | **{summary['ratio_median']:.2f}** "
        f"({summary['ratio_min']:.2f}-{summary['ratio_max']:.2f}) |",
        "",
        header_line(results),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog=f"python -m tests.benchmarks.{BENCH}")
    parser.add_argument("--messages", "-n", type=int, default=1500)
    parser.add_argument("--repetitions", "-r", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=2.0, help="handler CPU per message")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    results = run_header(BENCH, argv)
    try:
        runs = run(args.messages, args.repetitions, args.work_ms)
    except BenchmarkError as failure:
        print(f"benchmark failed: {failure}", file=sys.stderr)
        return 1
    results.update(
        messages=args.messages,
        repetitions=args.repetitions,
        work_ms=args.work_ms,
        summary=summarize(runs),
        runs=[{**asdict(r), "msgs_per_s": r.msgs_per_s} for r in runs],
    )
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
