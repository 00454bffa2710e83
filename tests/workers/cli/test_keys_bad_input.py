"""Bad settings of the key controls, and bad key methods, through the real command line: exit
code 2 and one line naming the field, before any queue is touched. An Azure connection string
without a blob endpoint has no key ledger: idempotency is refused, the cancel check left off."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import cast

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.host.host_keys import HostKeyLedger
from cloudqueue.workers.settings import CloudQueueSettings
from tests.support.cli import cloudqueue

WORKERS = """
from cloudqueue.workers import QueueWorker


class W(QueueWorker[dict]):
    queue_name = "work"

    def handle(self, item: dict) -> None:
        pass


class KeyWithoutItem(W):
    def key(self) -> str:
        return "k"


class ConcurrencyKeyNotAMethod(W):
    concurrency_key = "customer"


class NegativePerKey(W):
    settings = {"limits": {"per_key": -1}}
"""

QUEUE_ONLY_AZURE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey="
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"
)

ROWS: dict[str, tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]] = {
    "negative idempotency window": (
        ("run", "mywork:W"),
        {"CLOUDQUEUE_IDEMPOTENCY__WINDOW_S": "-1"},
        ("idempotency.window_s", "greater than or equal to 0"),
    ),
    "per_key not a number": (
        ("run", "mywork:W", "--set", "limits.per_key=many"),
        {},
        ("limits.per_key",),
    ),
    "limits url not redis": (
        ("run", "mywork:W"),
        {"CLOUDQUEUE_LIMITS__URL": "http://cache:6379"},
        ("limits.url", "redis://"),
    ),
    "cancel check not a boolean": (
        ("run", "mywork:W"),
        {"CLOUDQUEUE_CANCEL__CHECK": "sometimes"},
        ("cancel.check",),
    ),
    "worker class negative per_key": (
        ("run", "mywork:NegativePerKey"),
        {},
        ("settings of mywork:NegativePerKey", "limits.per_key"),
    ),
    "key without an item": (
        ("run", "mywork:KeyWithoutItem"),
        {},
        ("mywork:KeyWithoutItem", "def key(self, item)"),
    ),
    "idempotency without a blob endpoint": (
        ("run", "mywork:W"),
        {
            "CLOUDQUEUE_CONNECTION_STRING": QUEUE_ONLY_AZURE,
            "CLOUDQUEUE_IDEMPOTENCY__WINDOW_S": "60",
        },
        ("idempotency.window_s", "BlobEndpoint"),
    ),
    "concurrency_key not a method": (
        ("run", "mywork:ConcurrencyKeyNotAMethod"),
        {},
        ("mywork:ConcurrencyKeyNotAMethod", "def concurrency_key(self, item)"),
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=list(ROWS))
def test_a_bad_key_setting_exits_2_with_one_line(
    row: tuple[tuple[str, ...], dict[str, str], tuple[str, ...]], tmp_path: Path
) -> None:
    """Exit code 2, one line on stderr naming the setting or method, no traceback."""
    args, environment, names = row
    (tmp_path / "mywork.py").write_text(textwrap.dedent(WORKERS))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDQUEUE")}
    env = {
        **clean,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        **environment,
    }
    result = cloudqueue(*args, env=env, cwd=tmp_path)
    assert "Traceback" not in result.stderr
    # JSON log lines (an info that large payloads have no blob store) are not the error.
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("{")]
    assert (result.returncode, len(lines)) == (2, 1), result.stderr
    for name in names:
        assert name in lines[0]


def test_without_a_blob_endpoint_the_cancel_check_is_left_off() -> None:
    """A queue-only Azure string and default settings: no ledger, one info line, no refusal."""
    settings = CloudQueueSettings.model_validate({"connection_string": QUEUE_ONLY_AZURE})
    with capture_logs() as logs:
        keys = HostKeyLedger(settings, cast(QueueStorage, object()), None, [settings])
    assert keys.ledger is None
    assert [e["event"] for e in logs] == ["key_ledger_unavailable"]
