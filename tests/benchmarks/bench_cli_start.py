"""How long a ``cloudqueue`` command takes to start, next to what it cannot avoid importing.

Run ``.venv/bin/python -m tests.benchmarks.bench_cli_start [--rounds R] [--write]`` (about a
minute; ``--write`` saves tests/benchmarks/results/bench_cli_start.json, which the command-line
reference page shows).

Every process below is started the way a user or a script starts it, and timed from ``Popen`` to
its exit (wall time, in this process). The processes run interleaved: each round starts every one
of them once, in a shuffled order, so they all meet the same machine load; one unmeasured round
first fills the disk cache and creates the SQLite file. The figures are medians over the rounds.

* ``python -c "import click"``: the floor for any click command line;
* ``cloudqueue --version``: judged against that floor (target: at most 1.5 times);
* ``python -c "import pydantic_settings"``: the floor for a command that reads settings;
* the put itself: ``python -c`` importing only the SQLite store module, opening the store,
  creating the queue and putting one message, as ``cloudqueue enqueue`` does on SQLite;
* ``python -c "pass"``: the interpreter's own start;
* ``cloudqueue enqueue Q '{...}'`` on ``sqlite:///``: judged against ``import pydantic_settings``
  plus the put itself *less the interpreter start* (both processes pay it; the command pays it
  once), target at most 1.5 times;
* ``cloudqueue queues list`` on the same file: a command that also reads the workers' published
  state, shown against ``enqueue`` (no target): near 1 when it imports no more of the worker side
  than ``enqueue`` does (while the consumer came with it, it imported about 100 modules more than
  ``enqueue``; now a few fewer).

Compare the ratios, not the seconds: the cores are shared with whatever else runs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.benchmarks.results_file import header_line, report, run_header

TARGET_RATIO = 1.5
QUEUE = "bench-cli-start"
ITEM = '{"invoice_id": 1, "customer": "acme"}'

PUT_ONE = (
    "import os, sys\n"
    "from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage\n"
    "storage = SqliteQueueStorage(os.environ['BENCH_SQLITE_PATH'])\n"
    f"storage.create_queue({QUEUE!r})\n"
    f"storage.put_message({QUEUE!r}, {ITEM!r})\n"
    "storage.close()\n"
)
"""The put itself: what ``cloudqueue enqueue`` cannot avoid doing on SQLite."""

CLICK, VERSION, SETTINGS, PUT, BARE, ENQUEUE, QUEUES = (
    "import_click",
    "version",
    "import_pydantic_settings",
    "put_one",
    "python_start",
    "enqueue",
    "queues_list",
)
LABELS = {
    CLICK: '`python -c "import click"`',
    VERSION: "`cloudqueue --version`",
    SETTINGS: '`python -c "import pydantic_settings"`',
    PUT: "the put itself: `python -c` importing the SQLite store module, one put",
    BARE: '`python -c "pass"` (the interpreter start)',
    ENQUEUE: f"`cloudqueue enqueue {QUEUE} '{{…}}'` on `sqlite:///`",
    QUEUES: "`cloudqueue queues list` on `sqlite:///`",
}


def commands() -> dict[str, list[str]]:
    """Every measured process, as it is started (the console script is the one pip installed)."""
    python = sys.executable
    script = str(Path(python).with_name("cloudqueue"))
    return {
        CLICK: [python, "-c", "import click"],
        VERSION: [script, "--version"],
        SETTINGS: [python, "-c", "import pydantic_settings"],
        PUT: [python, "-c", PUT_ONE],
        BARE: [python, "-c", "pass"],
        ENQUEUE: [script, "enqueue", QUEUE, ITEM],
        QUEUES: [script, "queues", "list"],
    }


def timed(command: list[str], *, env: dict[str, str], cwd: Path) -> float:
    """Seconds from start to exit of one process, which must succeed."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def measure(rounds: int) -> dict[str, list[float]]:
    """Seconds of every process in every round, rounds interleaved, after one unmeasured round."""
    with tempfile.TemporaryDirectory(prefix="bench-cli-start-") as folder:
        cwd = Path(folder)  # no config/cloudqueue.toml, no .env: the settings' defaults
        database = cwd / "queues.db"
        env = {key: value for key, value in os.environ.items() if not key.startswith("CLOUDQUEUE_")}
        env |= {
            "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{database}",
            "BENCH_SQLITE_PATH": str(database),
        }
        argv = commands()
        seconds: dict[str, list[float]] = {name: [] for name in argv}
        for round_number in range(rounds + 1):
            order = list(argv)
            random.shuffle(order)
            for name in order:
                elapsed = timed(argv[name], env=env, cwd=cwd)
                if round_number > 0:
                    seconds[name].append(elapsed)
            if round_number > 0:
                print(
                    f"  round {round_number}: "
                    + ", ".join(f"{name} {seconds[name][-1]:.3f}" for name in argv),
                    flush=True,
                )
    return seconds


def summary(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """Medians, both baselines, and the two ratios the targets are judged on."""
    median = {name: statistics.median(values) for name, values in seconds.items()}
    enqueue_baseline = median[SETTINGS] + median[PUT] - median[BARE]
    return {
        "rounds": len(seconds[CLICK]),
        "median_s": median,
        "seconds": seconds,
        "version_baseline_s": median[CLICK],
        "enqueue_baseline_s": enqueue_baseline,
        "version_ratio": median[VERSION] / median[CLICK],
        "enqueue_ratio": median[ENQUEUE] / enqueue_baseline,
        "queues_ratio": median[QUEUES] / median[ENQUEUE],
        "target_ratio": TARGET_RATIO,
    }


def met(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "**not met**"


def render_markdown(results: dict[str, Any]) -> str:
    """The docs block: each command's median start-to-exit time against its floor."""
    median, target = results["median_s"], results["target_ratio"]
    version, enqueue = results["version_ratio"], results["enqueue_ratio"]
    queues = results["queues_ratio"]
    rows = [
        "| process | median wall time |",
        "|---|---|",
        *(f"| {LABELS[name]} | {median[name] * 1000:,.0f} ms |" for name in LABELS),
    ]
    return "\n".join(
        [
            f"**Start-up time** — medians of {results['rounds']} interleaved rounds, each process "
            "timed from start to exit:",
            "",
            *rows,
            "",
            "| command | against | ratio | target |",
            "|---|---|---|---|",
            f"| `cloudqueue --version` | `import click` | **{version:.2f}** "
            f"| ≤ {target}: {met(version, target)} |",
            "| `cloudqueue enqueue` on SQLite | `import pydantic_settings` + the put itself, less "
            f"the interpreter start ({results['enqueue_baseline_s'] * 1000:,.0f} ms) "
            f"| **{enqueue:.2f}** | ≤ {target}: {met(enqueue, target)} |",
            "| `cloudqueue queues list` on SQLite | `cloudqueue enqueue` on SQLite "
            f"| **{queues:.2f}** | (none) |",
            "",
            header_line(results),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", "-r", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="save the results for the docs")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = run_header("bench_cli_start", list(sys.argv[1:] if argv is None else argv))
    results |= summary(measure(args.rounds))
    report("bench_cli_start", results, render_markdown, write=args.write)
    ratios = (results["version_ratio"], results["enqueue_ratio"])
    return 0 if all(ratio <= TARGET_RATIO for ratio in ratios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
