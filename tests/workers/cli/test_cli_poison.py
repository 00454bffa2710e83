"""``cloudqueue poison`` driven for real in subprocesses, and the poison-queue helpers under it.

The poison messages are real: a ``CloudQueueListener`` poisons malformed, hopeless, always-failing
and batched items on a SQLite file once per module, and each test works on its own copy of that
file. One test runs the commands against Azurite; the helpers in ``cloudqueue.listener.poison`` and
the content view are also tested directly on the in-memory store. A test starts a CLI process for
the command it is about; what that command left is read through the store in the test process
(``store``, ``still_poisoned``), except where listing is itself what the test shows.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cloudqueue.listener import (
    MAX_BATCH_SIZE,
    MAX_MESSAGE_BYTES,
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    QueueNotFoundError,
    SqliteQueueStorage,
    poison_queue_name,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.poison.move import poison_message
from cloudqueue.listener.poison.queue import browse_poisoned, find_poisoned, take_poisoned
from cloudqueue.listener.poison.record import read_record
from cloudqueue.listener.poison.requeue import requeue_poisoned_by_id
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.wire.envelope import blob_envelope, inline_envelope
from cloudqueue.listener.wire.frames import pack
from cloudqueue.workers.views.poison import content_view
from tests.support.cli import Terminal, cloudqueue, help_text, ok, run_on_terminal
from tests.support.polling import eventually

QUEUE = "invoices"
POISON = poison_queue_name(QUEUE)
CODEC = MessageCodec(dict)
MALFORMED = "%%% not base64 %%%"
HOPELESS = {"invoice": 7, "customer": "zoë"}
FLAKY = {"invoice": 13, "fail": "always"}
BATCH = [{"invoice": 8}, {"invoice": 9}]
BLOB_NAME = f"invoices/{'ab' * 16}"


@dataclass(frozen=True)
class Poisoned:
    """What the listener poisoned: each kind's original message id and content."""

    ids: dict[str, str]
    contents: dict[str, str]


def poison_with_a_listener(storage: QueueStorage) -> Poisoned:
    """Send one message of each bad kind and run a listener until it has poisoned all four."""
    storage.create_queue(QUEUE)
    contents = {
        "malformed": MALFORMED,
        "hopeless": CODEC.encode(HOPELESS),
        "flaky": CODEC.encode(FLAKY),
        "batch": inline_envelope(pack([CODEC.encode(item) for item in BATCH])),
    }
    ids = {kind: storage.put_message(QUEUE, text).id for kind, text in contents.items()}
    attempts: list[int] = []

    def handle(item: dict[str, Any]) -> None:
        if item.get("fail") == "always":
            attempts.append(1)
            raise RuntimeError(f"attempt {len(attempts)}\nupstream said 503")
        raise PermanentFailure(f"invoice {item['invoice']} references a deleted customer")

    listener: CloudQueueListener[dict[str, Any]] = CloudQueueListener(
        storage,
        CloudQueueLocation(QUEUE),
        dict,
        dequeue_interval_s=0.05,
        delivery=DeliveryPolicy(max_dequeue_count=2, retry_delay_s=0.0, max_retry_delay_s=1.0),
    )
    listener.subscribe(handle)
    listener.start_listener(1)
    try:
        eventually(lambda: listener.messages_poisoned == 4, timeout_s=30)
    finally:
        listener.stop(10)
    return Poisoned(ids, contents)


@pytest.fixture(scope="module")
def poisoned_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Poisoned]:
    """A SQLite file whose poison queue a real listener filled (made once for the module)."""
    path = tmp_path_factory.mktemp("poisoned") / "q.db"
    storage = SqliteQueueStorage(path)
    try:
        return path, poison_with_a_listener(storage)
    finally:
        storage.close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose storage is the SQLite file q.db in the test's folder."""
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}",
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
    }


