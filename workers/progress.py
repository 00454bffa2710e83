"""A live status line on a terminal: depth, dequeue threads and processed count while workers run.

``cloudqueue run`` and the demo show one line per queue, redrawn a few times a second, so a person
watching sees the threads follow the backlog. Everything on it comes from in-memory counters and
the depth the listener last read for scaling: drawing it costs no storage transaction.

Log lines must not tear the line apart: while it is shown, structlog writes through the same
``rich`` console (``ConsoleStream``), which prints them above the status line.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

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

from listener.listener import CloudQueueListener

REFRESH_INTERVAL_S = 0.25

DepthReader = Callable[[str], int | None]
"""The queue's last known depth without a new storage call (e.g. ``MeteredStorage.last_depth``)."""


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """What the status line shows of one listener at one moment."""

    queue: str
    threads: int
    in_flight: int
    processed: int
    poisoned: int
    depth: int | None

    @classmethod
    def of(cls, listener: CloudQueueListener[Any], depth_of: DepthReader) -> QueueProgress:
        counters = listener.counters.snapshot()
        return cls(
            queue=listener.queue_name,
            threads=listener.active_dequeue_tasks,
            in_flight=counters["in_flight"],
            processed=counters["processed"],
            poisoned=counters["poisoned"],
            depth=depth_of(listener.queue_name),
        )

    @property
    def settled(self) -> int:
        return self.processed + self.poisoned

    def fields(self) -> dict[str, Any]:
        # The depth last read for scaling: reading it again would cost a transaction per frame.
        depth = "?" if self.depth is None else f"{self.depth:,}"
        return {
            "figures": f"last depth {depth} · threads {self.threads} · "
            f"in flight {self.in_flight} · processed {self.processed:,} · "
            f"poisoned {self.poisoned:,}"
        }


class LiveProgress:
    """The status lines of several listeners, redrawn until the context exits.

    ``expected`` (per queue) turns a line into a progress bar towards a known number of messages,
    as in the demo; without it the bar pulses and the figures carry the news.
    """

    def __init__(
        self,
        listeners: Sequence[CloudQueueListener[Any]],
        *,
        console: Console,
        depth_of: DepthReader,
        expected: dict[str, int] | None = None,
    ) -> None:
        self._listeners = list(listeners)
        self._depth_of = depth_of
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
        for listener in self._listeners:
            name = listener.queue_name
            self._tasks[name] = self._progress.add_task(
                name, total=self._expected.get(name), figures=""
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
        for listener in self._listeners:
            state = QueueProgress.of(listener, self._depth_of)
            self._progress.update(
                self._tasks[state.queue], completed=state.settled, **state.fields()
            )
        self._progress.refresh()

    def _refresh_loop(self) -> None:
        # A periodic redraw, not a wait for a condition: the interval is the frame rate.
        while not self._stopped.wait(REFRESH_INTERVAL_S):
            self.refresh()


class ConsoleStream(io.TextIOBase):
    """A text stream for structlog that prints through a rich console, above its live lines."""

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


__all__ = ["ConsoleStream", "LiveProgress", "QueueProgress", "shows_progress"]
