"""Where the client's Python time goes, counted by cProfile: own CPU time and calls per message.

``profile_client`` runs a no-op drain (``profile_drain``'s) in this process with cProfile on
every thread the drain starts and on the drain call itself, timed by each thread's CPU clock
(``time.thread_time``), so a call blocked on a socket, a lock or the GIL counts only the CPU it
used. Each function's own time counts for the layer its file belongs to
(``profile_client.LAYERS``). A function of no layer -- a C builtin or a stdlib function -- counts
for the functions that called it, in proportion to the time each call path spent in it, up to the
first caller that has a layer; so ``uuid4`` counts for the SDK's headers policy and the email
parser for ``http.client``'s ``parse_headers``.

Why cProfile and not a sampler: on this project's 2-core VMs ``py-spy --gil`` put up to 27 % of
its samples on ``HandlerPool.submit``, which a timer around it showed taking 3 ms of CPU in a
23 s drain. A
deterministic profiler counts every call; its own cost per call makes layers of many small calls
look bigger, so the shares are a guide, and the calls per message are exact.
"""

from __future__ import annotations

import cProfile
import pstats
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

Function = tuple[str, int, str]
"""cProfile's key: file (``~`` for builtins), line, name."""
Callers = dict[Function, tuple[int, int, float, float]]
"""Per caller: primitive calls, calls, own time, cumulative time of the callee from there."""
Entry = tuple[int, int, float, float, Callers]
"""A function's stats: primitive calls, calls, own time, cumulative time, its callers."""

MAX_DEPTH = 12
"""How far up the callers a function of no layer is followed before it counts as other."""
TOP_FUNCTIONS = 3
"""Functions shown per layer."""


class EveryThreadProfile:
    """cProfile on the thread that enters it and on every thread started inside it.

    Each profile is only ever enabled on its own thread (two threads in one profile corrupt its
    call stack), and ``stats`` reads only those of threads that have ended: reading one still in
    use disables and flushes it under its thread's feet.
    """

    def __init__(self) -> None:
        self._main = cProfile.Profile(time.thread_time)
        self._threads: list[tuple[threading.Thread, cProfile.Profile]] = []
        self._run = threading.Thread.run

    def __enter__(self) -> EveryThreadProfile:
        run, threads = self._run, self._threads

        def profiled_run(thread: threading.Thread) -> None:
            profile = cProfile.Profile(time.thread_time)
            threads.append((thread, profile))
            profile.enable()
            try:
                run(thread)
            finally:
                profile.disable()

        self._main.enable()
        threading.Thread.run = profiled_run  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        threading.Thread.run = self._run  # type: ignore[method-assign]
        self._main.disable()

    @property
    def still_running(self) -> int:
        """Threads started inside that have not ended (their calls are left out of ``stats``)."""
        return sum(thread.is_alive() for thread, _ in self._threads)

    def stats(self) -> dict[Function, Entry]:
        """The profiles of the entering thread and of every ended thread, merged."""
        merged = pstats.Stats(self._main)
        for thread, profile in list(self._threads):
            if not thread.is_alive():
                merged.add(profile)
        return merged.stats  # type: ignore[attr-defined, no-any-return]


def summarize_calls(
    stats: dict[Function, Entry],
    messages: int,
    layer_of: Callable[[str], str | None],
    other: str,
) -> dict[str, Any]:
    """Own CPU µs and calls per message of each layer, and its top functions."""
    own: dict[Function, float] = defaultdict(float)
    calls: dict[Function, float] = defaultdict(float)
    owners = _Owners(stats, layer_of)
    for function, (_, count, own_s, _, _) in stats.items():
        for owner, share in owners.of(function).items():
            own[owner] += own_s * share
            calls[owner] += count * share
    layers: dict[str, dict[str, Any]] = {}
    for function, seconds in own.items():
        layer = layer_of(function[0]) or other
        entry = layers.setdefault(layer, {"layer": layer, "us": 0.0, "calls": 0.0, "top": []})
        entry["us"] += seconds
        entry["calls"] += calls[function]
        entry["top"].append((seconds, function))
    per_message = 1e6 / messages
    return {
        "layers": [
            {
                "layer": entry["layer"],
                "own_us_per_msg": round(entry["us"] * per_message, 1),
                "calls_per_msg": round(entry["calls"] / messages, 1),
                "top_functions": [
                    {"function": _name(function), "own_us_per_msg": round(s * per_message, 1)}
                    for s, function in sorted(entry["top"], reverse=True)[:TOP_FUNCTIONS]
                ],
            }
            for entry in sorted(layers.values(), key=lambda e: -float(e["us"]))
        ],
    }


class _Owners:
    """Which layered functions a function's time counts for, as shares summing to 1."""

    def __init__(self, stats: dict[Function, Entry], layer_of: Callable[[str], str | None]):
        self._stats = stats
        self._layer_of = layer_of
        self._known: dict[Function, dict[Function, float]] = {}

    def of(self, function: Function, depth: int = 0) -> dict[Function, float]:
        if self._layer_of(function[0]) is not None:
            return {function: 1.0}
        if function in self._known:
            return self._known[function]
        callers = self._stats[function][4] if function in self._stats else {}
        spent = sum(entry[2] for entry in callers.values())
        if depth >= MAX_DEPTH or not callers:
            return {function: 1.0}  # counts as other, under its own name
        self._known[function] = {function: 1.0}  # a cycle back here counts as other
        shares: dict[Function, float] = defaultdict(float)
        for caller, entry in callers.items():
            weight = entry[2] / spent if spent > 0 else entry[1] / max(1, _calls(callers))
            for owner, share in self.of(caller, depth + 1).items():
                shares[owner] += weight * share
        self._known[function] = dict(shares)
        return self._known[function]


def _calls(callers: Callers) -> int:
    return sum(entry[1] for entry in callers.values())


def _name(function: Function) -> str:
    path, _, name = function
    return name if path == "~" else function_name(name, path)


def function_name(name: str, path: str) -> str:
    """``name (folder/file)``: how both profiles' summaries name a function."""
    return f"{name} ({'/'.join(path.split('/')[-2:])})"
