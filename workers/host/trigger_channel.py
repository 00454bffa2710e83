"""The push-trigger channel the settings name, opened for a host, a producer or a command.

Redis is imported only when ``triggers.url`` is set: a command that polls, or enqueues without
triggers, should not pay for the Redis client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudqueue.workers.settings import CloudQueueSettings

if TYPE_CHECKING:
    from cloudqueue.listener.push.triggers import TriggerChannel


def open_trigger_channel(settings: CloudQueueSettings) -> TriggerChannel | None:
    """The Redis trigger channel the settings name, or None to poll only."""
    url = settings.triggers.url_value()
    if url is None:
        return None
    from cloudqueue.listener.push.redis_triggers import RedisTriggerChannel

    return RedisTriggerChannel(
        url, channel=settings.triggers.channel, accept_wildcard=settings.triggers.accept_wildcard
    )


__all__ = ["open_trigger_channel"]
