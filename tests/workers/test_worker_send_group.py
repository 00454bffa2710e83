"""``Worker.send_group`` sends a group where ``cloudqueue run`` of that worker reads (the store its
settings name), every item checked first; the completion worker gets one ``GroupDone``; an
``on_complete`` that is no worker class is refused in one line, with nothing sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic import BaseModel

from cloudqueue.listener import GroupDone
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.membership import membership_of
from cloudqueue.listener.workflows.group_ledger import GroupError
from cloudqueue.workers import (
    QueueWorker,
    WorkerHost,
    close_senders,
    load_settings,
    open_storage_from_settings,
)
from tests.support.runs import run_environment


class Invoice(BaseModel):
    number: int


class Bill(QueueWorker[Invoice]):
    queue_name = "group-invoices"

    def handle(self, item: Invoice) -> None:
        pass


class Billed(QueueWorker[GroupDone]):
    queue_name = "group-billed"

    def handle(self, item: GroupDone) -> None:
        pass


@pytest.fixture(autouse=True)
def sqlite_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process sends to a SQLite file, as ``cloudqueue run`` with the same environment."""
    env = run_environment(f"sqlite:///{tmp_path / 'queues.db'}", tmp_path)
    close_senders()
    for name, value in env.items():
        if name.startswith("CLOUDQUEUE_"):
            monkeypatch.setenv(name, value)
    yield
    close_senders()


def test_a_worker_sends_a_group_that_its_host_completes_once() -> None:
    """Three invoices (one a dict) in messages carrying their membership; a host of both workers
    settles them and the group completes with 3 handled."""
    group = Bill.send_group(
        [Invoice(number=1), {"number": 2}, Invoice(number=3)], on_complete=Billed
    )
    storage = open_storage_from_settings()
    messages = storage.peek_messages(Bill.queue_name, max_messages=10)
    members = [membership_of(parse_envelope(message.content)) for message in messages]
    assert sorted(m.member_id for m in members if m is not None) == ["0", "1", "2"]
    host = WorkerHost([Bill, Billed], load_settings(), storage=storage)
    host.start()
    try:
        status = group.wait(60)
    finally:
        host.stop()
    assert (status.total, status.handled, status.poisoned) == (3, 3, 0)
    assert status.on_complete == Billed.queue_name


@pytest.mark.parametrize(
    "on_complete", ["group-billed", Invoice, None], ids=["queue-name", "class", "none"]
)
def test_an_on_complete_that_is_no_worker_is_refused_with_nothing_sent(
    on_complete: Any,
) -> None:
    """The error says what ``on_complete`` must be; no queue was even made."""
    with pytest.raises(GroupError, match="on_complete must be the worker class") as refused:
        Bill.send_group([Invoice(number=1)], on_complete=on_complete)
    assert "\n" not in str(refused.value)
    assert Bill.queue_name not in open_storage_from_settings().list_queues()


def test_an_invalid_item_is_refused_before_anything_is_sent() -> None:
    """One bad item among good ones: pydantic names the field, and no member is sent."""
    with pytest.raises(pydantic.ValidationError, match="number"):
        Bill.send_group([Invoice(number=1), {"number": "x"}], on_complete=Billed)
    assert Bill.queue_name not in open_storage_from_settings().list_queues()
