"""Where the client's CPU goes in a drain: its Python work grouped by layer.

``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.profile_client --write`` drains
4,000 messages with a no-op handler at 4 threads on a fresh Azurite (cloudqueue by default) and
saves the summary to ``tests/benchmarks/results/profile_client.json``, shown on the docs' drain
page. Two recorders:

* ``--profiler cprofile`` (the default): the drain runs in this process with cProfile on every
  thread, and each function's own time and calls count for its layer
  (``tests.benchmarks.call_profile``). Deterministic: the calls per message are exact; the
  profiler's cost per call inflates layers of many small calls, so the shares are a guide.
* ``--profiler py-spy``: ``py-spy record -r 250 --gil -f raw`` on ``tests.benchmarks.
  profile_drain``; ``--samples FILE`` summarizes an earlier recording. ``--gil`` keeps the thread
  holding the GIL at each tick. On this project's 2-core VMs it put up to 27 % of its samples
  on ``HandlerPool.submit`` (3 ms of CPU in a 23 s drain by a timer around it), hence the
  default.

Every call of the consumer counts (dequeue, handler and lease threads, the host's start and
stop); filling the queue, Azurite's start and the imports before the drain do not. Work belongs
to its innermost function of a known layer (a stdlib or builtin function counts for the layer
that called it), and that function names it in the top functions.
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

from tests.benchmarks.call_profile import EveryThreadProfile, function_name, summarize_calls
from tests.benchmarks.profile_drain import drain_once
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.azurite import REPO_ROOT

BENCH = "profile_client"
RATE_PER_S = 250
TOP_FRAMES = 3
"""Frames shown per layer."""
WAITING_LEAVES = (
    "SocketIO.readinto",
    "Condition.wait",
    "do_poll",
    "Lock.acquire",
    "Event.wait",
    # Blocked in C on SimpleQueue.get, which adds no frame of its own: the loop's line is the leaf.
    "HandlerPool._work",
    "_worker",
)
WAITING = "waiting (for responses, on locks)"
CONSUMER_ROOTS = ("drain_cloudqueue (", "drain_loop (", "Thread._bootstrap (")
"""A consumer's stack runs under the drain call (the host's start and stop) or on a thread."""
NOT_THE_CONSUMER = ("drain_support.py", "azurite.py")
"""Stacks of the harness: filling the queue, waiting for the drain's end, Azurite's start."""
LAYERS = (
    ("cloudqueue (listener, workers)", ("listener/", "workers/")),
    ("benchmark harness (the loop's own code)", ("tests/benchmarks/",)),
    (
        "azure-core pipeline policies (incl. the storage SDK's)",
        ("pipeline/policies/", "_shared/policies", "_shared/authentication"),
    ),
    ("pydantic", ("pydantic",)),  # before azure-core: "core/" would take pydantic_core's files
    ("azure-core pipeline, transport, tracing decorator", ("core/",)),
    # py-spy names the SDK's files from below site-packages/azure/storage/ (queue/_generated/...).
    # Its XML and date parsing are stdlib (xml.etree, email.utils) and so count here through it;
    # http.client's header parsing (email.parser) counts for http.client the same way.
    ("azure-storage-queue (models, XML, dates)", ("queue/_", "isodate/", "dateutil/")),
    ("requests", ("requests/",)),
    ("urllib3, http.client, socket", ("urllib3/", "http/client.py", "socket.py", "ssl.py")),
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
    """Under the drain or on a thread, and not the harness (imports before the drain are not)."""
    frames = ";".join(stack)
    return any(root in frames for root in CONSUMER_ROOTS) and not any(
        marker in frames for marker in NOT_THE_CONSUMER
    )


def is_waiting(stack: list[str]) -> bool:
    """The innermost frame is one of WAITING_LEAVES (a method, or a function nested in one)."""
    function = stack[-1].partition(" (")[0] if stack else ""
    return any(function == name or function.endswith(f".{name}") for name in WAITING_LEAVES)


def layer_of(path: str) -> str | None:
    """The layer a source file belongs to, if any (a stdlib file of none counts for its caller)."""
    for layer, prefixes in LAYERS:
        if any(prefix in path for prefix in prefixes):
            return layer
    return None


def attribution(stack: list[str]) -> tuple[str, str]:
    """The layer of a sample's innermost frame that belongs to one, and that frame."""
    for frame in reversed(stack):
        layer = layer_of(frame.rpartition("(")[2])
        if layer is not None:
            return layer, _short(frame)
    return OTHER, _short(stack[-1]) if stack else "?"


def _short(frame: str) -> str:
    """``function (path:line)`` as ``function (file)``: one entry per function."""
    function, _, where = frame.partition(" (")
    return function_name(function, where.rpartition(":")[0] or where.rstrip(")"))


def summarize(stacks: Sequence[tuple[list[str], int]]) -> dict[str, Any]:
    """Busy and waiting samples of the consumer, per layer and per attributed frame."""
    layers: Counter[str] = Counter()
    frames: Counter[tuple[str, str]] = Counter()
    waiting = frameless = 0
    for stack, count in stacks:
        if not any(frame.strip() for frame in stack):
            frameless += count  # whose they were is unknown: counted apart, for the whole process
            continue
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
        "frameless_samples": frameless,
        "layers": [
            {
                "layer": layer,
                "samples": n,
                "top_frames": [
                    {"frame": frame, "samples": m}
                    for (owner, frame), m in frames.most_common()
                    if owner == layer
                ][:TOP_FRAMES],
            }
            for layer, n in layers.most_common()
        ],
    }


