"""cloudqueue's listener: an auto-scaling, observable consumer of Azure Storage Queues.

The public surface is what ``__all__`` names, with ``cloudqueue.listener.testing`` (test clocks) and
``cloudqueue.listener.simulation`` (the cost simulator); everything else is internal.

Importing this root imports none of them: each name's module is imported on the name's first use
(``cloudqueue.listener.exports``), so that a command needing two names does not pay for a hundred.
"""

from typing import TYPE_CHECKING

from cloudqueue.listener.exports import lazy_exports

if TYPE_CHECKING:
    from cloudqueue.listener.clock import Clock, EventSleeper, Sleeper, SystemClock
    from cloudqueue.listener.consumer.current import MessageEnvelope, current_envelope
    from cloudqueue.listener.consumer.events import (
        BatchProcessed,
        ListenerStarted,
        ListenerStopped,
        QueueEmpty,
        QueueEmptyDecision,
        QueueWorkDetected,
        Scaled,
    )
    from cloudqueue.listener.consumer.handler_progress import HandlerProgress
    from cloudqueue.listener.consumer.listener import CloudQueueListener, CloudQueueListenerInfo
    from cloudqueue.listener.consumer.middleware import (
        CallNext,
        Decision,
        MessageContext,
        Middleware,
        Outcome,
    )
    from cloudqueue.listener.consumer.pool_control import ListenerLoad
    from cloudqueue.listener.errors import (
        BatchFailed,
        CloudQueueError,
        ConfigurationError,
        DecodeError,
        ForeignPayloadError,
        LimitExceededError,
        MessageNotFoundError,
        MessageTooLargeError,
        PayloadNotFoundError,
        PermanentFailure,
        PopReceiptMismatchError,
        QueueNotFoundError,
        RetryLater,
        StorageError,
        TimeLimitExceeded,
        TransientStorageError,
    )
    from cloudqueue.listener.limits.key_gate import KeyGate, LocalKeyGate
    from cloudqueue.listener.limits.limiter import LocalRateLimiter, RateLimiter
    from cloudqueue.listener.limits.redis_key_gate import RedisKeyGate
    from cloudqueue.listener.limits.redis_limiter import RedisRateLimiter
    from cloudqueue.listener.location import CloudQueueLocation
    from cloudqueue.listener.middleware.keyed import KeyedHandling
    from cloudqueue.listener.middleware.per_key import PerKeyLimit
    from cloudqueue.listener.middleware.rate_limit import RateLimit
    from cloudqueue.listener.middleware.retry import RetryPolicy
    from cloudqueue.listener.poison.queue import poison_queue_name
    from cloudqueue.listener.poison.record import PoisonRecord
    from cloudqueue.listener.policies.backoff import randomized_exponential_backoff
    from cloudqueue.listener.policies.delivery import DeliveryPolicy
    from cloudqueue.listener.policies.priority import Priority
    from cloudqueue.listener.policies.retry import Retry
    from cloudqueue.listener.policies.scaling_rules import (
        ScalingInput,
        ScalingRule,
        drain_time,
        proportional,
        steps,
    )
    from cloudqueue.listener.producer.announce import WorkAnnouncer
    from cloudqueue.listener.producer.publisher import Publisher
    from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel
    from cloudqueue.listener.push.triggers import (
        InProcessTriggerChannel,
        TriggerChannel,
        WorkDetected,
        account_of,
    )
    from cloudqueue.listener.scaling.scaler import ElasticScaler, ScalingPolicy
    from cloudqueue.listener.scaling.waker import TriggerWaker, Watchdog
    from cloudqueue.listener.stores.connection import open_payload_store, open_storage
    from cloudqueue.listener.stores.key_connection import open_key_ledger
    from cloudqueue.listener.stores.key_ledger import key_ledger_for
    from cloudqueue.listener.stores.key_records import KeyLedger
    from cloudqueue.listener.stores.layouts import QueueLayout, read_layout
    from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
    from cloudqueue.listener.stores.metered import MeteredStorage
    from cloudqueue.listener.stores.payload_store import (
        FolderPayloadStore,
        InMemoryPayloadStore,
        PayloadStore,
    )
    from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
    from cloudqueue.listener.stores.storage import (
        MAX_BATCH_SIZE,
        MAX_MESSAGE_BYTES,
        QueueMessage,
        QueueStorage,
    )
    from cloudqueue.listener.wire.codec import Codec, MessageCodec
    from cloudqueue.listener.wire.handler_notes import CheckpointError
    from cloudqueue.listener.wire.limits import DecodingLimits
    from cloudqueue.listener.workflows.group_done import GroupDone
    from cloudqueue.listener.workflows.group_ledger import GroupError, GroupStatus
    from cloudqueue.listener.workflows.result_handle import ResultHandle
    from cloudqueue.listener.workflows.sending import GroupHandle

