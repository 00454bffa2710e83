"""kill -9 during a group, on SQLite and on Azurite (queues, Table service, blobs for the
completion worker's idempotent handling): two ``cloudqueue run`` processes handle a group of
1,000 members -- 500 sent with the group and 500 added at run time, 10 by each of 50 members'
handlers -- 10 poisoned on purpose and 20 put twice on purpose (a duplicate delivery, 10 of them
adding members); one process is killed three times mid-run and restarted. The completion worker
receives exactly one ``GroupDone``, with 990 handled and 10 poisoned, after every member's first
handling ended, and nothing is left behind: the members' queue is empty and the 10 are in its
poison queue.

One run per store covers both shapes the issue names (a group of 1,000 under faults, and the same
with members added at run time): a group all of whose 1,000 members are sent up front is not run
on its own here, as each run costs a minute on Azurite; what it would add -- more members open
from the start -- the in-process ledger tests cover (``tests/listener/workflows``)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from cloudqueue.listener import Publisher
from cloudqueue.listener.poison.record import parse_record
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.envelope import Envelope, parse_envelope
from cloudqueue.listener.wire.frames import unpack
from cloudqueue.listener.wire.membership import Membership, membership_of
from cloudqueue.listener.workflows.membership import member_message
from tests.support.cli_fork import RunningProcess
from tests.support.polling import eventually
from tests.support.runs import start_run
from tests.support.written_lines import complete_lines, log_events

MEMBERS = 1_000
SENT = 500
"""Members sent with the group; the others are added at run time."""
ADD_EVERY = 10
"""Member n < SENT with ``n % 10 == 9`` adds 10 members: 50 additions, the 500 others."""
POISON_EVERY = 100
DUPLICATED = range(9, SENT, 25)
"""Members whose message is put a second time: 20, none of them poisoned, half of them adding
members (a duplicate's addition is the same addition)."""
KILLS = 3
KILL_AFTER = 40
"""Members a victim handles in its own life before it is killed, while its handlers run."""
WORKERS = [
    "tests.support.crash_group_workers:GroupMembers",
    "tests.support.crash_group_workers:GroupFinisher",
]


def item_number(envelope: Envelope | None) -> int:
    """The ``n`` of the one item a member's envelope carries."""
    assert envelope is not None
    assert envelope.packed is not None
    [text] = unpack(envelope.packed)
    return int(MessageCodec(dict).decode(text)["n"])


def store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The connection string: a SQLite file, or an Azurite of this test's own serving blobs
    too (the completion worker's key ledger) beside queues and tables."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'queues.db'}"
    return str(request.getfixturevalue("azurite_factory")(blob=True, table=True).connection_string)


@pytest.mark.parametrize("backend", ["sqlite", "azure"])
def test_a_group_survives_kill_9_with_exactly_one_completion(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    processes: list[RunningProcess],
) -> None:
    """1,000 members, half added at run time: a process killed three times while another
    handles beside it (SQLite: for its third life), then restarted beside that one: one
    GroupDone of 990 + 10, after every member's end."""
    connection_string, record_path = store(backend, request, tmp_path), tmp_path / "record.txt"
    members, finished = f"m{uuid.uuid4().hex[:10]}", f"d{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "CLOUDQUEUE_CONNECTION_STRING": connection_string,
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
        "CLOUDQUEUE_STATE_DIR": str(tmp_path / "run"),
        "CLOUDQUEUE_BACKOFF__MAX_IDLE_S": "0.2",
        "CLOUDQUEUE_LISTENER__VISIBILITY_TIMEOUT_S": "2",
        "CLOUDQUEUE_SCALING__MAX_THREADS": "2",
        "CLOUDQUEUE_LISTENER__CONCURRENCY": "4",
        "CLOUDQUEUE_LISTENER__DEQUEUE_BATCH_SIZE": "8",
        "TEST_QUEUE": members,
        "TEST_DONE_QUEUE": finished,
        "TEST_POISON_EVERY": str(POISON_EVERY),
        "TEST_RECORD_PATH": str(record_path),
        "TEST_HANDLER_DELAY_S": "0.005",
        "TEST_ADD_EVERY": str(ADD_EVERY),
        "TEST_ADD_FROM": str(SENT),
    }
    storage = open_storage(connection_string)
    for queue in (members, finished):
        storage.create_queue(queue)

    def start(name: str) -> RunningProcess:
        # The steady process handles at a twentieth of a victim's pace: on a loaded machine it
        # drained every member while a victim restarted, leaving none for it to be killed on.
        pace = {"TEST_HANDLER_DELAY_S": "0.1"} if name == "steady" else {}
        return start_run(processes, [*WORKERS], {**env, **pace}, tmp_path / f"{name}.log")

    def events(what: str) -> list[list[str]]:
        return [line.split() for line in complete_lines(record_path) if line.startswith(what)]

    def handled_by(process: RunningProcess) -> int:
        return sum(1 for event in events("returned") if event[-1] == str(process.pid))

    # The steady process joins for the victim's third life: from the start, beside the victim,
    # it would finish the group before that life (on SQLite, and on Azurite since a listener
    # settles a group's members with one request per transaction). The victim starts before
    # the group is sent: its start-up overlaps the puts.
    steady: RunningProcess | None = None
    victim = start("victim0")
    publisher = Publisher(storage, members, dict)
    group = publisher.send_group([{"n": n} for n in range(SENT)], on_complete=finished)
    for n in DUPLICATED:  # the same member delivered twice, as a redelivery would
        text = publisher.codec.encode({"n": n})
        storage.put_message(members, member_message(text, Membership(group.id, str(n))))
    for kill in range(KILLS):
        if kill:
            victim = start(f"victim{kill}")
        if steady is None and kill == KILLS - 1:  # the last victim dies beside another process
            steady = start("steady")
        # Killed once it has handled members of its own, while its handlers run.
        eventually(lambda: handled_by(victim) >= KILL_AFTER, timeout_s=120)  # noqa: B023
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
    assert steady is not None
    last = start("restarted")
    for name in ("steady", "restarted"):  # a SIGTERM before its handlers are set would kill it
        eventually(lambda: log_events(tmp_path / f"{name}.log", "host_started"), timeout_s=60)  # noqa: B023
    eventually(lambda: events("done") != [], timeout_s=180)
    eventually(lambda: storage.approximate_message_count(finished) == 0, timeout_s=60)
    eventually(lambda: storage.approximate_message_count(members) == 0, timeout_s=60)
    for process in (steady, last):
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0

    [done] = events("done")
    assert done[1:3] == ["990", "10"]
    status = group.status()
    assert (status.handled, status.poisoned, status.completion) == (990, 10, "sent")
    assert status.total == MEMBERS  # each addition counted once, however often it was made
    # A kill between a poison move's put and its delete poisons that member twice: at least once.
    poisoned = storage.peek_messages(f"{members}-poison", max_messages=32)
    records = [parse_envelope(parse_record(message.content).content) for message in poisoned]
    assert {getattr(membership_of(record), "group_id", None) for record in records} == {group.id}
    assert {item_number(record) for record in records} == set(range(0, MEMBERS, POISON_EVERY))
    lines = list(complete_lines(record_path))
    done_at = lines.index(" ".join(done))
    first_end: dict[int, int] = {}
    for at, line in enumerate(lines):
        what, *fields = line.split()
        if what in ("returned", "poisoned"):
            first_end.setdefault(int(fields[0]), at)
    assert sorted(first_end) == list(range(MEMBERS))
    assert max(first_end.values()) < done_at  # the completion came after every member's end
    storage.close()
