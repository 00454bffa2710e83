"""``CloudQueueSettings``: everything a worker process needs, as one typed object, and
``load_settings``, which reads it from every source.

The sections are ``cloudqueue.workers.settings.worker_sections`` (what a worker class may override)
and ``cloudqueue.workers.settings.process_sections``; the files read are
``cloudqueue.workers.settings.files``'s to find; every source's keys are checked by
``cloudqueue.workers.settings.keys`` before they are merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.stores.connection import describe_storage
from cloudqueue.workers.settings.files import (
    check_found_dotenv,
    config_file_path,
    reading_config_file,
    toml_label,
    toml_source,
)
from cloudqueue.workers.settings.key_sections import (
    CancelSettings,
    IdempotencySettings,
    LimitsSettings,
)
from cloudqueue.workers.settings.keys import (
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    CheckedSource,
    check_keys,
    env_label,
)
from cloudqueue.workers.settings.process_sections import (
    CostSettings,
    DashboardSettings,
    LoggingSettings,
    ObservabilitySettings,
    TriggerSettings,
)
from cloudqueue.workers.settings.worker_sections import (
    KEY_SECTIONS,
    WORKER_SECTIONS,
    BackoffSettings,
    BatchSettings,
    DecodingSettings,
    ListenerSettings,
    PoisonSettings,
    RateLimitSettings,
    ScalingSettings,
)

if TYPE_CHECKING:
    from cloudqueue.listener.scaling.scaler import ScalingPolicy

_EXAMPLE = '{"scaling": {"max_threads": 4}}'
OVERRIDE_SOURCE = "--set"
DOTENV_SOURCE = ".env"


class CloudQueueSettings(BaseSettings):
    """Everything a worker process needs."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        env_file=".env",
        extra="ignore",  # unknown names are refused per source (keys.py), naming the source
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
    batch: BatchSettings = Field(default_factory=BatchSettings)
    triggers: TriggerSettings = Field(default_factory=TriggerSettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    idempotency: IdempotencySettings = Field(default_factory=IdempotencySettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    cancel: CancelSettings = Field(default_factory=CancelSettings)
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
            CheckedSource(toml_source(settings_cls), toml_label()),
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
        check_worker_overrides(overrides, source)
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
        # Imported here: the scaler loads the loop's parts, which reading settings does not need.
        from cloudqueue.listener.scaling.scaler import ScalingPolicy

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


def check_worker_overrides(
    overrides: Mapping[str, Mapping[str, Any]], source: str = "worker settings"
) -> None:
    """Refuse a worker's ``settings`` whose names are wrong, before any value is read: a section
    no worker may override, or an unknown section or key (with the closest valid name, as for
    every other source). ConfigurationError naming ``source``."""
    if not isinstance(overrides, Mapping):
        raise ConfigurationError(f"{source} must map sections to settings, e.g. {_EXAMPLE}")
    allowed = (*WORKER_SECTIONS, *KEY_SECTIONS)
    for section, values in overrides.items():
        if section in CloudQueueSettings.model_fields and section not in allowed:
            raise ConfigurationError(f"{source} may override {', '.join(allowed)}, not {section!r}")
        if section in allowed and not isinstance(values, Mapping):
            raise ConfigurationError(
                f"{source}: {section!r} must map setting names to values, e.g. "
                f'{{"{section}": {{...}}}}'
            )
    check_keys(CloudQueueSettings, overrides, source, sections=allowed)


def load_settings(config_file: Path | None = None, **overrides: Any) -> CloudQueueSettings:
    """Read settings from every source, as ``cloudqueue run`` does; ``overrides`` win over all.

    The sources, from strongest to weakest: ``overrides`` (keyword arguments, as the command
    line's flags are: ``load_settings(scaling={"max_threads": 4})``), ``CLOUDQUEUE_*`` environment
    variables, a ``.env`` file, and the TOML file: ``config_file``, else ``$CLOUDQUEUE_CONFIG``,
    else ``config/cloudqueue.toml`` when present. ``CloudQueueSettings()`` alone reads no TOML file.
    Bad settings raise ``ConfigurationError`` (a missing ``config_file`` included), or pydantic's
    ``ValidationError`` naming each bad field and the source it came from.
    """
    path = config_file_path(config_file)
    check_found_dotenv()
    if path is not None and not path.is_file():
        raise ConfigurationError(f"config file {str(path)!r} does not exist")
    with reading_config_file(path):
        return CloudQueueSettings(**overrides)
