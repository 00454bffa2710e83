"""The workers of the groups kill -9 test: ``GroupMembers`` handles ``{"n": n}`` members (every
``TEST_POISON_EVERY``-th, default 20th, raises PermanentFailure: poisoned on purpose; with
``TEST_ADD_EVERY`` = k, member n with ``n % k == k - 1`` first adds the k members numbered
``TEST_ADD_FROM + (n // k) * k`` on to its group, at run time) and ``GroupFinisher`` receives the
``GroupDone``. Each writes one line per event with O_APPEND (whole lines, in order, on disk before
the process can be killed): ``started n pid``, ``returned n pid``, ``poisoned n pid``, and
``done handled poisoned pid``."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, ClassVar

from cloudqueue.listener import GroupDone, PermanentFailure, Publisher
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.workers import QueueWorker

RECORD_PATH = os.environ.get("TEST_RECORD_PATH", "record.txt")
HANDLER_S = float(os.environ.get("TEST_HANDLER_DELAY_S", "0.02"))
POISON_EVERY = int(os.environ.get("TEST_POISON_EVERY", "20"))
ADD_EVERY = int(os.environ.get("TEST_ADD_EVERY", "0"))
ADD_FROM = int(os.environ.get("TEST_ADD_FROM", "0"))
_OPENING = threading.Lock()


def record(*fields: object) -> None:
    descriptor = os.open(RECORD_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (" ".join(map(str, (*fields, os.getpid()))) + "\n").encode())
    finally:
        os.close(descriptor)


class GroupMembers(QueueWorker[dict[str, Any]]):
    queue_name = os.environ.get("TEST_QUEUE", "members")
    adding: ClassVar[Publisher[dict[str, Any]] | None] = None

    def handle(self, item: dict[str, Any]) -> None:
        n = int(item["n"])
        record("started", n)
        time.sleep(HANDLER_S)  # the handler's own work: a kill may fall inside it
        if ADD_EVERY and n < ADD_FROM and n % ADD_EVERY == ADD_EVERY - 1:
            first = ADD_FROM + (n // ADD_EVERY) * ADD_EVERY
            self.publisher().add_to_group([{"n": first + k} for k in range(ADD_EVERY)])
            record("added", n)
        if n % POISON_EVERY == 0:
            record("poisoned", n)
            raise PermanentFailure("poisoned on purpose")
        record("returned", n)

    @classmethod
    def publisher(cls) -> Publisher[dict[str, Any]]:
        """The members' publisher on this process's own storage, opened at the first add."""
        with _OPENING:
            if cls.adding is None:
                storage = open_storage(os.environ["CLOUDQUEUE_CONNECTION_STRING"])
                cls.adding = Publisher(storage, cls.queue_name, dict)
            return cls.adding


class GroupFinisher(QueueWorker[GroupDone]):
    queue_name = os.environ.get("TEST_DONE_QUEUE", "members-done")
    settings: ClassVar[dict[str, Any]] = {"idempotency": {"window_s": 3600}}

    def handle(self, item: GroupDone) -> None:
        record("done", item.handled, item.poisoned)
