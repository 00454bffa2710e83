"""OpenTelemetry tracing across the queue, when ``opentelemetry-api`` is installed
(``pip install 'cloudqueue[otel]'``).

* A ``Publisher`` call (and so ``cloudqueue enqueue``) runs in a PRODUCER span ``send <queue>``
  and writes that span's W3C trace context into each message it puts, where the message has room
  for it (``cloudqueue.listener.wire.trace_context``). ``cloudqueue enqueue`` continues the trace
  named by the ``TRACEPARENT`` / ``TRACESTATE`` environment variables, when set.
* The listener handles each message inside a CONSUMER span ``process <queue>``: a child of the
  producer's context when the message carries one, with a link to it as well (the messaging
  conventions' way to relate the two), so spans the handler starts join the producer's trace.
  A handler's exception marks that span failed (``record_failure``). A producer context whose
  sampled flag is off is linked but not made the parent: the span starts a trace of its own and
  the consumer's sampler decides, so a message (whoever wrote it) cannot switch off the
  consumer's tracing. Malformed context is ignored (``cloudqueue.listener.wire.trace_context``).

Attributes follow the OpenTelemetry messaging semantic conventions: ``messaging.system``
(``azure_queue``: the conventions list no value for Azure Storage Queues), ``messaging.operation
.type`` / ``.name``, ``messaging.destination.name``, ``messaging.message.id``,
``messaging.batch.message_count`` and ``messaging.azure_queue.message.dequeue_count`` (named as
the conventions name Service Bus's delivery count).

Without the package every function here returns a no-op and nothing is imported: messages are
put byte for byte as before. The API alone records nothing; an SDK (``opentelemetry-sdk``) with an
exporter, configured by the application, makes the spans real. Until the application sets a
tracer provider, no span is started at all (a no-op span per message would still cost about as
much as the rest of the listener's work on it); a context already current, such as the one
``TRACEPARENT`` names, is still written into the messages.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cloudqueue.listener.imports import extra_installed
from cloudqueue.listener.redaction import redact
from cloudqueue.listener.stores.storage import QueueMessage
from cloudqueue.listener.wire.envelope import Envelope
from cloudqueue.listener.wire.trace_context import (
    TRACEPARENT,
    TRACESTATE,
    Carrier,
    carrier_of,
    read_carrier,
    with_carrier,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

SYSTEM = "azure_queue"
TRACER_NAME = "cloudqueue"
DEQUEUE_COUNT = "messaging.azure_queue.message.dequeue_count"

UNPARSED = object()
"""``consumer_span``'s default: the caller has not parsed the message's envelope."""

SentCounter = Callable[[int], None]
"""Told how many messages a publish call put, for the producer span's batch count."""


@functools.cache
def enabled() -> bool:
    """True when opentelemetry-api can be imported (checked once)."""
    return extra_installed("opentelemetry.trace")


def _not_counted(_messages: int) -> None:
    """The sent counter when tracing is off."""


def producer_span(queue_name: str) -> AbstractContextManager[SentCounter]:
    """The PRODUCER span around one publish call; it yields the callable to report how many
    messages were put."""
    tracer = _tracer()
    if tracer is None:
        return nullcontext(_not_counted)
    return _producer_span(tracer, queue_name)


def stamp(content: str, *, wrap_plain: bool = False) -> str:
    """The message text carrying the current trace context where it can (see
    ``cloudqueue.listener.wire.trace_context``); unchanged without a valid context or the
    package."""
    if not enabled():
        return content
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return with_carrier(content, carrier, wrap_plain=wrap_plain)


def consumer_span(
    queue_name: str, message: QueueMessage, envelope: Envelope | object | None = UNPARSED
) -> AbstractContextManager[object]:
    """The CONSUMER span one message is handled in, continuing the producer's trace. The
    listener passes the ``envelope`` it parsed (None for a plain item), within its limits;
    without one, the message is parsed here (never raising)."""
    tracer = _tracer()
    if tracer is None:
        return nullcontext()
    if isinstance(envelope, Envelope) or envelope is None:
        carrier = carrier_of(message.content, envelope)
    else:
        carrier = read_carrier(message.content)
    return _consumer_span(tracer, queue_name, message, carrier)


