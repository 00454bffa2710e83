"""The workers of the groups kill -9 test: ``GroupMembers`` handles ``{"n": n}`` members (every
``TEST_POISON_EVERY``-th, default 20th, raises PermanentFailure: poisoned on purpose) and
``GroupFinisher`` receives the
``GroupDone``. Each writes one line per event with O_APPEND (whole lines, in order, on disk before
the process can be killed): ``started n pid``, ``returned n pid``, ``poisoned n pid``, and
``done handled poisoned pid``."""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from cloudqueue.listener import GroupDone, PermanentFailure
from cloudqueue.workers import QueueWorker

RECORD_PATH = os.environ.get("TEST_RECORD_PATH", "record.txt")
HANDLER_S = float(os.environ.get("TEST_HANDLER_DELAY_S", "0.02"))
POISON_EVERY = int(os.environ.get("TEST_POISON_EVERY", "20"))


def record(*fields: object) -> None:
    descriptor = os.open(RECORD_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (" ".join(map(str, (*fields, os.getpid()))) + "\n").encode())
    finally:
        os.close(descriptor)


class GroupMembers(QueueWorker[dict[str, Any]]):
    queue_name = os.environ.get("TEST_QUEUE", "members")

    def handle(self, item: dict[str, Any]) -> None:
        n = int(item["n"])
        record("started", n)
        time.sleep(HANDLER_S)  # the handler's own work: a kill may fall inside it
        if n % POISON_EVERY == 0:
            record("poisoned", n)
            raise PermanentFailure("poisoned on purpose")
        record("returned", n)


class GroupFinisher(QueueWorker[GroupDone]):
    queue_name = os.environ.get("TEST_DONE_QUEUE", "members-done")
    settings: ClassVar[dict[str, Any]] = {"idempotency": {"window_s": 3600}}

    def handle(self, item: GroupDone) -> None:
        record("done", item.handled, item.poisoned)
