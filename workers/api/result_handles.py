"""The handle ``QueueWorker.send`` returns: the message's key, and the wait for its result.

A worker that keeps results needs a key for each message: an item sent without one gets a new key
(a random hex string), unless the worker gives keys itself (``key(item)``) -- then the caller
passes ``key=`` to wait for the result, as a made-up key would replace the worker's own (and its
idempotent handling with it).
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Protocol

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.push.triggers import TriggerChannel
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.listener.workflows.result_handle import ResultHandle
from cloudqueue.listener.workflows.result_signals import ResultSignals
from cloudqueue.listener.workflows.result_stores import required_result_store
from cloudqueue.workers.api.results import result_type


class ResultKeeper(Protocol):
    """What a handle reads of a ``QueueWorker`` class (typed so: ``worker.py`` imports the
    sending modules when ``send`` is called, and each importing the other would be a circle)."""

    keep_results: bool

    @classmethod
    def gives_keys(cls) -> bool: ...


def key_to_send(worker_type: ResultKeeper, key: str | None) -> str | None:
    """``key``; or, for a worker that keeps results and gives no keys itself, a new one."""
    if key is not None or not worker_type.keep_results or worker_type.gives_keys():
        return key
    return uuid.uuid4().hex


def result_handle(
    worker_type: ResultKeeper,
    key: str | None,
    storage: QueueStorage,
    signals: ResultSignals | None,
    clock: Clock = SYSTEM_CLOCK,
) -> ResultHandle:
    """The handle of a message sent with ``key`` to ``worker_type``'s queue on ``storage``."""
    return ResultHandle(
        key,
        partial(required_result_store, storage),
        as_type=result_type(worker_type),
        signals=signals,
        clock=clock,
        refusal=_refusal(worker_type, key),
    )


def result_signals(channel: TriggerChannel | None, account: str) -> ResultSignals | None:
    """Waiting on the trigger channel, when the settings name one."""
    return None if channel is None else ResultSignals(channel, account=account)


def _refusal(worker_type: ResultKeeper, key: str | None) -> str | None:
    name = str(getattr(worker_type, "__qualname__", worker_type))
    if not worker_type.keep_results:
        return f"{name} keeps no results: set keep_results = True on it to wait for one"
    if key is None:
        return f"{name} gives its messages keys (key(item)): send(..., key=...) to wait for one"
    return None


__all__ = ["ResultKeeper", "key_to_send", "result_handle", "result_signals"]
