"""A recorded workload (``cloudqueue run --record``) replayed against other settings
(``cloudqueue replay``, and ``cloudqueue tune`` through it)."""
