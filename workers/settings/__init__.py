"""Settings for a worker process: one typed object, validated before any queue is touched.

Sources, highest priority first: values passed in code (the CLI's flags), environment variables
``CLOUDQUEUE_*`` (nested with ``__``: ``CLOUDQUEUE_SCALING__MAX_THREADS=8``), a ``.env`` file, a
TOML file (``--config``/``CLOUDQUEUE_CONFIG``, else ``config/cloudqueue.toml`` when present),
then the defaults. Files found in the working folder rather than named are refused when another
account could have written them (``files``). The storage is chosen by
``CLOUDQUEUE_CONNECTION_STRING``: an Azure Storage connection string, ``sqlite:///path``,
``memory://``, or unset for ``.cloudqueue/queues.db``.

Each source's keys are checked before they are merged (``keys``): a misspelt name is an error
naming the source and the closest valid key, never a silent default. ``model`` holds
``CloudQueueSettings`` and ``load_settings``; ``worker_sections`` and ``process_sections`` its
sections; ``sources`` says where each effective value came from (``cloudqueue config show``).
"""

from cloudqueue.workers.settings.files import DEFAULT_CONFIG_FILE, config_file_path
from cloudqueue.workers.settings.model import (
    DOTENV_SOURCE,
    OVERRIDE_SOURCE,
    CloudQueueSettings,
    load_settings,
)
from cloudqueue.workers.settings.process_sections import (
    CostSettings,
    DashboardSettings,
    LoggingSettings,
    ObservabilitySettings,
    TriggerSettings,
)
from cloudqueue.workers.settings.worker_sections import (
    BUILT_IN_RULES,
    WORKER_SECTIONS,
    BackoffSettings,
    BatchSettings,
    DecodingSettings,
    ListenerSettings,
    PoisonSettings,
    RateLimitSettings,
    ScalingSettings,
)

__all__ = [
    "BUILT_IN_RULES",
    "DEFAULT_CONFIG_FILE",
    "DOTENV_SOURCE",
    "OVERRIDE_SOURCE",
    "WORKER_SECTIONS",
    "BackoffSettings",
    "BatchSettings",
    "CloudQueueSettings",
    "CostSettings",
    "DashboardSettings",
    "DecodingSettings",
    "ListenerSettings",
    "LoggingSettings",
    "ObservabilitySettings",
    "PoisonSettings",
    "RateLimitSettings",
    "ScalingSettings",
    "TriggerSettings",
    "config_file_path",
    "load_settings",
]
