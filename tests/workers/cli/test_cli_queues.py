"""``cloudqueue queues`` and the CLI's progress output, driven for real in subprocesses.

Every queue command runs against the embedded SQLite store and against Azurite. The session's
Azurite is shared with other tests, so each test works on its own queue names and lists by prefix.
Terminal behaviour (confirmation prompts, progress) is exercised through a pseudo-terminal.
The command under test runs in a subprocess; the queues it starts from are made, and what it
left is read, through the store's own API in the test process (``store``), so each test starts
one CLI process per command it is about rather than one per step.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers.cli.queues import progress_spinner
from tests.support.cli import Terminal, cloudqueue, help_text, ok, run_on_terminal
from tests.support.polling import eventually

BAD_NAME = "Bad_Name"


@pytest.fixture(params=["sqlite", "azure"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """An environment whose storage is a fresh SQLite file, or the session's Azurite."""
    if request.param == "sqlite":
        connection_string = f"sqlite:///{tmp_path / 'q.db'}"
    else:
        connection_string = request.getfixturevalue("azurite_connection_string")
    return {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
    }


@pytest.fixture
def sqlite_env(tmp_path: Path) -> dict[str, str]:
    """An environment on a fresh SQLite file, for the terminal tests."""
    return {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}


@pytest.fixture
def store(env: dict[str, str]) -> Iterator[QueueStorage]:
    """The storage ``env`` names, opened in the test process to set up and look at queues."""
    storage = open_storage(env["CLOUDQUEUE_CONNECTION_STRING"])
    yield storage
    storage.close()


@pytest.fixture
def sqlite_store(sqlite_env: dict[str, str]) -> Iterator[QueueStorage]:
    """The SQLite file of ``sqlite_env``, opened in the test process."""
    storage = open_storage(sqlite_env["CLOUDQUEUE_CONNECTION_STRING"])
    yield storage
    storage.close()


def listed(prefix: str, env: dict[str, str]) -> list[dict[str, object]]:
    """What `queues list --json` prints for the prefix."""
    rows: list[dict[str, object]] = json.loads(
        ok("queues", "list", "--prefix", prefix, "--json", env=env)
    )
    return rows


def depths(prefix: str, storage: QueueStorage) -> list[dict[str, object]]:
    """The queues starting with ``prefix`` and their depths, as the store itself reports them."""
    return [
        {"queue": queue, "depth": storage.approximate_message_count(queue)}
        for queue in sorted(storage.list_queues(prefix))
    ]


def queue_with(queue: str, items: int, storage: QueueStorage) -> str:
    """Create the queue and put ``items`` messages on it."""
    storage.create_queue(queue)
    for index in range(items):
        storage.put_message(queue, f"item-{index}")
    return queue


# Create and list


def test_list_shows_each_queue_with_its_depth(
    env: dict[str, str], store: QueueStorage, queue_name: str
) -> None:
    """Created queues are listed by prefix, in name order, with their depths, as text and JSON."""
    queue_with(queue_name, 3, store)
    queue_with(f"{queue_name}-poison", 0, store)
    assert listed(queue_name, env) == [
        {"queue": queue_name, "depth": 3},
        {"queue": f"{queue_name}-poison", "depth": 0},
    ]
    lines = ok("queues", "list", "--prefix", queue_name, env=env).splitlines()
    assert lines[0].split() == ["QUEUE", "DEPTH"]
    assert [line.split() for line in lines[1:]] == [
        [queue_name, "3"],
        [f"{queue_name}-poison", "0"],
    ]


def test_list_with_a_prefix_nothing_matches_says_so(env: dict[str, str], queue_name: str) -> None:
    """An empty listing is an empty JSON array, and a sentence naming the prefix as text."""
    assert listed(queue_name, env) == []
    assert f"no queues starting with '{queue_name}'" in ok(
        "queues", "list", "--prefix", queue_name, env=env
    )


def test_create_is_idempotent_and_says_whether_the_queue_existed(
    env: dict[str, str], store: QueueStorage, queue_name: str
) -> None:
    """Creating an existing queue succeeds, keeps its messages, and reports that it existed."""
    assert ok("queues", "create", queue_name, env=env).startswith(f"created {queue_name} on ")
    store.put_message(queue_name, "kept")
    assert "already exists" in ok("queues", "create", queue_name, env=env)
    assert depths(queue_name, store) == [{"queue": queue_name, "depth": 1}]


# Clear and delete


def test_clear_with_yes_empties_the_queue_and_keeps_it(
    env: dict[str, str], store: QueueStorage, queue_name: str
) -> None:
    """`queues clear --yes` deletes every message and reports how many there were."""
    queue_with(queue_name, 4, store)
    assert "(4 message(s) before)" in ok("queues", "clear", queue_name, "--yes", env=env)
    assert depths(queue_name, store) == [{"queue": queue_name, "depth": 0}]


def test_delete_with_yes_removes_the_queue(
    env: dict[str, str], store: QueueStorage, queue_name: str
) -> None:
    """`queues delete --yes` removes the queue; the name can then be created again, empty."""
    queue_with(queue_name, 2, store)
    queue_with(f"{queue_name}-kept", 0, store)
    assert ok("queues", "delete", queue_name, "--yes", env=env).startswith(f"deleted {queue_name}")
    assert [row["queue"] for row in depths(queue_name, store)] == [f"{queue_name}-kept"]
    # Azure keeps a deleted name reserved for 40 s or more; Azurite and the embedded stores do not.
    eventually(
        lambda: cloudqueue("queues", "create", queue_name, env=env).returncode == 0,
        timeout_s=90,
        interval_s=1,
    )
    assert depths(queue_name, store)[0] == {"queue": queue_name, "depth": 0}


