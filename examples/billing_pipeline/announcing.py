"""Push triggers for the pipeline's publishers, when the settings configure them.

With ``triggers.url`` set (``CLOUDQUEUE_TRIGGERS__URL=redis://...``), each publish announces the
work on the trigger channel, so idle workers (even at ``min_threads = 0``) wake at once instead of
at their next poll; without it, this returns None and the workers poll.
"""

from __future__ import annotations

from listener.producer.announce import WorkAnnouncer
from listener.push.triggers import account_of
from workers import CloudQueueSettings
from workers.host import open_trigger_channel


def announcer_from(settings: CloudQueueSettings) -> WorkAnnouncer | None:
    channel = open_trigger_channel(settings)
    if channel is None:
        return None
    account = account_of(settings.connection_string_value())
    return WorkAnnouncer(channel, account=account, mode=settings.triggers.publish)
