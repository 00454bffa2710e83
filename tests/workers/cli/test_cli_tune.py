"""`cloudqueue tune`, `run --record` and `replay` on the command line."""

from __future__ import annotations

import json
import signal
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.listener.simulation.profile import ProfileRecorder, read_profile
from cloudqueue.workers.cli import cli
from cloudqueue.workers.settings import CloudQueueSettings
from tests.support.cli import ok
from tests.support.polling import eventually
from tests.support.runs import Runs, run_environment


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def short_day(tmp_path: Path) -> Path:
    """A CSV day profile: 120 messages in the first two minutes, then nothing."""
    path = tmp_path / "day.csv"
    path.write_text("minute,count\n0,60\n1,60\n")
    return path


def test_tune_prints_the_cheapest_settings_as_a_block_cloudqueue_reads(short_day: Path) -> None:
    """The answer is a TOML block that validates as settings, then the cost comparison with
    today's defaults and the peers', then the trade-off curve."""
    code, output, _ = invoke("tune", str(short_day), "--pickup-p95", "2s", "--no-push")
    assert code == 0, output
    block = output.split("Cheapest settings that meet the goals", 1)[1].split("\n\n", 2)[1]
    settings = CloudQueueSettings(**tomllib.loads(block))
    assert settings.scaling.min_threads == 1
    for peer in ("cloudqueue defaults", "Functions queue trigger", "fixed pool of 8 threads"):
        assert peer in output
    assert "Trade-off" in output


def test_tune_json_names_the_goals_and_the_best_settings(short_day: Path) -> None:
    """--json: the goals, the best settings with their figures, the peers and the curve."""
    code, output, _ = invoke("tune", str(short_day), "--pickup-max", "10s", "--json")
    assert code == 0, output
    report = json.loads(output)
    assert report["goals"]["pickup_max_s"] == 10.0
    assert report["best"]["latency_max_s"] <= 10.0
    assert report["infeasible"] is None
    assert len(report["baselines"]) == 4
    assert report["curve"]


@pytest.fixture
def short_recording(tmp_path: Path) -> Path:
    """A recorded profile of two busy minutes and nothing else: a whole search over it is cheap,
    where a day profile's idle hours make each trial of a short back-off cost seconds."""
    path = tmp_path / "seen.jsonl"
    start = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    recorder = ProfileRecorder(path, clock=start.timestamp)
    for second in range(0, 120, 2):
        recorder.arrived(start + timedelta(seconds=second))
    recorder.close()
    return path


def test_an_infeasible_goal_is_one_line_and_exit_1(short_recording: Path) -> None:
    """No setting picks up within a millisecond: one clear line naming the goal."""
    code, _, errors = invoke("tune", str(short_recording), "--pickup-p95", "1ms", "--no-push")
    assert code == 1
    assert errors.strip().splitlines() == [
        next(line for line in errors.splitlines() if line.startswith("Error: pickup p95"))
    ]
    assert "closest reachable" in errors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give at least one goal"),
        (("--pickup-p95", "soon"), "is not a positive duration"),
        (("--pickup-p95", "0s"), "is not a positive duration"),
    ],
)
def test_bad_goals_are_refused_with_exit_2(
    short_day: Path, args: tuple[str, ...], message: str
) -> None:
    code, output, errors = invoke("tune", str(short_day), *args)
    assert code == 2
    assert message in output + errors


def test_the_trade_off_curve_can_be_drawn(short_day: Path, tmp_path: Path) -> None:
    """With the plot extra, --plot writes a PNG of cost against p95 pickup."""
    chart = tmp_path / "curve.png"
    code, output, _ = invoke("tune", str(short_day), "--pickup-p95", "2s", "--plot", str(chart))
    assert code == 0, output
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_record_writes_the_workload_it_sees(tmp_path: Path) -> None:
    """A real worker with --record: every item arrives once in the profile and is handled."""
    env = run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path)
    profile = tmp_path / "seen.jsonl"
    queue = env["TEST_QUEUE"]
    ok("queues", "create", queue, env=env)
    ok("enqueue", queue, *[json.dumps({"n": n}) for n in range(5)], env=env)
    runs = Runs(tmp_path)
    try:
        run = runs.start(env, "--record", str(profile))
        eventually(lambda: len(run.handled()) == 5, timeout_s=60)
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(timeout=60) == 0
    finally:
        runs.kill_all()
    recorded = read_profile(profile)
    assert (recorded.messages, recorded.handled, recorded.failed) == (5, 5, 0)


def test_replay_runs_a_profile_on_a_real_queue_beside_the_prediction(tmp_path: Path) -> None:
    """A burst replayed at 60x on the embedded store: every message handled, and the measured
    and predicted transactions and pickup side by side."""
    profile = tmp_path / "burst.csv"
    profile.write_text("minute,count\n0,20\n")
    env = run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path)
    output = ok(
        "replay",
        str(profile),
        "replay-test",
        "--minutes",
        "1",
        "--speedup",
        "60",
        "--json",
        env=env,
    )
    report = json.loads(output)
    assert report["handled"] == report["messages"] == 20
    assert report["measured_transactions"]["delete_message"] == 20
    assert report["predicted_transactions"]["delete_message"] == 20
    assert report["measured_pickup_p95_s"] is not None
    assert report["predicted_pickup_p95_s"] is not None
    assert report["request_latency_s"] > 0


def test_a_plot_without_the_plot_extra_is_refused_before_tuning(
    short_day: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, --plot exits 2 naming the extra, and no tuning has been spent."""
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # an import of it fails

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("tuned before the extra was checked")

    monkeypatch.setattr("cloudqueue.workers.cli.tune.tune", never)
    code, output, errors = invoke(
        "tune", str(short_day), "--pickup-p95", "2s", "--plot", str(tmp_path / "c.png")
    )
    assert code == 2
    assert "pip install 'cloudqueue[plot]'" in output + errors


def test_the_chosen_settings_can_be_saved_for_config(short_day: Path, tmp_path: Path) -> None:
    """--save-settings writes the printed block to a TOML file that validates as settings."""
    saved = tmp_path / "tuned.toml"
    code, output, _ = invoke(
        "tune", str(short_day), "--pickup-p95", "2s", "--no-push", "--save-settings", str(saved)
    )
    assert code == 0, output
    text = saved.read_text()
    assert text.strip() in output
    assert CloudQueueSettings(**tomllib.loads(text)).scaling.min_threads == 1


def test_a_recorded_profile_shows_what_it_says_of_handling(tmp_path: Path) -> None:
    """Tuning a recorded profile prints its handling times, failures and sizes (it uses them)."""
    path = tmp_path / "seen.jsonl"
    start = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    recorder = ProfileRecorder(path, clock=start.timestamp)
    for second in range(30):
        recorder.arrived(start + timedelta(seconds=second))
        recorder.handled(0.03, size_bytes=300, failed=second == 0)
    recorder.close()
    code, output, _ = invoke("tune", str(path), "--pickup-p95", "2s", "--no-push")
    assert code == 0, output
    assert "recorded handling: p50 32 ms, p95 32 ms; failures 3.3% of 30 deliveries" in output
    assert "message size p95 <= 1,024 bytes" in output
