"""The Queue service's fixed limits, which the stores enforce and the policies and settings are
bounded by (a ground-floor module, so a policy need not import the stores to know them)."""

from __future__ import annotations

import math

MAX_BATCH_SIZE = 32
"""The most messages one Get Messages call may return (a Queue API limit)."""

MAX_MESSAGE_BYTES = 64 * 1024
"""The largest message content, in UTF-8 bytes as stored (a Queue API limit)."""

MAX_VISIBILITY_TIMEOUT_S = 7 * 24 * 3600
"""The longest visibility timeout or initial delay: 7 days."""


def is_hiding_delay(seconds: object) -> bool:
    """True for a number of seconds a message can be hidden for: 0 to 7 days (no bool, no NaN)."""
    return (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and 0 <= seconds <= MAX_VISIBILITY_TIMEOUT_S
    )


DEFAULT_TIME_TO_LIVE_S = 7 * 24 * 3600
"""A message's time-to-live when the producer does not choose one: 7 days."""

NEVER_EXPIRES = -1
"""Pass as ``time_to_live_s`` for a message that never expires."""
