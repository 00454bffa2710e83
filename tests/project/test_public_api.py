"""The public surface is what __all__ says, and every name in it exists."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC_PACKAGES = ["cloudqueue", "cloudqueue.testing", "cloudqueue.listener", "cloudqueue.workers"]


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
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
        "CheckpointError",
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
        "GroupDone",
        "GroupError",
        "GroupHandle",
        "GroupStatus",
        "HandlerProgress",
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
        "ResultHandle",
        "Retry",
        "RetryLater",
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
        "CloudQueueSettings",
        "ConsoleStream",
        "ListenerSettings",
        "LiveProgress",
        "LoggingSettings",
        "PeriodicJob",
        "QueueWorker",
        "ScalingSettings",
        "WorkerHost",
        "close_senders",
        "configure_logging",
        "group_progress_source",
        "load_settings",
        "load_worker",
        "open_storage_from_settings",
        "running_progress",
    ]


def test_the_root_has_what_a_worker_author_and_a_producer_need() -> None:
    """``from cloudqueue import ...`` gives the worker API, errors, producing and settings."""
    import cloudqueue

    assert cloudqueue.__all__ == [
        "BatchFailed",
        "CallNext",
        "CloudQueueError",
        "CloudQueueSettings",
        "ConfigurationError",
        "Decision",
        "GroupDone",
        "MessageContext",
        "MessageEnvelope",
        "Middleware",
        "Outcome",
        "PeriodicJob",
        "PermanentFailure",
        "Publisher",
        "QueueWorker",
        "Retry",
        "RetryLater",
        "TimeLimitExceeded",
        "current_envelope",
        "load_settings",
    ]
    assert sorted(dir(cloudqueue)) == sorted({*dir(cloudqueue), *cloudqueue.__all__})


def test_a_root_name_is_the_object_its_home_module_defines() -> None:
    """The root re-exports; it does not wrap: ``cloudqueue.QueueWorker`` is the one class."""
    import cloudqueue
    from cloudqueue.listener.errors import PermanentFailure
    from cloudqueue.workers.api.worker import QueueWorker

    assert cloudqueue.QueueWorker is QueueWorker
    assert cloudqueue.PermanentFailure is PermanentFailure
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = cloudqueue.Nothing  # type: ignore[attr-defined]


def test_importing_the_root_imports_nothing_until_a_name_is_used() -> None:
    """``import cloudqueue`` is cheap: each name loads its module on first use (the root reads
    its version and the lazy-export helper, nothing else)."""
    probe = (
        "import sys, cloudqueue; "
        "print(sorted(m for m in sys.modules if m.startswith('cloudqueue.')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == str(
        ["cloudqueue._version", "cloudqueue.listener", "cloudqueue.listener.exports"]
    )


def test_each_name_has_one_home_among_the_subpackages() -> None:
    """A name ``cloudqueue.listener`` exports is not exported again by ``cloudqueue.workers``:
    each has one documented place (the root re-exports what users import first)."""
    from cloudqueue import listener, workers

    assert sorted(set(listener.__all__) & set(workers.__all__)) == []
