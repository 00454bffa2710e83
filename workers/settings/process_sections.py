"""The settings sections of the process as a whole: push triggers, logging, the dashboard, the
metrics and probes endpoint, and what storage transactions cost.

A worker class cannot override these: every worker in a process shares them. The sections of one
worker's listener are in ``cloudqueue.workers.settings.worker_sections``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from cloudqueue.listener.simulation.cost import DEFAULT_PRICE_PER_10K_USD
from cloudqueue.workers.settings.worker_sections import Section, check_redis_url


class TriggerSettings(Section):
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

    _redis_url = field_validator("url")(check_redis_url)

    def url_value(self) -> str | None:
        return self.url.get_secret_value() if self.url is not None else None


class LoggingSettings(Section):
    """Log level and format (JSON lines when not on a terminal, unless told otherwise)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["auto", "json", "console"] = "auto"


class DashboardSettings(Section):
    """``cloudqueue dashboard``: the token that guards it when it listens beyond this machine."""

    token: SecretStr | None = Field(
        default=None,
        description="required by the dashboard on every request when set; generated and "
        "printed at start when unset and the dashboard binds beyond loopback",
    )


class ObservabilitySettings(Section):
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


class CostSettings(Section):
    """What storage transactions cost: the live meter and ``cloudqueue simulate`` use it."""

    price_per_10k_transactions_usd: float = Field(
        default=DEFAULT_PRICE_PER_10K_USD,
        gt=0,
        description="price of 10,000 storage transactions (the design's $0.01; set your account's)",
    )
