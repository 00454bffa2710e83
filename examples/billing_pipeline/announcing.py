"""Push triggers for the pipeline's publishers, when the settings configure them.

With ``triggers.url`` set (``CLOUDQUEUE_TRIGGERS__URL=redis://...``), each publish announces the
work on the trigger channel, so idle workers (even at ``min_threads = 0``) wake at once instead of
at their next poll; without it, this returns None and the workers poll.
"""

from __future__ import annotations

from cloudqueue import CloudQueueSettings
from cloudqueue.listener import RedisTriggerChannel, WorkAnnouncer, account_of


def announcer_from(settings: CloudQueueSettings) -> WorkAnnouncer | None:
    url = settings.triggers.url_value()
    if url is None:
        return None
    # The channel and the account the workers listen on, from the same settings.
    channel = RedisTriggerChannel(url, channel=settings.triggers.channel)
    account = account_of(settings.connection_string_value())
    return WorkAnnouncer(channel, account=account, mode=settings.triggers.publish)
