"""What a ``--processes N`` supervisor and its children agree on: the child's slot and its exit.

Here, below both, so that a host learns it is a child without importing the supervisor.
"""

CHILD_SLOT_VARIABLE = "CLOUDQUEUE_CHILD"
"""Tells a child its slot, so that each of its log lines names it (``child=N``)."""
RECYCLE_EXIT_CODE = 3
"""A child exits with this after draining when it asks to be replaced (too many handler threads
stuck past their time limit): it is started again at once, not counted as a crash."""
STARTUP_FAILED_EXIT_CODE = 4
"""A process exits with this when a worker's or job's ``startup`` raised, before it took any
message: restarting it would fail the same way, so the supervisor stops the fleet instead."""
