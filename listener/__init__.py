"""cloudqueue's listener: an auto-scaling, observable consumer of Azure Storage Queues.

The public surface is what ``__all__`` names; everything else is internal.
"""

from listener.backoff import randomized_exponential_backoff
from listener.clock import Clock, EventSleeper, Sleeper, SystemClock
from listener.codec import Codec, MessageCodec
from listener.connection import open_payload_store, open_storage
from listener.delivery import DeliveryPolicy
from listener.envelope import MessageEnvelope, current_envelope
from listener.errors import (
    CloudQueueError,
    ConfigurationError,
    DecodeError,
    MessageNotFoundError,
    MessageTooLargeError,
    PayloadNotFoundError,
    PermanentFailure,
    PopReceiptMismatchError,
    QueueNotFoundError,
    StorageError,
    TransientStorageError,
)
from listener.listener import (
    CloudQueueListener,
    CloudQueueListenerInfo,
    ListenerLoad,
    QueueEmptyDecision,
    QueueEmptyHandler,
    QueueWorkDetectedHandler,
)
from listener.location import CloudQueueLocation
from listener.memory_storage import InMemoryQueueStorage
from listener.metered import MeteredStorage
from listener.payload_store import FolderPayloadStore, InMemoryPayloadStore, PayloadStore
from listener.poison import PoisonRecord, poison_queue_name
from listener.publisher import Publisher
from listener.push import TriggerWaker, Watchdog
from listener.scaling import ElasticScaler, ScalingPolicy
from listener.scaling_rules import ScalingInput, ScalingRule, drain_time, proportional, steps
from listener.sqlite_storage import SqliteQueueStorage
from listener.storage import MAX_BATCH_SIZE, MAX_MESSAGE_BYTES, QueueMessage, QueueStorage
from listener.triggers import InProcessTriggerChannel, TriggerChannel, WorkDetected

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_MESSAGE_BYTES",
    "Clock",
    "CloudQueueError",
    "CloudQueueListener",
    "CloudQueueListenerInfo",
    "CloudQueueLocation",
    "Codec",
    "ConfigurationError",
    "DecodeError",
    "DeliveryPolicy",
    "ElasticScaler",
    "EventSleeper",
    "FolderPayloadStore",
    "InMemoryPayloadStore",
    "InMemoryQueueStorage",
    "InProcessTriggerChannel",
    "ListenerLoad",
    "MessageCodec",
    "MessageEnvelope",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "MeteredStorage",
    "PayloadNotFoundError",
    "PayloadStore",
    "PermanentFailure",
    "PoisonRecord",
    "PopReceiptMismatchError",
    "Publisher",
    "QueueEmptyDecision",
    "QueueEmptyHandler",
    "QueueMessage",
    "QueueNotFoundError",
    "QueueStorage",
    "QueueWorkDetectedHandler",
    "ScalingInput",
    "ScalingPolicy",
    "ScalingRule",
    "Sleeper",
    "SqliteQueueStorage",
    "StorageError",
    "SystemClock",
    "TransientStorageError",
    "TriggerChannel",
    "TriggerWaker",
    "Watchdog",
    "WorkDetected",
    "current_envelope",
    "drain_time",
    "open_payload_store",
    "open_storage",
    "poison_queue_name",
    "proportional",
    "randomized_exponential_backoff",
    "steps",
]
