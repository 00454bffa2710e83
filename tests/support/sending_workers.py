"""Workers whose items tests send with ``Worker.send`` and a real ``cloudqueue run`` handles.

Each handled item is logged as a JSON ``email_handled`` event, so that a test reads from the
worker's log what it received. Queue names are fixed: the sending test process and the worker
process import the same class.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

import structlog
from pydantic import BaseModel

from cloudqueue.workers import QueueWorker

log = structlog.get_logger("tests.sending")


class Email(BaseModel):
    to: str
    subject: str = ""


class SendEmail(QueueWorker[Email]):
    """One plain queue."""

    queue_name: ClassVar[str | tuple[str, ...]] = "emails"

    def handle(self, item: Email) -> None:
        log.info("email_handled", to=item.to, pid=os.getpid())


class PartitionedEmail(SendEmail):
    """Four partitions, by the worker's own settings only (nothing in the environment)."""

    queue_name = "emails-partitioned"
    settings: ClassVar[Mapping[str, Mapping[str, Any]]] = {"listener": {"partitions": 4}}


class UrgentOrNormalEmail(SendEmail):
    """Two queues in priority order."""

    queue_name = ("emails-urgent", "emails-normal")
