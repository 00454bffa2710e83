"""cloudqueue's listener: an auto-scaling, observable consumer of Azure Storage Queues.

The public surface is what ``__all__`` names, with ``listener.testing`` (test clocks) and
``listener.simulation`` (the cost simulator); everything else is internal.
"""

from listener.clock import Clock, EventSleeper, Sleeper, SystemClock
from listener.consumer.current import MessageEnvelope, current_envelope
from listener.consumer.events import (
    BatchProcessed,
    ListenerStarted,
    ListenerStopped,
    QueueEmpty,
    QueueEmptyDecision,
    QueueWorkDetected,
    Scaled,
)
from listener.consumer.listener import CloudQueueListener, CloudQueueListenerInfo
from listener.consumer.middleware import CallNext, Decision, MessageContext, Middleware, Outcome
from listener.consumer.pool_control import ListenerLoad
from listener.errors import (
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
    StorageError,
    TimeLimitExceeded,
    TransientStorageError,
)
from listener.limits.key_gate import KeyGate, LocalKeyGate
from listener.limits.limiter import LocalRateLimiter, RateLimiter
from listener.limits.redis_key_gate import RedisKeyGate
from listener.limits.redis_limiter import RedisRateLimiter
from listener.location import CloudQueueLocation
from listener.middleware.keyed import KeyedHandling
from listener.middleware.per_key import PerKeyLimit
from listener.middleware.rate_limit import RateLimit
from listener.middleware.retry import RetryPolicy
from listener.poison.queue import poison_queue_name
from listener.poison.record import PoisonRecord
from listener.policies.backoff import randomized_exponential_backoff
from listener.policies.delivery import DeliveryPolicy
from listener.policies.priority import Priority
from listener.policies.retry import Retry
from listener.policies.scaling_rules import (
    ScalingInput,
    ScalingRule,
    drain_time,
    proportional,
    steps,
)
from listener.producer.announce import WorkAnnouncer
from listener.producer.publisher import Publisher
from listener.push.redis_triggers import RedisTriggerChannel
from listener.push.triggers import (
    InProcessTriggerChannel,
    TriggerChannel,
    WorkDetected,
    account_of,
)
from listener.scaling.scaler import ElasticScaler, ScalingPolicy
from listener.scaling.waker import TriggerWaker, Watchdog
from listener.stores.connection import open_payload_store, open_storage
from listener.stores.key_connection import open_key_ledger
from listener.stores.key_ledger import key_ledger_for
from listener.stores.key_records import KeyLedger
from listener.stores.layouts import QueueLayout, read_layout
from listener.stores.memory_storage import InMemoryQueueStorage
from listener.stores.metered import MeteredStorage
from listener.stores.payload_store import FolderPayloadStore, InMemoryPayloadStore, PayloadStore
from listener.stores.sqlite_storage import SqliteQueueStorage
from listener.stores.storage import MAX_BATCH_SIZE, MAX_MESSAGE_BYTES, QueueMessage, QueueStorage
from listener.wire.codec import Codec, MessageCodec
from listener.wire.limits import DecodingLimits

__all__ = [
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
