"""Settings for a worker process: one typed object, validated before any queue is touched.

Sources, highest priority first: values passed in code (the CLI's flags), environment variables
``CLOUDQUEUE_*`` (nested with ``__``: ``CLOUDQUEUE_SCALING__MAX_THREADS=8``), a ``.env`` file, a
TOML file (``--config``/``CLOUDQUEUE_CONFIG``, else ``config/cloudqueue.toml`` when present),
then the defaults. Files found in the working folder rather than named are refused when another
account could have written them (``workers.settings_files``). The storage is chosen by
``CLOUDQUEUE_CONNECTION_STRING``: an Azure Storage connection string, ``sqlite:///path``,
``memory://``, or unset for ``.cloudqueue/queues.db``.

Each source's keys are checked before they are merged (``workers.settings_keys``): a misspelt
name is an error naming the source and the closest valid key, never a silent default.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from listener.consumer.in_flight import DEFAULT_CONCURRENCY, MAX_CONCURRENCY
from listener.consumer.middleware import Middleware, make_middleware
from listener.errors import ConfigurationError
from listener.imports import check_object_path, import_object
from listener.policies.delivery import DeliveryPolicy
from listener.policies.scaling_rules import (
    ScalingRule,
    drain_time,
    import_rule,
    proportional,
    steps,
)
from listener.scaling.scaler import ScalingPolicy
from listener.simulation.cost import DEFAULT_PRICE_PER_10K_USD
from listener.stores.connection import describe_storage
from listener.stores.partition_names import MAX_PARTITIONS
from listener.stores.storage import MAX_BATCH_SIZE, MAX_VISIBILITY_TIMEOUT_S
from listener.wire.codec import Encoding
from listener.wire.limits import MAX_JSON_DEPTH_CEILING, DecodingLimits
from workers.settings_files import check_found_dotenv, found_file
from workers.settings_keys import (
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    CheckedSource,
    check_keys,
    env_label,
)

DEFAULT_CONFIG_FILE = Path("config/cloudqueue.toml")
BUILT_IN_RULES = ("steps", "proportional", "drain_time")
WORKER_SECTIONS = ("listener", "backoff", "scaling", "poison", "rate_limit", "decoding")
_EXAMPLE = '{"scaling": {"max_threads": 4}}'
OVERRIDE_SOURCE = "--set"
DOTENV_SOURCE = ".env"


class _Section(BaseModel):
    """A settings section: an unknown key is an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class ListenerSettings(_Section):
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
    middleware: list[str] = Field(
        default_factory=list,
        description="middleware around each message, 'package.module:Class' (made with no "
        "arguments), after the worker's own; imported by 'cloudqueue run'",
    )

    @field_validator("middleware")
    @classmethod
    def _middleware_paths(cls, paths: list[str]) -> list[str]:
        # The form only: the modules are imported by `cloudqueue run` (build_middleware).
        return [check_object_path(path, what="middleware") for path in paths]

    def build_middleware(self) -> list[Middleware]:
        """The middleware the settings name, imported and made (ConfigurationError if not)."""
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


class PoisonSettings(_Section):
    """When a message is given up on and moved to ``<queue>-poison``."""

    max_dequeue_count: int = Field(default=5, ge=1, description="deliveries before poisoning")


_DEFAULT_LIMITS = DecodingLimits()


class DecodingSettings(_Section):
    """The most work one message may cost before its items are built (``listener.messages
    .limits``); a message over a limit is poisoned at once, reason ``over_limit``."""

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

    def limits(self) -> DecodingLimits:
        """The listener's limits these settings describe."""
        return DecodingLimits(**self.model_dump())


