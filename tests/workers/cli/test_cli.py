"""The cloudqueue command line, driven for real in subprocesses on the embedded store."""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cloudqueue
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import start_cloudqueue
from tests.support.written_lines import log_events

INVOICE = (
    '{"invoice_id": %d, "customer": "acme",'
    ' "lines": [{"sku": "a", "quantity": 2, "unit_price_cents": 150}]}'
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose storage is a fresh SQLite file."""
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
    }


@pytest.fixture
def worker(env: dict[str, str], tmp_path: Path) -> Iterator[RunningProcess]:
    """`cloudqueue run examples.billing:InvoiceWorker` as a background process, always ended."""
    log_path = tmp_path / "worker.log"
    process = start_cloudqueue(
        ["run", "examples.billing:InvoiceWorker"], env=env, log_path=log_path
    )
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(10)


def test_enqueue_then_status_counts_the_items(env: dict[str, str]) -> None:
    """Items given as arguments or on stdin land on the queue; status reports the depth as JSON."""
    assert cloudqueue("enqueue", "invoices", "a", "b", env=env).returncode == 0
    assert cloudqueue("enqueue", "invoices", env=env, stdin="c\nd\n\ne\n").returncode == 0
    result = cloudqueue("status", "invoices", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report.pop("oldest_age_s") >= 0
    assert report == {
        "queue": "invoices",
        "depth": 5,
        "poison_depth": 0,
        "visible": 5,
        "visible_exact": True,
        "in_flight": 0,
        "delayed": 0,
        "workers": [],
        "totals": {
            "threads": 0,
            "storage_transactions_per_hour": None,
            "projected_cost_per_month_usd": None,
        },
    }


def test_a_running_worker_drains_the_queue_and_exits_0_on_sigterm(
    env: dict[str, str], worker: RunningProcess, tmp_path: Path
) -> None:
    """cloudqueue run handles what is enqueued, and SIGTERM ends it cleanly with exit code 0."""
    items = "\n".join(INVOICE % number for number in range(20))
    assert cloudqueue("enqueue", "invoices", env=env, stdin=items).returncode == 0
    log_path = tmp_path / "worker.log"
    eventually(
        lambda: sum(e["event"] == "invoice_billed" for e in log_events(log_path)) == 20,
        timeout_s=30,
    )
    live = json.loads(cloudqueue("status", "invoices", "--json", env=env).stdout)["workers"]
    assert [w["pid"] for w in live] == [worker.pid]  # status shows the running worker
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    billed = log_events(log_path, "invoice_billed")
    assert {e["total_cents"] for e in billed} == {360}
    assert all("message_id" in e and e["queue"] == "invoices" for e in billed)
    status = json.loads(cloudqueue("status", "invoices", "--json", env=env).stdout)
    assert (status["depth"], status["workers"]) == (0, [])  # gone with its process


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("CLOUDQUEUE_LISTENER__DEQUEUE_BATCH_SIZE", "33", "listener.dequeue_batch_size"),
        ("CLOUDQUEUE_LISTENER__DEQUEUE_BATCH_SIZE", "0", "listener.dequeue_batch_size"),
        ("CLOUDQUEUE_BACKOFF__MAX_IDLE_S", "-1", "backoff.max_idle_s"),
        ("CLOUDQUEUE_LISTENER__RETRY_DELAY_S", "-0.5", "listener.retry_delay_s"),
        ("CLOUDQUEUE_SCALING__MIN_THREADS", "99", "scaling"),
        ("CLOUDQUEUE_SCALING__RULE", "fastest", "scaling.rule"),
        ("CLOUDQUEUE_SCALING__RULE", "tests.nowhere:rule", "scaling.rule"),
        ("CLOUDQUEUE_POISON__MAX_DEQUEUE_COUNT", "0", "poison.max_dequeue_count"),
        ("CLOUDQUEUE_TRIGGERS__URL", "http://not-redis", "triggers.url"),
    ],
)
def test_invalid_settings_exit_2_naming_the_field(
    env: dict[str, str], variable: str, value: str, field: str
) -> None:
    """A bad setting stops the command before any queue is touched, with exit code 2."""
    result = cloudqueue("run", "examples.billing:InvoiceWorker", env={**env, variable: value})
    assert result.returncode == 2
    assert field in result.stderr


def test_a_malformed_connection_string_exits_2_without_echoing_it(env: dict[str, str]) -> None:
    """The error names what is missing and never prints the secret it was given."""
    # Built at run time so that no key-shaped literal sits in the repository.
    secret = "AccountKey=" + base64.b64encode(b"secret-key-that-must-not-leak").decode()
    result = cloudqueue("status", "invoices", env={**env, "CLOUDQUEUE_CONNECTION_STRING": secret})
    assert result.returncode == 2
    assert "c2VjcmV0" not in result.stderr + result.stdout


def test_an_unimportable_worker_exits_2(env: dict[str, str]) -> None:
    """`run` with a target that is not a QueueWorker fails fast with a clear message."""
    result = cloudqueue("run", "examples.nowhere:Worker", env=env)
    assert result.returncode == 2
    assert "examples.nowhere" in result.stderr


def test_batch_enqueue_packs_items_and_large_items_go_to_the_payload_folder(
    env: dict[str, str], tmp_path: Path
) -> None:
    """--batch packs 200 small items into one message; a 200 KB item is stored beside the db."""
    small = "\n".join(f'{{"n": {n}}}' for n in range(200))
    batched = cloudqueue("enqueue", "bulk", "--batch", env=env, stdin=small)
    assert "enqueued 200 item(s) on bulk in 1 message(s)" in batched.stdout
    large = secrets.token_hex(100_000)  # random: gzip cannot shrink it under 64 KiB
    single = cloudqueue("enqueue", "big", env=env, stdin=large)
    assert single.returncode == 0, single.stderr
    assert len([p for p in (tmp_path / "payloads").rglob("*") if p.is_file()]) == 1
