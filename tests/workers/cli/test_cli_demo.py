"""`cloudqueue demo`: the quick-start demo from the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.workers.cli import cli
from tests.support.cli import Terminal, cloudqueue, plain
from tests.support.paths import REPO_ROOT


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
        [sys.executable, "-m", "cloudqueue", "demo"],
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


def test_demo_without_a_terminal_keeps_every_story_event_as_json(tmp_path: Path) -> None:
    """Piped, the demo logs JSON lines: scaling, poison and the summary, per-invoice lines off."""
    result = _demo(tmp_path, {"CLOUDQUEUE_LOGGING__FORMAT": "auto"}, capture_output=True)
    assert result.returncode == 0, result.stderr[-4000:]
    events = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    names = {event["event"] for event in events}
    assert {"demo_enqueueing", "scaled_up", "message_poisoned", "scaled_down"} <= names
    assert "invoice_billed" not in names  # per-item events are debug-level in the demo
    (finished,) = [event for event in events if event["event"] == "demo_finished"]
    assert finished["transactions"] == sum(finished["transactions_by_operation"].values())
    assert finished["transactions_by_operation"]["delete_message"] >= 400
    ours, push, fixed = finished["burst_and_idle_hour"].values()
    assert push < ours < fixed  # an idle hour: no polling < backing off < polling every second


def test_demo_on_a_terminal_narrates_and_sums_up_what_the_store_holds(tmp_path: Path) -> None:
    """On a terminal: a status line, short story lines, and a summary that matches the store."""
    env = {**os.environ, **_store(tmp_path), "TERM": "xterm-256color"}
    env.pop("CLOUDQUEUE_LOGGING__FORMAT", None)
    terminal = Terminal()
    process = subprocess.Popen(
        [sys.executable, "-m", "examples.demo"],
        stdin=terminal.slave,
        stdout=terminal.slave,
        stderr=terminal.slave,
        cwd=REPO_ROOT,
        env=env,
    )
    returncode = process.wait(timeout=180)
    text = plain(terminal.output())
    assert returncode == 0, text[-4000:]
    processed = _figure(text, "Messages processed")
    poisoned = _figure(text, "Poisoned (in invoices-poison)")
    storage = open_storage(_store(tmp_path)["CLOUDQUEUE_CONNECTION_STRING"])
    try:
        assert storage.approximate_message_count("invoices") == 0
        assert storage.approximate_message_count("invoices-poison") == poisoned == 1
    finally:
        storage.close()
    assert processed + poisoned == 401  # every enqueued message: billed or poisoned
    assert "Enqueueing 400 invoices" in text
    assert "the pool grows to" in text
    assert "moved to invoices-poison (undecodable" in text
    assert "1 thread left." in text
    assert "The same burst plus an idle hour" in text
    assert "threads polling every second" in text
    assert "invoice_billed" not in text
    frames = ("━", "· threads")  # redraws of the status line, full or cut at the width
    story = [
        line for line in text.splitlines() if line.strip() and not any(f in line for f in frames)
    ]
    assert len(story) < 40, story  # a story and two small tables, not 400 log lines


def _store(tmp_path: Path) -> dict[str, str]:
    return {"CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}"}


def _demo(
    tmp_path: Path, extra_env: dict[str, str], *, capture_output: bool
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.demo"],
        cwd=REPO_ROOT,
        env={**os.environ, **_store(tmp_path), **extra_env},
        capture_output=capture_output,
        text=True,
        timeout=180,
        check=False,
    )


def _figure(text: str, label: str) -> int:
    match = re.search(re.escape(label) + r"\s*│\s*([\d,]+)", text)
    assert match is not None, f"{label!r} not in the summary:\n{text[-3000:]}"
    return int(match.group(1).replace(",", ""))


def test_demo_without_the_examples_package_says_so_and_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An installed cloudqueue without the repository cannot import the demo: a clear error."""
    monkeypatch.setitem(sys.modules, "examples.demo", None)  # makes the import fail
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 1
    assert "ships with the cloudqueue repository" in result.output
    assert "Traceback" not in result.output