@pytest.fixture
def poisoned(poisoned_file: tuple[Path, Poisoned], tmp_path: Path) -> Poisoned:
    """This test's own copy of the poisoned SQLite file, as q.db in its folder."""
    source_path, made = poisoned_file
    with (
        closing(sqlite3.connect(source_path)) as source,
        closing(sqlite3.connect(tmp_path / "q.db")) as copy,
    ):
        source.backup(copy)
    return made


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteQueueStorage]:
    """The test's SQLite file opened in the test process, to look at what the CLI did."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    yield storage
    storage.close()


def poison(storage: QueueStorage, queue: str, content: str, *, error: str = "boom") -> str:
    """Send ``content`` and poison it at once, as the listener would; return its original id."""
    storage.create_queue(queue)
    storage.create_queue(poison_queue_name(queue))
    sent = storage.put_message(queue, content)
    (taken,) = storage.get_messages(queue, max_messages=1, visibility_timeout_s=30)
    now = datetime.now(UTC)
    assert poison_message(storage, queue, taken, reason="permanent_failure", error=error, now=now)
    return sent.id


def listed(env: dict[str, str], *flags: str, queue: str = QUEUE) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(ok("poison", "list", queue, "--json", *flags, env=env))
    return rows


def shown(env: dict[str, str], wanted_id: str, *, queue: str = QUEUE) -> dict[str, Any]:
    details: dict[str, Any] = json.loads(ok("poison", "show", queue, wanted_id, "--json", env=env))
    return details


def still_poisoned(storage: QueueStorage, queue: str = QUEUE) -> list[str | None]:
    """The original ids (None for an unwrapped message) of everything in the poison queue, read
    in the test process; browsing leaves every message visible."""
    records = (
        read_record(message.content) for message in browse_poisoned(storage, queue, limit=None)
    )
    return [None if record is None else record.original_id for record in records]


def waiting(storage: QueueStorage, queue: str) -> list[str]:
    """The contents of the queue's visible messages (up to 32), left in place."""
    return [message.content for message in storage.peek_messages(queue, max_messages=32)]


def fails(*args: str, env: dict[str, str], code: int) -> str:
    """Run the CLI, require exit code ``code`` and no traceback, and return its stderr."""
    result = cloudqueue(*args, env=env)
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


# List


