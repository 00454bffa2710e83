"""Where the client's CPU goes in a drain: py-spy's samples of the consumer, grouped by layer.

``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.profile_client --write`` runs
``py-spy record -r 250 -f raw`` on ``tests.benchmarks.profile_drain`` (a no-op drain of 2,000
messages at 4 threads on a fresh Azurite, cloudqueue by default) and saves the summary to
``tests/benchmarks/results/profile_client.json``, shown on the docs' drain page;
``--samples FILE`` summarizes an earlier recording instead.

Every sample of the consumer's threads counts (dequeue, handler and lease threads, the host's
start and stop); filling the queue and starting Azurite do not. Samples whose innermost frame
waits (``SocketIO.readinto``, lock and poll waits) are split out first: py-spy sees a thread
blocked in a read as running. A busy sample belongs to its innermost frame from a known layer
(a stdlib frame counts for the layer that called it), and that frame names it in the top frames:
the guide to what the request path spends per message.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import REPO_ROOT

BENCH = "profile_client"
RATE_PER_S = 250
TOP_FRAMES = 15
WAITING_LEAVES = ("SocketIO.readinto", "Condition.wait", "do_poll", "Lock.acquire", "Event.wait")
WAITING = "waiting (for responses, on locks)"
NOT_THE_CONSUMER = ("drain_support.py", "azurite.py")
"""Stacks of the harness: filling the queue, waiting for the drain's end, Azurite's start."""
LAYERS = (
    ("cloudqueue (listener, workers)", ("listener/", "workers/")),
    ("benchmark harness (the loop's own code)", ("tests/benchmarks/",)),
    (
        "azure-core pipeline policies (incl. the storage SDK's)",
        ("pipeline/policies/", "_shared/policies", "_shared/authentication", "_shared/base_client"),
    ),
    ("azure-core pipeline and transport", ("core/pipeline/", "core/")),
    ("azure-storage-queue (models, XML)", ("storage/queue/", "xml/", "isodate/", "dateutil/")),
    ("requests", ("requests/",)),
    ("urllib3, http.client, socket", ("urllib3/", "http/client.py", "socket.py", "ssl.py")),
    ("pydantic", ("pydantic",)),
    ("reactivex", ("reactivex/",)),
    ("structlog, logging", ("structlog/", "logging/")),
    ("json, base64", ("json/", "base64.py")),
)
OTHER = "other (threading, stdlib)"


def parse(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    """py-spy raw lines (``frame;frame;... count``, leaf last) as (frames, samples)."""
    stacks = []
    for line in lines:
        stack_text, _, count = line.rpartition(" ")
        if count.isdigit():
            stacks.append((stack_text.split(";"), int(count)))
    return stacks


def is_consumer(stack: list[str]) -> bool:
    return not any(marker in frame for frame in stack for marker in NOT_THE_CONSUMER)


def is_waiting(stack: list[str]) -> bool:
    return bool(stack) and any(name in stack[-1].partition(" (")[0] for name in WAITING_LEAVES)


def attribution(stack: list[str]) -> tuple[str, str]:
    """The layer of a sample's innermost frame that belongs to one, and that frame."""
    for frame in reversed(stack):
        path = frame.rpartition("(")[2]
        for layer, prefixes in LAYERS:
            if any(prefix in path for prefix in prefixes):
                return layer, _short(frame)
    return OTHER, _short(stack[-1]) if stack else "?"


def _short(frame: str) -> str:
    """``function (path:line)`` as ``function (file)``: one entry per function."""
    function, _, where = frame.partition(" (")
    path = where.rpartition(":")[0] or where.rstrip(")")
    return f"{function} ({'/'.join(path.split('/')[-2:])})"


def summarize(stacks: Sequence[tuple[list[str], int]]) -> dict[str, Any]:
    """Busy and waiting samples of the consumer, per layer and per attributed frame."""
    layers: Counter[str] = Counter()
    frames: Counter[tuple[str, str]] = Counter()
    waiting = 0
    for stack, count in stacks:
        if not is_consumer(stack):
            continue
        if is_waiting(stack):
            waiting += count
            continue
        layer, frame = attribution(stack)
        layers[layer] += count
        frames[layer, frame] += count
    return {
        "busy_samples": sum(layers.values()),
        "waiting_samples": waiting,
        "layers": dict(layers.most_common()),
        "top_frames": [
            {"layer": layer, "frame": frame, "samples": n}
            for (layer, frame), n in frames.most_common(TOP_FRAMES)
        ],
    }


def record(consumer: str, threads: int, messages: int) -> list[str]:
    """Run the drain under py-spy; its raw samples' lines."""
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "samples.txt"
        drain = [sys.executable, "-m", "tests.benchmarks.profile_drain"]
        options = ["--consumer", consumer, "--threads", str(threads), "--messages", str(messages)]
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", str(RATE_PER_S)]
        command = [*spy, "-f", "raw", "-o", str(output), "--", *drain, *options]
        subprocess.run(command, cwd=REPO_ROOT, check=True)
        return output.read_text().splitlines()


def render_markdown(results: dict[str, Any]) -> str:
    """The docs block: each layer's share of the busy samples, then the top frames."""
    busy = results["busy_samples"] or 1
    lines = [
        f"**Where the client's CPU goes** — {results['consumer']}, no-op handler, "
        f"{results['threads']} threads, {results['messages']:,} messages on Azurite, sampled by "
        f"py-spy at {RATE_PER_S} Hz. A busy sample counts for its innermost frame from a known "
        "layer (stdlib frames for the layer that called them).",
        "",
        "| layer | share of busy samples |",
        "|---|---|",
    ]
    for layer, n in results["layers"].items():
        lines.append(f"| {layer} | {100 * n / busy:.0f} % |")
    lines += ["", "| top frames (own time, stdlib callees included) | layer | share |"]
    lines.append("|---|---|---|")
    for entry in results["top_frames"]:
        share = 100 * entry["samples"] / busy
        lines.append(f"| `{entry['frame']}` | {entry['layer']} | {share:.1f} % |")
    lines += [
        "",
        f"Besides {results['busy_samples']:,} busy samples, the consumer's threads spent "
        f"{results['waiting_samples']:,} waiting for responses or locks.",
        "",
        header_line(results),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog=f"python -m tests.benchmarks.{BENCH}", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--consumer", choices=("cloudqueue", "loop"), default="cloudqueue")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--messages", "-n", type=int, default=2000)
    parser.add_argument("--samples", type=Path, help="summarize this py-spy raw file instead")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(arguments)
    results = run_header(BENCH, arguments)
    lines = (
        args.samples.read_text().splitlines()
        if args.samples
        else record(args.consumer, args.threads, args.messages)
    )
    results.update(consumer=args.consumer, threads=args.threads, messages=args.messages)
    results.update(summarize(parse(lines)))
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
