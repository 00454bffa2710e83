"""Interrupting a thread: an exception raised in it at its next bytecode (CPython's
``PyThreadState_SetAsyncExc``, as dramatiq's ``TimeLimit`` uses).

Python checks for it between bytecodes, so a thread blocked in C -- ``time.sleep``, a socket
read without a timeout, a lock -- only sees it once the call returns. ``time_limits`` sets it
only while the thread runs a handler, and withdraws it if the handler returned first.
"""

from __future__ import annotations

import ctypes

from cloudqueue.listener.errors import TimeLimitExceeded


def interrupt(thread_id: int, error: type[BaseException] = TimeLimitExceeded) -> bool:
    """Have ``error`` raised in the thread at its next bytecode; True when it is set to be."""
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    changed = int(set_async(ctypes.c_ulong(thread_id), ctypes.py_object(error)))
    if changed > 1:  # pragma: no cover - CPython's documented undo for a confused id
        set_async(ctypes.c_ulong(thread_id), None)
        return False
    return changed == 1


def withdraw_interrupt(thread_id: int) -> None:
    """Withdraw a pending interrupt that has not been raised yet (the thread left the code it
    was meant for)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)


__all__ = ["interrupt", "withdraw_interrupt"]
