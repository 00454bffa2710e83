"""SIGTERM and SIGINT heard by a long-lived process without doing anything inside the handler.

Python runs a signal handler in the main thread *between two bytecodes of whatever it was doing*.
If that was writing a log line, the thread holds structlog's per-file write lock (a plain
``threading.Lock``), and a handler that logs waits for it forever: the process ignored SIGTERM,
and a second one too (a fresh-clone run saw a worker not exit within its 30 s grace). The same
holds for any lock, an ``Event``'s included.

So the handler only counts the signal. The interpreter's own C handler writes the signal number
to a socket (``signal.set_wakeup_fd``, async-signal-safe), which wakes ``wait`` at once; the main
loop then logs and drains as ordinary code. A second signal calls ``on_second`` from the handler:
it must take no lock either (``os._exit``, a child's ``send_signal``).
"""

from __future__ import annotations

import select
import signal
import socket
from collections.abc import Callable
from types import FrameType

HEARD = (signal.SIGTERM, signal.SIGINT)


class SignalLatch:
    """Counts SIGTERM/SIGINT; ``wait(timeout)`` returns True once one came."""

    def __init__(self, on_second: Callable[[int], None] | None = None) -> None:
        self.on_second = on_second
        self.signals: list[int] = []
        self._previous: dict[int, object] = {}
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)

    def __enter__(self) -> SignalLatch:
        self.install()
        return self

    def __exit__(self, *_: object) -> None:
        self.uninstall()

    def install(self) -> None:
        """Become the handler of SIGTERM and SIGINT (main thread only); ``with`` does it and
        ``uninstall`` at the end."""
        signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for signum in HEARD:
            self._previous[signum] = signal.signal(signum, self._heard)

    def uninstall(self) -> None:
        """Give the signals back to their earlier handlers and close the wake-up socket."""
        signal.set_wakeup_fd(-1)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._reader.close()
        self._writer.close()

    @property
    def first(self) -> str | None:
        """The name of the first signal heard, if any."""
        return signal.Signals(self.signals[0]).name if self.signals else None

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a signal; True when one has come (now or before)."""
        if not self.signals:
            select.select([self._reader], [], [], timeout_s)
            self._drain()
        return bool(self.signals)

    def _drain(self) -> None:
        try:
            while self._reader.recv(64):
                pass
        except BlockingIOError:
            pass

    def _heard(self, signum: int, _: FrameType | None) -> None:
        self.signals.append(signum)  # a list append takes no lock the main thread could hold
        if len(self.signals) > 1 and self.on_second is not None:
            self.on_second(signum)


__all__ = ["SignalLatch"]
