"""The public surface is what __all__ says, and every name in it exists."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["listener", "workers"])
def test_all_names_exist_and_are_sorted(package: str) -> None:
    """Every exported name resolves; the list is kept sorted so changes are easy to review."""
    module = importlib.import_module(package)
    assert all(hasattr(module, name) for name in module.__all__)
    assert list(module.__all__) == sorted(module.__all__, key=lambda n: (not n.isupper(), n))


def test_the_core_names_are_public() -> None:
    """The names users build on are importable from the package roots."""
    from cloudqueue import listener, workers

    for name in [
        "CloudQueueListener",
        "CloudQueueListenerInfo",
        "CloudQueueLocation",
        "QueueStorage",
        "InMemoryQueueStorage",
        "SqliteQueueStorage",
        "current_envelope",
    ]:
        assert name in listener.__all__
    assert "QueueWorker" in workers.__all__


def test_the_public_surface_is_exactly_this() -> None:
    """Adding or removing a public name is a deliberate change: it shows up in this list."""
    from cloudqueue import listener, workers

    assert list(listener.__all__) == [
        "MAX_BATCH_SIZE",
        "MAX_MESSAGE_BYTES",
        "BatchFailed",
        "BatchProcessed",
        "CallNext",
        "Clock",
        "CloudQueueError",
        "CloudQueueListener",
        "CloudQueueListenerInfo",
        "CloudQueueLocation",
        "Codec",
        "ConfigurationError",
        "Decision",
        "DecodeError",
        "DecodingLimits",
        "DeliveryPolicy",
        "ElasticScaler",
        "EventSleeper",
        "FolderPayloadStore",
        "ForeignPayloadError",
        "InMemoryPayloadStore",
        "InMemoryQueueStorage",
        "InProcessTriggerChannel",
        "KeyGate",
        "KeyLedger",
        "KeyedHandling",
        "LimitExceededError",
        "ListenerLoad",
        "ListenerStarted",
        "ListenerStopped",
        "LocalKeyGate",
        "LocalRateLimiter",
        "MessageCodec",
        "MessageContext",
        "MessageEnvelope",
        "MessageNotFoundError",
        "MessageTooLargeError",
        "MeteredStorage",
        "Middleware",
        "Outcome",
        "PayloadNotFoundError",
        "PayloadStore",
        "PerKeyLimit",
        "PermanentFailure",
        "PoisonRecord",
        "PopReceiptMismatchError",
        "Priority",
        "Publisher",
        "QueueEmpty",
        "QueueEmptyDecision",
        "QueueLayout",
        "QueueMessage",
        "QueueNotFoundError",
        "QueueStorage",
        "QueueWorkDetected",
        "RateLimit",
        "RateLimiter",
        "RedisKeyGate",
        "RedisRateLimiter",
        "RedisTriggerChannel",
        "Retry",
        "RetryPolicy",
        "Scaled",
        "ScalingInput",
        "ScalingPolicy",
        "ScalingRule",
        "Sleeper",
        "SqliteQueueStorage",
        "StorageError",
        "SystemClock",
        "TimeLimitExceeded",
        "TransientStorageError",
        "TriggerChannel",
        "TriggerWaker",
        "Watchdog",
        "WorkAnnouncer",
        "WorkDetected",
        "account_of",
        "current_envelope",
        "drain_time",
        "key_ledger_for",
        "open_key_ledger",
        "open_payload_store",
        "open_storage",
        "poison_queue_name",
        "proportional",
        "randomized_exponential_backoff",
        "read_layout",
        "steps",
    ]
    assert list(workers.__all__) == [
        "BatchFailed",
        "CloudQueueSettings",
        "ConsoleStream",
        "ListenerSettings",
        "LiveProgress",
        "LoggingSettings",
        "PeriodicJob",
        "QueueWorker",
        "Retry",
        "ScalingSettings",
        "WorkerHost",
        "close_senders",
        "configure_logging",
        "load_settings",
        "load_worker",
        "open_storage_from_settings",
    ]
