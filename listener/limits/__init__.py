"""Rate limits that protect downstream systems: a worker's, or a whole fleet's, messages a second.

``RateLimiter`` is the seam the listener calls before each message; ``LocalRateLimiter`` holds
the limit across one process's threads and ``RedisRateLimiter`` across every process sharing a
Redis. The decision itself is the pure token bucket of ``cloudqueue.listener.policies.rate_limit``.
"""