class BackoffSettings(_Section):
    """Idle polling: min_idle_s + (2^n - 1) x U(0.8, 1.2) x delta_backoff_s, up to max_idle_s."""

    delta_backoff_s: float = Field(default=0.1, gt=0)
    min_idle_s: float = Field(default=0.0, ge=0)
    max_idle_s: float = Field(default=1.5, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> BackoffSettings:
        if self.max_idle_s < self.min_idle_s:
            raise ValueError("max_idle_s must be >= min_idle_s")
        return self


class ScalingSettings(_Section):
    """Thread bounds and the rule that turns queue depth into a thread count."""

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


class TriggerSettings(_Section):
    """Push triggers: producers announce work so idle listeners need not poll."""

    url: SecretStr | None = Field(
        default=None, description="redis://host:port/db (unset: no push triggers, poll only)"
    )
    channel: str = Field(default="cloudqueue:work-detected", min_length=1)
    publish: Literal["per_put", "per_batch", "when_empty"] = Field(
        default="per_batch",
        description="when a producer sends a trigger: after every put, once per batch of puts, "
        "or only when the queue was probably empty (depth was 0 before the batch)",
    )
    watchdog_interval_s: float = Field(
        default=300.0, gt=0, description="depth check while at zero threads (lost triggers)"
    )
    accept_wildcard: bool = Field(
        default=False,
        description='let a received trigger naming "*" as its account or queue wake every '
        "listener (off: such triggers are dropped and counted as rejected)",
    )

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None and not url.get_secret_value().startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return url

    def url_value(self) -> str | None:
        return self.url.get_secret_value() if self.url is not None else None


class RateLimitSettings(_Section):
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


class LoggingSettings(_Section):
    """Log level and format (JSON lines when not on a terminal, unless told otherwise)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["auto", "json", "console"] = "auto"


class DashboardSettings(_Section):
    """``cloudqueue dashboard``: the token that guards it when it listens beyond this machine."""

    token: SecretStr | None = Field(
        default=None,
        description="required by the dashboard on every request when set; generated and "
        "printed at start when unset and the dashboard binds beyond loopback",
    )


class ObservabilitySettings(_Section):
    """The HTTP endpoint for Prometheus and for liveness / readiness probes (off by default)."""

    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve /metrics, /healthz and /readyz on this port (unset: no server)",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="the address to bind; 0.0.0.0 in a container, so the kubelet can probe it",
    )
    stall_after_s: float = Field(
        default=120.0,
        gt=0,
        description="a dequeue thread silent this long (in one handler or storage call) is wedged",
    )
    record_path: Path | None = Field(
        default=None,
        description="append the workload this worker sees (arrivals per minute, handling times, "
        "failures, sizes) to this file, for `cloudqueue tune` (unset: no recording)",
    )


_config_file: ContextVar[Path | None] = ContextVar("cloudqueue_config_file", default=None)


class CostSettings(_Section):
    """What storage transactions cost: the live meter and ``cloudqueue simulate`` use it."""

    price_per_10k_transactions_usd: float = Field(
        default=DEFAULT_PRICE_PER_10K_USD,
        gt=0,
        description="price of 10,000 storage transactions (the seed's $0.01; set your account's)",
    )


class CloudQueueSettings(BaseSettings):
    """Everything a worker process needs."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        env_file=".env",
        extra="ignore",  # unknown names are refused per source (settings_keys), naming the source
        hide_input_in_errors=True,  # an error's text must never carry the connection string
    )

    connection_string: SecretStr | None = None
    shutdown_grace_s: float = Field(default=30.0, ge=0, description="time to finish in-flight work")
    state_dir: Path = Field(
        default=Path(".cloudqueue/run"),
        description="where running workers publish their live state for `cloudqueue status`",
    )
    credential: str | None = Field(
        default=None,
        description="sign in with Microsoft Entra ID: default | managed_identity[:CLIENT_ID] | "
        "workload_identity | azure_cli | package.module:callable (needs cloudqueue[identity])",
    )
    partition_accounts: list[SecretStr] = Field(
        default_factory=list,
        description="connection strings of further storage accounts; partition i of a "
        "partitioned queue lives on account i mod (1 + len), account 0 being connection_string",
    )
    listener: ListenerSettings = Field(default_factory=ListenerSettings)
    backoff: BackoffSettings = Field(default_factory=BackoffSettings)
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    poison: PoisonSettings = Field(default_factory=PoisonSettings)
    decoding: DecodingSettings = Field(default_factory=DecodingSettings)
    triggers: TriggerSettings = Field(default_factory=TriggerSettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    cost: CostSettings = Field(default_factory=CostSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            CheckedSource(init_settings, OVERRIDE_SOURCE),
            CheckedSource(env_settings, env_label),
            CheckedSource(dotenv_settings, DOTENV_SOURCE, sections_only=True),
            CheckedSource(_toml_source(settings_cls, _config_file.get()), _toml_label()),
        )

    @field_validator("connection_string")
    @classmethod
    def _parsable(cls, value: SecretStr | None) -> SecretStr | None:
        """Check the connection string as opening the storage would, without opening it."""
        if value is not None:
            try:
                describe_storage(value.get_secret_value())
            except ConfigurationError as error:
                # Endpoints with no key are valid for a token sign-in (the credential setting,
                # read after this field); opening the storage without one still refuses them.
                try:
                    describe_storage(value.get_secret_value(), credential="default")
                except ConfigurationError:
                    raise ValueError(str(error)) from None  # the message never quotes the secret
        return value

    @field_validator("partition_accounts")
    @classmethod
    def _accounts_parsable(cls, accounts: list[SecretStr]) -> list[SecretStr]:
        """Each further account opens as connection_string does; errors name its position only."""
        for position, account in enumerate(accounts, start=1):
            try:
                describe_storage(account.get_secret_value())
            except ConfigurationError as error:
                raise ValueError(f"partition account {position}: {error}") from None
        return accounts

    @model_validator(mode="after")
    def _zero_threads_need_triggers(self) -> CloudQueueSettings:
        if self.scaling.min_threads == 0 and self.triggers.url is None:
            raise ValueError(
                "scaling.min_threads = 0 needs triggers.url: with no poller and no push trigger, "
                "work would wait for the watchdog"
            )
        return self

    @model_validator(mode="after")
    def _fleet_limit_needs_redis(self) -> CloudQueueSettings:
        if self.rate_limit.fleet and self.triggers.url is None:
            raise ValueError("rate_limit.fleet = true needs triggers.url (the fleet's Redis)")
        return self

    def connection_string_value(self) -> str | None:
        """The connection string in clear, for opening storage only (never for logging)."""
        if self.connection_string is None:
            return None
        return self.connection_string.get_secret_value() or None

    def for_worker(
        self, overrides: Mapping[str, Mapping[str, Any]], *, source: str = "worker settings"
    ) -> CloudQueueSettings:
        """These settings with one worker's overrides of listener/backoff/scaling/poison fields.

        The whole object is validated again (``model_copy`` would skip the model validators, e.g.
        ``min_threads = 0`` without triggers). ``source`` names the worker in errors.
        Raises ConfigurationError (unknown section or key) or pydantic's ValidationError.
        """
        if not isinstance(overrides, Mapping):
            raise ConfigurationError(f"{source} must map sections to settings, e.g. {_EXAMPLE}")
        for section, values in overrides.items():
            if section not in WORKER_SECTIONS:
                raise ConfigurationError(
                    f"{source} may override {', '.join(WORKER_SECTIONS)}, not {section!r}"
                )
            if not isinstance(values, Mapping):
                raise ConfigurationError(
                    f"{source}: {section!r} must map setting names to values, e.g. "
                    f'{{"{section}": {{...}}}}'
                )
        check_keys(CloudQueueSettings, overrides, source)
        merged = self.model_dump()
        for section, values in overrides.items():
            merged[section] = {**merged[section], **values}
        return CloudQueueSettings.model_validate(merged)

    def delivery_policy(self) -> DeliveryPolicy:
        """Retries, poisoning and renewal as these settings describe them."""
        return DeliveryPolicy(
            max_dequeue_count=self.poison.max_dequeue_count,
            retry_delay_s=self.listener.retry_delay_s,
            max_retry_delay_s=max(self.listener.max_retry_delay_s, self.listener.retry_delay_s),
            renew_visibility=self.listener.renew_visibility,
        )

    def scaling_policy(self) -> ScalingPolicy:
        """The listener-level policy these settings describe."""
        scaling, backoff = self.scaling, self.backoff
        return ScalingPolicy(
            min_threads=scaling.min_threads,
            max_threads=scaling.max_threads,
            rule=scaling.build_rule(),
            rule_name=scaling.rule,
            delta_backoff_s=backoff.delta_backoff_s,
            min_idle_s=backoff.min_idle_s,
            max_idle_s=backoff.max_idle_s,
            rescale_interval_s=scaling.rescale_interval_s,
            scale_in_delay_s=scaling.scale_in_delay_s,
            cpu_saturation_cores=scaling.cpu_saturation_cores,
            max_messages_per_s=self.rate_limit.max_messages_per_s,
        )


def config_file_path(explicit: Path | None = None) -> Path | None:
    """The TOML file to read: explicit, else $CLOUDQUEUE_CONFIG, else the default if present and
    no other account could have written it (``settings_files``: ConfigurationError otherwise)."""
    if explicit is not None:
        return explicit
    from_env = os.environ.get("CLOUDQUEUE_CONFIG")
    if from_env:
        return Path(from_env)
    return found_file(DEFAULT_CONFIG_FILE) if DEFAULT_CONFIG_FILE.is_file() else None


def _toml_source(settings_cls: type[BaseSettings], path: Path | None) -> PydanticBaseSettingsSource:
    """The TOML file's settings; a syntax error names the file, line and column."""
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as error:
        # tomllib's message ends in "(at line L, column C)".
        raise ConfigurationError(f"config file {path} is not valid TOML: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"cannot read config file {path}: {error}") from None


def _toml_label() -> str:
    return f"config file {_config_file.get()}"


def load_settings(config_file: Path | None = None, **overrides: Any) -> CloudQueueSettings:
    """Read settings from every source; ``overrides`` (e.g. CLI flags) win over all of them."""
    path = config_file_path(config_file)
    check_found_dotenv()
    if path is not None and not path.is_file():
        raise ConfigurationError(f"config file {str(path)!r} does not exist")
    token = _config_file.set(path)
    try:
        return CloudQueueSettings(**overrides)
    finally:
        _config_file.reset(token)
