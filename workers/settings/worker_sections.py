"""The settings sections of one worker's listener, which a worker class may override.

``listener``, ``backoff``, ``scaling``, ``poison``, ``rate_limit``, ``decoding`` and
``batch``: how a listener fetches, idles, scales, retries and poisons, how fast it may go, how much
one message may cost to decode, and how a batch handler's calls are gathered. A worker class's
``settings`` replace fields of these (``CloudQueueSettings.for_worker``); the sections of the
process as a whole are in ``cloudqueue.workers.settings.process_sections``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from cloudqueue.listener.consumer.in_flight import DEFAULT_CONCURRENCY, MAX_CONCURRENCY
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import check_object_path, import_object
from cloudqueue.listener.policies.priority import Priority, PriorityMode
from cloudqueue.listener.policies.scaling_rules import (
    ScalingRule,
    drain_time,
    import_rule,
    proportional,
    steps,
)
from cloudqueue.listener.stores.partition_names import MAX_PARTITIONS
from cloudqueue.listener.stores.storage import MAX_BATCH_SIZE, MAX_VISIBILITY_TIMEOUT_S
from cloudqueue.listener.wire.codec import Encoding
from cloudqueue.listener.wire.limits import MAX_JSON_DEPTH_CEILING, DecodingLimits

if TYPE_CHECKING:
    from cloudqueue.listener.consumer.middleware import Middleware

BUILT_IN_RULES = ("steps", "proportional", "drain_time")
MAX_BATCH_ITEMS = 256
"""The most items one ``handle_batch`` call may get (gathered across gets of at most 32)."""
WORKER_SECTIONS = ("listener", "backoff", "scaling", "poison", "rate_limit", "decoding", "batch")
KEY_SECTIONS = ("idempotency", "limits", "cancel")
"""The sections of message keys (``cloudqueue.workers.settings.key_sections``), overridable too."""
"""The sections a worker class's ``settings`` may override."""


class Section(BaseModel):
    """A settings section: an unknown key is an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


def check_redis_url(url: SecretStr | None) -> SecretStr | None:
    """A Redis URL setting (triggers, fleet limits): ValueError unless redis://, rediss:// or
    unix:// (the URL itself, a secret, is never quoted)."""
    if url is not None and not url.get_secret_value().startswith(
        ("redis://", "rediss://", "unix://")
    ):
        raise ValueError("must be a redis://, rediss:// or unix:// URL")
    return url


