"""A worker's own retry policy: which failures are worth another try, when, and how many.

``Retry`` is a value a ``QueueWorker`` sets as its ``retry`` class attribute; the process-wide
settings (``listener.retry_delay_s``, ``poison.max_dequeue_count``) stay the default for workers
without one. Everything here is pure: the listener applies it through its ``DeliveryPolicy``
(delays and the number of deliveries) and the ``RetryPolicy`` middleware (giving up).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.queue_limits import MAX_VISIBILITY_TIMEOUT_S, is_hiding_delay

GIVE_UP_PREFIX = "give_up: "
"""How the poison reason of a message given up on by a ``Retry`` begins."""

MAX_REASON_CHARS = 300
"""The longest ``give_up: <Type>: <message>`` reason kept (the error field has it in full)."""


@dataclass(frozen=True, slots=True)
class Retry:
    """How one worker's failed messages are retried.

    * ``delays_s``: how long a failed message stays hidden before its next delivery, after the
      1st, 2nd, ... failure (the last repeats); empty: the settings' exponential back-off.
    * ``retry_on``: the exceptions worth retrying; any other gives up at once (when given).
    * ``give_up_on``: exceptions that give up at once: the message goes to the poison queue at
      its first failure, with ``give_up: <Type>: <message>`` as the reason.
    * ``max_deliveries``: deliveries before a message is poisoned (``poison.max_dequeue_count``
      when None).

    Example::

        class ChargeWorker(QueueWorker[Charge]):
            queue_name = "charges"
            retry = Retry(delays_s=(5, 30, 300), retry_on=(ConnectionError,), max_deliveries=4)
    """

    delays_s: tuple[float, ...] = ()
    retry_on: tuple[type[BaseException], ...] = ()
    give_up_on: tuple[type[BaseException], ...] = ()
    max_deliveries: int | None = None

    def __post_init__(self) -> None:
        # Lists are taken as tuples, so a policy stays hashable and cannot change under a worker.
        object.__setattr__(self, "delays_s", _delays(self.delays_s))
        object.__setattr__(self, "retry_on", _exception_classes(self.retry_on, "retry_on"))
        object.__setattr__(self, "give_up_on", _exception_classes(self.give_up_on, "give_up_on"))
        maximum = self.max_deliveries
        if maximum is not None and (
            isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1
        ):
            raise ConfigurationError(
                f"Retry(max_deliveries=...) must be an int >= 1, got {maximum!r}"
            )

    @property
    def classifies(self) -> bool:
        """True when some exceptions give up at once (the middleware is needed)."""
        return bool(self.retry_on or self.give_up_on)

    def gives_up_on(self, error: BaseException) -> bool:
        """True when ``error`` is not worth another try under this policy."""
        if self.give_up_on and isinstance(error, self.give_up_on):
            return True
        return bool(self.retry_on) and not isinstance(error, self.retry_on)

    def applied_to(self, policy: DeliveryPolicy) -> DeliveryPolicy:
        """The listener's delivery policy with this worker's delays and deliveries."""
        return replace(
            policy,
            max_dequeue_count=self.max_deliveries or policy.max_dequeue_count,
            retry_delays_s=self.delays_s or policy.retry_delays_s,
        )


def give_up_reason(error: BaseException) -> str:
    """The poison reason for giving up on ``error``: ``give_up: <Type>: <message>``."""
    return f"{GIVE_UP_PREFIX}{type(error).__name__}: {error}"[:MAX_REASON_CHARS]


def _delays(delays: Any) -> tuple[float, ...]:
    if isinstance(delays, int | float):
        delays = (delays,)
    try:
        values = tuple(delays)
    except TypeError:
        raise ConfigurationError(f"Retry(delays_s=...) must be seconds, got {delays!r}") from None
    for value in values:
        if not is_hiding_delay(value):
            raise ConfigurationError(
                f"Retry(delays_s=...) must be seconds from 0 to {MAX_VISIBILITY_TIMEOUT_S} "
                f"(a message is hidden at most 7 days), got {value!r}"
            )
    return values


def _exception_classes(classes: Any, name: str) -> tuple[type[BaseException], ...]:
    if isinstance(classes, type):
        classes = (classes,)
    try:
        values = tuple(classes)
    except TypeError:
        raise ConfigurationError(
            f"Retry({name}=...) must name exception classes, got {classes!r}"
        ) from None
    for value in values:
        if not (isinstance(value, type) and issubclass(value, BaseException)):
            raise ConfigurationError(
                f"Retry({name}=...) must name exception classes, got {value!r}"
            )
    return values


__all__ = ["GIVE_UP_PREFIX", "Retry", "give_up_reason"]
