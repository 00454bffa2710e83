"""``cloudqueue tune``: the cheapest settings that meet a pickup and drain goal for a workload.

Reads a profile (recorded by ``cloudqueue run --record``, or a hand-made ``minute,count`` CSV),
searches the settings that decide cost and latency with the real policies in virtual time
(``cloudqueue.listener.simulation.tuning``), and prints the winner as a TOML block, its monthly cost
beside today's defaults and the peers' defaults, and the trade-off between cost and p95 pickup.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from cloudqueue.listener.simulation import format_table
from cloudqueue.listener.simulation.candidates import Trial
from cloudqueue.listener.simulation.cost import monthly_cost_usd
from cloudqueue.listener.simulation.goals import Goals
from cloudqueue.listener.simulation.plot import require_plot_extra, save_tradeoff
from cloudqueue.listener.simulation.profile import LoadedProfile, RecordedProfile, load_profile
from cloudqueue.listener.simulation.tuning import Tuning, tune
from cloudqueue.workers.cli.common import BadInput, current_settings
from cloudqueue.workers.cli.durations import Seconds
from cloudqueue.workers.cli.profile_options import (
    CSV_SERVICE_S,
    request_latency_option,
    service_for,
)

INFEASIBLE_EXIT = 1


@click.command(name="tune")
@click.argument("profile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pickup-p95", type=Seconds(), help="95 % of messages picked up within (e.g. 2s).")
@click.option("--pickup-max", type=Seconds(), help="Every message picked up within (e.g. 10s).")
@click.option(
    "--drain-after-burst",
    type=Seconds(),
    help="Every message handled and deleted within this long after its put (e.g. 10m).",
)
@click.option("--max-threads-per-worker", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--max-workers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--no-push", is_flag=True, help="Only settings that need no Redis trigger channel.")
@CSV_SERVICE_S
@request_latency_option
@click.option("--price", type=click.FloatRange(min=0, min_open=True), help="USD per 10,000.")
@click.option("--seed", type=int, default=1, show_default=True, help="Random seed (jitter).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG of cost against p95 pickup (needs cloudqueue[plot]).",
)
@click.option(
    "--save-settings",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the chosen settings to this TOML file (for --config, e.g. to replay them).",
)
def tune_command(
    *,
    profile: Path,
    pickup_p95: float | None,
    pickup_max: float | None,
    drain_after_burst: float | None,
    max_threads_per_worker: int,
    max_workers: int,
    no_push: bool,
    service_s: float,
    request_latency_s: float,
    price: float | None,
    seed: int,
    as_json: bool,
    plot: Path | None,
    save_settings: Path | None,
) -> None:
    """Find the cheapest settings that meet pickup and drain goals for a recorded workload.

    Runs cloudqueue's real back-off, scaling and push policies in virtual time over the profile
    for a grid of settings (see the docs' "Tune" page for the grid) and prints the cheapest that
    meets every goal, as a block for config/cloudqueue.toml. Seeded: the same input gives the
    same answer. Exit 1 with one line when no setting meets the goals.

    \b
    Examples:
      cloudqueue run app:Worker --record day.jsonl      # record a day first
      cloudqueue tune day.jsonl --pickup-p95 2s --drain-after-burst 10m
      cloudqueue tune day.csv --pickup-p95 500ms --max-workers 4 --plot curve.png
      cloudqueue tune day.jsonl --pickup-p95 2s --save-settings tuned.toml
    """
    goals = Goals(pickup_p95, pickup_max, drain_after_burst)
    if goals == Goals():
        raise BadInput("give at least one goal: --pickup-p95, --pickup-max or --drain-after-burst")
    if plot is not None:
        require_plot_extra()
    loaded = load_profile(profile)
    service = service_for(loaded, service_s, request_latency_s=request_latency_s)
    price_usd = (
        price if price is not None else current_settings().cost.price_per_10k_transactions_usd
    )
    tuning = tune(
        loaded.workload,
        service,
        goals,
        max_threads_per_worker=max_threads_per_worker,
        max_workers=max_workers,
        allow_push=not no_push,
        seed=seed,
    )
    if plot is not None:
        save_tradeoff(
            [(t.result.latency.p95_s or 0.0, t.cost_per_month_usd) for t in tuning.curve()], plot
        )
    if as_json:
        click.echo(json.dumps(_as_json(tuning, price_usd), indent=2))
    else:
        click.echo(_report(loaded, tuning, price_usd))
    if tuning.best is None:
        click.echo(f"Error: {tuning.infeasible}", err=True)
        raise SystemExit(INFEASIBLE_EXIT)
    if save_settings is not None:
        save_settings.write_text(tuning.best.candidate.toml() + "\n", encoding="utf-8")


def _report(loaded: LoadedProfile, tuning: Tuning, price_usd: float) -> str:
    workload = loaded.workload
    lines = [
        f"{len(workload.arrivals_s):,} messages over {workload.duration_s / 3600:g} h; "
        f"{len(tuning.trials)} settings simulated; ${price_usd:g} per 10,000 transactions",
        *_recorded_lines(loaded.recorded),
        "",
    ]
    best = tuning.best
    if best is None:
        lines.append(f"No settings meet the goals: {tuning.infeasible}")
    else:
        lines += [
            f"Cheapest settings that meet the goals ({best.candidate.name}):",
            "",
            best.candidate.toml(),
            "",
        ]
    lines += ["Monthly cost, against today's defaults and the peers' defaults:", ""]
    results = ([best.result] if best is not None else []) + tuning.baselines
    lines += [format_table(results, price_usd), ""]
    lines += ["Trade-off: the cheapest settings for each p95 pickup reached", ""]
    lines += [_curve_table(tuning.curve(), price_usd)]
    return "\n".join(lines)


def _recorded_lines(recorded: RecordedProfile | None) -> list[str]:
    """What a recorded profile says of handling, beside its arrivals (the tuning uses it)."""
    if recorded is None:
        return []
    p50, p95 = recorded.handler_percentile_ms(50), recorded.handler_percentile_ms(95)
    handling = (
        "none handled" if p50 is None or p95 is None else f"p50 {p50:,.0f} ms, p95 {p95:,.0f} ms"
    )
    size = recorded.size_percentile_bytes(95)
    return [
        f"recorded handling: {handling}; failures {recorded.failure_rate:.1%} of "
        f"{recorded.handled + recorded.failed:,} deliveries; message size p95 <= "
        f"{'-' if size is None else f'{size:,} bytes'}"
    ]


def _curve_table(curve: list[Trial], price_usd: float) -> str:
    rows = [("$/month", "p95 pickup s", "max pickup s", "settings")]
    for trial in curve:
        latency = trial.result.latency
        rows.append(
            (
                f"${monthly_cost_usd(trial.result.transactions_per_day, price_usd):,.2f}",
                f"{latency.p95_s or 0:.2f}",
                f"{latency.max_s or 0:.2f}",
                trial.candidate.name,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(f"{cell:>{width}}" for cell, width in zip(row[:3], widths, strict=True))
        + f"  {row[3]}"
        for row in rows
    )


def _as_json(tuning: Tuning, price_usd: float) -> dict[str, Any]:
    best = tuning.best
    return {
        "goals": {
            "pickup_p95_s": tuning.goals.pickup_p95_s,
            "pickup_max_s": tuning.goals.pickup_max_s,
            "drain_after_burst_s": tuning.goals.drain_after_burst_s,
        },
        "best": None
        if best is None
        else {"settings": best.candidate.toml(), **best.result.to_json(price_usd)},
        "infeasible": tuning.infeasible,
        "baselines": [result.to_json(price_usd) for result in tuning.baselines],
        "curve": [
            {"settings": t.candidate.name, **t.result.to_json(price_usd)} for t in tuning.curve()
        ],
        "trials": len(tuning.trials),
    }