__all__ = [
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

if not TYPE_CHECKING:  # mypy reads the imports above; a missing name stays an error
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cloudqueue.listener.clock": ("Clock", "EventSleeper", "Sleeper", "SystemClock"),
            "cloudqueue.listener.consumer.current": ("MessageEnvelope", "current_envelope"),
            "cloudqueue.listener.consumer.handler_progress": ("HandlerProgress",),
            "cloudqueue.listener.consumer.events": (
                "BatchProcessed",
                "ListenerStarted",
                "ListenerStopped",
                "QueueEmpty",
                "QueueEmptyDecision",
                "QueueWorkDetected",
                "Scaled",
            ),
            "cloudqueue.listener.consumer.listener": (
                "CloudQueueListener",
                "CloudQueueListenerInfo",
            ),
            "cloudqueue.listener.consumer.middleware": (
                "CallNext",
                "Decision",
                "MessageContext",
                "Middleware",
                "Outcome",
            ),
            "cloudqueue.listener.consumer.pool_control": ("ListenerLoad",),
            "cloudqueue.listener.errors": (
                "BatchFailed",
                "CloudQueueError",
                "ConfigurationError",
                "DecodeError",
                "ForeignPayloadError",
                "LimitExceededError",
                "MessageNotFoundError",
                "MessageTooLargeError",
                "PayloadNotFoundError",
                "PermanentFailure",
                "PopReceiptMismatchError",
                "QueueNotFoundError",
                "RetryLater",
                "StorageError",
                "TimeLimitExceeded",
                "TransientStorageError",
            ),
            "cloudqueue.listener.limits.key_gate": ("KeyGate", "LocalKeyGate"),
            "cloudqueue.listener.limits.limiter": ("LocalRateLimiter", "RateLimiter"),
            "cloudqueue.listener.limits.redis_key_gate": ("RedisKeyGate",),
            "cloudqueue.listener.limits.redis_limiter": ("RedisRateLimiter",),
            "cloudqueue.listener.location": ("CloudQueueLocation",),
            "cloudqueue.listener.middleware.keyed": ("KeyedHandling",),
            "cloudqueue.listener.middleware.per_key": ("PerKeyLimit",),
            "cloudqueue.listener.middleware.rate_limit": ("RateLimit",),
            "cloudqueue.listener.middleware.retry": ("RetryPolicy",),
            "cloudqueue.listener.poison.queue": ("poison_queue_name",),
            "cloudqueue.listener.poison.record": ("PoisonRecord",),
            "cloudqueue.listener.policies.backoff": ("randomized_exponential_backoff",),
            "cloudqueue.listener.policies.delivery": ("DeliveryPolicy",),
            "cloudqueue.listener.policies.priority": ("Priority",),
            "cloudqueue.listener.policies.retry": ("Retry",),
            "cloudqueue.listener.policies.scaling_rules": (
                "ScalingInput",
                "ScalingRule",
                "drain_time",
                "proportional",
                "steps",
            ),
            "cloudqueue.listener.producer.announce": ("WorkAnnouncer",),
            "cloudqueue.listener.producer.publisher": ("Publisher",),
            "cloudqueue.listener.workflows.group_done": ("GroupDone",),
            "cloudqueue.listener.workflows.group_ledger": ("GroupError", "GroupStatus"),
            "cloudqueue.listener.workflows.result_handle": ("ResultHandle",),
            "cloudqueue.listener.workflows.sending": ("GroupHandle",),
            "cloudqueue.listener.wire.handler_notes": ("CheckpointError",),
            "cloudqueue.listener.push.redis_triggers": ("RedisTriggerChannel",),
            "cloudqueue.listener.push.triggers": (
                "InProcessTriggerChannel",
                "TriggerChannel",
                "WorkDetected",
                "account_of",
            ),
            "cloudqueue.listener.scaling.scaler": ("ElasticScaler", "ScalingPolicy"),
            "cloudqueue.listener.scaling.waker": ("TriggerWaker", "Watchdog"),
            "cloudqueue.listener.stores.connection": ("open_payload_store", "open_storage"),
            "cloudqueue.listener.stores.key_connection": ("open_key_ledger",),
            "cloudqueue.listener.stores.key_ledger": ("key_ledger_for",),
            "cloudqueue.listener.stores.key_records": ("KeyLedger",),
            "cloudqueue.listener.stores.layouts": ("QueueLayout", "read_layout"),
            "cloudqueue.listener.stores.memory_storage": ("InMemoryQueueStorage",),
            "cloudqueue.listener.stores.metered": ("MeteredStorage",),
            "cloudqueue.listener.stores.payload_store": (
                "FolderPayloadStore",
                "InMemoryPayloadStore",
                "PayloadStore",
            ),
            "cloudqueue.listener.stores.sqlite_storage": ("SqliteQueueStorage",),
            "cloudqueue.listener.stores.storage": (
                "MAX_BATCH_SIZE",
                "MAX_MESSAGE_BYTES",
                "QueueMessage",
                "QueueStorage",
            ),
            "cloudqueue.listener.wire.codec": ("Codec", "MessageCodec"),
            "cloudqueue.listener.wire.limits": ("DecodingLimits",),
        },
    )
