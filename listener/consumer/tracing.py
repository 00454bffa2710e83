"""Each message handled in a CONSUMER span that continues its producer's trace (with the
``otel`` extra): a middleware every listener has, a no-op until the application sets a tracer
provider (see ``cloudqueue.listener.tracing``)."""

from __future__ import annotations

from typing import Any

from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.tracing import consumer_span, record_failure, tracing_on


class ConsumerTracing(Middleware):
    """Wraps the handling of each message in its consumer span; a handler's failure marks it.
    A generator (``yield`` for ``call_next()``): on every listener, it must cost no thread hop
    on the event-loop consumer (``cloudqueue.listener.consumer.wrapping``)."""

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        if not tracing_on():  # asked per message: a provider may be set at any time
            yield
            return
        # The envelope the processor parsed carries the producer's context: no second parse.
        with consumer_span(context.queue_name, context.message, context.envelope):
            yield
            for item in context.failures:
                for failure in item.failures:
                    record_failure(failure)


__all__ = ["ConsumerTracing"]
