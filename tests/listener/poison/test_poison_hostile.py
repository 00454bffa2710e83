"""The poison tools against hostile poison queues: deep, forged and escape-laden records, and ids.

Anyone who may add messages to ``<queue>-poison`` can write anything there, so ``cloudqueue
poison`` and the dashboard must show every stored message for what it is (escaped), requeue what
they can and leave the rest visible. The commands run in-process (click's runner) on a SQLite file;
the dashboard through its app.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from starlette.exceptions import StarletteDeprecationWarning

from cloudqueue.listener import (
    InMemoryQueueStorage,
    PoisonRecord,
    QueueNotFoundError,
    poison_queue_name,
)
from cloudqueue.listener.poison.move import poison_message
from cloudqueue.listener.poison.requeue import requeue_poisoned
from cloudqueue.listener.scaling.scaler import ScalingPolicy
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.cli import cli
from cloudqueue.workers.dashboard.access import Access
from cloudqueue.workers.dashboard.app import create_app
from cloudqueue.workers.views.sampler import Sampler

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

QUEUE = "invoices"
POISON = poison_queue_name(QUEUE)
ESC = "\x1b"
DEEP_ENVELOPE = '{"$cloudqueue": ' + "[" * 30_000 + "]" * 30_000 + "}"
DEEP_BASE64 = base64.b64encode(("[" * 20_000 + "]" * 20_000).encode()).decode()
JSON_POST = {"host": "127.0.0.1:8787", "content-type": "application/json"}


def record_text(original_id: str, **changes: Any) -> str:
    """A poison record as a listener writes it, with some fields changed (or removed: None)."""
    fields: dict[str, Any] = {
        "queue": QUEUE,
        "original_id": original_id,
        "dequeue_count": 1,
        "inserted_on": "2026-01-01T00:00:00+00:00",
        "poisoned_on": "2026-01-01T00:00:01+00:00",
        "reason": "permanent_failure",
        "error": "ValueError: bad invoice",
        "first_error": "ValueError: bad invoice",
        "worker": "host:1",
        "content": "aXRlbQ==",
    }
    fields.update(changes)
    return json.dumps({key: value for key, value in fields.items() if value is not None})


FORGED = {
    "error is a number": record_text("f0000001-0000", error=5),
    "fields missing": record_text("f0000002-0000", reason=None, content=None),
    "dequeue count a string": record_text("f0000003-0000", dequeue_count="many"),
    "not JSON": '{"original_id": "f0000004", "reason": ',
    "not an object": "[1, 2, 3]",
    "deeply nested": '{"original_id": ' + "[" * 30_000 + "]" * 30_000 + "}",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteQueueStorage]:
    """The SQLite file the commands use, with the queue and its poison queue."""
    with closing(SqliteQueueStorage(tmp_path / "q.db")) as storage:
        storage.create_queue(QUEUE)
        storage.create_queue(POISON)
        yield storage


@pytest.fixture
def run(tmp_path: Path, store: SqliteQueueStorage) -> Any:
    """Run ``cloudqueue ARGS`` in-process on the test's SQLite file."""
    env = {
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
    }

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

    return invoke


def poison(storage: QueueStorage, content: str, *, error: str = "boom") -> str:
    """Send ``content`` and poison it as the listener would; return its original id."""
    sent = storage.put_message(QUEUE, content)
    (taken,) = storage.get_messages(QUEUE, max_messages=1, visibility_timeout_s=30)
    now = datetime.now(UTC)
    poison_message(storage, QUEUE, taken, reason="undecodable", error=error, now=now)
    return sent.id


def visible_poison(storage: QueueStorage) -> list[str]:
    return [m.content for m in storage.peek_messages(POISON, max_messages=32)]


def listed(run: Any) -> list[dict[str, Any]]:
    """The rows of `poison list --json`."""
    rows: list[dict[str, Any]] = json.loads(run("poison", "list", QUEUE, "--json").stdout)
    return rows


# Finding 2: a deeply nested message


def test_a_deeply_nested_message_is_shown_and_listed(run: Any, store: SqliteQueueStorage) -> None:
    """`show` sums up deep content without a traceback; `list` lists it."""
    envelope_id = poison(store, DEEP_ENVELOPE)
    base64_id = poison(store, DEEP_BASE64)
    for wanted in (envelope_id, base64_id):
        result = run("poison", "show", QUEUE, wanted)
        assert result.exit_code == 0, result.output
        assert f"original id:    {wanted}" in result.output
        as_json = run("poison", "show", QUEUE, wanted, "--json")
        assert json.loads(as_json.stdout)["original_id"] == wanted
    assert {row["original_id"] for row in listed(run)} == {
        envelope_id,
        base64_id,
    }


