"""Metrics and probes of a real `cloudqueue run --metrics-port` on Azurite, read over HTTP."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from tests.support.azurite import AzuriteFactory, AzuriteProcess, free_port
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import Run, Runs, run_environment
from tests.support.scrape import get, port_answers, scrape, value


@dataclass
class MetricsRun:
    """A running `cloudqueue run --metrics-port PORT`: its process, log and endpoint's port."""

    run: Run
    port: int

    @property
    def process(self) -> RunningProcess:
        return self.run.process

    def events(self, name: str) -> list[dict[str, Any]]:
        return self.run.events(name)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    """Starts `cloudqueue run WORKER --metrics-port PORT ...`, always ended at teardown."""
    runs = Runs(tmp_path)

    def launch(env: dict[str, str], *args: str, delay_s: float = 0.0) -> MetricsRun:
        port = free_port()
        run = runs.start(env, "--metrics-port", str(port), *args, delay_s=delay_s)
        eventually(lambda: port_answers(port), timeout_s=20)
        return MetricsRun(run, port)

    yield launch
    runs.kill_all()


def enqueue(env: dict[str, str], texts: list[str]) -> None:
    """Put each text as a message, as a foreign producer would (no CLI start: faster)."""
    storage = AzureQueueStorage.from_connection_string(env["CLOUDQUEUE_CONNECTION_STRING"])
    try:
        storage.create_queue(env["TEST_QUEUE"])
        for text in texts:
            storage.put_message(env["TEST_QUEUE"], text)
    finally:
        storage.close()


def status(run: MetricsRun, path: str) -> int:
    return get(run.port, path)[0]


def red(run: MetricsRun, path: str, *, timeout_s: float) -> str:
    """Wait until the probe answers 503 (at most ``timeout_s``, its stated bound); its body."""

    def answer() -> str:
        code, body = get(run.port, path)
        return body if code == 503 else ""  # a red probe always gives a reason

    return eventually(answer, timeout_s=timeout_s)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_scrape_mid_burst_parses_and_the_counters_add_up_to_the_messages_sent(
    azurite_connection_string: str, tmp_path: Path, start: Any, processes: int
) -> None:
    """Scraped while a burst drains, /metrics parses; at the end processed + poisoned = sent."""
    env = run_environment(azurite_connection_string, tmp_path)
    run = start(env, "--processes", str(processes), "--set", "scaling.max_threads=1", delay_s=0.06)
    queue = env["TEST_QUEUE"]
    eventually(lambda: status(run, "/readyz") == 200, timeout_s=20)  # every child has started
    good, bad = 40, 3
    enqueue(env, [json.dumps({"n": n}) for n in range(good)] + ["not json"] * bad)

    def started_handling() -> Any:
        samples = scrape(run.port)
        return samples if value(samples, "cloudqueue_handle_seconds_count", queue=queue) else None

    mid_burst = eventually(started_handling)
    settled = value(mid_burst, "cloudqueue_messages_total", queue=queue, outcome="processed")
    assert settled < good  # the burst is still draining

    def deletes(samples: Any) -> float:
        return value(
            samples, "cloudqueue_storage_operations_total", queue=queue, operation="delete_message"
        )

    def all_settled() -> Any:
        samples = scrape(run.port)
        total = sum(
            value(samples, "cloudqueue_messages_total", queue=queue, outcome=outcome)
            for outcome in ("processed", "poisoned")
        )
        # Each sample (every second) takes the counters, then the storage calls: a scrape may
        # fall between the two, so the deletes can trail the messages by one sample.
        return samples if total == good + bad and deletes(samples) >= good + bad else None

    samples = eventually(all_settled, timeout_s=20)
    assert value(samples, "cloudqueue_messages_total", queue=queue, outcome="processed") == good
    assert value(samples, "cloudqueue_messages_total", queue=queue, outcome="poisoned") == bad
    assert value(samples, "cloudqueue_handle_seconds_count", queue=queue) == good
    assert value(samples, "cloudqueue_pickup_seconds_count", queue=queue) == good
    assert value(samples, "cloudqueue_dequeue_threads", queue=queue) >= processes

    def depth_reads_zero() -> bool:  # the empty gets after the drain say so (no transaction)
        return value(scrape(run.port), "cloudqueue_queue_depth", queue=queue, kind="visible") == 0

    eventually(depth_reads_zero, timeout_s=10)
    assert status(run, "/healthz") == 200
    assert status(run, "/readyz") == 200


def test_a_wedged_handler_turns_healthz_red_and_sigterm_turns_readyz_red_before_the_drain(
    azurite_connection_string: str, tmp_path: Path, start: Any
) -> None:
    """A handler silent past stall_after_s reds /healthz; SIGTERM reds /readyz while draining."""
    env = run_environment(azurite_connection_string, tmp_path)
    run = start(env, "--set", "observability.stall_after_s=1", delay_s=2.0)
    eventually(lambda: status(run, "/readyz") == 200)
    assert status(run, "/healthz") == 200
    enqueue(env, [json.dumps({"n": 1})])

    eventually(lambda: run.events("handling"))
    body = red(run, "/healthz", timeout_s=3)
    assert "wedged" in body
    eventually(lambda: status(run, "/healthz") == 200, timeout_s=5)  # the handler returned

    enqueue(env, [json.dumps({"n": 2})])
    eventually(lambda: [e for e in run.events("handling") if e["n"] == 2])
    run.process.send_signal(signal.SIGTERM)
    body = red(run, "/readyz", timeout_s=2)
    assert "draining" in body
    assert run.process.poll() is None  # red before the drain has finished
    assert run.process.wait(15) == 0
    assert [e["n"] for e in run.events("handled")] == [1, 2]


def test_storage_going_away_turns_readyz_red_and_leaves_healthz_green(
    azurite_factory: AzuriteFactory, tmp_path: Path, start: Any
) -> None:
    """Azurite stopped: /readyz red (storage unreachable), /healthz green; back when it returns."""
    azurite: AzuriteProcess = azurite_factory()
    env = run_environment(azurite.connection_string, tmp_path)
    run = start(
        env, "--set", "observability.stall_after_s=5", "--set", "listener.max_error_delay_s=0.5"
    )
    eventually(lambda: status(run, "/readyz") == 200)

    azurite.stop()
    body = red(run, "/readyz", timeout_s=5)
    assert "storage unreachable" in body
    assert status(run, "/healthz") == 200

    azurite.start()
    eventually(lambda: status(run, "/readyz") == 200, timeout_s=10)
    assert status(run, "/healthz") == 200
