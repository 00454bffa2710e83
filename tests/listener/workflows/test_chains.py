"""The chain step on the seam, message by message on the memory store: what a handler returns
goes on under the message's derived key and in the step's trace; an item its handler failed on
sends nothing while the others of its message go on; a value of the wrong type gives the message
up (``chain_item_invalid``) with nothing sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from cloudqueue.listener import InMemoryQueueStorage, PermanentFailure, Publisher
from cloudqueue.listener.consumer.listener import CloudQueueListener
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.payload import open_message
from cloudqueue.listener.wire.trace_context import read_carrier
from cloudqueue.listener.workflows.chains import ChainStep
from cloudqueue.listener.workflows.completion import GroupCompletion
from cloudqueue.listener.workflows.group_ledger import GroupLedger
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from cloudqueue.workers.testing import run_until_drained
from tests.support.tracing import named


class Priced(BaseModel):
    cents: int


PRICED = MessageCodec(Priced)
POLICY = DeliveryPolicy(max_dequeue_count=3)


def run_step(
    storage: InMemoryQueueStorage,
    clock: VirtualClock,
    handler: Callable[[Any], Any],
    groups: GroupLedger | None = None,
) -> list[Any]:
    """Drain ``work`` through a chain step to ``next`` (``Priced`` items), inside the groups
    middleware when ``groups`` is given; the poisoned items."""
    for queue in ("work", "next"):
        storage.create_queue(queue)
    next_step = Publisher(storage, "next", Priced, effect_once_s=3600, trace_envelope=True)
    chain = ChainStep(next_step, groups)
    completion = (
        []
        if groups is None
        else [GroupCompletion(groups, storage, delivery=POLICY, passed_on=chain.passed_on)]
    )
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage,
        CloudQueueLocation("work"),
        dict,
        clock=clock,
        sleeper=clock,
        middleware=[*completion, chain],
    )
    listener.subscribe(chain.returning(handler))
    return run_until_drained(listener, fail_fast=False).poisoned


def sent_on(storage: InMemoryQueueStorage) -> list[tuple[str | None, int]]:
    """Each message on ``next``: its key and its item's cents."""
    sent = []
    for message in storage.peek_messages("next", max_messages=32):
        envelope = parse_envelope(message.content)
        assert envelope is not None
        [text] = open_message(message.content, None).texts
        sent.append((envelope.key, PRICED.decode(text).cents))
    return sent


def test_a_list_goes_on_under_derived_keys_in_the_steps_trace(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A message keyed ``run-7`` whose handler returns two items: ``run-7/0`` and ``run-7/1`` on
    the next queue, each carrying the trace of the step's consumer span."""
    virtual_storage.create_queue("work")
    Publisher(virtual_storage, "work", dict).publish({"lines": [1, 2]}, key="run-7")
    run_step(virtual_storage, virtual_clock, lambda item: [Priced(cents=n) for n in item["lines"]])
    assert sorted(sent_on(virtual_storage)) == [
        ("run-7/0", 1),
        ("run-7/1", 2),
    ]
    [consumer] = named(spans, "process work")
    for message in virtual_storage.peek_messages("next", max_messages=32):
        _, trace_id, _, _ = read_carrier(message.content)["traceparent"].split("-")
        assert trace_id == format(consumer.context.trace_id, "032x")


def test_only_the_items_handled_go_on_from_a_message_of_several(
    virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A batch of three under key ``b``, the second item failing for good: the first and third go
    on as ``b/0`` and ``b/2``; the second is poisoned alone and sends nothing."""

    def price(item: dict[str, int]) -> Priced:
        if item["n"] == 1:
            raise PermanentFailure("no price")
        return Priced(cents=item["n"])

    virtual_storage.create_queue("work")
    Publisher(virtual_storage, "work", dict, batch=True, key=lambda _: "b").publish_many(
        [{"n": 0}, {"n": 1}, {"n": 2}]
    )
    poisoned = run_step(virtual_storage, virtual_clock, price)
    assert sorted(sent_on(virtual_storage)) == [("b/0", 0), ("b/2", 2)]
    assert [item.item for item in poisoned] == [{"n": 1}]


def test_a_value_of_the_wrong_type_gives_the_message_up_with_nothing_sent(
    virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A handler returning text where ``Priced`` is expected: poisoned at once as
    ``chain_item_invalid``, nothing on the next queue."""
    virtual_storage.create_queue("work")
    Publisher(virtual_storage, "work", dict).publish({"n": 1})
    poisoned = run_step(virtual_storage, virtual_clock, lambda item: "not a price")
    assert [(item.item, item.reason) for item in poisoned] == [({"n": 1}, "chain_item_invalid")]
    assert sent_on(virtual_storage) == []


def test_an_empty_list_sends_nothing_and_settles_a_group_member_here(
    virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A member whose step returns ``[]`` passes nothing on: it is handled, and its group of one
    completes with it."""
    for queue in ("work", "next", "done"):
        virtual_storage.create_queue(queue)
    group = Publisher(virtual_storage, "work", dict).send_group([{"n": 1}], on_complete="done")
    ledger = group_ledger_for(virtual_storage)
    assert ledger is not None
    nothing: list[Priced] = []
    assert run_step(virtual_storage, virtual_clock, lambda item: nothing, ledger) == []
    assert sent_on(virtual_storage) == []
    status = group.status()
    assert (status.handled, status.completion) == (1, "sent")
