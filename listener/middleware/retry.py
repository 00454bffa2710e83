"""A worker's ``Retry`` policy on the seam: give up at once on the failures it names.

The policy's delays and its number of deliveries need no middleware: they become the listener's
``DeliveryPolicy`` (``Retry.applied_to``), so every retry -- a failed item, a message over its
time limit -- waits as the worker asked, by visibility, with no thread sleeping. What is left is
the judgement: after the handler failed, an exception in ``give_up_on``, or not in ``retry_on``
when that is given, poisons the message now, with ``give_up: <Type>: <message>`` as its reason.
Only the failed items are given up on: those of a batch that succeeded stay done.
"""

from __future__ import annotations

from typing import Any

import structlog

from cloudqueue.listener.consumer.item_failures import judged
from cloudqueue.listener.consumer.middleware import CallNext, MessageContext, Middleware
from cloudqueue.listener.consumer.wrapping import Wrapper
from cloudqueue.listener.errors import PermanentFailure, RetryLater, TimeLimitExceeded
from cloudqueue.listener.policies.retry import Retry, give_up_reason

log = structlog.get_logger(__name__)

NEVER_JUDGED = (PermanentFailure, RetryLater, TimeLimitExceeded)
"""Failures with their own path: ``PermanentFailure`` is poisoned as such, ``RetryLater`` waits
the delay its handler asked for, and a delivery past its time limit is retried (then poisoned as
``time_limit``) whatever the policy names."""


class RetryPolicy(Middleware):
    """Gives up on a message at its first failure when the worker's ``Retry`` says so (a
    generator: ``yield`` for ``call_next()``, so no thread hop on the event-loop consumer)."""

    def __init__(self, retry: Retry) -> None:
        self.retry = retry

    def around_handle(self, context: MessageContext[Any], call_next: CallNext) -> Wrapper:
        yield
        if not context.failures or context.decision is not None:
            return
        for item in context.failures:
            for failure in item.failures:
                error = judged(failure)
                if not isinstance(error, NEVER_JUDGED) and self.retry.gives_up_on(error):
                    log.warning(
                        "give_up",
                        message_id=context.message_id,
                        error_type=type(error).__name__,
                        deliveries=context.deliveries,
                    )
                    context.give_up(give_up_reason(error), f"{type(error).__name__}: {error}")
                    return

    def __repr__(self) -> str:
        return f"RetryPolicy({self.retry!r})"


__all__ = ["RetryPolicy", "judged"]