def test_requeue_moves_a_deeply_nested_message_back_as_it_was(
    run: Any, store: SqliteQueueStorage
) -> None:
    """Requeue all and requeue by id put deep content back unchanged, no traceback."""
    wanted = poison(store, DEEP_ENVELOPE)
    poison(store, DEEP_BASE64)
    poison(store, "aXRlbQ==")
    by_id = run("poison", "requeue", QUEUE, "--id", wanted, "--yes")
    assert by_id.exit_code == 0, by_id.output
    everything = run("poison", "requeue", QUEUE, "--yes")
    assert everything.exit_code == 0, everything.output
    assert everything.stdout.startswith("requeued 2 message(s)")
    back = [m.content for m in store.peek_messages(QUEUE, max_messages=32)]
    assert sorted(back) == sorted([DEEP_ENVELOPE, DEEP_BASE64, "aXRlbQ=="])
    assert visible_poison(store) == []


def test_requeue_leaves_what_it_cannot_move_visible_and_moves_the_rest(
    run: Any, store: SqliteQueueStorage
) -> None:
    """Forged records are skipped with a line naming them; they stay visible, not hidden 60 s."""
    good = poison(store, "aXRlbQ==")
    for text in FORGED.values():
        store.put_message(POISON, text)
    result = run("poison", "requeue", QUEUE, "--yes")
    assert result.exit_code == 0, result.output
    assert [m.content for m in store.peek_messages(QUEUE, max_messages=32)] != []
    assert "skipped 3 unreadable poison record(s)" in result.stderr
    skipped = ["error is a number", "fields missing", "dequeue count a string"]
    assert sorted(visible_poison(store)) == sorted(FORGED[kind] for kind in skipped)
    assert good not in {row["original_id"] for row in listed(run)}


def test_a_requeue_that_storage_stops_leaves_every_poison_message_visible() -> None:
    """The main queue gone mid-way: the error is raised and nothing taken stays hidden 60 s."""
    memory = InMemoryQueueStorage()
    memory.create_queue(QUEUE)
    memory.create_queue(POISON)
    for number in range(3):
        poison(memory, f"item {number}")
    memory.delete_queue(QUEUE)
    with pytest.raises(QueueNotFoundError):
        requeue_poisoned(memory, QUEUE)
    assert len(visible_poison(memory)) == 3


# Finding 12: forged records


@pytest.mark.parametrize("kind", list(FORGED))
def test_a_forged_record_is_listed_and_shown_as_unreadable(
    run: Any, store: SqliteQueueStorage, kind: str
) -> None:
    """`list` (text and JSON) and `show` survive it and say what it is, with its escaped start."""
    good = poison(store, "aXRlbQ==")
    forged = store.put_message(POISON, FORGED[kind])
    listing = run("poison", "list", QUEUE)
    assert listing.exit_code == 0, listing.output
    assert good in listing.stdout
    assert forged.id in listing.stdout
    rows = {row["poison_id"]: row for row in listed(run)}
    assert rows[forged.id]["readable"] is False
    assert rows[forged.id]["problem"]
    shown = run("poison", "show", QUEUE, forged.id)
    assert shown.exit_code == 0, shown.output
    assert "not a readable poison record" in shown.stdout


def test_an_invalid_utf8_poison_row_is_listed(
    run: Any, store: SqliteQueueStorage, tmp_path: Path
) -> None:
    """A row written around the API with bytes that are not UTF-8 is listed, not a crash."""
    forged = store.put_message(POISON, "placeholder")
    with closing(__import__("sqlite3").connect(tmp_path / "q.db")) as db:
        db.execute(
            "UPDATE messages SET content = CAST(X'7B22FF22' AS TEXT) WHERE id = ?", (forged.id,)
        )
        db.commit()
    listing = run("poison", "list", QUEUE, "--json")
    assert listing.exit_code == 0, listing.output
    assert [row["poison_id"] for row in json.loads(listing.stdout)] == [forged.id]


def test_the_dashboard_samples_and_requeues_past_forged_records(
    store: SqliteQueueStorage, tmp_path: Path
) -> None:
    """Every forged kind: the state still shows the queue; Requeue all answers 200, not 500."""
    poison(store, "aXRlbQ==")
    poison(store, DEEP_ENVELOPE)
    for text in FORGED.values():
        store.put_message(POISON, text)
    sampler = Sampler(
        store, queues=[QUEUE], state_dir=tmp_path / "run", where="here", policy=ScalingPolicy()
    )
    sampler.sample()
    client = TestClient(
        create_app(sampler, Access(token=None, loopback_only=True), run_sampler=False)
    )
    (queue,) = client.get("/api/state", headers=JSON_POST).json()["queues"]
    assert "error" not in queue
    assert len(queue["poison"]["latest"]) == 2 + len(FORGED)
    answer = client.post(f"/api/queues/{QUEUE}/poison/requeue", json={}, headers=JSON_POST)
    assert answer.status_code == 200, answer.text
    assert answer.json()["moved"] == 2 + 3
    assert len(answer.json()["skipped"]) == 3
    assert len(visible_poison(store)) == 3