def record(consumer: str, threads: int, messages: int) -> tuple[list[str], str]:
    """Run the drain under py-spy: its raw samples' lines, and the drain's own report."""
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "samples.txt"
        drain = [sys.executable, "-m", "tests.benchmarks.profile_drain"]
        options = ["--consumer", consumer, "--threads", str(threads), "--messages", str(messages)]
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", str(RATE_PER_S)]
        command = [*spy, "--gil", "-f", "raw", "-o", str(output), "--", *drain, *options]
        run = subprocess.run(command, cwd=REPO_ROOT, check=True, stdout=subprocess.PIPE, text=True)
        said = [line for line in run.stdout.splitlines() if " threads: " in line]  # not py-spy's
        return output.read_text().splitlines(), said[-1] if said else "not recorded"


def record_calls(consumer: str, threads: int, messages: int) -> dict[str, Any]:
    """Run the drain here under cProfile: its summary by layer, and the drain's own report."""
    profile = EveryThreadProfile()
    drain = drain_once(consumer, threads, messages, around_drain=profile)
    summary = summarize_calls(profile.stats(), messages, layer_of, OTHER)
    return {
        "profiler": "cprofile",
        "drain_under_profiler": drain,
        "threads_left_out": profile.still_running,  # started by the drain, not ended after it
        **summary,
    }


def render_calls(results: dict[str, Any]) -> str:
    """The docs block of a cProfile summary: own time and calls per message by layer."""
    layers = results["layers"]
    total = sum(layer["own_us_per_msg"] for layer in layers) or 1.0
    lines = [
        f"**Where the client's Python time goes** — {results['consumer']}, no-op handler, "
        f"{results['threads']} threads, {results['messages']:,} messages on Azurite, every call "
        "counted by cProfile on each thread's CPU clock: a function's own CPU time (a stdlib or "
        "builtin function's counts for the layer that called it; time blocked on a socket, a "
        "lock or the GIL does not count). cProfile's cost per call inflates layers of many "
        "small calls, so the shares are a guide and the calls exact. Under the profiler the "
        "drain ran slower "
        f"({results.get('drain_under_profiler') or 'not recorded'}).",
        "",
        "| layer | share of own time | calls per message | top functions (own µs per message) |",
        "|---|---|---|---|",
    ]
    for layer in layers:
        top = ", ".join(
            f"`{entry['function']}` {entry['own_us_per_msg']:.1f}"
            for entry in layer["top_functions"]
        )
        share = 100 * layer["own_us_per_msg"] / total
        lines.append(f"| {layer['layer']} | {share:.0f} % | {layer['calls_per_msg']:.1f} | {top} |")
    lines += ["", header_line(results)]
    return "\n".join(lines) + "\n"


def render_markdown(results: dict[str, Any]) -> str:
    """The docs block: each layer's share of the client's Python work, with its top functions."""
    if results.get("profiler") == "cprofile":
        return render_calls(results)
    busy = results["busy_samples"] or 1
    lines = [
        f"**Where the client's Python time goes** — {results['consumer']}, no-op handler, "
        f"{results['threads']} threads, {results['messages']:,} messages on Azurite, sampled by "
        f"py-spy at {RATE_PER_S} Hz, the thread holding the GIL (`--gil`): Python's own work. A "
        "sample counts for its innermost frame from a known layer (stdlib frames for the layer "
        "that called them). Under the profiler the drain ran slower "
        f"({results.get('drain_under_profiler') or 'not recorded'}): shares, not speeds.",
        "",
        "| layer | share of samples | its top frames (own time, stdlib callees included) |",
        "|---|---|---|",
    ]
    for layer in results["layers"]:
        top = ", ".join(
            f"`{entry['frame']}` {100 * entry['samples'] / busy:.1f} %"
            for entry in layer["top_frames"]
        )
        lines.append(f"| {layer['layer']} | {100 * layer['samples'] / busy:.0f} % | {top} |")
    lines += [
        "",
        f"Besides {results['busy_samples']:,} busy samples, the consumer's threads spent "
        f"{results['waiting_samples']:,} waiting for responses or locks "
        f"(and the process {results.get('frameless_samples', 0):,} samples without frames).",
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
    parser.add_argument("--messages", "-n", type=int, default=4000)
    parser.add_argument("--profiler", choices=("cprofile", "py-spy"), default="cprofile")
    parser.add_argument("--samples", type=Path, help="summarize this py-spy raw file instead")
    parser.add_argument("--keep", type=Path, help="also save the raw samples recorded here")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(arguments)
    results = run_header(BENCH, arguments)
    results.update(consumer=args.consumer, threads=args.threads, messages=args.messages)
    if args.profiler == "cprofile" and not args.samples:
        results.update(record_calls(args.consumer, args.threads, args.messages))
        report(BENCH, results, render_markdown, write=args.write)
        return 0
    if args.samples:
        lines, drain = args.samples.read_text().splitlines(), None
    else:
        lines, drain = record(args.consumer, args.threads, args.messages)
        if args.keep:
            args.keep.write_text("\n".join(lines) + "\n")
    results["drain_under_profiler"] = drain
    results.update(summarize(parse(lines)))
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