class ListenerSettings(Section):
    """How each worker's listener fetches."""

    threads: int = Field(default=1, ge=1, description="dequeue threads started per worker")
    concurrency: int = Field(
        default=DEFAULT_CONCURRENCY,
        ge=1,
        le=MAX_CONCURRENCY,
        description="messages each dequeue thread keeps in handling at once (1: handle inline)",
    )
    dequeue_batch_size: int = Field(default=MAX_BATCH_SIZE, ge=1, le=MAX_BATCH_SIZE)
    visibility_timeout_s: int = Field(default=30, ge=1, le=MAX_VISIBILITY_TIMEOUT_S)
    max_error_delay_s: float = Field(default=30.0, ge=0, description="longest back-off on errors")
    encoding: Encoding = Field(
        default="auto",
        description="how message text carries items: auto (read plain or base64, publish base64), "
        "base64 (as Azure Functions), plain (as the SDKs' defaults)",
    )
    # A retry delay becomes a visibility timeout: the service refuses more than 7 days.
    retry_delay_s: float = Field(
        default=1.0, ge=0, le=MAX_VISIBILITY_TIMEOUT_S, description="base of the retry back-off"
    )
    max_retry_delay_s: float = Field(
        default=60.0, ge=0, le=MAX_VISIBILITY_TIMEOUT_S, description="longest retry back-off"
    )
    renew_visibility: bool = Field(default=True, description="extend held messages' visibility")
    create_queues: bool = Field(
        default=True,
        description="create the queue and its -poison queue at start; false for a SAS or role "
        "that may not create queues (create both beforehand)",
    )
    partitions: int = Field(
        default=1,
        ge=1,
        le=MAX_PARTITIONS,
        description="physical queues <queue>-p0 ... behind the queue (1: the queue itself)",
    )
    drain_partitions: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PARTITIONS,
        description="while repartitioning: the old partition count, read until its queues empty",
    )
    priority: PriorityMode = Field(
        default="strict",
        description="for a worker on several queues: strict (a get takes the highest queue "
        "with work) or weighted (gets shared by listener.weights; none with work starves)",
    )
    weights: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None,
        description="for priority = weighted: one whole number per queue, in the order of "
        "queue_name (3, 1: three gets in four to the first while both have work)",
    )
    time_limit_s: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="longest a handler may run for one message (0: no limit); past it the "
        "message is released for a retry, then poisoned as time_limit",
    )
    max_stuck_threads: int = Field(
        default=8,
        ge=1,
        description="handler threads still running past time_limit_s beyond which /readyz fails "
        "and `cloudqueue run --processes N` recycles the process",
    )
    middleware: list[str] = Field(
        default_factory=list,
        description="middleware around each message, 'package.module:Class' (made with no "
        "arguments), after the worker's own; imported by 'cloudqueue run'",
    )
    event_loop: Literal["threads", "single"] = Field(
        default="threads",
        description="where an async def handle's messages are fetched and settled: threads "
        "(dequeue threads, each handler awaited on the worker's event loop) or single (one "
        "event loop fetches, handles and settles, no thread per message; async def handle or "
        "handle_batch only)",
    )
    loop_blocked_after_s: float = Field(
        default=1.0,
        gt=0,
        description="event_loop = single: a handler holding the loop this long (a blocking call "
        "in async def handle) is logged as event_loop_blocked, naming it",
    )

    @field_validator("middleware")
    @classmethod
    def _middleware_paths(cls, paths: list[str]) -> list[str]:
        # The form only: the modules are imported by `cloudqueue run` (build_middleware).
        return [check_object_path(path, what="middleware") for path in paths]

    def priority_policy(self) -> Priority:
        """How a worker on several queues shares its gets among them."""
        return Priority(self.priority, tuple(self.weights or ()))

    def build_middleware(self) -> list[Middleware]:
        """The middleware the settings name, imported and made (ConfigurationError if not)."""
        # Imported here, as the middleware are: reading settings should not load the loop's parts.
        from cloudqueue.listener.consumer.middleware import make_middleware

        return [
            make_middleware(import_object(path, what="middleware"), path)
            for path in self.middleware
        ]

    @model_validator(mode="before")
    @classmethod
    def _base64_is_an_encoding(cls, data: Any) -> Any:
        """The older boolean ``base64`` still works, as ``encoding = base64 | plain``."""
        if isinstance(data, dict) and "base64" in data:
            data = dict(data)
            wrapped = str(data.pop("base64")).strip().lower() in ("true", "1", "yes", "on")
            data.setdefault("encoding", "base64" if wrapped else "plain")
        return data


class BatchSettings(Section):
    """How a worker with ``handle_batch`` gathers items into calls
    (``cloudqueue.workers.host.batch_handler``)."""

    max_items: int = Field(
        default=32, ge=1, le=MAX_BATCH_ITEMS, description="most items in one handle_batch call"
    )
    max_wait_s: float = Field(
        default=1.0,
        ge=0,
        le=MAX_VISIBILITY_TIMEOUT_S,
        allow_inf_nan=False,
        description="longest a batch waits to fill before handle_batch is called with fewer",
    )


class PoisonSettings(Section):
    """When a message is given up on and moved to ``<queue>-poison``."""

    max_dequeue_count: int = Field(default=5, ge=1, description="deliveries before poisoning")


_DEFAULT_LIMITS = DecodingLimits()


class DecodingSettings(Section):
    """The most work one message may cost before its items are built
    (``cloudqueue.listener.wire.limits``); a message over a limit is poisoned at once, reason
    ``over_limit``."""

    max_items_per_message: int = Field(
        default=_DEFAULT_LIMITS.max_items_per_message,
        ge=1,
        description="items in one batch message or stored payload",
    )
    max_inflated_bytes_per_message: int = Field(
        default=_DEFAULT_LIMITS.max_inflated_bytes_per_message,
        ge=1,
        description="bytes the gzip data of a message carried inline may inflate to",
    )
    max_blob_payload_bytes: int = Field(
        default=_DEFAULT_LIMITS.max_blob_payload_bytes,
        ge=1,
        description="bytes of a stored (claim-check) payload, as stored and once inflated",
    )
    max_json_depth: int = Field(
        default=_DEFAULT_LIMITS.max_json_depth,
        ge=1,
        le=MAX_JSON_DEPTH_CEILING,
        description="levels of nested JSON objects and arrays in an envelope or a JSON item",
    )
    max_json_values_per_message: int = Field(
        default=_DEFAULT_LIMITS.max_json_values_per_message,
        ge=1,
        description="JSON values in all of a message's items (each , : [ { counts): bounds the "
        "memory decoding may build, whatever the items' shape",
    )

    def limits(self) -> DecodingLimits:
        """The listener's limits these settings describe."""
        return DecodingLimits(**self.model_dump())