def tracing_on() -> bool:
    """True when consumer spans would be recorded now (the package, and a provider set)."""
    return _tracer() is not None


def record_failure(error: Exception) -> None:
    """Mark the current consumer span failed by a handler's exception: an ``exception`` event
    (type and message, secrets redacted as in the logs; no traceback) and an error status."""
    if _tracer() is None:
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    error_type = type(error).__qualname__
    span.add_event(
        "exception",
        {"exception.type": error_type, "exception.message": redact(str(error))},
    )
    span.set_status(trace.Status(trace.StatusCode.ERROR, error_type))


def context_from_environment(
    environment: Mapping[str, str] = os.environ,
) -> AbstractContextManager[object]:
    """Make the trace named by ``TRACEPARENT`` (and ``TRACESTATE``) current, for a command
    started inside a traced job; nothing when unset or without the package."""
    parent = environment.get(TRACEPARENT.upper())
    if not enabled() or not parent:
        return nullcontext()
    carrier = {TRACEPARENT: parent, TRACESTATE: environment.get(TRACESTATE.upper(), "")}
    return _attached(carrier)


def _tracer() -> Tracer | None:
    """cloudqueue's tracer, or None without the package or before a provider is set."""
    # Asked once per message: the import and the placeholder types are looked up once.
    if not enabled():
        return None
    trace, placeholders = _trace_api()
    # Until a provider is set, get_tracer_provider() looks in os.environ on every call (about
    # 1 µs a message); the API's own global tells the same without that lookup. A version
    # without that global (getattr falls back to the module) simply takes the long way.
    if getattr(trace, "_TRACER_PROVIDER", trace) is None and not _provider_in_environment():
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, placeholders):
        return None
    return _tracer_of(provider)


@functools.cache
def _provider_in_environment() -> bool:
    """True when ``OTEL_PYTHON_TRACER_PROVIDER`` names a provider for the API to load."""
    return bool(os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"))


@functools.cache
def _trace_api() -> tuple[ModuleType, tuple[type, ...]]:
    """``opentelemetry.trace`` and its providers that stand in until one is set."""
    from opentelemetry import trace

    return trace, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


@functools.lru_cache(maxsize=4)
def _tracer_of(provider: TracerProvider) -> Tracer:
    return provider.get_tracer(TRACER_NAME)


@contextmanager
def _producer_span(tracer: Tracer, queue_name: str) -> Iterator[SentCounter]:
    from opentelemetry import trace

    with tracer.start_as_current_span(
        f"send {queue_name}",
        kind=trace.SpanKind.PRODUCER,
        attributes=_attributes(queue_name, "send"),
    ) as span:

        def sent(messages: int) -> None:
            if messages != 1:
                span.set_attribute("messaging.batch.message_count", messages)

        yield sent


@contextmanager
def _consumer_span(
    tracer: Tracer, queue_name: str, message: QueueMessage, carrier: Carrier
) -> Iterator[object]:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    producer = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    links = []
    if producer is not None:
        producer_span_context = trace.get_current_span(producer).get_span_context()
        if producer_span_context.is_valid:
            links.append(trace.Link(producer_span_context))
        if not producer_span_context.trace_flags.sampled:
            producer = Context()  # linked, not the parent: the consumer's own sampler decides
    attributes = {
        **_attributes(queue_name, "process"),
        "messaging.message.id": message.id,
        DEQUEUE_COUNT: message.dequeue_count,
    }
    with tracer.start_as_current_span(
        f"process {queue_name}",
        context=producer,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
    ) as span:
        yield span


@contextmanager
def _attached(carrier: dict[str, str]) -> Iterator[object]:
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield None
    finally:
        context.detach(token)


def _attributes(queue_name: str, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": queue_name,
    }


__all__ = [
    "SYSTEM",
    "consumer_span",
    "context_from_environment",
    "enabled",
    "producer_span",
    "record_failure",
    "stamp",
]
