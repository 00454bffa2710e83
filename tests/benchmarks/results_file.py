"""Where benchmark results live and what every results file records about its run.

Convention for every benchmark module ``tests/benchmarks/<bench>.py`` that publishes figures:

* ``--write`` saves its results to ``tests/benchmarks/results/<bench>.json`` (``write_results``),
  with the machine, the command and the date beside the figures (``run_header``);
* the module exposes ``render_markdown(results: dict) -> str``, the docs block for those results;
* a Performance page of the docs holds ``<!-- bench:<bench> -->`` ``<!-- /bench:<bench> -->``,
  filled from the JSON at every docs build (``tests.benchmarks.render_readme``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"

_PACKAGES = ("azure-storage-queue", "azure-core", "requests", "pydantic", "reactivex")


def results_path(bench: str) -> Path:
    return RESULTS_DIR / f"{bench}.json"


def run_header(bench: str, argv: list[str]) -> dict[str, Any]:
    """What a reader needs to judge the figures: when, how and on what they were measured."""
    return {
        "bench": bench,
        "command": " ".join([".venv/bin/python", "-m", f"tests.benchmarks.{bench}", *argv]),
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "machine": machine_info(),
    }


def machine_info() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {name: _version(name) for name in _PACKAGES},
        "load_average_at_start": list(os.getloadavg()),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def write_results(bench: str, results: dict[str, Any]) -> Path:
    """Save the results (with the load average at the end added) where the docs read them."""
    results["machine"]["load_average_at_end"] = list(os.getloadavg())
    path = results_path(bench)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return path


def report(
    bench: str, results: dict[str, Any], render: Callable[[dict[str, Any]], str], *, write: bool
) -> None:
    """Print the docs block for ``results``; with ``write`` also save them (said on stderr)."""
    print(render(results))
    if write:
        print(f"wrote {write_results(bench, results)}", file=sys.stderr)


def load_results(bench: str) -> dict[str, Any]:
    results: dict[str, Any] = json.loads(results_path(bench).read_text())
    return results


def header_line(results: dict[str, Any]) -> str:
    """One markdown line: command, date and machine, under every generated table."""
    machine = results["machine"]
    load = machine.get("load_average_at_start", [0.0])[0]
    return (
        f"`{results['command']}` — {results['date_utc']} UTC, {machine['cpus']} CPUs "
        f"({machine['cpu_model']}), Python {machine['python']}, load average {load:.1f} at start."
    )
