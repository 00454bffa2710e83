"""How long the simulator takes to replay a bursty day, against the day it simulates.

Run ``.venv/bin/python -m tests.benchmarks.bench_simulate [--repeat N] [--json PATH]``.

The workload is the ``bursty-day`` preset: 24 hours with a burst of 500 messages every 30
minutes (24,000 messages), under the five standard policies, with chart samples on (as for
``--plot``). Each policy is timed on its own and the whole comparison too; the figure to quote is
the median wall time of the comparison and its ratio to the 86,400 simulated seconds (how many
times faster than real time). Wall-clock on a shared machine: compare within one invocation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from cloudqueue.listener.simulation import PRESETS, simulate

SAMPLES = 500


def time_once() -> tuple[float, dict[str, float]]:
    """Wall seconds for the whole comparison, and for each policy alone."""
    scenario = PRESETS["bursty-day"]()
    per_policy: dict[str, float] = {}
    for spec in scenario.policies:
        started = time.perf_counter()
        simulate(scenario.workload, [spec], service=scenario.service, samples=SAMPLES)
        per_policy[spec.name] = time.perf_counter() - started
    started = time.perf_counter()
    simulate(scenario.workload, scenario.policies, service=scenario.service, samples=SAMPLES)
    return time.perf_counter() - started, per_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = [time_once() for _ in range(args.repeat)]
    total_s = statistics.median(total for total, _ in runs)
    simulated_s = PRESETS["bursty-day"]().workload.duration_s
    report = {
        "workload": "bursty-day: 24 h, 500 messages every 30 min, 5 policies",
        "median_wall_s": round(total_s, 3),
        "all_wall_s": [round(total, 3) for total, _ in runs],
        "times_faster_than_real_time": round(simulated_s / total_s),
        "per_policy_median_s": {
            name: round(statistics.median(per[name] for _, per in runs), 3) for name in runs[0][1]
        },
    }
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
