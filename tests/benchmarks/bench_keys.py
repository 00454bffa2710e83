"""What the key controls cost per message, in memory; and the per-key limit's drain time.

Run ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_keys [--messages N]
[--repetitions R] [--write]``.

Each variant drains N pre-filled messages through a ``WorkerHost`` (one dequeue thread, a handler
that does nothing, the in-memory store: the storage costs microseconds, so the controls' share is
as large as it can be) in a process of its own (``keys_drain.py``) and measures that process's
CPU time per message. With ``--base DIR`` the baseline is also drained on another checkout (the
tree before the key controls: ``git archive <commit> | tar -x -C DIR``), to show what unkeyed
messages cost now against then. The variants alternate
their order between repetitions; the figure is the median, and the cost of a control is its
variant's median less the baseline's (no key controls, unkeyed messages). Compare costs, not
absolute figures: the cores are shared with anything else running.

* ``plain, none``: unkeyed messages, ``cancel.check = false``: no key middleware (the baseline).
* ``plain, cancel check``: the default settings on unkeyed messages (the middleware is there).
* ``keyed, none``: every message carries a key (a one-item envelope), no control reads it.
* ``keyed, cancel check``: the default: each key's record read and marked in the ledger.
* ``keyed, idempotency``: ``window_s`` set (one key per message: nothing skipped).
* ``keyed, per_key``: ``per_key = 1``, distinct keys (no waiting), cancel check off.
* ``publish, effect-once``: the publisher's own CPU per ``publish`` with ``effect_once_s``, less
  without.

Then the drain of the issue's example: 40 items over 4 keys, ``per_key = 1``, 0.2 s handlers,
against the serial time (40 x 0.2 s).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from cloudqueue.listener import InMemoryQueueStorage, Publisher
from cloudqueue.workers import CloudQueueSettings, QueueWorker, WorkerHost
from tests.benchmarks.keys_drain import DRAIN_TIMEOUT_S, QUEUE
from tests.benchmarks.results_file import header_line, report, run_header

VARIANTS: dict[str, tuple[bool, dict[str, Any]]] = {
    "plain, none": (False, {"cancel": {"check": False}}),
    "plain, cancel check": (False, {}),
    "keyed, none": (True, {"cancel": {"check": False}}),
    "keyed, cancel check": (True, {}),
    "keyed, idempotency": (True, {"idempotency": {"window_s": 3600}}),
    "keyed, per_key": (True, {"limits": {"per_key": 1}, "cancel": {"check": False}}),
}
BASELINE = "plain, none"
BEFORE = "plain, before the key controls"
"""With ``--base DIR``: unkeyed messages, default settings, on the tree in DIR (e.g. ``git
archive`` of the commit before the key controls)."""
DRAIN = Path(__file__).resolve().parent / "keys_drain.py"


def settings(sections: dict[str, Any]) -> CloudQueueSettings:
    return CloudQueueSettings.model_validate(
        {"shutdown_grace_s": 5, "scaling": {"max_threads": 1}, **sections}
    )


def drain_us(count: int, keyed: bool, sections: dict[str, Any], tree: Path | None = None) -> float:
    """CPU per message of one drain in a fresh process, of this tree or of ``tree``."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    kind = "keyed" if keyed else "plain"
    done = subprocess.run(
        [sys.executable, str(DRAIN), str(count), kind, json.dumps(sections)],
        env=env,
        cwd=tempfile.gettempdir(),  # nothing of this tree on the path but what PYTHONPATH says
        capture_output=True,
        text=True,
        check=True,
        timeout=DRAIN_TIMEOUT_S,
    )
    return float(done.stdout.strip().splitlines()[-1])


def publish_cost_us(count: int) -> dict[str, float]:
    """CPU per keyed ``publish`` without and with effect-once (in memory)."""
    costs = {}
    for label, window in (("without", 0), ("with", 3600)):
        storage = InMemoryQueueStorage()
        storage.create_queue(QUEUE)
        publisher = Publisher(storage, QUEUE, dict, key="k", effect_once_s=window)
        started = time.process_time()
        for n in range(count):
            publisher.publish({"k": f"key-{n}", "n": n})
        costs[label] = (time.process_time() - started) / count * 1e6
    return costs


