"""A worker's workload recorded (``--record``) and replayed against other settings
(``cloudqueue replay``, and ``cloudqueue tune`` through it)."""
