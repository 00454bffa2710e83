"""Tracing: a producer's trace continues in the consumer's span, through a real queue.

Spans come from the OpenTelemetry SDK's in-memory exporter (tests/support/tracing.py); the round
trips run a real publisher and listener on the in-memory store (virtual time), SQLite (through
the CLI) and Azurite.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from azure.core.messaging import CloudEvent
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    MessageCodec,
    Publisher,
)
from cloudqueue.listener.errors import PermanentFailure
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.stores.azure_storage import AzureQueueStorage
from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.testing import VirtualClock
from cloudqueue.listener.tracing import consumer_span
from cloudqueue.listener.wire.envelope import ENVELOPE_KEY, inline_envelope, parse_envelope
from cloudqueue.listener.wire.frames import pack
from cloudqueue.listener.wire.payload import open_message
from cloudqueue.listener.wire.trace_context import read_carrier, with_carrier
from cloudqueue.workers.testing import run_until_drained
from tests.support.cli import ok
from tests.support.event_loop_consumer import LoopConsumer
from tests.support.polling import eventually
from tests.support.tracing import named

SECRET = "c2VjcmV0LWtleS1ub3QtZm9yLWxvZ3M="
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def job(name: str = "job") -> Any:
    """A span of the test's own, current while the block runs (on this test's provider)."""
    return trace.get_tracer("tests").start_as_current_span(name)


def drain(
    storage: InMemoryQueueStorage, clock: VirtualClock, queue: str, item_type: Any
) -> list[Any]:
    """Run a listener over what is in ``queue``; return (item, the span current in the handler)."""
    seen: list[Any] = []
    listener: CloudQueueListener[Any] = CloudQueueListener(
        storage, CloudQueueLocation(queue), item_type, clock=clock, sleeper=clock
    )
    listener.subscribe(lambda item: seen.append((item, trace.get_current_span())))
    run_until_drained(listener)
    return seen


def sent_in_job(exporter: InMemorySpanExporter, queue: str) -> ReadableSpan:
    """The producer span of the test's publish (run_until_drained publishes nothing, outside)."""
    return only([span for span in named(exporter, f"send {queue}") if span.parent is not None])


def only(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, spans
    return spans[0]


def assert_continues(consumer: ReadableSpan, producer: ReadableSpan) -> None:
    """The consumer span is the producer's child and links to it."""
    assert consumer.kind == trace.SpanKind.CONSUMER
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]


def test_a_trace_started_by_a_producer_continues_in_the_consumers_span(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A batch published inside a job's span is handled in a consumer span of the same trace,
    the producer's child, with the messaging attributes; the handler runs inside it."""
    virtual_storage.create_queue("orders")
    publisher = Publisher(virtual_storage, "orders", dict, batch=True)
    with job("nightly-job") as nightly:
        publisher.publish_many([{"n": n} for n in range(3)])
    handled = drain(virtual_storage, virtual_clock, "orders", dict)

    producer = sent_in_job(spans, "orders")
    consumer = only(named(spans, "process orders"))
    assert producer.kind == trace.SpanKind.PRODUCER
    assert producer.parent is not None
    assert producer.parent.span_id == nightly.get_span_context().span_id
    assert_continues(consumer, producer)
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "azure_queue",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "orders",
        "messaging.message.id": consumer.attributes["messaging.message.id"],  # type: ignore[index]
        "messaging.azure_queue.message.dequeue_count": 1,
    }
    assert [item for item, _ in handled] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert {span.get_span_context().span_id for _, span in handled} == {consumer.context.span_id}


def test_on_the_event_loop_the_trace_continues_and_the_async_handler_runs_in_its_span(
    spans: InMemorySpanExporter, queue_name: str
) -> None:
    """The event-loop consumer has the tracing middleware of every listener (a generator,
    stepped on its loop): the consumer span continues the producer's trace, and the ``async
    def`` handler -- after an await too -- runs inside it."""
    storage = InMemoryQueueStorage()
    storage.create_queue(queue_name)
    with job():  # a batch: its envelope carries the trace context
        Publisher(storage, queue_name, dict, batch=True).publish_many([{"n": 1}, {"n": 2}])
    current: list[trace.Span] = []

    async def handle(item: dict[str, int]) -> None:
        await asyncio.sleep(0)
        current.append(trace.get_current_span())

    consumer = LoopConsumer(storage, queue_name, handle, MessageCodec(dict)).start()
    try:
        eventually(lambda: consumer.messages_processed == 1)
    finally:
        consumer.stop()
    span = only(named(spans, f"process {queue_name}"))
    assert_continues(span, sent_in_job(spans, queue_name))
    assert [s.get_span_context().span_id for s in current] == [span.context.span_id] * 2


