"""A live status line on a terminal: depth, dequeue threads and processed count while workers run.

``cloudqueue run`` and the demo show one line per queue, redrawn a few times a second, so a person
watching sees the threads follow the backlog. Everything on it comes from in-memory counters and
the listener's known depth (``cloudqueue.listener.consumer.depth``: its last count, or 0 after an
empty get, with its age when that is a second or more): drawing it costs no storage transaction.

Log lines must not tear the line apart: while it is shown, structlog writes through the same
``rich`` console (``ConsoleStream``), which prints them above the status line.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

if TYPE_CHECKING:  # only hinted: `cloudqueue status` formats with this module, no consumer
    from cloudqueue.listener.consumer.depth import KnownDepth
    from cloudqueue.listener.consumer.event_loop.consumer import AsyncConsumer
    from cloudqueue.listener.consumer.listener import CloudQueueListener

REFRESH_INTERVAL_S = 0.25

SHOWN_AGE_S = 1.0
"""A depth this old or older is shown with its age."""


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """What the status line shows of one listener at one moment."""

    queue: str
    threads: int
    in_flight: int
    processed: int
    """Messages."""
    poisoned: int
    depth: int | None
    """Visible messages at the last count or empty get (None before either)."""
    depth_age_s: float | None = None
    items_processed: int | None = None
    """Items (a batched message holds several); None: as many as messages."""

    @classmethod
    def of(cls, listener: CloudQueueListener[Any]) -> QueueProgress:
        counters = listener.counters.snapshot()
        return cls._read(
            listener.queue_name,
            listener.active_dequeue_tasks,
            counters,
            listener.meters.known_depth,
            counters["items_processed"],
        )

    @classmethod
    def of_loop(cls, consumer: AsyncConsumer[Any]) -> QueueProgress:
        """The line of a worker on one event loop: its dequeue tasks shown as its threads."""
        counters = consumer.counters_of(consumer.queue_name)
        return cls._read(consumer.queue_name, consumer.active_tasks, counters, consumer.depth.known)

    @classmethod
    def _read(
        cls,
        queue: str,
        tasks: int,
        counters: Mapping[str, int],
        known: KnownDepth,
        items: int | None = None,
    ) -> QueueProgress:
        reading = known.reading()
        return cls(
            queue=queue,
            threads=tasks,
            in_flight=counters["in_flight"],
            processed=counters["processed"],
            poisoned=counters["poisoned"],
            depth=None if reading is None else reading.visible,
            depth_age_s=known.age_s(),
            items_processed=items,
        )

    @property
    def settled(self) -> int:
        return self.processed + self.poisoned

    def fields(self) -> dict[str, Any]:
        processed = processed_text(self.items_processed, self.processed)
        return {
            "figures": f"depth {self._depth()} · threads {self.threads} · "
            f"in flight {self.in_flight} · processed {processed} · poisoned {self.poisoned:,}"
        }

    def _depth(self) -> str:
        # The known depth, not a new count: a count per frame would cost a transaction each.
        if self.depth is None:
            return "?"
        age_s = self.depth_age_s or 0.0
        return f"{self.depth:,}" + ("" if age_s < SHOWN_AGE_S else f" ({age_s:,.0f} s ago)")


def processed_text(items: int | None, messages: int) -> str:
    """``200 items (1 message)`` when batches made them differ, else just the count."""
    if items is None or items == messages:
        return f"{messages:,}"
    noun = "message" if messages == 1 else "messages"
    return f"{items:,} items ({messages:,} {noun})"


class LiveProgress:
    """The status lines of several listeners, redrawn until the context exits.

    The line ``cloudqueue run`` shows on a terminal, one per queue: depth, dequeue threads, in
    flight, processed and poisoned, redrawn a few times a second from in-memory counters (drawing
    costs no storage transaction). To show it around a ``WorkerHost`` in your own process, send
    the log lines through the same console so that they print above it::

        console = rich.console.Console(stderr=True)
        configure_logging(settings.logging, stream=ConsoleStream(console))
        host = WorkerHost([InvoiceWorker], settings)
        with LiveProgress(host.listeners, console=console):
            host.run()

    ``expected`` (per queue) turns a line into a progress bar towards a known number of messages,
    as in the demo; without it the bar pulses and the figures carry the news. ``loops`` are the
    event-loop consumers of workers with ``listener.event_loop = "single"`` (``host.consumers``).
    """

    def __init__(
        self,
        listeners: Sequence[CloudQueueListener[Any]],
        *,
        console: Console,
        expected: dict[str, int] | None = None,
        loops: Sequence[AsyncConsumer[Any]] = (),
    ) -> None:
        self._lines: list[tuple[Sequence[str], Callable[[], QueueProgress]]] = [
            *((shown.queue_names, partial(QueueProgress.of, shown)) for shown in listeners),
            *((loop.queue_names, partial(QueueProgress.of_loop, loop)) for loop in loops),
        ]
        self._expected = expected or {}
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=console,
            # The final frame stays on screen: the last state is worth keeping in the scroll-back.
            transient=False,
            auto_refresh=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._stopped = threading.Event()
        self._refresher = threading.Thread(target=self._refresh_loop, name="live-progress")

    def __enter__(self) -> Self:
        for queue_names, _ in self._lines:
            name = queue_names[0]
            # A worker on several queues shows them all, highest priority first.
            self._tasks[name] = self._progress.add_task(
                " > ".join(queue_names), total=self._expected.get(name), figures=""
            )
        self._progress.start()
        self.refresh()
        self._refresher.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopped.set()
        self._refresher.join()
        self.refresh()
        self._progress.stop()

    def refresh(self) -> None:
        """Redraw every line from the listeners' counters now."""
        for _, read in self._lines:
            state = read()
            self._progress.update(
                self._tasks[state.queue], completed=state.settled, **state.fields()
            )
        self._progress.refresh()

    def _refresh_loop(self) -> None:
        # A periodic redraw, not a wait for a condition: the interval is the frame rate.
        while not self._stopped.wait(REFRESH_INTERVAL_S):
            self.refresh()


class ConsoleStream(io.TextIOBase):
    """A text stream for structlog that prints through a rich console, above its live lines.

    Give it to ``configure_logging(settings.logging, stream=ConsoleStream(console))`` while a
    ``LiveProgress`` draws on the same ``console``: log lines then never tear the status lines.
    """

    def __init__(self, console: Console) -> None:
        super().__init__()
        self._console = console

    def write(self, text: str) -> int:
        line = text.rstrip("\n")
        if line:
            # The renderer already coloured the line with ANSI codes: keep them, add no markup.
            self._console.print(Text.from_ansi(line), soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        self._console.file.flush()

    def isatty(self) -> bool:
        return self._console.is_terminal


def shows_progress(console: Console, *, wanted: bool = True) -> bool:
    """The status line is for people: only when asked and when the console is a terminal."""
    return wanted and console.is_terminal


__all__ = ["ConsoleStream", "LiveProgress", "QueueProgress", "processed_text", "shows_progress"]
