"""What each handler control costs per message, in memory, against the same drain without it.

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_controls`` (``--write``
saves ``tests/benchmarks/results/bench_controls.json``, rendered on the Performance pages;
``--quick`` for a short smoke run; ``--main PATH`` also measures the baselines on the code of
another checkout, e.g. an export of ``main``: ``git archive main | tar -x -C PATH``).

Every drain is one fresh process: N messages (20,000) already on an ``InMemoryQueueStorage``, a
no-op handler, one dequeue thread, timed from the thread's start to the N-th delete. The
variants, each next to its baseline of the same repetition (the order rotates):

* ``off, 1 slot`` (baseline): ``concurrency = 1``, handled on the dequeue thread;
* ``time limit, 1 slot``: ``time_limit_s = 60``, which also hands each message to a handler
  thread (a thread past its limit must hold a slot, never the loop);
* ``retry policy, 1 slot``: a ``Retry(give_up_on=...)`` worker's middleware and delays;
* ``off, 8 slots`` (baseline): ``concurrency = 8``, handler threads;
* ``time limit, 8 slots``: the same under a time limit;
* ``batch handler, 32 items``: ``handle_batch`` with ``max_items = 32`` (a 32-slot thread).

A control's cost is its drain's microseconds per message minus its baseline's, paired within a
repetition: median (min-max). With ``--main``, ``main: off, ...`` drains the baselines on that
checkout, so the cost with every control off can be compared with the code before them.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from tests.benchmarks.drain_support import format_spread, spread
from tests.benchmarks.results_file import header_line, report, run_header

BENCH = "bench_controls"
QUEUE = "bench-controls"
DEADLINE_S = 300.0
BASELINES = {"off, 1 slot": "off_inline", "off, 8 slots": "off_in_flight"}
VARIANTS: dict[str, tuple[str, str]] = {
    # name: (how it is built, the baseline it is measured against)
    "time limit, 1 slot": ("time_limit_inline", "off, 1 slot"),
    "retry policy, 1 slot": ("retry_inline", "off, 1 slot"),
    "time limit, 8 slots": ("time_limit_in_flight", "off, 8 slots"),
    "batch handler, 32 items": ("batch_32", "off, 8 slots"),
}
MAIN = "main: "
"""The prefix of a baseline drained on another checkout (``--main``)."""


# -- one drain, in its own process ---------------------------------------------------------------


def drain(kind: str, count: int) -> dict[str, float]:
    """Wall and CPU seconds of one drain of ``count`` messages by the listener ``kind`` names.

    The baselines use only what the listener had before the controls, so that ``--main`` can run
    them on older code."""
    from cloudqueue.listener.consumer.listener import CloudQueueListener
    from cloudqueue.listener.location import CloudQueueLocation
    from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage

    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    storage.create_queue(f"{QUEUE}-poison")
    for number in range(count):
        storage.put_message(QUEUE, str(number))
    options: dict[str, Any] = {"concurrency": 8 if "in_flight" in kind else 1}
    close = _controls(kind, options)
    listener: CloudQueueListener[int] = CloudQueueListener(
        storage, CloudQueueLocation(QUEUE), int, dequeue_interval_s=0.05, **options
    )
    if kind == "batch_32":
        close = _batches(listener)
    else:
        listener.subscribe(lambda item: None)
    wall, cpu = time.perf_counter(), time.process_time()
    listener.start_listener(1)
    deadline = time.monotonic() + DEADLINE_S
    while listener.messages_processed < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind}: {listener.messages_processed}/{count} handled")
        time.sleep(0.001)  # the benchmark's own polling
    measured = {"seconds": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
    listener.stop(30)
    close()
    return measured


def _controls(kind: str, options: dict[str, Any]) -> Any:
    """Set the listener arguments of a control variant; what to close after the drain."""
    if kind.startswith("time_limit"):
        options["time_limit_s"] = 60.0
    elif kind == "retry_inline":
        from cloudqueue.listener.middleware.retry import RetryPolicy
        from cloudqueue.listener.policies.delivery import DeliveryPolicy
        from cloudqueue.listener.policies.retry import Retry

        retry = Retry(delays_s=(5, 30), give_up_on=(ValueError,))
        options["middleware"] = [RetryPolicy(retry)]
        options["delivery"] = retry.applied_to(DeliveryPolicy())
    elif kind == "batch_32":
        options.update(concurrency=32, adaptive_slots=False)
    return lambda: None


def _batches(listener: Any) -> Any:
    from cloudqueue.listener.consumer.coroutines import LoopThread
    from cloudqueue.workers.host.batch_handler import Batcher

    loop = LoopThread("bench-batches")
    listener.subscribe_batches(
        Batcher(lambda items: None, max_items=32, max_wait_s=0.05, loop=loop)
    )
    return loop.close


def measure(name: str, count: int, checkout: Path | None) -> dict[str, float]:
    """One drain in a fresh process (on ``checkout``'s code for a ``main:`` baseline)."""
    kind = _kind(name)
    cwd = Path.cwd() if checkout is None else checkout
    command = [sys.executable, "-m", f"tests.benchmarks.{BENCH}", "--drain", kind, "-n", str(count)]
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, check=False, timeout=DEADLINE_S + 60
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def _kind(name: str) -> str:
    plain = name.removeprefix(MAIN)
    return BASELINES.get(plain) or VARIANTS[plain][0]


# -- the run -------------------------------------------------------------------------------------


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    names = [*BASELINES, *VARIANTS]
    checkout: Path | None = args.main
    if checkout is not None:
        names += [f"{MAIN}{name}" for name in BASELINES]
        _install_into(checkout)
    started = time.monotonic()
    us: dict[str, list[float]] = {name: [] for name in names}
    cpu_us: dict[str, list[float]] = {name: [] for name in names}
    for repetition in range(args.repetitions):
        shift = repetition % len(names)
        for name in [*names[shift:], *names[:shift]]:
            on_main = checkout if name.startswith(MAIN) else None
            measured = measure(name, args.messages, on_main)
            us[name].append(1e6 * measured["seconds"] / args.messages)
            cpu_us[name].append(1e6 * measured["cpu_s"] / args.messages)
            print(f"rep {repetition} {name}: {us[name][-1]:.1f} µs/msg", flush=True)
    return {
        **run_header(BENCH, argv),
        "messages": args.messages,
        "repetitions": args.repetitions,
        "duration_s": round(time.monotonic() - started, 1),
        "us_per_message": {name: spread(values) for name, values in us.items()},
        "cpu_us_per_message": {name: spread(values) for name, values in cpu_us.items()},
        "cost_us_per_message": _costs(us),
        "cost_cpu_us_per_message": _costs(cpu_us),
        "main_ratio": _ratios(us),
        "main_cpu_ratio": _ratios(cpu_us),
        "raw": {"us_per_message": us, "cpu_us_per_message": cpu_us},
    }


def _ratios(per_message: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each baseline here over the same drained on ``--main``, paired within a repetition."""
    return {
        name: spread(
            [a / b for a, b in zip(per_message[name], per_message[MAIN + name], strict=True)]
        )
        for name in BASELINES
        if MAIN + name in per_message
    }


def _costs(per_message: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each control's µs per message over its baseline's, paired within a repetition."""
    return {
        name: spread([a - b for a, b in zip(per_message[name], per_message[base], strict=True)])
        for name, (_, base) in VARIANTS.items()
    }


def _install_into(checkout: Path) -> None:
    """Put this file into the other checkout, so its drains run the same code on its library."""
    target = checkout / "tests" / "benchmarks" / Path(__file__).name
    if not target.parent.is_dir():
        raise SystemExit(f"--main {checkout}: no tests/benchmarks folder there")
    shutil.copyfile(__file__, target)


def render_markdown(results: dict[str, Any]) -> str:
    """The Performance page's table for these results."""
    wall, cpu = results["us_per_message"], results["cpu_us_per_message"]
    lines = [
        header_line(results),
        "",
        f"{results['messages']:,} messages per drain, {results['repetitions']} repetitions "
        "(order rotated), one dequeue thread, a no-op handler, each drain a fresh process. "
        "Wall and CPU (this process, every thread) µs per message, median (min-max); a "
        "control's cost is paired with its baseline's drain of the same repetition. On a "
        "shared machine CPU per message moves less than wall time.",
        "",
        "| drain | wall µs / msg | CPU µs / msg | cost: wall µs / msg | cost: CPU µs / msg |",
        "|---|---|---|---|---|",
    ]
    for name in BASELINES:
        lines.append(
            f"| {name} (baseline) | {format_spread(wall[name], 1)} "
            f"| {format_spread(cpu[name], 1)} | — | — |"
        )
    for name, (_, baseline) in VARIANTS.items():
        lines.append(
            f"| {name} (against {baseline}) | {format_spread(wall[name], 1)} "
            f"| {format_spread(cpu[name], 1)} "
            f"| {format_spread(results['cost_us_per_message'][name], 1)} "
            f"| **{format_spread(results['cost_cpu_us_per_message'][name], 1)}** |"
        )
    for name, ratio in (results.get("main_ratio") or {}).items():
        lines.append(
            f"| {MAIN}{name} | {format_spread(wall[MAIN + name], 1)} "
            f"| {format_spread(cpu[MAIN + name], 1)} "
            f"| this branch / main: {format_spread(ratio, 3)} "
            f"| {format_spread(results['main_cpu_ratio'][name], 3)} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m tests.benchmarks.{BENCH}",
        description=(__doc__ or "").split("\n", maxsplit=1)[0],
    )
    parser.add_argument("--messages", "-n", type=int, default=20_000, help="N per drain")
    parser.add_argument("--repetitions", "-r", type=int, default=5, help="drains per variant")
    parser.add_argument("--main", type=Path, default=None, help="a checkout to compare with")
    parser.add_argument("--drain", default=None, help=argparse.SUPPRESS)  # one drain, JSON out
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 messages, 1 rep")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.repetitions = 2_000, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(arguments)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.drain is not None:
        print(json.dumps(drain(args.drain, args.messages)))
        return 0
    results = run(args, arguments)
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