def test_a_failing_handler_marks_the_consumer_span_failed_without_leaking_secrets(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """The handler's exception becomes an error status and an ``exception`` event whose message
    is redacted as the logs are."""
    virtual_storage.create_queue("orders")
    with job():
        Publisher(virtual_storage, "orders", dict, batch=True).publish_many([{"n": 1}, {"n": 2}])
    listener: CloudQueueListener[Any] = CloudQueueListener(
        virtual_storage,
        CloudQueueLocation("orders"),
        dict,
        clock=virtual_clock,
        sleeper=virtual_clock,
    )

    def handle(item: dict[str, int]) -> None:
        raise PermanentFailure(f"cannot bill {item['n']}: AccountKey={SECRET}")

    listener.subscribe(handle)
    run_until_drained(listener, fail_fast=False)
    consumer = only(named(spans, "process orders"))
    assert consumer.status.status_code == trace.StatusCode.ERROR
    events = [event for event in consumer.events if event.name == "exception"]
    assert [event.attributes["exception.type"] for event in events] == ["PermanentFailure"] * 2  # type: ignore[index]
    assert all(SECRET not in str(event.attributes) for event in events)
    assert "cannot bill 1" in str(events[0].attributes)


def test_single_items_stay_byte_for_byte_and_start_their_own_trace(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A single plain item is put exactly as its codec writes it (what Azure Functions reads);
    its consumer span, with no context to continue, is a root."""
    virtual_storage.create_queue("orders")
    with job():
        Publisher(virtual_storage, "orders", dict).publish({"n": 1})
    [message] = virtual_storage.peek_messages("orders", max_messages=1)
    assert message.content == MessageCodec(dict).encode({"n": 1})
    drain(virtual_storage, virtual_clock, "orders", dict)
    consumer = only(named(spans, "process orders"))
    assert consumer.parent is None
    assert consumer.links == ()


def test_trace_envelope_carries_the_context_of_single_items(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """With ``trace_envelope=True`` a single item travels in a one-item envelope with the
    context, and its consumer span continues the trace."""
    virtual_storage.create_queue("orders")
    with job():
        Publisher(virtual_storage, "orders", dict, trace_envelope=True).publish({"n": 1})
    handled = drain(virtual_storage, virtual_clock, "orders", dict)
    assert [item for item, _ in handled] == [{"n": 1}]
    assert_continues(only(named(spans, "process orders")), sent_in_job(spans, "orders"))


def test_cloud_events_carry_the_context_as_extension_attributes(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A CloudEvent gets the distributed-tracing extension's ``traceparent``; the consumer
    continues the trace and the handler sees the attribute among the event's extensions."""
    virtual_storage.create_queue("events")
    event: CloudEvent[Any] = CloudEvent(source="/tests", type="created", data={"n": 1})
    with job():
        Publisher(virtual_storage, "events", CloudEvent).publish(event)
    [message] = virtual_storage.peek_messages("events", max_messages=1)
    document = json.loads(base64.b64decode(message.content))
    assert document["data"] == {"n": 1}
    producer = sent_in_job(spans, "events")
    assert document["traceparent"].split("-")[1] == f"{producer.context.trace_id:032x}"
    [(received, _)] = drain(virtual_storage, virtual_clock, "events", CloudEvent)
    assert received.extensions["traceparent"] == document["traceparent"]
    assert_continues(only(named(spans, "process events")), producer)


def test_without_a_tracer_provider_no_span_starts_and_envelopes_stay_as_they_were(
    virtual_storage: InMemoryQueueStorage,
) -> None:
    """The API installed but no provider set (the application configured no SDK): a batch is
    put without trace fields, and handling it starts no span."""
    virtual_storage.create_queue("orders")
    Publisher(virtual_storage, "orders", dict, batch=True).publish_many([{"n": 1}, {"n": 2}])
    [message] = virtual_storage.peek_messages("orders", max_messages=1)
    assert read_carrier(message.content) == {}
    assert isinstance(consumer_span("orders", message), nullcontext)


def test_a_stamped_envelope_reads_as_before() -> None:
    """Trace fields beside the envelope's own leave its items as they were, for any listener."""
    storage = InMemoryQueueStorage()
    storage.create_queue("jobs")
    Publisher(storage, "jobs", str, batch=True).publish_many(["a", "b"])
    [message] = storage.peek_messages("jobs", max_messages=1)
    stamped = with_carrier(message.content, {"traceparent": TRACEPARENT, "tracestate": "k=v"})
    assert json.loads(stamped)[ENVELOPE_KEY]["traceparent"] == TRACEPARENT
    assert parse_envelope(stamped) == parse_envelope(message.content)
    assert open_message(stamped, None).texts == open_message(message.content, None).texts
    assert read_carrier(stamped) == {"traceparent": TRACEPARENT, "tracestate": "k=v"}


def test_the_context_is_left_out_where_it_has_no_place_or_room() -> None:
    """Plain text, an event that has its own context, and a message the fields would push past
    64 KiB all stay as they are."""
    carrier = {"traceparent": TRACEPARENT}
    event = json.dumps(
        {
            "specversion": "1.0",
            "id": "1",
            "source": "/",
            "type": "t",
            "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        }
    )
    assert with_carrier("hello", carrier) == "hello"
    assert with_carrier('{"n": 1}', carrier) == '{"n": 1}'
    assert with_carrier(event, carrier) == event
    full = json.dumps(
        {
            "specversion": "1.0",
            "id": "1",
            "source": "/",
            "type": "t",
            "data": "x" * (MAX_MESSAGE_BYTES - 80),
        }
    )
    assert with_carrier(full, carrier) == full
    assert with_carrier('{"specversion": "1.0"}', {}) == '{"specversion": "1.0"}'


def test_enqueue_continues_the_trace_named_by_traceparent(tmp_path: Path) -> None:
    """`cloudqueue enqueue --trace-envelope` with $TRACEPARENT set puts a message in that trace
    (the CLI process has no SDK: it passes the context on without recording spans)."""
    env = {
        **os.environ,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}",
        "TRACEPARENT": TRACEPARENT,
    }
    ok("enqueue", "jobs", "hello", "--trace-envelope", env=env)
    [message] = SqliteQueueStorage(tmp_path / "q.db").peek_messages("jobs", max_messages=1)
    assert read_carrier(message.content)["traceparent"].split("-")[1] == TRACEPARENT.split("-")[1]
    assert open_message(message.content, None).texts == [MessageCodec(str).encode("hello")]


def test_without_opentelemetry_nothing_changes_and_nothing_is_imported(tmp_path: Path) -> None:
    """With the package unimportable, a publish → listen round trip works, the message is the
    codec's text, and no opentelemetry module is loaded."""
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ImportError(f"blocked {name}")
        sys.meta_path.insert(0, Block())
        from cloudqueue.listener import InMemoryQueueStorage, MessageCodec, Publisher
        from cloudqueue.listener import tracing
        from cloudqueue.workers import QueueWorker
        from cloudqueue.workers.testing import run_until_drained
        class Echo(QueueWorker[dict]):
            queue_name = "jobs"
            def handle(self, item: dict) -> None:
                pass
        storage = InMemoryQueueStorage()
        storage.create_queue("jobs")
        Publisher(storage, "jobs", dict, trace_envelope=True).publish({"n": 1})
        [message] = storage.peek_messages("jobs", max_messages=1)
        assert message.content == MessageCodec(dict).encode({"n": 1}), message.content
        assert run_until_drained(Echo, [{"n": 2}, {"n": 3}], serial=True) == [{"n": 2}, {"n": 3}]
        print(tracing.enabled(), sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False []"


@pytest.fixture
def azure(azurite_connection_string: str) -> Iterator[AzureQueueStorage]:
    storage = AzureQueueStorage.from_connection_string(azurite_connection_string)
    yield storage
    storage.close()


def test_a_trace_continues_through_azurite(
    spans: InMemorySpanExporter, azure: QueueStorage, queue_name: str
) -> None:
    """The same round trip over real HTTP: a batch published in a span is handled by a
    listener thread in a consumer span that continues it."""
    azure.create_queue(queue_name)
    with job():
        Publisher(azure, queue_name, str, batch=True).publish_many(["a", "b"])
    done = threading.Event()
    listener: CloudQueueListener[str] = CloudQueueListener(
        azure, CloudQueueLocation(queue_name), str, dequeue_interval_s=0.05
    )
    listener.subscribe(lambda item: done.set() if item == "b" else None)
    listener.start_listener(1)
    try:
        assert done.wait(30)
        eventually(lambda: named(spans, f"process {queue_name}"), timeout_s=10)
    finally:
        assert listener.stop(10)
    assert_continues(
        only(named(spans, f"process {queue_name}")), only(named(spans, f"send {queue_name}"))
    )


# -- context from messages is a hint, never an instruction (issue 26, findings 1 and 13) -----


def envelope_with(fields: dict[str, Any]) -> str:
    """A one-item envelope as a publisher writes it, with ``fields`` set beside its own."""
    base = json.loads(inline_envelope(pack(["hello"])))[ENVELOPE_KEY]
    return json.dumps({ENVELOPE_KEY: {**base, **fields}})


def test_a_deeply_nested_envelope_is_poisoned_at_once_while_tracing(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """20,000 nested brackets in the envelope raise nothing in the consumer span: the message is
    poisoned at its first delivery (``over_limit``, naming decoding.max_json_depth) and the
    items behind it are handled."""
    virtual_storage.create_queue("orders")
    virtual_storage.put_message("orders", '{"$cloudqueue": ' + "[" * 20_000 + "]" * 20_000 + "}")
    virtual_storage.put_message("orders", json.dumps({"n": 1}))
    handled = drain(virtual_storage, virtual_clock, "orders", dict)
    assert [item for item, _ in handled] == [{"n": 1}]
    [poisoned] = virtual_storage.peek_messages("orders-poison", max_messages=32)
    record = json.loads(poisoned.content)
    assert (record["reason"], record["dequeue_count"]) == ("over_limit", 1)
    assert "decoding.max_json_depth" in record["error"]
    assert len(named(spans, "process orders")) == 2


def test_a_message_cannot_switch_off_the_consumers_tracing(
    spans: InMemorySpanExporter, virtual_clock: VirtualClock, virtual_storage: InMemoryQueueStorage
) -> None:
    """A traceparent whose sampled flag is off still gets a recorded consumer span: it starts a
    trace of its own (the consumer's sampler decides) and links to the producer's context."""
    virtual_storage.create_queue("orders")
    unsampled = TRACEPARENT[:-2] + "00"
    virtual_storage.put_message("orders", envelope_with({"traceparent": unsampled}))
    handled = drain(virtual_storage, virtual_clock, "orders", str)
    consumer = only(named(spans, "process orders"))
    assert [item for item, _ in handled] == ["hello"]
    assert consumer.parent is None
    assert consumer.context.trace_id != int(TRACEPARENT.split("-")[1], 16)
    assert [link.context.span_id for link in consumer.links] == [int(TRACEPARENT.split("-")[2], 16)]


@pytest.mark.parametrize(
    "traceparent",
    [
        TRACEPARENT.upper(),
        TRACEPARENT + "-extra",
        TRACEPARENT + "\n",
        "01" + TRACEPARENT[2:],
        "00-" + "0" * 32 + TRACEPARENT[35:],
        TRACEPARENT[:36] + "0" * 16 + "-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
    ],
)
def test_a_malformed_traceparent_is_ignored(traceparent: str) -> None:
    """Only W3C's version-00 form is read: anything else carries no context."""
    assert read_carrier(envelope_with({"traceparent": traceparent, "tracestate": "k=v"})) == {}


@pytest.mark.parametrize(
    "tracestate",
    [
        "k=v\n",
        "K=v",
        "k=v,k=w",
        "k=" + "v" * 600,
        ",".join(f"k{n}=v" for n in range(33)),
        "k=v=w",
        "=v",
        "\x1b[31m=red",
    ],
)
def test_a_malformed_tracestate_is_dropped_and_the_traceparent_kept(tracestate: str) -> None:
    """tracestate is checked against W3C's list-member grammar, 32 members and 512 characters."""
    carrier = read_carrier(envelope_with({"traceparent": TRACEPARENT, "tracestate": tracestate}))
    assert carrier == {"traceparent": TRACEPARENT}


def test_a_well_formed_tracestate_is_kept() -> None:
    """Vendor and multi-tenant keys, spaces around members: what W3C allows is read."""
    state = "congo=t61rcWkgMzE, rojo@vendor=00f067aa0ba902b7,k/_-*=a b"
    carrier = read_carrier(envelope_with({"traceparent": TRACEPARENT, "tracestate": state}))
    assert carrier == {"traceparent": TRACEPARENT, "tracestate": state}
