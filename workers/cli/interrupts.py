"""Ctrl-C for commands that run until it comes (``status --watch``): always heard, always quiet."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click


@contextmanager
def ended_by_ctrl_c() -> Iterator[None]:
    """Ctrl-C, whenever it comes (settings, storage, a refresh, the wait), ends the command quietly
    with exit code 0.

    SIGINT raises KeyboardInterrupt here even when this process was started with it ignored: a
    shell starts a script's background jobs so, Python then installs no handler, and a watch
    could not be stopped. (A SIGINT during interpreter start-up and imports, before this runs, is
    discarded by the kernel in that case: nothing in the process can see it.)
    """
    previous = _interrupt_on_sigint()
    try:
        yield
    except KeyboardInterrupt:
        click.echo(err=True)  # end the ^C line; no traceback, no "Aborted!"
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _interrupt_on_sigint() -> signal.Handlers | Callable[..., object] | int | None:
    """Make SIGINT raise KeyboardInterrupt; return the handler to restore (None: unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        return None  # only the main thread may set handlers (and only it receives them)
    return signal.signal(signal.SIGINT, signal.default_int_handler)


__all__ = ["ended_by_ctrl_c"]
