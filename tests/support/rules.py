"""A custom scaling rule, loaded by import path in tests as a user's would be."""

from __future__ import annotations

from cloudqueue.listener.policies.scaling_rules import ScalingInput


def double_the_pool(load: ScalingInput) -> int:
    """Twice the active threads, whatever the depth."""
    return load.active_threads * 2
