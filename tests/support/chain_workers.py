"""The workers of the chain tests: ``Split`` (an order into its lines) -> ``Price`` (a line's
price) -> ``Total`` (records it), and ``Done`` (records a group's ``GroupDone``).

Each event is a line ``what fields... pid`` written with O_APPEND to ``TEST_RECORD_PATH`` (whole
lines, on disk before a process can be killed). With ``TEST_KILL_MARKER`` set, the first ``Price``
message whose handling ends kills its own process with SIGKILL right after its chained send and
before its delete: the marker file (created once, exclusively) says it happened.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from cloudqueue.listener import GroupDone, Middleware, current_envelope
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext
from cloudqueue.workers import QueueWorker
from tests.support.written_lines import complete_lines

CENTS_PER_UNIT = 150


class Order(BaseModel):
    order: str
    quantities: list[int]


class Line(BaseModel):
    order: str
    quantity: int


class Priced(BaseModel):
    order: str
    cents: int


def record(*fields: object) -> None:
    path = os.environ["TEST_RECORD_PATH"]
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (" ".join(map(str, (*fields, os.getpid()))) + "\n").encode())
    finally:
        os.close(descriptor)


class KillAfterChainedSend(Middleware):
    """Outside the chain step: its ``call_next`` returns once the chained items were put."""

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> None:
        call_next()
        marker = os.environ.get("TEST_KILL_MARKER")
        if marker is None or context.failures:
            return
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        record("killed", context.key)
        os.kill(os.getpid(), signal.SIGKILL)


class Total(QueueWorker[Priced]):
    """Handles a key once: a chained put whose effect-once mark a kill prevented is sent again
    under the same key, and dropped here."""

    queue_name = "chain-totals"
    settings: ClassVar[dict[str, Any]] = {"idempotency": {"window_s": 3600}}

    def handle(self, item: Priced) -> None:
        message = current_envelope()  # the chained message: its derived key, its own id
        record("priced", item.order, item.cents, message.key, message.message_id)


class Price(QueueWorker[Line]):
    queue_name = "chain-lines"
    then = Total
    middleware: ClassVar[list[Any]] = [KillAfterChainedSend]

    async def handle(self, item: Line) -> Priced:  # async: its value is awaited, then sent on
        record("pricing", item.order, item.quantity)
        return Priced(order=item.order, cents=item.quantity * CENTS_PER_UNIT)


class Split(QueueWorker[Order]):
    queue_name = "chain-orders"
    then = Price

    def handle(self, item: Order) -> list[Line]:
        return [Line(order=item.order, quantity=quantity) for quantity in item.quantities]


class Done(QueueWorker[GroupDone]):
    queue_name = "chain-done"
    settings: ClassVar[dict[str, Any]] = {"idempotency": {"window_s": 3600}}

    def handle(self, item: GroupDone) -> None:
        record("done", item.handled, item.poisoned)


ORDERS = [Order(order=f"o{n}", quantities=[n + 1, 2 * n + 1, 3]) for n in range(6)]
LINES = sum(len(order.quantities) for order in ORDERS)


def events(path: Path, what: str) -> list[list[str]]:
    """The fields of each recorded ``what`` event, without the pid."""
    return [line.split()[1:-1] for line in complete_lines(path) if line.startswith(what + " ")]


def priced(path: Path) -> list[tuple[str, int, str]]:
    """Each line ``Total`` handled: its order, cents and message key."""
    return [(order, int(cents), key) for order, cents, key, _ in events(path, "priced")]


def totals(path: Path) -> dict[str, int]:
    """The cents ``Total`` handled, per order."""
    summed: Counter[str] = Counter()
    for order, cents, _ in priced(path):
        summed[order] += cents
    return dict(summed)


def expected_keys() -> set[str]:
    """The keys the chain derives: each order's key, ``/i`` per line of it."""
    return {f"{order.order}/{n}" for order in ORDERS for n in range(len(order.quantities))}


def expected_totals() -> dict[str, int]:
    return {order.order: sum(order.quantities) * CENTS_PER_UNIT for order in ORDERS}