@pytest.mark.parametrize("command", ["clear", "delete"])
def test_destructive_commands_refuse_without_yes_when_stdin_is_not_a_terminal(
    env: dict[str, str], store: QueueStorage, queue_name: str, command: str
) -> None:
    """Without --yes and nobody to ask, clear and delete exit 2 and touch nothing."""
    queue_with(queue_name, 2, store)
    result = cloudqueue("queues", command, queue_name, env=env)
    assert result.returncode == 2
    assert "without --yes" in result.stderr
    assert depths(queue_name, store) == [{"queue": queue_name, "depth": 2}]


@pytest.mark.parametrize("command", ["clear", "delete"])
def test_a_missing_queue_exits_1_naming_it(
    env: dict[str, str], queue_name: str, command: str
) -> None:
    """Clearing or deleting a queue that does not exist fails with exit 1 and a plain message."""
    result = cloudqueue("queues", command, queue_name, "--yes", env=env)
    assert result.returncode == 1
    assert f"queue {queue_name} does not exist on " in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [("create",), ("clear", "--yes"), ("delete", "--yes")])
def test_an_invalid_queue_name_exits_2(env: dict[str, str], args: tuple[str, ...]) -> None:
    """A name Azure would reject is a usage error that explains the naming rule."""
    command, *flags = args
    result = cloudqueue("queues", command, BAD_NAME, *flags, env=env)
    assert result.returncode == 2
    assert "invalid queue name 'Bad_Name'" in result.stderr


@pytest.mark.parametrize("command", ["list", "create", "clear", "delete"])
def test_every_queues_command_documents_examples(command: str) -> None:
    """Each command's --help ends with an Examples block that click left unwrapped."""
    examples = help_text("queues", command).split("Examples:\n", 1)[1]
    assert examples.splitlines()[0].strip().startswith(f"cloudqueue queues {command}")


# On a terminal


@pytest.mark.parametrize(("answer", "depth"), [("y", 0), ("n", 3)])
def test_clear_on_a_terminal_asks_first(
    sqlite_env: dict[str, str], sqlite_store: QueueStorage, queue_name: str, answer: str, depth: int
) -> None:
    """On a terminal clear asks, naming the message count; only a yes clears the queue."""
    queue_with(queue_name, 3, sqlite_store)
    terminal = Terminal()
    terminal.type(f"{answer}\n")
    result, _ = run_on_terminal("queues", "clear", queue_name, env=sqlite_env, terminal=terminal)
    assert f"Delete all 3 message(s) in {queue_name}" in result.stdout
    assert result.returncode == (0 if answer == "y" else 1)
    assert depths(queue_name, sqlite_store) == [{"queue": queue_name, "depth": depth}]


def test_delete_on_a_terminal_asks_first(
    sqlite_env: dict[str, str], sqlite_store: QueueStorage, queue_name: str
) -> None:
    """On a terminal delete asks before removing the queue; a no keeps it."""
    queue_with(queue_name, 1, sqlite_store)
    terminal = Terminal()
    terminal.type("n\n")
    result, _ = run_on_terminal("queues", "delete", queue_name, env=sqlite_env, terminal=terminal)
    assert result.returncode == 1
    assert f"Delete {queue_name} and its 1 message(s)" in result.stdout
    assert depths(queue_name, sqlite_store) == [{"queue": queue_name, "depth": 1}]


def test_bulk_enqueue_shows_a_running_count_only_on_a_terminal(
    sqlite_env: dict[str, str], queue_name: str
) -> None:
    """Items from stdin are counted on stderr when it is a terminal, and never into a pipe."""
    items = "\n".join(f"item-{index}" for index in range(25))
    result, progress = run_on_terminal(
        "enqueue", queue_name, env=sqlite_env, terminal=Terminal(), stdin=items
    )
    assert result.returncode == 0
    assert f"enqueueing on {queue_name}: 25" in progress
    assert result.stdout.startswith(f"enqueued 25 item(s) on {queue_name}")

    piped = cloudqueue("enqueue", queue_name, env=sqlite_env, stdin=items)
    assert piped.returncode == 0
    assert piped.stderr == ""


def test_a_quick_clear_shows_no_spinner_even_on_a_terminal(
    sqlite_env: dict[str, str], sqlite_store: QueueStorage, queue_name: str
) -> None:
    """The embedded stores clear in one quick call, so nothing is drawn on the terminal."""
    queue_with(queue_name, 3, sqlite_store)
    result, progress = run_on_terminal(
        "queues", "clear", queue_name, "--yes", env=sqlite_env, terminal=Terminal(), stdin=""
    )
    assert result.returncode == 0
    assert progress == ""


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_spinner_shows_the_elapsed_time_and_erases_itself() -> None:
    """Past its delay the spinner redraws one line with the elapsed seconds, then clears it."""
    terminal = FakeTerminal()
    with progress_spinner("clearing big", stream=terminal, delay_s=0, interval_s=0.01):
        eventually(lambda: terminal.getvalue().count("clearing big (") >= 2)
    assert terminal.getvalue().endswith("\r\x1b[K")


def test_the_spinner_stays_silent_for_quick_work_and_off_a_terminal() -> None:
    """Work that ends within the delay draws nothing; neither does anything on a pipe."""
    terminal = FakeTerminal()
    with progress_spinner("quick", stream=terminal, delay_s=60):
        pass
    pipe = io.StringIO()
    with progress_spinner("piped", stream=pipe, delay_s=0, interval_s=0.01):
        pass
    assert terminal.getvalue() == ""
    assert pipe.getvalue() == ""
