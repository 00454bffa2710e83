"""`cloudqueue demo`: the quick-start demo from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.cli import cloudqueue
from workers.cli import cli

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_demo_drains_the_burst_and_exits_0(tmp_path: Path) -> None:
    """From a checkout, the demo bills every invoice, poisons the malformed one and exits 0.

    Poison left by an earlier run is cleared first, so the figures are this run's alone.
    """
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
    }
    assert cloudqueue("enqueue", "invoices-poison", "old poison", env=env).returncode == 0
    result = subprocess.run(
        [sys.executable, "-m", "workers", "demo"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    (finished,) = [event for event in events if event["event"] == "demo_finished"]
    assert (finished["processed"], finished["poisoned"], finished["poison_depth"]) == (400, 1, 1)


def test_demo_without_the_examples_package_says_so_and_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An installed cloudqueue without the repository cannot import the demo: a clear error."""
    monkeypatch.setitem(sys.modules, "examples.demo", None)  # makes the import fail
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 1
    assert "ships with the cloudqueue repository" in result.output
    assert "Traceback" not in result.output
