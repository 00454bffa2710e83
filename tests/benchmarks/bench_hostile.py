"""What hostile input costs a worker: decoding memory per message, gzip bombs, a trigger flood.

The figures of docs/security/threat-model.md and docs/security/triggers.md, measured here, written
to ``results/bench_hostile.json`` with ``--write`` and rendered into those pages at docs build
time (part ``decoding`` and part ``triggers``):

1. **Decoding memory** (tracemalloc, in this process): the peak while ``open_message`` reads one
   message, its JSON values are counted (as the listener does) and ``MessageCodec(dict)`` decodes
   every item, all items held at the end, for the heaviest messages the default limits accept --
   ``max_items_per_message`` items filling ``max_inflated_bytes_per_message`` inline (or
   ``max_blob_payload_bytes`` stored, read from a payload folder) within
   ``max_json_values_per_message`` -- with ordinary records and with items crafted of empty lists;
   and for what the limits refuse: two gzip bombs, and a batch of empty lists filling the inline
   limit. Every inline message is a real one: at most 65,535 characters.
2. **Hostile messages in a real `cloudqueue run`** (the embedded SQLite store): four 64 KiB bombs
   of 5.6 million items ``{}``, or four batches of empty lists filling the inline limit, and 20
   ordinary items, as ``tests/workers/test_hostile_input.py`` puts them; the worker's peak
   resident size (VmHWM) next to a run of the 20 ordinary items alone.
3. **A trigger flood** on one idle listener (the scenario of
   ``tests/listener/scaling/test_push.py``: in-memory store, ``MeteredStorage`` counting calls):
   1,000 triggers at once (virtual clock, the wake at the end of the back-off floor let through by
   hand, several runs), and triggers at the rate issue 26 reported for 10 s of real time; each
   beside the same listener with the floor set to 0, which wakes on every trigger as the code
   before the debounce did.

Run: ``flock /tmp/bench.lock .venv/bin/python -m tests.benchmarks.bench_hostile --write``
(about two minutes).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import logging
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import structlog

from cloudqueue.listener import open_storage, poison_queue_name
from cloudqueue.listener.errors import LimitExceededError
from cloudqueue.listener.stores.payload_store import (
    FolderPayloadStore,
    PayloadStore,
    new_payload_name,
)
from cloudqueue.listener.wire.bounded_json import values_in, values_limited
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.envelope import blob_envelope, inline_envelope
from cloudqueue.listener.wire.frames import pack
from cloudqueue.listener.wire.limits import MIB, DecodingLimits
from cloudqueue.listener.wire.payload import open_message
from cloudqueue.workers.settings import CloudQueueSettings
from tests.benchmarks.hostile_triggers import render_triggers, trigger_costs
from tests.benchmarks.results_file import header_line, report, run_header
from tests.support.hostile import EMPTY_ITEM, MAX_CONTENT_BYTES, gzip_bomb, item
from tests.support.polling import eventually
from tests.support.runs import Run, Runs, run_environment
from tests.workers.test_hostile_input import peak_rss_mib, stamp

BENCH = "bench_hostile"
PARTS = ("decoding", "triggers")
"""The docs blocks ``<!-- bench:bench_hostile:PART -->`` this module renders."""
QUEUE = "orders"
FRAME_BYTES = 4
"""Each item's length before it in the inflated data."""
BOMB_FRAMES = 5_600_000
"""Items ``{}`` in one bomb: about the most whose gzip fits one queue message."""
MAX_ITEMS = DecodingLimits().max_items_per_message
ORDINARY = 20
CRAFTED_N = -1
"""The number a crafted item carries, so that the recording worker handles it."""
CODEC = MessageCodec(dict)


class BenchmarkError(RuntimeError):
    """A run did not go as the tests say it must (a message too big, a bomb accepted)."""


# -- 1. decoding memory ------------------------------------------------------------------------


def record(size: int) -> dict[str, Any]:
    """An order record of ``size`` bytes of JSON: eight order lines and a note."""
    lines = [{"sku": f"sku-{line:04d}", "qty": line + 1, "price": 9.99 + line} for line in range(8)]
    base = {"order": 42, "customer": "customer-00042", "lines": lines, "note": ""}
    return {**base, "note": "x" * (size - _json_bytes(base))}


