"""``cloudqueue simulate``: what polling costs, before deployment, with the real policies.

Builds a workload from the options (or a preset), runs each chosen policy over it in virtual
time (``cloudqueue.listener.simulation``), and prints a table, JSON, or a chart. Touches no storage.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cloudqueue.listener.simulation import (
    PRESETS,
    PolicySpec,
    ServiceModel,
    Workload,
    bursts,
    cloudqueue_defaults,
    cloudqueue_push,
    constant,
    fixed_pool,
    format_table,
    functions_like,
    idle,
    naive_poller,
    table_notes,
)
from cloudqueue.listener.simulation import simulate as run_simulation
from cloudqueue.listener.simulation.plot import require_plot_extra
from cloudqueue.listener.simulation.presets import Scenario
from cloudqueue.listener.simulation.profile import load_profile
from cloudqueue.listener.simulation.workload import DAY_S
from cloudqueue.workers.cli.common import BadInput, current_settings
from cloudqueue.workers.cli.durations import Duration
from cloudqueue.workers.cli.profile_options import (
    DEFAULT_SERVICE,
    request_latency_option,
    service_s_option,
)

PLOT_SAMPLES = 500
TABLE_SAMPLES = 1
"""Samples are only drawn: without a chart, one keeps idle fast-forwarding in long strides."""

POLICY_NAMES = ("naive", "fixed", "defaults", "push", "functions")

SEED_SLIP_NOTE = (
    "The design document prints $457.20 for 200 threads: a digit slip, 200 x $2.376 = $475.20."
)


@click.command()
@click.option("--preset", type=click.Choice(sorted(PRESETS)), help="A named scenario.")
@click.option("--rate", type=float, help="Constant arrivals, messages per second.")
@click.option("--burst-size", type=click.IntRange(min=1), help="Messages per burst.")
@click.option("--burst-period", type=Duration(), default="30m", show_default=True)
@click.option(
    "--profile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A profile recorded by `cloudqueue run --record`, or a CSV day profile with the "
    "header minute,count.",
)
@click.option(
    "--duration",
    type=Duration(),
    default="24h",
    show_default=True,
    help="Length of a rate or burst workload.",
)
@click.option(
    "--idle",
    "idle_s",
    type=Duration(),
    default="0",
    help="An idle stretch appended after the workload.",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice(POLICY_NAMES),
    help="Policies to compare (repeatable; default all five).",
)
@click.option("--naive-threads", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--naive-interval",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between the naive poller's idle polls.",
)
@click.option("--fixed-threads", type=click.IntRange(min=1), default=4, show_default=True)
@service_s_option("Handler time per message (mean, for --service-distribution exponential).")
@click.option(
    "--service-distribution",
    type=click.Choice(["fixed", "exponential"]),
    default=DEFAULT_SERVICE.distribution,
    show_default=True,
)
@request_latency_option
@click.option(
    "--failure-rate",
    type=click.FloatRange(min=0, max=1),
    default=DEFAULT_SERVICE.failure_rate,
    show_default=True,
    help="Chance a delivery fails: retried with the retry back-off, poisoned after 5.",
)
@click.option(
    "--price",
    type=click.FloatRange(min=0, min_open=True),
    help="USD per 10,000 transactions (default: cost.price_per_10k_transactions_usd).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Random seed (jitter).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG of depth, threads and transactions (needs cloudqueue[plot]).",
)
def simulate(
    *,
    preset: str | None,
    rate: float | None,
    burst_size: int | None,
    burst_period: int,
    profile: Path | None,
    duration: int,
    idle_s: int,
    policies: tuple[str, ...],
    naive_threads: int,
    naive_interval: float,
    fixed_threads: int,
    service_s: float,
    service_distribution: str,
    request_latency_s: float,
    failure_rate: float,
    price: float | None,
    seed: int,
    as_json: bool,
    plot: Path | None,
) -> None:
    """Simulate a workload under several polling policies and compare what they cost.

    Runs cloudqueue's real back-off, scaling rules and push wake-ups in virtual time against a
    simulated queue: a day takes seconds. Costs count every storage call of the consumers (the
    producer's puts cost the same under every policy and are left out).

    \b
    Examples:
      cloudqueue simulate --preset design-table
      cloudqueue simulate --burst-size 500 --burst-period 30m --duration 24h --plot day.png
      cloudqueue simulate --profile day.csv --policy defaults --policy push --json
      cloudqueue simulate --rate 2 --duration 1h --idle 22h --naive-threads 200
    """
    if plot is not None:
        require_plot_extra()
    if preset is not None:
        scenario = PRESETS[preset]()
    else:
        workload = _workload(
            rate=rate,
            burst_size=burst_size,
            burst_period_s=burst_period,
            profile=profile,
            duration_s=duration,
            idle_s=idle_s,
        )
        service = ServiceModel(
            service_s=service_s,
            distribution="exponential" if service_distribution == "exponential" else "fixed",
            request_latency_s=request_latency_s,
            failure_rate=failure_rate,
        )
        chosen = _policies(policies or POLICY_NAMES, naive_threads, naive_interval, fixed_threads)
        scenario = Scenario(workload, chosen, service)
    price_usd = (
        price if price is not None else current_settings().cost.price_per_10k_transactions_usd
    )
    results = run_simulation(
        scenario.workload,
        scenario.policies,
        service=scenario.service,
        seed=seed,
        samples=PLOT_SAMPLES if plot is not None else TABLE_SAMPLES,
    )
    if plot is not None:
        from cloudqueue.listener.simulation.plot import save_plot

        save_plot(results, plot)
    if as_json:
        click.echo(json.dumps([result.to_json(price_usd) for result in results], indent=2))
        return
    click.echo(_heading(scenario.workload, price_usd))
    click.echo(format_table(results, price_usd))
    for note in table_notes(results):
        click.echo(note)
    if preset == "design-table":
        click.echo(SEED_SLIP_NOTE)
    if plot is not None:
        click.echo(f"chart written to {plot}")


def _workload(
    *,
    rate: float | None,
    burst_size: int | None,
    burst_period_s: int,
    profile: Path | None,
    duration_s: int,
    idle_s: int,
) -> Workload:
    """The one workload the options describe, with the idle stretch after it."""
    given = [
        name
        for name, value in (("--rate", rate), ("--burst-size", burst_size), ("--profile", profile))
        if value is not None
    ]
    if len(given) > 1:
        raise BadInput(f"choose one workload, not {' and '.join(given)}")
    if rate is not None:
        workload = constant(rate, duration_s)
    elif burst_size is not None:
        workload = bursts(burst_size, burst_period_s, duration_s)
    elif profile is not None:
        workload = load_profile(profile).workload
    elif idle_s > 0:
        return idle(idle_s)
    else:
        raise BadInput("give a workload (--rate, --burst-size, --profile or --idle) or --preset")
    return workload.then(idle(idle_s)) if idle_s > 0 else workload


def _policies(
    names: tuple[str, ...], naive_threads: int, naive_interval_s: float, fixed_threads: int
) -> list[PolicySpec]:
    builders = {
        "naive": lambda: naive_poller(naive_threads, naive_interval_s),
        "fixed": lambda: fixed_pool(fixed_threads),
        "defaults": cloudqueue_defaults,
        "push": cloudqueue_push,
        "functions": functions_like,
    }
    return [builders[name]() for name in dict.fromkeys(names)]


def _heading(workload: Workload, price_per_10k_usd: float) -> str:
    hours = workload.duration_s / 3600
    days = workload.day_count
    scale = "" if abs(days * DAY_S - workload.duration_s) < 1 else f", counted as {days:g} day(s)"
    return (
        f"{len(workload.arrivals_s):,} messages over {hours:g} h{scale}; "
        f"${price_per_10k_usd:g} per 10,000 transactions, 30-day month"
    )
