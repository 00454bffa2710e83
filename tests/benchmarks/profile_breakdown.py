"""Where a drain's client CPU goes: py-spy's raw samples bucketed by the layer that spent them.

``.venv/bin/python -m tests.benchmarks.profile_breakdown /tmp/drain.txt [--write]`` reads a
``py-spy record -f raw`` file of ``tests.benchmarks.profile_drain`` and prints the share of the
consumer threads' busy samples per layer (``--write``: results/profile_breakdown.json, rendered
into the README). Samples waiting for a response (``SocketIO.readinto``, lock and poll waits) are
not busy: py-spy counts them, so they are split out first. A busy sample belongs to the innermost
frame of a known layer (a stdlib frame counts for the layer that called it); ``requests``'
per-request environment lookups (proxies, netrc) are split out, being the cost a listener can skip.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.benchmarks.results_file import header_line, report, run_header

BENCH = "profile_breakdown"
PROFILE_COMMAND = (
    "py-spy record -r 250 -f raw -o /tmp/drain.txt -- .venv/bin/python -m "
    "tests.benchmarks.profile_drain --threads 4"
)
WAITING_LEAVES = ("SocketIO.readinto", "Condition.wait", "do_poll", "Lock.acquire", "Event.wait")
WAITING = "waiting (for responses, on locks)"

CONSUMER_MARKERS = {
    "cloudqueue": "CloudQueueListener._dequeue_task",
    "loop": "work (tests/benchmarks/bench_drain.py",
}
ENVIRONMENT_LOOKUPS = (
    "merge_environment_settings",
    "get_netrc_auth",
    "get_environ_proxies",
    "should_bypass_proxies",
    "rebuild_proxies",
)
LAYERS = (
    ("framework (listener, workers)", ("listener/", "workers/")),
    # py-spy names site-packages files from below site-packages/azure/.
    ("SDK pipeline (azure-core, azure-storage-queue)", ("azure/", "core/", "storage/queue/")),
    ("requests", ("requests/",)),
    ("urllib3, http.client, socket", ("urllib3/", "http/client.py", "socket.py", "ssl.py")),
    ("codec (pydantic, json, base64)", ("pydantic", "json/", "base64.py")),
)
OTHER = "other (threading, logging, stdlib)"


def layer_of(stack: list[str]) -> str:
    """The layer of a sample's innermost frame that belongs to one (frames leaf last)."""
    if stack and any(name in stack[-1].partition(" (")[0] for name in WAITING_LEAVES):
        return WAITING
    if any(name.startswith(ENVIRONMENT_LOOKUPS) for name in stack):
        return "requests: environment lookups (proxies, netrc)"
    for frame in reversed(stack):
        path = frame.rpartition("(")[2]
        for layer, prefixes in LAYERS:
            if any(prefix in path for prefix in prefixes):
                return layer
    return OTHER


def breakdown(lines: Sequence[str], marker: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in lines:
        stack_text, _, count = line.rpartition(" ")
        if marker in stack_text and count.isdigit():
            counts[layer_of(stack_text.split(";"))] += int(count)
    return counts


def render_markdown(results: dict[str, Any]) -> str:
    """The README block: each layer's share of the busy samples, waiting shown apart."""
    counts: dict[str, int] = results["samples"]
    busy = sum(n for layer, n in counts.items() if layer != WAITING) or 1
    lines = [
        f"**Where a drain's client CPU goes** — {results['consumer']}, {results['threads']} "
        f"threads, 2,000 messages on Azurite, sampled by py-spy (`{PROFILE_COMMAND}`, then "
        "`python -m tests.benchmarks.profile_breakdown /tmp/drain.txt --write`):",
        "",
        "| layer | share of busy samples |",
        "|---|---|",
    ]
    for layer, n in sorted(counts.items(), key=lambda item: -item[1]):
        if layer != WAITING:
            lines.append(f"| {layer} | {100 * n / busy:.0f} % |")
    waiting = counts.get(WAITING, 0)
    lines += [
        "",
        f"Besides {busy:,} busy samples, the threads spent {waiting:,} samples waiting for "
        "responses or locks.",
        "",
        header_line(results),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.profile_breakdown")
    parser.add_argument("samples", type=Path)
    parser.add_argument("--consumer", choices=sorted(CONSUMER_MARKERS), default="cloudqueue")
    parser.add_argument("--threads", type=int, default=4, help="as profile_drain ran")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    counts = breakdown(args.samples.read_text().splitlines(), CONSUMER_MARKERS[args.consumer])
    results = run_header(BENCH, [str(args.samples), "--consumer", args.consumer])
    results.update(consumer=args.consumer, threads=args.threads, samples=dict(counts))
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
