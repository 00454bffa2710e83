"""Settings for a worker process, read from ``CLOUDQUEUE_*`` environment variables.

Nested settings use ``__``: ``CLOUDQUEUE_LISTENER__THREADS=4``. The storage is chosen by
``CLOUDQUEUE_CONNECTION_STRING``: an Azure Storage connection string, ``sqlite:///path``,
``memory://``, or unset for the embedded SQLite store in ``.cloudqueue/queues.db``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from listener.storage import MAX_BATCH_SIZE, MAX_VISIBILITY_TIMEOUT_S


class ListenerSettings(BaseModel):
    """How each worker's listener fetches and how many threads it starts with."""

    threads: int = Field(default=1, ge=1, description="dequeue threads started per worker")
    dequeue_batch_size: int = Field(default=MAX_BATCH_SIZE, ge=1, le=MAX_BATCH_SIZE)
    dequeue_interval_s: float = Field(default=1.0, ge=0, description="wait after an empty get")
    max_error_delay_s: float = Field(default=30.0, ge=0, description="longest back-off on errors")
    visibility_timeout_s: int = Field(default=30, ge=1, le=MAX_VISIBILITY_TIMEOUT_S)
    base64: bool = Field(default=True, description="base64 message text, as Azure Functions does")


class LoggingSettings(BaseModel):
    """Log level and format (JSON lines when not on a terminal, unless told otherwise)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["auto", "json", "console"] = "auto"


class CloudQueueSettings(BaseSettings):
    """Everything a worker process needs, validated before any queue is touched."""

    model_config = SettingsConfigDict(
        env_prefix="CLOUDQUEUE_", env_nested_delimiter="__", extra="ignore"
    )

    connection_string: SecretStr | None = None
    shutdown_grace_s: float = Field(default=30.0, ge=0, description="time to finish in-flight work")
    listener: ListenerSettings = Field(default_factory=ListenerSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)

    def connection_string_value(self) -> str | None:
        """The connection string in clear, for opening storage only (never for logging)."""
        if self.connection_string is None:
            return None
        return self.connection_string.get_secret_value() or None
