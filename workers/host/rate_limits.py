"""A worker's rate limiter, as its settings describe it: none, per process, or fleet-wide."""

from __future__ import annotations

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.limits.limiter import LocalRateLimiter, RateLimiter
from cloudqueue.listener.location import CloudQueueLocation
from cloudqueue.listener.push.triggers import account_of
from cloudqueue.workers.settings import CloudQueueSettings


def open_rate_limiter(
    settings: CloudQueueSettings, location: CloudQueueLocation
) -> RateLimiter | None:
    """The limiter for one worker's queue, or None when its settings set no limit.

    A fleet limit is one Redis key per account and queue, so every process listening on that
    queue with ``rate_limit.fleet`` shares it, whichever worker class or host it runs in.
    """
    limit = settings.rate_limit.max_messages_per_s
    if limit is None:
        return None
    if not settings.rate_limit.fleet:
        return LocalRateLimiter(limit)
    url = settings.triggers.url_value()
    if url is None:  # a worker's own settings may ask for fleet; the host's validator did not see
        raise ConfigurationError("rate_limit.fleet = true needs triggers.url (the fleet's Redis)")
    # Imported here: the Redis client (and what it imports) only for a fleet limit.
    from cloudqueue.listener.limits.redis_limiter import RedisRateLimiter, bucket_key

    account = account_of(settings.connection_string_value())
    return RedisRateLimiter(
        url,
        bucket_key(account, location.queue_name),
        limit,
        max_waiting=settings.rate_limit.fleet_max_waiting,
    )
