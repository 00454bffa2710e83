"""Where a failed delivery goes: the settlement rules as pure decisions.

Shared by the threaded ``settlement`` and the event loop's ``event_loop.settling``, so both paths
retry, re-publish and poison alike; no storage call and no clock here, the random source (for the
back-off's jitter) passed in.

* ``judge``: a message failed as a whole -- poisoned when its failure is permanent or at its last
  allowed delivery, else hidden for the delay asked for or the delivery policy's back-off.
* ``judge_items``: a message whose handler failed on some of its items (a publisher's batch):
  when others succeeded, the failed items go on in a message of their own (its ``remainder``),
  which ``judge`` then sends to the poison queue or back after the back-off; when all failed (or
  the failed ones would not fit in a message), the whole message is judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cloudqueue.listener.consumer.item_failures import (
    ItemFailure,
    describe_items,
    is_permanent,
    judged,
    retry_later_s,
)
from cloudqueue.listener.errors import PermanentFailure, RetryLater
from cloudqueue.listener.policies.backoff import RandomSource
from cloudqueue.listener.policies.delivery import DeliveryPolicy, exhausted, retry_visibility_s
from cloudqueue.listener.producer.republish import remainder_content

RETRY_LATER = "retry_later"
"""The reason of a message whose handler raised ``RetryLater``: it waits the delay asked for."""


def retry_log_level(reason: str | None) -> str:
    """The level a retry is logged at: info when the handler asked for it (``RetryLater``: no
    fault to look into), else warning."""
    return "info" if reason == RETRY_LATER else "warning"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a failed delivery goes: the poison queue (with ``poison_reason``) or back to the
    queue in ``retry_in_s`` seconds (with ``reason``, when the failure gave one)."""

    poison_reason: str | None
    retry_in_s: int = 0
    reason: str | None = None


def judge(
    deliveries: int,
    policy: DeliveryPolicy,
    rng: RandomSource,
    *,
    permanent: bool = False,
    reason: str | None = None,
    delay_s: float | None = None,
) -> Verdict:
    """A delivery failed (its ``deliveries``-th, earlier messages of its items included):
    ``permanent`` (a ``PermanentFailure``, a middleware gave up), ``reason`` and ``delay_s``
    (asked by the handler or a middleware; None: the back-off) say how."""
    if permanent:
        return Verdict(reason or "permanent_failure")
    if exhausted(deliveries, policy):
        return Verdict(reason or "max_dequeue_count_exceeded")
    if delay_s is None:
        return Verdict(None, retry_visibility_s(deliveries, policy, rng), reason)
    return Verdict(None, round(delay_s), reason)


def judge_failure(
    failure: BaseException,
    deliveries: int,
    policy: DeliveryPolicy,
    rng: RandomSource,
    *,
    reason: str | None = None,
) -> Verdict:
    """``judge`` for a message failed as a whole by ``failure``: permanent for a
    ``PermanentFailure``, the delay asked for a ``RetryLater`` (reason ``retry_later``)."""
    failure = judged(failure)
    if isinstance(failure, PermanentFailure):
        return judge(deliveries, policy, rng, permanent=True, reason=reason)
    if isinstance(failure, RetryLater):
        asked_s = math.ceil(failure.visibility_s)
        return judge(deliveries, policy, rng, reason=reason or RETRY_LATER, delay_s=asked_s)
    return judge(deliveries, policy, rng, reason=reason)


@dataclass(frozen=True, slots=True)
class ItemsVerdict:
    """What becomes of a message whose handler failed on some or all of its items."""

    error: str
    """The failures in one line (for a batch, each failed item named by its position)."""
    verdict: Verdict
    """Where the failed items go: the remainder's verdict, or the whole message's."""
    remainder: str | None
    """The failed items as the content of a message of their own, when other items succeeded;
    None when the whole message goes (all failed, or the failed ones would not fit)."""
    asked: bool
    """The handler asked for the delay (``RetryLater``): a retry, no fault."""


def judge_items(
    failed: Sequence[ItemFailure],
    *,
    count: int,
    attempts: int,
    deliveries: int,
    key: str | None,
    policy: DeliveryPolicy,
    rng: RandomSource,
    permanent: bool = False,
    reason: str | None = None,
    delay_s: float | None = None,
) -> ItemsVerdict:
    """The ``failed`` items of a message of ``count`` (delivered ``attempts`` times in earlier
    messages, ``deliveries`` in all; carrying ``key``); ``permanent``, ``reason`` and
    ``delay_s`` carry a middleware's decision about the failure."""
    error = describe_items(failed, count=count, batched=count > 1 or attempts > 0)
    permanent = permanent or is_permanent(failed)
    asked_s = None if permanent or delay_s is not None else retry_later_s(failed)
    if asked_s is not None:  # the handler said when: its delay, not the back-off
        delay_s, reason = asked_s, reason or RETRY_LATER
    remainder = None
    if len(failed) < count:  # the other items were handled: they are not delivered again
        texts = [item.text for item in failed]
        remainder = remainder_content(texts, attempts=deliveries, key=key)
    verdict = judge(deliveries, policy, rng, permanent=permanent, reason=reason, delay_s=delay_s)
    return ItemsVerdict(error, verdict, remainder, asked=asked_s is not None)


__all__ = [
    "RETRY_LATER",
    "ItemsVerdict",
    "Verdict",
    "judge",
    "judge_failure",
    "judge_items",
    "retry_log_level",
]
