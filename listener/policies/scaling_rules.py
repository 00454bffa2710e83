"""Scaling rules: pure functions from a listener's load to the thread count it should run.

A rule sees a ``ScalingInput`` and returns a thread count; ``bounded`` then clamps it to
``[min_threads, max_threads]``. Rules are chosen and parameterized in configuration by name
(``steps``, ``proportional``, ``drain_time``) or given as an import path
``package.module:callable`` that takes a ``ScalingInput`` and returns an int.

Depth: the scaler asks a rule twice. To decide whether to grow it passes the *visible* backlog
(messages nobody works on yet: the queue's approximate count minus this listener's in-flight
messages); to decide whether to shrink it passes the backlog *including* in-flight messages, so a
pool busy with a full batch per thread does not shrink just because the visible queue looks empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import import_object


@dataclass(frozen=True, slots=True)
class ScalingInput:
    """What a rule may look at, all measured just before the decision."""

    depth: int
    """The backlog the rule should size the pool for (see the module docstring)."""
    active_threads: int
    per_thread_rate_per_s: float | None
    """Messages one thread completes per second, as measured (None before the first batch)."""
    message_latency_s: float | None = None
    """Seconds one message spends being handled and settled, as measured (None until known)."""
    concurrency: int = 1
    """Messages each thread keeps in flight: a thread's capacity is concurrency / latency."""


ScalingRule = Callable[[ScalingInput], int]


def steps(table: Sequence[tuple[int, int]]) -> ScalingRule:
    """A table of (depth threshold, threads): the last row whose threshold the depth reaches.

    The design's example is ``steps([(0, 10), (100, 50), (1000, 100)])``.
    """
    rows = sorted(table)
    if not rows or any(threads < 0 or threshold < 0 for threshold, threads in rows):
        raise ConfigurationError("steps needs rows of (depth >= 0, threads >= 0)")

    def rule(load: ScalingInput) -> int:
        chosen = 0
        for threshold, threads in rows:
            if load.depth >= threshold:
                chosen = threads
        return chosen

    return rule


def proportional(messages_per_thread: int) -> ScalingRule:
    """One thread per ``messages_per_thread`` messages of backlog."""
    if messages_per_thread <= 0:
        raise ConfigurationError("proportional needs messages_per_thread > 0")

    def rule(load: ScalingInput) -> int:
        return math.ceil(load.depth / messages_per_thread)

    return rule


def drain_time(target_drain_s: float, *, assumed_rate_per_s: float = 10.0) -> ScalingRule:
    """Enough threads to drain the backlog within ``target_drain_s`` at the measured rate.

    Little's law: threads = backlog / (rate per thread x target time). The rate is measured as
    the listener runs, so slow and fast handlers need no retuning; before the first measurement
    ``assumed_rate_per_s`` stands in. With several messages in flight per thread the rate is the
    thread's capacity, concurrency / measured latency: the messages that must be in flight are
    backlog / target time x latency, and each thread holds ``concurrency`` of them.
    """
    if target_drain_s <= 0 or assumed_rate_per_s <= 0:
        raise ConfigurationError("drain_time needs target_drain_s > 0 and assumed_rate_per_s > 0")

    def rule(load: ScalingInput) -> int:
        rate = thread_capacity_per_s(load) or assumed_rate_per_s
        return math.ceil(load.depth / (rate * target_drain_s))

    return rule


def thread_capacity_per_s(load: ScalingInput) -> float | None:
    """Messages per second one thread can settle: from latency when it keeps several in flight
    (its measured rate only shows the work it had), else its measured rate."""
    if load.concurrency > 1 and load.message_latency_s:
        return load.concurrency / load.message_latency_s
    return load.per_thread_rate_per_s


def bounded(threads: int, *, min_threads: int, max_threads: int) -> int:
    """Clamp a rule's answer to the configured bounds."""
    return max(min_threads, min(max_threads, threads))


def import_rule(path: str) -> ScalingRule:
    """Load a custom rule from ``package.module:callable``; ConfigurationError if it is not one."""
    rule = import_object(path, what="custom rule")
    if not callable(rule):
        raise ConfigurationError(f"custom rule {path!r} is not a callable")
    return cast(ScalingRule, rule)