# Finding 4: escape sequences


HOSTILE = f"{ESC}]0;owned{chr(7)}{ESC}[2J\u009b31m\u202eevil"


def test_escape_sequences_never_reach_the_terminal_raw(run: Any, store: SqliteQueueStorage) -> None:
    """Content, errors and record fields print escaped in `list` and `show`, text and JSON."""
    wanted = poison(
        store,
        base64.b64encode(json.dumps({"note": HOSTILE}).encode()).decode(),
        error=f"ValidationError: loc ('{HOSTILE}',)\nline two {HOSTILE}",
    )
    poison(store, f"raw {HOSTILE}")
    store.put_message(POISON, record_text("f1", reason=HOSTILE, worker=HOSTILE))
    store.put_message(POISON, record_text("f2", error=7, worker=HOSTILE))
    outputs = [
        run("poison", "list", QUEUE),
        run("poison", "list", QUEUE, "--json"),
        run("poison", "show", QUEUE, wanted),
        run("poison", "show", QUEUE, wanted, "--json"),
        run("poison", "show", QUEUE, "f1"),
    ]
    for result in outputs:
        assert result.exit_code == 0, result.output
        for raw in (ESC, chr(7), "\u009b", "\u202e"):
            assert raw not in result.output
    assert "\\x1b]0;owned" in outputs[0].stdout
    assert "line two \\x1b]0;owned" in outputs[2].stdout
    assert json.loads(outputs[3].stdout)["content_view"]["value"] == {"note": HOSTILE}


# Issue 27: ids and JSON


def test_show_and_requeue_accept_a_unique_prefix_of_the_id(
    run: Any, store: SqliteQueueStorage
) -> None:
    """Eight characters, as the demo prints, find the message; so does its poison id's prefix."""
    wanted = poison(store, "aXRlbQ==")
    poison(store, "b3RoZXI=")
    shown = run("poison", "show", QUEUE, wanted[:8])
    assert shown.exit_code == 0, shown.output
    assert f"original id:    {wanted}" in shown.stdout
    moved = run("poison", "requeue", QUEUE, "--id", wanted[:8], "--yes")
    assert moved.exit_code == 0, moved.output
    assert f"requeued message {wanted}" in moved.stdout
    assert [m.content for m in store.peek_messages(QUEUE, max_messages=32)] == ["aXRlbQ=="]


@pytest.mark.parametrize("command", [("show",), ("requeue", "--yes", "--id")])
def test_an_ambiguous_prefix_lists_the_candidates_and_exits_2(
    run: Any, store: SqliteQueueStorage, command: tuple[str, ...]
) -> None:
    """A prefix two ids start with names both and changes nothing."""
    store.put_message(POISON, record_text("abcd1111-0000"))
    store.put_message(POISON, record_text("abcd2222-0000", reason="undecodable"))
    name, *flags = command
    result = run("poison", name, QUEUE, *flags, "abcd")
    assert result.exit_code == 2, result.output
    assert "abcd1111-0000" in result.stderr
    assert "abcd2222-0000" in result.stderr
    assert "ambiguous" in result.stderr
    assert len(visible_poison(store)) == 2


def test_a_prefix_shorter_than_four_characters_is_refused(
    run: Any, store: SqliteQueueStorage
) -> None:
    """As git: three characters are too few to name a message safely, even a unique one."""
    wanted = poison(store, "aXRlbQ==")
    result = run("poison", "requeue", QUEUE, "--id", wanted[:3], "--yes")
    assert result.exit_code == 2
    assert "at least 4 characters" in result.stderr
    assert visible_poison(store) != []


def test_list_json_never_shortens_the_error(run: Any, store: SqliteQueueStorage) -> None:
    """The text table may cut the error's first line; the JSON has all of it."""
    error = "validation error for Invoice\n" + "amount: " + "x" * 200
    wanted = poison(store, "aXRlbQ==", error=error)
    (row,) = listed(run)
    assert (row["original_id"], row["error"]) == (wanted, error)
    assert "x" * 200 not in run("poison", "list", QUEUE).stdout


def test_a_record_read_back_is_the_record_written() -> None:
    """from_json keeps accepting what to_json writes (first_error optional, as old records)."""
    text = record_text("id-1", first_error=None)
    record = PoisonRecord.from_json(text)
    assert (record.original_id, record.first_error) == ("id-1", "ValueError: bad invoice")
