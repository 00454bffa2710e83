"""Push triggers.

WorkDetected channels (in-process, Redis), the waker and watchdog, and the announcer.
"""
