"""`cloudqueue simulate`: the cost comparison on the command line, and its chart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cloudqueue.listener.simulation import bursts, cloudqueue_defaults, cloudqueue_push, simulate
from cloudqueue.listener.simulation.plot import SERIES, comparison_figure, save_plot
from cloudqueue.workers.cli import cli


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_the_design_table_preset_prints_the_seeds_figures() -> None:
    """79,200 a day and $2.38 a month for one thread, $475.20 for 200, then cloudqueue's rows."""
    code, output = invoke("simulate", "--preset", "design-table")
    assert code == 0, output
    rows = {line.split("  ")[0].strip(): line for line in output.splitlines()}
    assert "79,200" in rows["naive 1 thr @ 1 s"]
    assert "$2.38" in rows["naive 1 thr @ 1 s"]
    assert "$475.20" in rows["naive 200 thr @ 1 s"]
    assert {"cloudqueue defaults", "cloudqueue + push"} <= set(rows)
    assert "$457.20" in output  # the design's digit slip, named


def test_json_output_prices_at_the_given_rate() -> None:
    """--json gives each policy's figures; --price scales the cost and nothing else."""
    args = ("simulate", "--burst-size", "50", "--burst-period", "10m", "--duration", "30m")
    _, at_seed_price = invoke(*args, "--policy", "naive", "--json")
    _, at_double = invoke(*args, "--policy", "naive", "--json", "--price", "0.02")
    (seed,), (double,) = json.loads(at_seed_price), json.loads(at_double)
    assert seed["handled"] == 150
    assert seed["total_transactions"] == double["total_transactions"] > 0
    assert double["cost_per_month_usd"] == pytest.approx(2 * seed["cost_per_month_usd"])
    assert set(seed["transactions"]) == {"get_messages", "delete_message"}


def test_a_day_profile_runs_from_a_csv(tmp_path: Path) -> None:
    """--profile reads minute,count rows: a whole day with the messages where the rows say."""
    profile = tmp_path / "day.csv"
    profile.write_text("minute,count\n10,30\n700,20\n", encoding="utf-8")
    code, output = invoke("simulate", "--profile", str(profile), "--policy", "naive", "--json")
    assert code == 0, output
    (naive,) = json.loads(output)
    assert naive["handled"] == 50
    assert naive["transactions_per_day"] == naive["total_transactions"]  # the profile is a day


def test_all_five_policies_are_compared_by_default() -> None:
    """Without --policy, the five standard policies run side by side."""
    code, output = invoke("simulate", "--rate", "1", "--duration", "5m", "--json")
    assert code == 0, output
    names = [result["policy"] for result in json.loads(output)]
    assert names == [
        "naive 1 thr @ 1 s",
        "fixed pool 4 thr",
        "cloudqueue defaults",
        "cloudqueue + push",
        "functions-like",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rate", "1", "--burst-size", "5"), "choose one workload"),
        ((), "give a workload"),
        (("--burst-period", "5 minutes", "--burst-size", "5"), "not a duration"),
    ],
)
def test_unclear_workloads_are_refused(args: tuple[str, ...], message: str) -> None:
    """Two workloads at once, none at all, or a bad duration: exit 2 with a clear line."""
    code, output = invoke("simulate", *args)
    assert code == 2
    assert message in output


def test_the_chart_has_depth_threads_and_transactions_for_each_policy(tmp_path: Path) -> None:
    """Three panels, one line per policy in each, written as a PNG with real content."""
    results = simulate(bursts(100, 600.0, 1_800.0), [cloudqueue_defaults(), cloudqueue_push()])
    figure = comparison_figure(results)
    axes = figure.get_axes()
    assert [axis.get_ylabel() for axis in axes] == list(SERIES)
    for axis in axes:
        assert [line.get_label() for line in axis.get_lines()] == [r.policy for r in results]
    legend = axes[0].get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == [r.policy for r in results]
    transactions = [float(y) for y in np.asarray(axes[2].get_lines()[0].get_ydata())]
    assert transactions == sorted(transactions)  # cumulative: never falls
    assert transactions[-1] == results[0].total_transactions
    path = tmp_path / "chart.png"
    save_plot(results, path)
    from matplotlib.image import imread

    pixels = imread(path)
    assert pixels.shape[:2] == (800, 1000)  # 10 x 8 inches at 100 dpi
    blue = (abs(pixels[..., 0] - 0x1F / 255) < 0.02) & (abs(pixels[..., 2] - 0xB4 / 255) < 0.02)
    assert blue.sum() > 500  # the first policy's lines are drawn (matplotlib's first colour)


def test_plot_option_writes_the_png(tmp_path: Path) -> None:
    """--plot writes the chart beside the table."""
    path = tmp_path / "out.png"
    code, output = invoke(
        "simulate",
        "--rate",
        "0.5",
        "--duration",
        "10m",
        "--policy",
        "defaults",
        "--plot",
        str(path),
    )
    assert code == 0, output
    assert path.read_bytes().startswith(b"\x89PNG")
    assert f"chart written to {path}" in output


def test_the_table_says_its_counts_are_run_totals_and_its_rates_are_scaled() -> None:
    """A caption under the table tells run totals (get, delete, count) from per-day figures."""
    code, output = invoke("simulate", "--rate", "2", "--duration", "1h", "--policy", "defaults")
    assert code == 0, output
    assert "get, delete, count: totals for the run" in output
    assert "txn/day, $/day, $/month: scaled to a day" in output


def test_when_push_costs_more_than_polling_one_line_says_why() -> None:
    """Steady traffic: every put announces work, so push costs more, and the output says why."""
    args = ("simulate", "--duration", "1h", "--policy", "defaults", "--policy", "push")
    code, steady = invoke(*args, "--rate", "2")
    assert code == 0, steady
    (why,) = [line for line in steady.splitlines() if line.startswith("push costs more")]
    assert "every put announces work" in why
    assert "idles or work comes in bursts" in why
    code, bursty = invoke(*args, "--burst-size", "100", "--burst-period", "30m")
    assert code == 0, bursty
    assert "push costs more" not in bursty  # push is the cheaper one there
