"""A running handler's handling mark is extended as long as it runs, so a message of the same key
from another process keeps waiting; once it ends, nothing extends it and the keeper stops."""

from __future__ import annotations

from cloudqueue.listener.middleware.handling_marks import HandlingMarks
from cloudqueue.listener.stores.key_ledger import InMemoryKeyLedger
from cloudqueue.listener.stores.key_records import begin
from cloudqueue.listener.testing import VirtualClock
from tests.support.polling import eventually

QUEUE = "orders"
HOLD_S = 60


def start(ledger: InMemoryKeyLedger, message_id: str) -> str:
    return begin(ledger, QUEUE, "k", message_id=message_id, hold_s=HOLD_S, dedupe=True)


def test_a_mark_outlives_its_hold_while_its_handler_runs_and_expires_after() -> None:
    clock = VirtualClock()
    ledger = InMemoryKeyLedger(clock=clock)
    marks = HandlingMarks(ledger, HOLD_S, clock=clock, sleeper=clock)
    assert start(ledger, "m1") == "started"
    with marks.held(QUEUE, "k", "m1"):
        for _ in range(30):  # 300 s of a handler's run, the keeper looking every 10 s
            eventually(lambda: clock.waiting == 1)
            clock.advance(10)
        eventually(lambda: clock.waiting == 1)
        assert start(ledger, "m2") == "busy"  # 5 hold times later, still m1's
    clock.advance(10)  # the keeper's next look finds no mark held, and it ends
    eventually(lambda: clock.waiting == 0)
    clock.advance(HOLD_S)
    assert start(ledger, "m2") == "started"  # m1 never finished: its mark expired by itself
