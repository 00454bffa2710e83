"""Azurite under V8's CPU profiler during one drain: what its JavaScript thread spent the drain on.

``profiled_azurite(folder)`` makes every Azurite the test support starts from then on run under
``node --cpu-prof`` (a profile lands in ``folder`` when it exits; node refuses ``--cpu-prof`` in
``NODE_OPTIONS``, so the command itself changes). ``drain_samples(folder, window)`` reads the
newest profile and shares out the samples taken inside ``window`` (the drain's start and end,
``time.monotonic`` seconds: V8 stamps samples with the same CLOCK_MONOTONIC, in microseconds) by
``profile_azurite``'s categories, garbage collection apart, and says how idle the thread was in
each tenth of the drain: an idle stretch in the middle is time the consumer left the server with
nothing to do, idle at the ends is the drain starting and finishing.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.benchmarks import profile_azurite
from tests.support import azurite

GC = "(garbage collector)"
SLICES = 10


def profiled_azurite(profile_dir: Path) -> None:
    """Start every Azurite service from now on under ``node --cpu-prof``."""
    command = azurite._Service.command

    def profiled(self: azurite._Service, bin_dir: Path, location: Path | None) -> list[str]:
        script, *rest = command(self, bin_dir, location)
        node = shutil.which("node") or "node"
        profiling = ["--cpu-prof", f"--cpu-prof-dir={profile_dir}"]
        return [node, *profiling, str(Path(script).resolve()), *rest]

    azurite._Service.command = profiled  # type: ignore[method-assign]


def drain_samples(profile_dir: Path, window: Sequence[float]) -> dict[str, Any]:
    """Shares (percent) of the newest profile's samples in ``window`` by category, and the idle
    share of each tenth of the window; the profile file is removed once read."""
    newest = max(profile_dir.glob("*.cpuprofile"), key=lambda path: path.stat().st_mtime)
    profile = json.loads(newest.read_text())
    newest.unlink()
    nodes = {node["id"]: node for node in profile["nodes"]}
    parents = {child: node["id"] for node in profile["nodes"] for child in node.get("children", [])}
    start_us, end_us = (1e6 * seconds for seconds in window)
    counts: Counter[str] = Counter()
    slices, idle_slices = [0] * SLICES, [0] * SLICES
    at = profile["startTime"]
    for node_id, delta in zip(profile["samples"], profile["timeDeltas"], strict=True):
        at += delta
        if not start_us <= at <= end_us:
            continue
        stack = list(profile_azurite._stack(node_id, nodes, parents))
        category = GC if stack[0][0] == GC else profile_azurite._category(stack)
        counts[category] += 1
        part = min(SLICES - 1, int(SLICES * (at - start_us) / (end_us - start_us)))
        slices[part] += 1
        idle_slices[part] += category == profile_azurite.IDLE
    total = sum(counts.values()) or 1
    return {
        "pct": {name: round(100 * n / total, 1) for name, n in counts.most_common()},
        "idle_pct_by_tenth": [
            round(100 * idle / (n or 1)) for idle, n in zip(idle_slices, slices, strict=True)
        ],
    }
