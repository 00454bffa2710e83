"""``cloudqueue replay``: a recorded workload on a real queue, measured beside the prediction."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.simulation.profile import load_profile
from cloudqueue.listener.stores.storage import validate_queue_name
from cloudqueue.workers.cli.common import (
    BadInput,
    current_settings,
    opened_storage,
    parse_overrides,
)
from cloudqueue.workers.cli.profile_options import CSV_SERVICE_S, service_for
from cloudqueue.workers.replay.replay import replay
from cloudqueue.workers.replay.replay_prediction import CONSUMER_OPERATIONS, ReplayReport


@click.command(name="replay")
@click.argument("profile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("queue")
@click.option(
    "--speedup",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Run this many times faster than recorded (arrivals and handling times divided).",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="A setting for the replaying worker, e.g. the tuned ones (or use --config FILE).",
)
@CSV_SERVICE_S
@click.option(
    "--start-minute",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Replay from this minute of the profile (0: its first).",
)
@click.option(
    "--minutes",
    type=click.IntRange(min=1),
    help="Replay this many recorded minutes (default: to the profile's end).",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def replay_command(
    *,
    profile: Path,
    queue: str,
    speedup: float,
    assignments: tuple[str, ...],
    service_s: float,
    start_minute: int,
    minutes: int | None,
    seed: int,
    as_json: bool,
) -> None:
    """Put a profile's arrivals on QUEUE, sped up, while a worker with the given settings drains
    it here; print the measured transactions and pickup beside the simulator's prediction.

    Prove a tuning before deploying it: run the settings `cloudqueue tune` chose on Azurite, the
    embedded store or a real account. The queue should be empty and used by nobody else. The
    producer's puts are not counted (they cost the same under any settings).

    \b
    Examples:
      cloudqueue tune hour.jsonl --pickup-p95 2s --save-settings tuned.toml
      cloudqueue --config tuned.toml replay hour.jsonl replay-test --speedup 60
      cloudqueue replay day.csv replay-test --start-minute 480 --minutes 60
    """
    try:
        validate_queue_name(queue)
    except ValueError as error:
        raise BadInput(str(error)) from None
    settings = current_settings(parse_overrides(assignments))
    loaded = load_profile(profile)
    service = service_for(loaded, service_s, request_latency_s=0.0)
    whole = loaded.workload
    try:
        workload = whole.window(
            start_minute * 60.0, whole.duration_s if minutes is None else minutes * 60.0
        )
    except ConfigurationError as error:
        raise BadInput(str(error)) from None
    with opened_storage(settings) as storage:
        report = replay(workload, service, settings, storage, queue, speedup=speedup, seed=seed)
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else _table(report))


def _table(report: ReplayReport) -> str:
    rows = [("", "measured", "predicted")]
    for operation in CONSUMER_OPERATIONS:
        rows.append(
            (
                operation,
                f"{report.measured_transactions.get(operation, 0):,}",
                f"{report.predicted_transactions.get(operation, 0):,}",
            )
        )
    rows.append(("transactions", f"{report.measured_total:,}", f"{report.predicted_total:,}"))
    for name, measured, predicted in (
        ("pickup p50 s", report.measured_pickup.p50_s, report.predicted_pickup.p50_s),
        ("pickup p95 s", report.measured_pickup.p95_s, report.predicted_pickup.p95_s),
        ("pickup max s", report.measured_pickup.max_s, report.predicted_pickup.max_s),
    ):
        rows.append((name, _s(measured), _s(predicted)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        f"{report.handled:,} of {report.messages:,} messages handled in {report.wall_s:.1f} s; "
        f"mean delete {report.request_latency_s * 1000:.1f} ms, "
        f"storage at its busiest {_rate(report.storage_calls_per_s)}; puts done up to "
        f"{report.producer_late_s:.2f} s after their recorded time. The prediction is told "
        "all three, and the handling times the handlers took."
    ]
    lines += [
        f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}" for row in rows
    ]
    return "\n".join(lines)


def _rate(calls_per_s: float | None) -> str:
    return "unmeasured" if calls_per_s is None else f"{calls_per_s:,.0f} calls/s"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
