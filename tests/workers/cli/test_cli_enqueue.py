"""`cloudqueue enqueue`: delayed and expiring items, and reading stdin, on the embedded store."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.due import due_of
from cloudqueue.workers.cli.durations import parse_duration_s
from cloudqueue.workers.cli.messages import STDIN_HINT
from tests.support.cli import Terminal, cloudqueue, ok, run_on_terminal

QUEUE = "reminders"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose storage is a fresh SQLite file."""
    return {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'queues.db'}"}


def store_at(tmp_path: Path, seconds_from_now: float) -> SqliteQueueStorage:
    """The test's queue database as seen from a moment ``seconds_from_now`` away."""
    clock = ManualClock(datetime.now(UTC) + timedelta(seconds=seconds_from_now))
    return SqliteQueueStorage(tmp_path / "queues.db", clock=clock)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1h", 3600), ("7D", 604_800)]
)
def test_durations_take_a_unit_of_seconds_minutes_hours_or_days(text: str, seconds: int) -> None:
    """A whole number with s, m, h or d (any case); no unit means seconds."""
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "1.5h", "-5s", "5 weeks", "h"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    """Fractions, negatives and unknown units are refused rather than guessed."""
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_s(text)


def test_a_delayed_item_is_invisible_until_its_delay_and_expires_after_its_ttl(
    env: dict[str, str], tmp_path: Path
) -> None:
    """--delay 1h --ttl 1d: nobody sees it for an hour; a day after the put it is gone."""
    ok("enqueue", QUEUE, "call back", "--delay", "1h", "--ttl", "1d", env=env)
    now = store_at(tmp_path, 0)
    assert now.approximate_message_count(QUEUE) == 1
    assert now.peek_messages(QUEUE, max_messages=1) == []
    [later] = store_at(tmp_path, 3601).peek_messages(QUEUE, max_messages=1)
    assert later.expires_on is not None
    assert later.next_visible_on - later.inserted_on == timedelta(hours=1)
    assert later.expires_on - later.inserted_on == timedelta(days=1)
    assert store_at(tmp_path, 86_401).approximate_message_count(QUEUE) == 0


def test_ttl_never_puts_an_item_that_does_not_expire(env: dict[str, str], tmp_path: Path) -> None:
    """--ttl never (or -1), as Azure's -1."""
    ok("enqueue", QUEUE, "keep", "--ttl", "never", env=env)
    [message] = store_at(tmp_path, 0).peek_messages(QUEUE, max_messages=1)
    assert message.expires_on is None


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        (["--delay", "-5s"], "--delay: '-5s' is not a duration: a duration cannot be negative"),
        (["--delay", "soon"], "--delay: 'soon' is not a duration"),
        (["--delay", "2h", "--ttl", "1h"], "--delay (7200) must be less than --ttl (3600)"),
        (["--delay", "30d", "--ttl", "7d"], "would expire before it is due"),
        (["--ttl", "0"], "--ttl must be >= 1"),
        (["--ttl", "1.5h"], "--ttl: '1.5h' is not a duration"),
    ],
)
def test_an_out_of_range_delay_or_ttl_is_one_line_exit_2_and_nothing_is_enqueued(
    env: dict[str, str], tmp_path: Path, options: list[str], complaint: str
) -> None:
    """Exit code 2 with one line naming the option and the limit; the queue is not even
    created."""
    result = cloudqueue("enqueue", QUEUE, "x", *options, env=env)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert complaint in result.stderr
    assert QUEUE not in store_at(tmp_path, 0).list_queues()


def test_a_delay_of_30_days_is_accepted_and_hops_every_7_days(
    env: dict[str, str], tmp_path: Path
) -> None:
    """--delay 30d: hidden for 7 days, then seen with its due time 30 days after the put, and
    kept until 7 days after that."""
    ok("enqueue", QUEUE, "renew", "--delay", "30d", env=env)
    assert store_at(tmp_path, 7 * 86_400 - 60).peek_messages(QUEUE, max_messages=1) == []
    [message] = store_at(tmp_path, 7 * 86_400).peek_messages(QUEUE, max_messages=1)
    due = due_of(message.content)
    assert due is not None
    assert timedelta(days=30) <= due - message.inserted_on < timedelta(days=30, seconds=2)
    assert message.expires_on is not None
    assert message.expires_on - message.inserted_on == timedelta(days=37)


def queued_items(tmp_path: Path) -> list[str]:
    """The queue's items in order, decoded from the default base64."""
    store = store_at(tmp_path, 0)
    return [
        base64.b64decode(message.content).decode()
        for message in store.peek_messages(QUEUE, max_messages=32)
    ]


def test_a_dash_item_stands_for_the_lines_of_stdin(env: dict[str, str], tmp_path: Path) -> None:
    """`enqueue QUEUE first - last` puts first, stdin's lines, last; never the text "-"."""
    ok("enqueue", QUEUE, "first", "-", "last", env=env, stdin="a\nb\n")
    assert queued_items(tmp_path) == ["first", "a", "b", "last"]
    ok("enqueue", QUEUE, "-", env=env, stdin="c\n")
    assert queued_items(tmp_path)[-1] == "c"


def test_stdin_cannot_be_read_twice(env: dict[str, str], tmp_path: Path) -> None:
    """Two dashes are a usage error before anything is enqueued."""
    result = cloudqueue("enqueue", QUEUE, "-", "-", env=env, stdin="a\n")
    assert result.returncode == 2
    assert "only once" in result.stderr
    assert QUEUE not in store_at(tmp_path, 0).list_queues()


def test_waiting_on_a_terminal_says_how_to_finish(env: dict[str, str], tmp_path: Path) -> None:
    """Reading a terminal, enqueue tells the person at it what it waits for and how to end."""
    terminal = Terminal()
    terminal.type("typed\n\x04")  # buffered by the terminal until enqueue reads it; ^D ends
    result, shown = run_on_terminal("enqueue", QUEUE, "-", env=env, terminal=terminal)
    assert result.returncode == 0
    assert STDIN_HINT in shown
    assert queued_items(tmp_path) == ["typed"]


def test_no_hint_when_stdin_is_a_pipe_even_with_stderr_on_a_terminal(env: dict[str, str]) -> None:
    """The hint is for people typing: piped input gets none, wherever stderr goes."""
    result, shown = run_on_terminal("enqueue", QUEUE, env=env, terminal=Terminal(), stdin="x\n")
    assert result.returncode == 0
    assert STDIN_HINT not in shown