def empty_lists(size: int) -> dict[str, Any]:
    """A crafted item of ``size`` bytes: as many empty lists as fit (three bytes each)."""
    base: dict[str, Any] = {"n": CRAFTED_N, "a": []}
    return {**base, "a": [[] for _ in range((size - _json_bytes(base) + 1) // 3)]}


def _json_bytes(value: dict[str, Any]) -> int:
    return len(base64.b64decode(CODEC.encode(value)))


def _values(text: str) -> int:
    """JSON values as the listener counts them (``bounded_json.values_in``)."""
    return values_in(base64.b64decode(text).decode())


Shape = Callable[[int], dict[str, Any]]
"""An item of the given size. Every item of a message is the same: only a batch that repeats
itself compresses enough to reach the inline limit within one queue message."""
DECODING_CASES: tuple[tuple[str, Shape, bool, DecodingLimits], ...] = (
    ("inline batch of order records", record, False, DecodingLimits()),
    ("inline batch of items crafted of empty lists", empty_lists, False, DecodingLimits()),
    (
        "the same, with max_inflated_bytes_per_message = 1 MiB",
        empty_lists,
        False,
        DecodingLimits(max_inflated_bytes_per_message=MIB),
    ),
    ("stored payload of order records", record, True, DecodingLimits()),
)


def heaviest_message(
    shape: Shape,
    stored: bool,
    limits: DecodingLimits,
    store: PayloadStore | None,
    *,
    values_limited: bool = True,
) -> tuple[str, int]:
    """The message text and inflated bytes of the most items of ``shape`` the limits accept
    (``values_limited`` False: the bytes limits alone, as before the values were counted)."""
    limit = limits.max_blob_payload_bytes if stored else limits.max_inflated_bytes_per_message
    count = limits.max_items_per_message
    size = limit // count - FRAME_BYTES
    values = count * _values(CODEC.encode(shape(size)))
    if values_limited and values > limits.max_json_values_per_message:
        size = int(size * limits.max_json_values_per_message / values) - 1
    packed = pack([CODEC.encode(shape(size))] * count)
    inflated = len(gzip.decompress(packed.data))
    if stored and store is not None:
        name = new_payload_name(QUEUE)
        store.put(name, packed.data)
        return blob_envelope(name, packed), inflated
    content = inline_envelope(packed)
    if len(content) > MAX_CONTENT_BYTES:
        raise BenchmarkError(f"the {shape.__name__} batch does not fit a message: {len(content)}")
    return content, inflated


def opening_peak(
    content: str, store: PayloadStore | None, limits: DecodingLimits
) -> tuple[int, str]:
    """Peak bytes allocated while the message is opened and its items decoded (all kept), and
    the outcome: the item count, or the setting that refused it."""
    tracemalloc.start()
    try:
        contents = open_message(content, store, limits=limits, queue_name=QUEUE)
        with values_limited(limits.max_json_values_per_message):  # as the listener decodes
            items = [CODEC.decode(text) for text in contents.texts]
        outcome = f"{len(items):,} items"
    except LimitExceededError as refused:
        outcome = f"refused: {refused.setting}"
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, outcome


def decoding_costs(folder: Path) -> list[dict[str, Any]]:
    """The heaviest messages the limits accept: what opening each one holds."""
    store = FolderPayloadStore(folder)
    rows = []
    for label, shape, stored, limits in DECODING_CASES:
        content, inflated = heaviest_message(shape, stored, limits, store)
        peak, outcome = opening_peak(content, store, limits)
        if outcome.startswith("refused"):
            raise BenchmarkError(f"{label}: {outcome}, not the heaviest message accepted")
        rows.append(_row(label, content, inflated, peak, outcome))
    return rows


def bombs() -> list[str]:
    """Gzip bombs announcing all their items, or only as many as the limit allows."""
    return [gzip_bomb(BOMB_FRAMES, count=count) for count in (BOMB_FRAMES, MAX_ITEMS)]


def crafted_batch() -> tuple[str, int]:
    """A batch of items crafted of empty lists filling the inline limit: over the values limit."""
    return heaviest_message(empty_lists, False, DecodingLimits(), None, values_limited=False)


def bomb_costs() -> list[dict[str, Any]]:
    """What refusing each bomb, and the crafted batch over the values limit, holds at its peak."""
    crafted, crafted_inflated = crafted_batch()
    bomb_label = f"{BOMB_FRAMES:,} items {{}}"
    refused = [(bomb, BOMB_FRAMES * len(EMPTY_ITEM), bomb_label) for bomb in bombs()]
    refused.append((crafted, crafted_inflated, "a batch of empty lists filling 16 MiB"))
    rows = []
    for content, inflated, label in refused:
        peak, outcome = opening_peak(content, None, DecodingLimits())
        if not outcome.startswith("refused"):
            raise BenchmarkError(f"{label} was opened: {outcome}")
        rows.append(_row(label, content, inflated, peak, outcome))
    return rows


def _row(label: str, content: str, inflated: int, peak: int, outcome: str) -> dict[str, Any]:
    return {
        "message": label,
        "message_chars": len(content),
        "inflated_bytes": inflated,
        "outcome": outcome,
        "peak_bytes": peak,
    }


# -- 2. hostile messages before ordinary ones in a real worker -----------------------------------


def worker_runs() -> list[dict[str, Any]]:
    """The ordinary items alone; behind four gzip bombs; behind four crafted batches."""
    crafted = [crafted_batch()[0]] * 4
    accepted = [heaviest_message(empty_lists, False, DecodingLimits(), None)[0]] * 4
    found = []
    for label, hostile, poisoned in (
        ("items only", [], 0),
        ("4 gzip bombs, then the items", bombs() * 2, 4),
        ("4 batches of empty lists filling 16 MiB, then the items", crafted, 4),
        ("4 of the heaviest batches of empty lists accepted, then the items", accepted, 0),
    ):
        with TemporaryDirectory() as folder:
            found.append({"run": label, **worker_run(Path(folder), hostile, poisoned)})
    return found


def worker_run(folder: Path, hostile: list[str], poisoned: int) -> dict[str, Any]:
    """A `cloudqueue run` of the ``hostile`` messages and the ordinary items behind them, until
    the queue is empty and ``poisoned`` messages are in the poison queue."""
    env = run_environment(f"sqlite:///{folder / 'queues.db'}", folder)
    queue, poison = env["TEST_QUEUE"], poison_queue_name(env["TEST_QUEUE"])
    queues = open_storage(env["CLOUDQUEUE_CONNECTION_STRING"])
    queues.create_queue(queue)
    for content in [*hostile, *(item(n) for n in range(ORDINARY))]:
        queues.put_message(queue, content)
    runs = Runs(folder)
    try:
        run = runs.start(env)
        eventually(lambda: set(range(ORDINARY)) <= run.handled(), timeout_s=120)
        eventually(lambda: queues.approximate_message_count(queue) == 0, timeout_s=120)
        eventually(lambda: queues.approximate_message_count(poison) == poisoned, timeout_s=30)
        return {
            "ordinary": ORDINARY,
            "peak_rss_mib": round(peak_rss_mib(run.process.pid), 1),
            "ordinary_handled_s": round(seconds_to_ordinary(run), 2),
            "poisoned_at_first_delivery": sum(
                event["dequeue_count"] == 1 for event in run.events("message_poisoned")
            ),
        }
    finally:
        runs.kill_all()
        queues.close()


def seconds_to_ordinary(run: Run) -> float:
    """From the worker's start to the last ordinary item handled, by the log's timestamps."""
    [started] = run.events("host_started")
    ordinary = [e for e in run.events("handled") if 0 <= int(e["n"]) < ORDINARY]
    return (max(stamp(e) for e in ordinary) - stamp(started)).total_seconds()


# -- rendering ---------------------------------------------------------------------------------


def render_markdown(results: dict[str, Any], part: str | None = None) -> str:
    """The docs block of one part (``decoding`` or ``triggers``); every part without one."""
    rendered = {
        "decoding": lambda: _render_decoding(results),
        "triggers": lambda: render_triggers(results["triggers"]),
    }
    chosen = PARTS if part is None else (part,)
    return "\n\n".join([*(rendered[name]() for name in chosen), header_line(results)])


def _mib(count: float) -> str:
    return f"{count / MIB:,.1f} MiB"


def _render_decoding(results: dict[str, Any]) -> str:
    at_once = results["config"]["messages_at_once"]
    lines = [
        "| the heaviest message the limits accept | its text | inflated | items "
        f"| peak while opened (tracemalloc) | x {at_once} at once (computed) |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["decoding"]:
        peak, inflated = row["peak_bytes"], row["inflated_bytes"]
        lines.append(
            f"| {row['message']} | {row['message_chars']:,} characters | {_mib(inflated)} "
            f"| {row['outcome']} | {_mib(peak)}, {peak / inflated:.1f} x inflated "
            f"| {peak * at_once / 1024**3:,.1f} GiB |"
        )
    lines += [
        "",
        "| refused message | its text | would inflate to | refused by | peak while refused |",
    ]
    lines.append("|---|---|---|---|---|")
    for row in results["bombs"]:
        setting = row["outcome"].removeprefix("refused: ")
        lines.append(
            f"| {row['message']} | {row['message_chars']:,} characters "
            f"| {_mib(row['inflated_bytes'])} | `{setting}` | {_mib(row['peak_bytes'])} |"
        )
    ordinary = results["worker_runs"][0]["ordinary"]
    lines += [
        "",
        f"| `cloudqueue run` on SQLite, {ordinary} ordinary items | peak resident (VmHWM) "
        f"| the {ordinary} handled, after start | poisoned at their first delivery |",
        "|---|---|---|---|",
    ]
    for run in results["worker_runs"]:
        lines.append(
            f"| {run['run']} | {run['peak_rss_mib']:,.0f} MiB | {run['ordinary_handled_s']:.2f} s "
            f"| {run['poisoned_at_first_delivery']} |"
        )
    return "\n".join(lines)


# -- run ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog=f"python -m tests.benchmarks.{BENCH}")
    parser.add_argument("--write", action="store_true", help=f"save results/{BENCH}.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    settings = CloudQueueSettings()
    results = run_header(BENCH, argv)
    results["config"] = {
        "messages_at_once": settings.scaling.max_threads * settings.listener.concurrency,
        "limits": asdict(DecodingLimits()),
    }
    with TemporaryDirectory() as folder:
        results["decoding"] = decoding_costs(Path(folder) / "payloads")
    results["bombs"] = bomb_costs()
    results["worker_runs"] = worker_runs()
    results["triggers"] = trigger_costs()
    report(BENCH, results, render_markdown, write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
