"""Consuming a queue: the threaded dequeue loop (the listener, its threads, settlement, the
middleware seam) and, in ``event_loop/``, the single event-loop consumer of ``async def``
handlers that shares its rules."""
