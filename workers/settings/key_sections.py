"""The settings sections of message keys, which a worker class may override: ``idempotency``
(skip a key completed within a window), ``limits`` (at most N of a key at a time) and ``cancel``
(delete the messages of cancelled keys). See ``cloudqueue.listener.wire.keys`` for what a key is."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from cloudqueue.workers.settings.worker_sections import Section, check_redis_url

MAX_WINDOW_S = 366 * 24 * 3600


class IdempotencySettings(Section):
    """Idempotent handling: a message whose key completed within the window is not handled."""

    window_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WINDOW_S,
        allow_inf_nan=False,
        description="remember each completed key this long and delete later messages of it "
        "unhandled (duplicate_skipped); 0: off",
    )


class LimitsSettings(Section):
    """Per-key concurrency: at most ``per_key`` messages of one key handled at a time."""

    per_key: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="messages of one key (the worker's concurrency_key, else the message's key) "
        "handled at once per worker, or per fleet with url; 0: no limit",
    )
    url: SecretStr | None = Field(
        default=None,
        description="redis://host:port/db holding per_key across every process (unset: per "
        "worker process); may be the Redis of triggers.url",
    )
    lease_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="a fleet permit's lease, renewed while held: a dead holder's permit is free "
        "after this long",
    )

    _redis_url = field_validator("url")(check_redis_url)

    def url_value(self) -> str | None:
        return self.url.get_secret_value() if self.url is not None else None


class CancelSettings(Section):
    """Cancelling by key (``cloudqueue cancel``, ``Publisher.cancel``)."""

    check: bool = Field(
        default=True,
        description="look up each keyed message's key in the queue's store before handling it "
        "and delete it if cancelled (on Azure: ~3 blob transactions per keyed message); false: "
        "cancels of this worker's keys take no effect",
    )


__all__ = ["CancelSettings", "IdempotencySettings", "LimitsSettings"]