def per_key_drain_s() -> float:
    """Seconds to drain 40 items over 4 keys at per_key = 1 with 0.2 s handlers."""
    storage = InMemoryQueueStorage()
    storage.create_queue(QUEUE)
    publisher = Publisher(storage, QUEUE, dict, key="k")
    for n in range(40):
        publisher.publish({"k": f"key-{n % 4}", "n": n})
    done, lock = [], threading.Lock()

    class Slow(QueueWorker[dict[str, Any]]):
        queue_name = QUEUE

        def handle(self, item: dict[str, Any]) -> None:
            time.sleep(0.2)  # the handler's own work
            with lock:
                done.append(item["n"])

    host = WorkerHost([Slow], settings({"limits": {"per_key": 1}}), storage=storage)
    started = time.perf_counter()
    host.start()
    while len(done) < 40:
        time.sleep(0.005)  # polling the end of the drain
    seconds = time.perf_counter() - started
    host.stop()
    return seconds


def measure(count: int, rounds: int, base: Path | None) -> dict[str, Any]:
    variants = dict(VARIANTS)
    if base is not None:
        variants[BEFORE] = (False, {})
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_number in range(rounds):
        order = names if round_number % 2 == 0 else list(reversed(names))
        for name in order:
            keyed, sections = variants[name]
            tree = base if name == BEFORE else None
            samples[name].append(drain_us(count, keyed, sections, tree))
            print(f"  round {round_number + 1} {name:>22}: {samples[name][-1]:6.1f} us", flush=True)
    publish = [publish_cost_us(count) for _ in range(rounds)]
    drains = [per_key_drain_s() for _ in range(rounds)]
    baseline = statistics.median(samples[BASELINE])
    return {
        "messages": count,
        "repetitions": rounds,
        "cpu_us_per_message": {
            name: {
                "median": round(statistics.median(values), 2),
                "min": round(min(values), 2),
                "max": round(max(values), 2),
                "cost_us": round(statistics.median(values) - baseline, 2),
            }
            for name, values in samples.items()
        },
        "effect_once_publish_us": round(
            statistics.median(p["with"] - p["without"] for p in publish), 2
        ),
        "publish_us_without": round(statistics.median(p["without"] for p in publish), 2),
        "per_key_drain_s": [round(s, 3) for s in drains],
        "per_key_serial_s": 8.0,
    }


def render_markdown(results: dict[str, Any]) -> str:
    """The docs' table for these results (the docs build calls this)."""
    lines = [
        f"{results['messages']:,} messages per drain in memory, one dequeue thread, a handler "
        f"that does nothing; median of {results['repetitions']} interleaved repetitions (min-max). "
        "*Cost*: the variant's CPU per message less the baseline's.",
        "",
        "| variant | CPU µs / message | cost µs / message |",
        "|---|---|---|",
    ]
    for name, figures in results["cpu_us_per_message"].items():
        cost = "baseline" if name == BASELINE else f"**{figures['cost_us']:+.1f}**"
        lines.append(
            f"| {name} | {figures['median']:.1f} ({figures['min']:.1f}-{figures['max']:.1f}) "
            f"| {cost} |"
        )
    drains = results["per_key_drain_s"]
    serial = results["per_key_serial_s"]
    lines += [
        "",
        f"A keyed `publish` costs {results['publish_us_without']:.1f} µs of CPU; effect-once "
        f"(`effect_once_s`) adds **{results['effect_once_publish_us']:.1f} µs** (a mark read "
        "and written in the in-memory ledger).",
        "",
        f"40 items over 4 keys, `per_key = 1`, 0.2 s handlers: drained in "
        f"{', '.join(f'{s:.2f}' for s in drains)} s against {serial:.0f} s serial "
        f"(**{statistics.median(drains) / serial:.2f}** of it; a quarter is 0.25).",
        "",
        header_line(results),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", "-n", type=int, default=5_000)
    parser.add_argument("--repetitions", "-r", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="save the results for the docs")
    parser.add_argument(
        "--base", type=Path, help="a checkout to measure the baseline on too (PYTHONPATH)"
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    results = run_header("bench_keys", sys.argv[1:])
    results.update(measure(args.messages, args.repetitions, args.base))
    report("bench_keys", results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
