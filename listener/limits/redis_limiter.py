"""A rate limit shared by a fleet of processes through Redis.

Each turn is one atomic Lua script: the GCRA reservation of
``cloudqueue.listener.policies.rate_limit`` kept in one key per queue, on the Redis server's clock
(``TIME``), so every process lines up on
one timeline whatever its own clock says. Why GCRA rather than ``INCR`` over fixed windows:
fixed windows let a full window's worth through at the end of one window and again at the start
of the next (twice the limit over that second); GCRA spaces messages evenly with a small,
bounded burst. Times are whole microseconds, which a Lua number holds exactly. The key expires a
second after its last reserved slot: a fleet idle that long starts again from an empty bucket,
as a new one does (no burst, never more than the limit).

When Redis cannot be reached the limiter never stops consuming: it warns and falls back to a
local limit of the same rate (the fleet limit is then held per process, not fleet-wide), and
tries Redis again after ``retry_after_s``.

What it reads back is bounded, since anyone who can write to that Redis can write the key: a
stored time further ahead than ``max_waiting`` turns (one interval each, the most messages the
fleet may have waiting at once) plus the burst, a negative one or no number at all, was not
written by a limiter. The script then treats the bucket as empty and overwrites it, and warns
(``fleet_rate_limit_implausible``, at most once a minute); a reply that is not a wait within
that bound is ignored and the turn taken from the local limit.
"""

from __future__ import annotations

import threading

import redis
import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.limits.limiter import LocalRateLimiter
from cloudqueue.listener.log_throttle import ThrottledWarning
from cloudqueue.listener.policies.rate_limit import check_limit, default_burst
from cloudqueue.listener.redaction import redact

log = structlog.get_logger(__name__)

SOCKET_TIMEOUT_S = 0.5
"""A hung Redis delays a message at most this long before the local limit takes over."""
RETRY_AFTER_S = 5.0

DEFAULT_MAX_WAITING = 1024
"""The most turns the whole fleet may have waiting at once (about processes x max_threads)."""

# The GCRA reservation of listener.policies.rate_limit.reserve, in microseconds.
# KEYS[1]: the bucket; ARGV[1]: interval_us; ARGV[2]: tolerance_us; ARGV[3]: horizon_us, the
# furthest ahead of now a limiter ever writes. Returns {wait_us, 1 if the stored value was not
# a limiter's (ignored and overwritten) else 0}.
RESERVE_SCRIPT = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local horizon = tonumber(ARGV[3])
local stored = redis.call('GET', KEYS[1])
local tat = tonumber(stored)
local implausible = 0
if stored and (tat == nil or tat ~= tat or tat < 0 or tat > now + horizon) then
  tat = nil
  implausible = 1
end
if tat == nil then
  tat = now + tolerance
end
local wait = math.max(0, tat - tolerance - now)
local next_tat = math.max(tat, now) + interval
local ttl_ms = math.ceil((next_tat - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', ttl_ms)
return {wait, implausible}
"""


def bucket_key(account: str, queue_name: str) -> str:
    """The Redis key of one queue's fleet limit."""
    return f"cloudqueue:rate-limit:{account}:{queue_name}"


class RedisRateLimiter:
    """A token bucket in Redis, shared by every process that uses the same key."""

    def __init__(
        self,
        url: str,
        key: str,
        max_messages_per_s: float,
        *,
        burst: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
        retry_after_s: float = RETRY_AFTER_S,
        max_waiting: int = DEFAULT_MAX_WAITING,
    ) -> None:
        """``max_waiting``: the most turns the fleet may have waiting at once; a longer wait
        read from Redis is not believed (see the module's docstring)."""
        if max_waiting < 1:
            raise ConfigurationError(f"max_waiting must be >= 1, got {max_waiting}")
        self.burst = default_burst(max_messages_per_s) if burst is None else burst
        check_limit(max_messages_per_s, self.burst)
        self.key = key
        self.max_waiting = max_waiting
        self._max_messages_per_s = max_messages_per_s
        self.clock = clock
        self.sleeper = sleeper
        self.retry_after_s = retry_after_s
        self._interval_us = max(1, round(1_000_000 / max_messages_per_s))
        self._tolerance_us = (self.burst - 1) * self._interval_us
        # A reservation made behind max_waiting others: the longest wait the limit can need.
        self._horizon_us = self._tolerance_us + (max_waiting + 1) * self._interval_us
        self._implausible = ThrottledWarning("fleet_rate_limit_implausible", clock=clock)
        self._client: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self._script = self._client.register_script(RESERVE_SCRIPT)
        self._fallback = LocalRateLimiter(
            max_messages_per_s, burst=self.burst, clock=clock, sleeper=sleeper
        )
        self._lock = threading.Lock()
        self._local_until_s: float | None = None
        self.fallbacks = 0

    @property
    def max_messages_per_s(self) -> float:
        return self._max_messages_per_s

    @property
    def degraded(self) -> bool:
        """True while the local limit stands in for the fleet's."""
        with self._lock:
            return self._local_until_s is not None

    def acquire(self, stop_event: threading.Event) -> float:
        wait_s = self.reserve_s()
        if wait_s > 0:
            self.sleeper.wait(stop_event, wait_s)
        return wait_s

    def close(self) -> None:
        self._client.close()

    def reserve_s(self) -> float:
        """Take the next slot (in Redis, or locally while it is out); return how long until it."""
        if self._use_local():
            return self._fallback.reserve_s()
        try:
            reply = self._script(
                keys=[self.key], args=[self._interval_us, self._tolerance_us, self._horizon_us]
            )
        except redis.RedisError as failure:
            self._degrade(failure)
            return self._fallback.reserve_s()
        self._recover()
        return self._accepted_wait_s(reply)

    def _accepted_wait_s(self, reply: object) -> float:
        """The wait the script replied, if it is one a limiter could need; else a local turn."""
        match reply:
            case [int(wait_us), int(implausible)] if 0 <= wait_us <= self._horizon_us:
                if implausible:
                    self._warn_implausible("the bucket held no time a limiter writes: reset")
                return wait_us / 1_000_000
        self._warn_implausible("the reply was not a wait within the limit: a local turn")
        return self._fallback.reserve_s()

    def _warn_implausible(self, reason: str) -> None:
        self._implausible.record(
            key=self.key,
            reason=reason,
            max_wait_s=round(self._horizon_us / 1_000_000, 3),
        )

    def _use_local(self) -> bool:
        with self._lock:
            return self._local_until_s is not None and self.clock.monotonic() < self._local_until_s

    def _degrade(self, failure: redis.RedisError) -> None:
        with self._lock:
            first = self._local_until_s is None
            self._local_until_s = self.clock.monotonic() + self.retry_after_s
            if first:
                self.fallbacks += 1
        if first:
            log.warning(
                "fleet_rate_limit_unavailable",
                key=self.key,
                error=redact(str(failure)),
                local_limit_per_s=self._max_messages_per_s,
                retry_in_s=self.retry_after_s,
            )

    def _recover(self) -> None:
        with self._lock:
            recovered, self._local_until_s = self._local_until_s is not None, None
        if recovered:
            log.info("fleet_rate_limit_restored", key=self.key)

    def __repr__(self) -> str:
        return (
            f"RedisRateLimiter(key={self.key!r}, max_messages_per_s={self._max_messages_per_s}, "
            f"burst={self.burst}, degraded={self.degraded})"
        )
