"""``cloudqueue groups show`` and ``groups list``: a group's counts, state, age and the members
it still waits for, as text and JSON, read from the queues' own SQLite file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner
from pydantic import BaseModel

from cloudqueue.listener import Publisher, SqliteQueueStorage
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.cli import cli
from tests.support.cli import cloudqueue


class Invoice(BaseModel):
    number: int


def sent_groups(database: Path) -> None:
    """Group ``billing`` of 30 members, 2 handled and 1 poisoned; group ``tiny`` of 1, done."""
    storage = SqliteQueueStorage(database)
    storage.create_queue("invoices")
    publisher = Publisher(storage, "invoices", Invoice)
    publisher.send_group(
        [Invoice(number=n) for n in range(30)], on_complete="totals", group_id="billing"
    )
    publisher.send_group([Invoice(number=0)], on_complete="totals", group_id="tiny")
    ledger = group_ledger_for(storage)
    assert ledger is not None
    ledger.settle("billing", "0", "handled")
    ledger.settle("billing", "2", "handled")
    ledger.settle("billing", "5", "poisoned")
    ledger.settle("tiny", "0", "handled")
    storage.close()


def test_show_gives_counts_and_the_first_pending_members(tmp_path: Path) -> None:
    """A running group shows its counts and its first 20 pending members, saying how many more;
    --json has the same numbers and state."""
    sent_groups(tmp_path / "q.db")
    env = {"CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}
    text = CliRunner().invoke(cli, ["groups", "show", "billing"], env=env)
    assert text.exit_code == 0, text.output
    assert "billing  running  2 handled, 1 poisoned, 27 pending of 30" in text.output
    assert "pending members: 1, 3, 4, 6, 7, 8," in text.output
    assert "(and 7 more)" in text.output
    shown = CliRunner().invoke(cli, ["groups", "show", "billing", "--json"], env=env)
    detail = json.loads(shown.stdout)
    assert {key: detail[key] for key in ("state", "total", "handled", "poisoned", "pending")} == {
        "state": "running",
        "total": 30,
        "handled": 2,
        "poisoned": 1,
        "pending": 27,
    }
    assert detail["pending_members"][:3] == ["1", "3", "4"]
    assert len(detail["pending_members"]) == 20
    assert detail["ended"] is None
    assert detail["age_s"] >= 0


def test_list_shows_the_newest_groups_and_running_only_on_request(tmp_path: Path) -> None:
    """Both groups are listed; --running leaves out the one whose members all settled, whose
    completion is owed until a worker sends it."""
    sent_groups(tmp_path / "q.db")
    env = {"CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}
    listed = json.loads(CliRunner().invoke(cli, ["groups", "list", "--json"], env=env).stdout)
    assert {row["group"]: row["state"] for row in listed} == {
        "billing": "running",
        "tiny": "completing",
    }
    running = CliRunner().invoke(cli, ["groups", "list", "--running"], env=env)
    assert running.exit_code == 0
    assert "billing" in running.output
    assert "tiny" not in running.output


def test_an_unknown_group_is_exit_1_naming_it_in_a_real_process(tmp_path: Path) -> None:
    """`groups show` of an id nobody sent exits 1 with one line naming the id; an empty store
    lists no groups."""
    env = {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}
    shown = cloudqueue("groups", "show", "nosuch", env=env)
    assert shown.returncode == 1
    assert shown.stderr.strip().splitlines()[-1] == "Error: no group 'nosuch' in this store"
    empty = CliRunner().invoke(cli, ["groups", "list"], env=env)
    assert empty.output.strip() == "no groups"
