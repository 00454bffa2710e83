"""Pure policies: idle back-off, scaling rules and the retry/poison delivery policy.

No clock, no I/O: inputs in, decision out, so the listener and a simulation share them.
"""
