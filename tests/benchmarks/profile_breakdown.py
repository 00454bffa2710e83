"""Where a drain's client CPU goes: py-spy's raw samples bucketed by the layer that spent them.

``.venv/bin/python -m tests.benchmarks.profile_breakdown /tmp/drain.txt`` reads a ``py-spy record
-f raw`` file of ``tests.benchmarks.profile_drain`` and prints the share of the consumer threads'
busy samples per layer. A sample belongs to the innermost frame of a known layer (a stdlib frame
counts for the layer that called it); ``requests``' per-request environment lookups (proxies,
netrc) are split out, being the cost a listener can skip.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

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
    ("SDK pipeline (azure-core, azure-storage-queue)", ("azure/",)),
    ("requests", ("requests/",)),
    ("urllib3, http.client, socket", ("urllib3/", "http/client.py", "socket.py", "ssl.py")),
    ("codec (pydantic, json, base64)", ("pydantic", "json/", "base64.py")),
)
OTHER = "other (threading, logging, stdlib)"


def layer_of(stack: list[str]) -> str:
    """The layer of a sample's innermost frame that belongs to one (frames leaf last)."""
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


def render(counts: Counter[str]) -> list[str]:
    total = sum(counts.values()) or 1
    rows = ["| layer | share of busy samples |", "|---|---|"]
    rows += [f"| {layer} | {100 * n / total:.0f} % |" for layer, n in counts.most_common()]
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.profile_breakdown")
    parser.add_argument("samples", type=Path)
    parser.add_argument("--consumer", choices=sorted(CONSUMER_MARKERS), default="cloudqueue")
    args = parser.parse_args(argv)
    counts = breakdown(args.samples.read_text().splitlines(), CONSUMER_MARKERS[args.consumer])
    print("\n".join(render(counts)))
    print(f"({sum(counts.values())} busy samples of the {args.consumer} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