class BackoffSettings(Section):
    """Idle polling: min_idle_s + (2^n - 1) x U(0.8, 1.2) x delta_backoff_s, up to max_idle_s."""

    delta_backoff_s: float = Field(default=0.1, gt=0)
    min_idle_s: float = Field(default=0.0, ge=0)
    max_idle_s: float = Field(default=1.5, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> BackoffSettings:
        if self.max_idle_s < self.min_idle_s:
            raise ValueError("max_idle_s must be >= min_idle_s")
        return self


class ScalingSettings(Section):
    """Thread bounds and the rule that turns queue depth into a thread count (``[scaling]``).

    The ``scaling`` section of ``CloudQueueSettings``; in code, e.g.
    ``CloudQueueSettings(scaling=ScalingSettings(max_threads=8, rule="drain_time"))``.
    ``rule`` picks the scaling rule: ``proportional`` (one thread per ``messages_per_thread``
    waiting), ``steps`` (the ``steps`` table of depth and threads), ``drain_time`` (enough threads
    to drain within ``target_drain_s``) or a ``package.module:callable`` of your own.
    """

    min_threads: int = Field(default=1, ge=0)
    max_threads: int = Field(default=16, ge=1)
    rule: str = Field(
        default="proportional",
        description="steps | proportional | drain_time | package.module:callable",
    )
    steps: list[tuple[int, int]] = Field(default=[(0, 1), (100, 10), (1000, 50)])
    messages_per_thread: int = Field(default=32, gt=0)
    target_drain_s: float = Field(default=30.0, gt=0)
    assumed_rate_per_s: float = Field(default=10.0, gt=0)
    rescale_interval_s: float = Field(default=1.0, gt=0)
    scale_in_delay_s: float = Field(default=15.0, ge=0)
    cpu_saturation_cores: float = Field(default=0.9, gt=0)
    depth_refresh_s: float = Field(
        default=5.0,
        gt=0,
        description="while work flows, count the queue at least this often for the figures "
        "(status line, /metrics): at most 3600 / depth_refresh_s counts an hour",
    )

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, rule: str) -> str:
        if rule not in BUILT_IN_RULES and ":" not in rule:
            raise ValueError(
                f"unknown rule {rule!r}: use one of {', '.join(BUILT_IN_RULES)} "
                "or 'package.module:callable'"
            )
        if ":" in rule:
            try:  # the form only: the module is imported by `cloudqueue run` (build_rule)
                check_object_path(rule, what="custom rule")
            except ConfigurationError as error:
                raise ValueError(str(error)) from error
        return rule

    @model_validator(mode="after")
    def _bounds(self) -> ScalingSettings:
        if self.min_threads > self.max_threads:
            raise ValueError(
                f"min_threads ({self.min_threads}) must not exceed max_threads ({self.max_threads})"
            )
        return self

    def build_rule(self) -> ScalingRule:
        """The ``ScalingRule`` these settings name (a custom rule's module is imported here)."""
        if self.rule == "steps":
            return steps(self.steps)
        if self.rule == "proportional":
            return proportional(self.messages_per_thread)
        if self.rule == "drain_time":
            return drain_time(self.target_drain_s, assumed_rate_per_s=self.assumed_rate_per_s)
        try:
            return import_rule(self.rule)
        except ConfigurationError as error:
            raise ConfigurationError(f"invalid setting scaling.rule: {error}") from None


class RateLimitSettings(Section):
    """A ceiling on messages handled a second, for downstream systems that cannot take more."""

    max_messages_per_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="per worker, across its threads (unset: no limit)",
    )
    fleet: bool = Field(
        default=False,
        description="hold the limit across every process on the queue, through triggers.url",
    )
    fleet_max_waiting: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="the most messages the whole fleet may have waiting for their turn at once "
        "(about processes x scaling.max_threads): a wait read from Redis beyond that many "
        "intervals was not written by a limiter, and is ignored with a warning",
    )

    @model_validator(mode="after")
    def _fleet_needs_a_limit(self) -> RateLimitSettings:
        if self.fleet and self.max_messages_per_s is None:
            raise ValueError("fleet = true needs max_messages_per_s")
        return self
