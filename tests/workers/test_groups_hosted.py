"""Groups in a running host on SQLite: members handled, poisoned on purpose and added at run time
by a member's handler all settle, and the completion worker gets exactly one ``GroupDone`` with
the counts; a second copy of it (a crash between its put and its mark) is dropped by key, by a
completion worker whose settings turn neither idempotency nor cancel checks on."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from cloudqueue.listener import PermanentFailure, Publisher, SqliteQueueStorage
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.packing import single_message
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.workers import QueueWorker, WorkerHost
from tests.support.keyed_workers import drained, host_settings, hosting
from tests.support.polling import eventually


def test_a_group_with_poisoned_and_added_members_completes_once(tmp_path: Path) -> None:
    """40 members, 4 raising PermanentFailure, member 7 adding 3 more at run time: one
    ``GroupDone`` of 39 handled and 4 poisoned, after every member's handler ran; a copy of it
    put later is dropped by its key though the completion worker configures no idempotency (its
    items are ``GroupDone``: the host handles them by key anyway)."""
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
        settings: ClassVar[dict[str, Any]] = {"cancel": {"check": False}}

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


def test_a_completion_worker_backing_off_in_the_same_host_is_woken_by_the_group_done(
    tmp_path: Path,
) -> None:
    """Members and their completion worker in one host whose pollers back off for an hour once
    idle: the completion worker, idle since the start, still gets the ``GroupDone`` -- the host
    wakes its own listener of the completion queue when it puts it there."""
    storage = SqliteQueueStorage(tmp_path / "q.db")
    done = threading.Event()

    class Members(QueueWorker[dict[str, Any]]):
        queue_name = "members"

        def handle(self, item: dict[str, Any]) -> None:
            pass

    class Finisher(QueueWorker[GroupDone]):
        queue_name = "finished"

        def handle(self, item: GroupDone) -> None:
            done.set()

    for queue in ("members", "finished"):
        storage.create_queue(queue)
    settings = host_settings(backoff={"min_idle_s": 3000, "max_idle_s": 3600})
    metered = MeteredStorage(storage)
    host = WorkerHost([Members, Finisher], settings, storage=metered)
    host.start()
    try:
        gets = metered.counts_by_queue_and_operation
        eventually(lambda: gets().get(("finished", "get_messages"), 0) >= 1, timeout_s=30)
        Publisher(storage, "members", dict).send_group(
            [{"n": n} for n in range(5)], on_complete=Finisher
        )
        host.listeners[0].pool_control.wake_idle()  # the members' poller is asleep too
        assert done.wait(30)
    finally:
        host.stop()