def test_list_shows_each_poisoned_message_with_its_reason_and_first_error_line(
    env: dict[str, str], poisoned: Poisoned
) -> None:
    """The text listing has one row per message: original id, reason, dequeues, time, error."""
    lines = ok("poison", "list", QUEUE, env=env).splitlines()
    assert lines[0].split() == ["ORIGINAL", "ID", "REASON", "DEQUEUES", "POISONED", "ON", "ERROR"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(poisoned.ids.values())
    flaky = rows[poisoned.ids["flaky"]].split()
    assert flaky[1:3] == ["max_dequeue_count_exceeded", "2"]
    assert rows[poisoned.ids["flaky"]].endswith("RuntimeError: attempt 2")
    assert "undecodable" in rows[poisoned.ids["malformed"]]


def test_list_json_has_one_object_per_message(env: dict[str, str], poisoned: Poisoned) -> None:
    """`list --json` gives ids, reason, dequeue count, poisoning time and the error's first line."""
    rows = {row["original_id"]: row for row in listed(env)}
    assert set(rows) == set(poisoned.ids.values())
    hopeless = rows[poisoned.ids["hopeless"]]
    assert hopeless["reason"] == "permanent_failure"
    assert hopeless["dequeue_count"] == 1
    assert hopeless["error"] == "PermanentFailure: invoice 7 references a deleted customer"
    assert datetime.fromisoformat(hopeless["poisoned_on"]) <= datetime.now(UTC)
    assert hopeless["poison_id"] not in poisoned.ids.values()


def test_list_reads_past_the_32_a_peek_sees_and_leaves_every_message_visible(
    env: dict[str, str], store: SqliteQueueStorage
) -> None:
    """Up to 32 by default with a note on the rest; a larger --limit lists all, and twice."""
    originals = {poison(store, QUEUE, f"item {index}") for index in range(40)}
    text = ok("poison", "list", QUEUE, env=env).splitlines()
    assert len(text) == 1 + 32 + 1
    assert text[-1] == f"showing 32 of about 40 in {POISON}: use --limit for more"
    assert {row["original_id"] for row in listed(env, "--limit", "100")} == originals
    assert len(listed(env, "--limit", "35")) == 35
    assert {row["original_id"] for row in listed(env, "--limit", "100")} == originals


def test_an_empty_poison_queue_lists_as_a_sentence_or_an_empty_array(
    env: dict[str, str], store: SqliteQueueStorage
) -> None:
    """Nothing poisoned yet is not an error: a sentence naming the poison queue, or []."""
    store.create_queue(POISON)
    assert ok("poison", "list", QUEUE, env=env).startswith(f"no poisoned messages in {POISON} on ")
    assert listed(env) == []


# Show


def test_show_prints_the_whole_record_with_json_content_decoded(
    env: dict[str, str], poisoned: Poisoned
) -> None:
    """The text shows the first and last error and the base64 JSON content decoded."""
    text = ok("poison", "show", QUEUE, poisoned.ids["flaky"], env=env)
    assert f"original id:    {poisoned.ids['flaky']}" in text
    assert "reason:         max_dequeue_count_exceeded" in text
    assert "dequeue count:  2" in text
    assert "first error:    RuntimeError: attempt 1\n                upstream said 503" in text
    assert "last error:     RuntimeError: attempt 2" in text
    assert "content:        base64 of JSON, decoded:" in text
    assert '"fail": "always"' in text


def test_show_json_carries_the_record_the_raw_content_and_a_view_of_it(
    env: dict[str, str], poisoned: Poisoned
) -> None:
    """`show --json` has every record field, the content verbatim, and the decoded value."""
    details = shown(env, poisoned.ids["hopeless"])
    assert details["wrapped"] is True
    assert details["queue"] == QUEUE
    assert details["original_id"] == poisoned.ids["hopeless"]
    assert details["reason"] == "permanent_failure"
    assert details["first_error"] == details["error"]
    assert details["content"] == poisoned.contents["hopeless"]
    assert details["content_view"] == {"format": "base64-json", "value": HOPELESS}
    assert set(details) >= {"inserted_on", "poisoned_on", "worker", "dequeue_count", "poison_id"}


def test_show_sums_up_an_envelope_instead_of_dumping_it(
    env: dict[str, str], poisoned: Poisoned
) -> None:
    """A batched message shows its kind, item count and size, never its compressed data."""
    text = ok("poison", "show", QUEUE, poisoned.ids["batch"], env=env)
    assert "content:        cloudqueue envelope: batch, 2 item(s), " in text
    data = json.loads(poisoned.contents["batch"])["$cloudqueue"]["data"]
    assert data not in text
    view = shown(env, poisoned.ids["batch"])["content_view"]
    assert (view["format"], view["kind"], view["count"]) == ("envelope", "batch", 2)


def test_show_prints_undecodable_content_as_it_is(env: dict[str, str], poisoned: Poisoned) -> None:
    """Content that is not base64 JSON is shown raw, with the decoding error as the reason."""
    text = ok("poison", "show", QUEUE, poisoned.ids["malformed"], env=env)
    assert f"content:        raw text:\n                {MALFORMED}" in text
    details = shown(env, poisoned.ids["malformed"])
    assert details["reason"] == "undecodable"
    assert details["content_view"] == {"format": "raw"}


def test_an_unwrapped_message_is_listed_shown_and_requeued_by_its_poison_id(
    env: dict[str, str], store: SqliteQueueStorage
) -> None:
    """A near-64 KiB message kept unwrapped has no record: its poison id stands in for one."""
    big = "x" * (MAX_MESSAGE_BYTES - 100)
    poison(store, QUEUE, big)
    (row,) = listed(env)
    assert (row["original_id"], row["reason"]) == (None, None)
    details = shown(env, row["poison_id"])
    assert (details["wrapped"], details["content"]) == (False, big)
    assert "wrapping it would have exceeded 64 KiB" in ok(
        "poison", "show", QUEUE, row["poison_id"], env=env
    )
    ok("poison", "requeue", QUEUE, "--id", row["poison_id"], "--yes", env=env)
    assert waiting(store, QUEUE) == [big]


# Requeue and purge


def test_requeue_with_a_limit_moves_that_many_back_with_their_original_content(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """`requeue --limit 3 --yes` puts three original contents back and leaves one poisoned."""
    output = ok("poison", "requeue", QUEUE, "--limit", "3", "--yes", env=env)
    assert output.startswith(f"requeued 3 message(s) from {POISON} to {QUEUE} on ")
    back = waiting(store, QUEUE)
    assert len(back) == 3
    assert set(back) < set(poisoned.contents.values())
    assert len(still_poisoned(store)) == 1


def test_requeue_without_a_limit_moves_every_message_back(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """A plain `requeue --yes` empties the poison queue into the main queue."""
    ok("poison", "requeue", QUEUE, "--yes", env=env)
    assert sorted(waiting(store, QUEUE)) == sorted(poisoned.contents.values())
    assert still_poisoned(store) == []


def test_requeue_by_id_moves_only_that_message(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """`requeue --id` moves the one message with that original id, and only it."""
    output = ok("poison", "requeue", QUEUE, "--id", poisoned.ids["hopeless"], "--yes", env=env)
    assert output.startswith(f"requeued message {poisoned.ids['hopeless']} from {POISON}")
    assert waiting(store, QUEUE) == [poisoned.contents["hopeless"]]
    remaining = set(still_poisoned(store))
    assert remaining == set(poisoned.ids.values()) - {poisoned.ids["hopeless"]}


def test_requeued_messages_are_handled_again_by_a_listener(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """After `requeue --id`, a listener receives the original item again."""
    ok("poison", "requeue", QUEUE, "--id", poisoned.ids["hopeless"], "--yes", env=env)
    received: list[dict[str, Any]] = []
    listener: CloudQueueListener[dict[str, Any]] = CloudQueueListener(
        store, CloudQueueLocation(QUEUE), dict, dequeue_interval_s=0.05
    )
    listener.subscribe(received.append)
    listener.start_listener(1)
    try:
        eventually(lambda: received == [HOPELESS])
    finally:
        listener.stop(10)


def test_purge_with_yes_empties_the_poison_queue(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """`purge --yes` deletes every poisoned message, reports how many, and requeues nothing."""
    output = ok("poison", "purge", QUEUE, "--yes", env=env)
    assert output.startswith(f"purged {POISON} on ")
    assert output.rstrip().endswith("(4 message(s) before)")
    assert still_poisoned(store) == []
    assert waiting(store, QUEUE) == []


@pytest.mark.parametrize(
    "args", [("requeue",), ("requeue", "--limit", "1"), ("requeue", "--id", "x"), ("purge",)]
)
def test_changes_refuse_without_yes_when_stdin_is_not_a_terminal(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage, args: tuple[str, ...]
) -> None:
    """Without --yes and nobody to ask, requeue and purge exit 2 and touch nothing."""
    command, *flags = args
    assert "without --yes" in fails("poison", command, QUEUE, *flags, env=env, code=2)
    assert sorted(still_poisoned(store), key=str) == sorted(poisoned.ids.values())


@pytest.mark.parametrize(("answer", "left"), [("y", 0), ("n", 4)])
def test_purge_on_a_terminal_asks_first(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage, answer: str, left: int
) -> None:
    """On a terminal purge asks, naming the count; only a yes deletes."""
    terminal = Terminal()
    terminal.type(f"{answer}\n")
    result, _ = run_on_terminal("poison", "purge", QUEUE, env=env, terminal=terminal)
    assert f"Delete all 4 poisoned message(s) in {POISON}" in result.stdout
    assert result.returncode == (0 if answer == "y" else 1)
    assert len(still_poisoned(store)) == left


def test_requeue_by_id_on_a_terminal_names_the_message_and_its_reason(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """The question names the message and why it was poisoned; a no leaves it poisoned."""
    terminal = Terminal()
    terminal.type("n\n")
    wanted = poisoned.ids["malformed"]
    result, _ = run_on_terminal(
        "poison", "requeue", QUEUE, "--id", wanted, env=env, terminal=terminal
    )
    assert f"Move message {wanted} (undecodable) back to {QUEUE}" in result.stdout
    assert result.returncode == 1
    assert waiting(store, QUEUE) == []


# Errors


@pytest.mark.parametrize("args", [("show",), ("requeue", "--yes", "--id")])
def test_an_unknown_id_exits_1_naming_it(
    env: dict[str, str], poisoned: Poisoned, args: tuple[str, ...]
) -> None:
    """Showing or requeuing an id no poisoned message has fails with exit 1 and a plain message."""
    command, *flags = args
    stderr = fails("poison", command, QUEUE, *flags, "no-such-id", env=env, code=1)
    assert f"no poisoned message with id no-such-id in {POISON}" in stderr


@pytest.mark.parametrize(
    "args", [("list",), ("show", "some-id"), ("requeue", "--yes"), ("purge", "--yes")]
)
def test_a_missing_poison_queue_exits_1_naming_it(
    env: dict[str, str], store: SqliteQueueStorage, args: tuple[str, ...]
) -> None:
    """Before any listener ran there is no poison queue: exit 1 with a message that says so."""
    store.create_queue(QUEUE)
    command, *rest = args
    stderr = fails("poison", command, QUEUE, *rest, env=env, code=1)
    assert f"queue {POISON} does not exist on " in stderr


def test_requeue_into_a_missing_queue_exits_1_and_keeps_the_poison(
    env: dict[str, str], poisoned: Poisoned, store: SqliteQueueStorage
) -> None:
    """Requeuing needs the main queue: without it, exit 1 naming it, every message kept."""
    store.delete_queue(QUEUE)
    assert f"queue {QUEUE} does not exist on " in fails(
        "poison", "requeue", QUEUE, "--yes", env=env, code=1
    )
    assert sorted(still_poisoned(store), key=str) == sorted(poisoned.ids.values())


@pytest.mark.parametrize(
    "args", [("list",), ("show", "some-id"), ("requeue", "--yes"), ("purge", "--yes")]
)
def test_an_invalid_queue_name_exits_2(env: dict[str, str], args: tuple[str, ...]) -> None:
    """A name Azure would reject is a usage error that explains the naming rule."""
    command, *rest = args
    stderr = fails("poison", command, "Bad_Name", *rest, env=env, code=2)
    assert "invalid queue name 'Bad_Name'" in stderr


@pytest.mark.parametrize(
    "args",
    [
        ("requeue", QUEUE, "--limit", "1", "--id", "x", "--yes"),
        ("requeue", QUEUE, "--limit", "0", "--yes"),
        ("list", QUEUE, "--limit", "0"),
    ],
)
def test_invalid_options_exit_2(env: dict[str, str], args: tuple[str, ...]) -> None:
    """--limit below 1, or --limit together with --id, is a usage error."""
    fails("poison", *args, env=env, code=2)


@pytest.mark.parametrize("command", ["list", "show", "requeue", "purge"])
def test_every_poison_command_documents_examples(command: str) -> None:
    """Each command's --help ends with an Examples block that click left unwrapped."""
    examples = help_text("poison", command).split("Examples:\n", 1)[1]
    assert examples.splitlines()[0].strip().startswith(f"cloudqueue poison {command} invoices")


# Against Azurite


def test_list_show_requeue_and_purge_work_on_azure(
    azurite_connection_string: str, queue_name: str
) -> None:
    """On Azurite the commands list, show, requeue by id and purge real poison records."""
    env = {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": azurite_connection_string}
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    try:
        kept = CODEC.encode({"invoice": 1})
        first = poison(storage, queue_name, kept, error="ValueError: no such customer")
        second = poison(storage, queue_name, CODEC.encode({"invoice": 2}))
        assert {row["original_id"] for row in listed(env, queue=queue_name)} == {first, second}
        details = shown(env, first, queue=queue_name)
        assert details["error"] == "ValueError: no such customer"
        assert details["content_view"] == {"format": "base64-json", "value": {"invoice": 1}}
        ok("poison", "requeue", queue_name, "--id", first, "--yes", env=env)
        assert waiting(storage, queue_name) == [kept]
        ok("poison", "purge", queue_name, "--yes", env=env)
        assert still_poisoned(storage, queue_name) == []
    finally:
        storage.close()


# The helpers under the commands


@pytest.fixture
def memory() -> InMemoryQueueStorage:
    """An empty in-memory store."""
    return InMemoryQueueStorage()


def test_browsing_past_32_returns_each_message_once_and_leaves_all_visible(
    memory: InMemoryQueueStorage,
) -> None:
    """A scan of 70 messages returns 70 distinct ones, all visible again afterwards."""
    originals = [poison(memory, QUEUE, f"item {index}") for index in range(70)]
    records = [
        read_record(message.content) for message in browse_poisoned(memory, QUEUE, limit=100)
    ]
    assert sorted(record.original_id for record in records if record) == sorted(originals)
    assert len(browse_poisoned(memory, QUEUE, limit=50)) == 50
    assert len(memory.peek_messages(POISON, max_messages=MAX_BATCH_SIZE)) == MAX_BATCH_SIZE
    assert len(browse_poisoned(memory, QUEUE, limit=100)) == 70


def test_finding_past_the_first_32_leaves_every_message_visible(
    memory: InMemoryQueueStorage,
) -> None:
    """find_poisoned finds the 40th message by original id and hides nothing."""
    originals = [poison(memory, QUEUE, f"item {index}") for index in range(40)]
    found = find_poisoned(memory, QUEUE, originals[-1])
    assert found is not None
    assert found.content == poison_text(memory, originals[-1])
    assert find_poisoned(memory, QUEUE, "no-such-id") is None
    assert len(browse_poisoned(memory, QUEUE, limit=100)) == 40


def poison_text(storage: QueueStorage, original_id: str) -> str:
    """The poison message text for an original id, found by browsing every poison message."""
    for message in browse_poisoned(storage, QUEUE, limit=1000):
        record = read_record(message.content)
        if record is not None and record.original_id == original_id:
            return message.content
    raise AssertionError(f"no poison record for {original_id}")


def test_taking_hides_only_the_wanted_message(memory: InMemoryQueueStorage) -> None:
    """take_poisoned hides the match for the caller to delete; the others stay visible."""
    originals = [poison(memory, QUEUE, f"item {index}") for index in range(3)]
    taken = take_poisoned(memory, QUEUE, originals[1])
    assert taken is not None
    assert len(memory.peek_messages(POISON, max_messages=MAX_BATCH_SIZE)) == 2
    assert memory.delete_message(POISON, taken.id, taken.pop_receipt)


def test_requeue_by_id_into_a_missing_queue_raises_and_releases_the_message(
    memory: InMemoryQueueStorage,
) -> None:
    """If the put fails the poison message is visible again at once, not after the scan's hiding."""
    original = poison(memory, QUEUE, "item")
    memory.delete_queue(QUEUE)
    with pytest.raises(QueueNotFoundError):
        requeue_poisoned_by_id(memory, QUEUE, original)
    assert len(memory.peek_messages(POISON, max_messages=1)) == 1
    assert not requeue_poisoned_by_id(memory, QUEUE, "no-such-id")


def test_a_message_that_is_not_a_record_reads_as_none() -> None:
    """Unwrapped original content, JSON or not, is no record."""
    assert read_record("plain text") is None
    assert read_record('{"invoice": 1}') is None
    assert read_record("[1, 2]") is None


@pytest.mark.parametrize(
    ("content", "view"),
    [
        (base64.b64encode(b'{"a": [1]}').decode(), {"format": "base64-json", "value": {"a": [1]}}),
        (base64.b64encode("\u00e9t\u00e9".encode()).decode(), {"format": "raw"}),
        ("abcd", {"format": "raw"}),
        ("", {"format": "raw"}),
        ('{"a": 1}', {"format": "raw"}),
    ],
)
def test_content_is_decoded_only_when_it_is_base64_of_utf8_json(
    content: str, view: dict[str, Any]
) -> None:
    """Base64 of UTF-8 JSON is decoded; anything else (even base64 of other bytes) stays raw."""
    assert content_view(content) == view


def test_an_envelope_is_summed_up_by_kind_count_and_size() -> None:
    """Inline envelopes give their compressed size, stored ones their payload name and size."""
    packed = pack(["aGVsbG8=", "d29ybGQ="])
    inline = content_view(inline_envelope(packed))
    assert inline == {
        "format": "envelope",
        "kind": "batch",
        "count": 2,
        "inner": "base64",
        "bytes": len(packed.data),
        "blob": None,
    }
    stored = content_view(blob_envelope(BLOB_NAME, packed))
    assert (stored["kind"], stored["blob"]) == ("blob", BLOB_NAME)
    assert stored["bytes"] == len(packed.data)
    broken = content_view('{"$cloudqueue": {"v": 99}}')
    assert broken["format"] == "envelope"
    assert "version 99" in broken["error"]
