"""The per-key limit across a fleet of processes, through Redis, with leases that expire.

Each key is a sorted set ``cloudqueue:per-key:<account>:<queue>:<key>`` whose members are the
holders (process and message id) scored by when their lease ends, on the Redis server's clock.
Entering is one atomic Lua script: drop the expired leases, then take a lease if fewer than N are
live. A holder's leases are extended every third of ``lease_s`` while it handles; if its process
dies, they run out within ``lease_s`` and its permits are free again.

A message that finds its key full is deferred and tries again after a short, growing pause (0.1 s
doubling to 2 s): the permit may free in another process, which cannot resume it. A permit freed
in this process resumes this process's oldest waiter at once.

When Redis cannot be reached the gate falls back to the limit of this process alone, warns
(``fleet_key_limit_unavailable``) and tries Redis again after ``retry_after_s``, as the fleet rate
limiter does: work goes on, held per process meanwhile.
"""

from __future__ import annotations

import threading
import uuid

import redis
import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.limits.key_gate import Defer, LocalKeyGate, Resume
from cloudqueue.listener.redaction import redact

log = structlog.get_logger(__name__)

SOCKET_TIMEOUT_S = 0.5
RETRY_AFTER_S = 5.0
FIRST_POLL_S = 0.1
MAX_POLL_S = 2.0

# KEYS[1]: the key's set; ARGV: limit, lease_ms, holder. 1 when the holder has a lease now.
ENTER_SCRIPT = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[3]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], lease)
  return 1
end
return 0
"""

# KEYS[1]: the key's set; ARGV: lease_ms, holder. Extends a live lease (XX: never re-creates one).
RENEW_SCRIPT = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local renewed = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return renewed
"""


def key_set(account: str, queue_name: str, key: str) -> str:
    """The Redis key of one message key's leases."""
    return f"cloudqueue:per-key:{account}:{queue_name}:{key}"


class RedisKeyGate:
    """At most ``limit`` holders per key across every process using the same Redis."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        limit: int,
        lease_s: float,
        clock: Clock = SYSTEM_CLOCK,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        """``prefix``: ``key_set(account, queue, "")``, to which each key is appended."""
        self.limit = limit
        self.prefix = prefix
        self.lease_ms = max(1, round(lease_s * 1000))
        self._clock = clock
        self._retry_after_s = retry_after_s
        self._process = uuid.uuid4().hex[:12]
        self._client: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self._enter = self._client.register_script(ENTER_SCRIPT)
        self._renew = self._client.register_script(RENEW_SCRIPT)
        self._fallback = LocalKeyGate(limit, clock=clock)
        self._held: dict[str, str] = {}
        """holder -> key, for the leases this process holds now (renewed while held)."""
        self._waiting: dict[str, dict[str, Resume]] = {}
        """key -> holder -> its latest resume: this process's waiters, oldest first."""
        self._polls: dict[str, int] = {}
        self._local_until: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew_leases, name="cloudqueue:per-key-leases", daemon=True
        )
        self._renewer.start()

    def enter(self, key: str, holder: str, defer: Defer) -> bool:
        if self._use_local():
            return self._fallback.enter(key, holder, defer)
        try:
            entered = bool(self._enter(keys=[self.prefix + key], args=self._args(holder)))
        except redis.RedisError as failure:
            self._degrade(failure)
            return self._fallback.enter(key, holder, defer)
        with self._lock:
            waiting = self._waiting.get(key)
            if entered:
                self._held[holder] = key
                self._polls.pop(holder, None)
                if waiting is not None:
                    waiting.pop(holder, None)
                    if not waiting:
                        del self._waiting[key]
                return True
            polls = self._polls[holder] = self._polls.get(holder, 0) + 1
            pause_s = min(MAX_POLL_S, FIRST_POLL_S * 2 ** (polls - 1))
            self._waiting.setdefault(key, {})[holder] = defer(pause_s)
        return False

    def leave(self, key: str, holder: str) -> None:
        with self._lock:
            held = self._held.pop(holder, None) is not None
            waiting = self._waiting.get(key)
            resume = waiting.pop(next(iter(waiting))) if waiting else None
            if waiting is not None and not waiting:
                del self._waiting[key]
        if not held:
            self._fallback.leave(key, holder)
        else:
            try:
                self._client.zrem(self.prefix + key, self._member(holder))
            except redis.RedisError as failure:
                self._degrade(failure)  # the lease runs out by itself
        if resume is not None:
            resume()  # freed here: this process's oldest waiter tries now, not after its pause

    def abandon(self, holder: str) -> None:
        with self._lock:
            if self._polls.pop(holder, None) is not None:
                for waiting in self._waiting.values():
                    waiting.pop(holder, None)
        self._fallback.abandon(holder)

    def close(self) -> None:
        self._stop.set()
        self._renewer.join(5)
        self._client.close()

    def _args(self, holder: str) -> list[int | str]:
        return [self.limit, self.lease_ms, self._member(holder)]

    def _member(self, holder: str) -> str:
        return f"{self._process}:{holder}"

    def _renew_leases(self) -> None:
        while not self._stop.wait(self.lease_ms / 3000):
            with self._lock:
                held = list(self._held.items())
            for holder, key in held:
                try:
                    member = self._member(holder)
                    self._renew(keys=[self.prefix + key], args=[self.lease_ms, member])
                except redis.RedisError as failure:
                    self._degrade(failure)
                    break

    def _use_local(self) -> bool:
        with self._lock:
            until = self._local_until
            if until is not None and self._clock.monotonic() >= until:
                self._local_until = until = None
                log.info("fleet_key_limit_restored", prefix=self.prefix)
            return until is not None

    def _degrade(self, failure: redis.RedisError) -> None:
        with self._lock:
            first = self._local_until is None
            self._local_until = self._clock.monotonic() + self._retry_after_s
        if first:
            log.warning(
                "fleet_key_limit_unavailable",
                prefix=self.prefix,
                error=redact(str(failure)),
                retry_in_s=self._retry_after_s,
            )

    def __repr__(self) -> str:
        return f"RedisKeyGate(prefix={self.prefix!r}, limit={self.limit}, held={len(self._held)})"


__all__ = ["RedisKeyGate", "key_set"]
