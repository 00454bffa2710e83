"""Groups in a running host on SQLite: members handled, poisoned on purpose and added at run time
by a member's handler all settle, and the completion worker gets exactly one ``GroupDone`` with
the counts; a second copy of it (a crash between its put and its mark) is dropped by key."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from cloudqueue.listener import PermanentFailure, Publisher, SqliteQueueStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.packing import single_message
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.workers import QueueWorker
from tests.support.keyed_workers import drained, host_settings, hosting
from tests.support.polling import eventually


def test_a_group_with_poisoned_and_added_members_completes_once(tmp_path: Path) -> None:
    """40 members, 4 raising PermanentFailure, member 7 adding 3 more at run time: one
    ``GroupDone`` of 39 handled and 4 poisoned, after every member's handler ran."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    handled: list[int] = []
    done: list[tuple[GroupDone, int]] = []
    lock = threading.Lock()

    class Members(QueueWorker[dict[str, Any]]):
        queue_name = "members"

        def handle(self, item: dict[str, Any]) -> None:
            if item["n"] % 10 == 3:
                raise PermanentFailure("poisoned on purpose")
            if item["n"] == 7:
                Publisher(storage, "members", dict).add_to_group([{"n": 100 + n} for n in range(3)])
            with lock:
                handled.append(item["n"])

    class Finisher(QueueWorker[GroupDone]):
        queue_name = "finished"
        settings: ClassVar[dict[str, Any]] = {"idempotency": {"window_s": 3600}}

        def handle(self, item: GroupDone) -> None:
            with lock:
                done.append((item, len(handled)))

    for queue in ("members", "finished"):
        storage.create_queue(queue)
    items = [{"n": n} for n in range(40)]
    group = Publisher(storage, "members", dict).send_group(items, on_complete=Finisher)
    with hosting(Members, storage, host_settings()), hosting(Finisher, storage, host_settings()):
        eventually(lambda: len(done) == 1, timeout_s=60)
        copy = single_message(MessageCodec(GroupDone).encode(done[0][0]), key=group.id)
        storage.put_message("finished", str(copy))  # a second copy, as after a crash
        drained(storage, "finished", lambda: True, timeout_s=30)
        drained(storage, "members", lambda: True, timeout_s=30)
        status = group.status()
        poisoned = storage.approximate_message_count("members-poison")
    [(completion, handled_before)] = done
    assert (completion.group_id, completion.handled, completion.poisoned) == (group.id, 39, 4)
    assert handled_before == 39
    assert sorted(handled) == sorted([n for n in range(40) if n % 10 != 3] + [100, 101, 102])
    assert (status.pending, status.completion, poisoned) == (0, "sent", 4)
